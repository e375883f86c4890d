// Package trigger plays the template's asynchronous triggers against the
// functions the local cloud runs: every AWS::Lambda::EventSourceMapping as a
// long-running poller with Lambda's semantics (the harness's StreamPoller and
// QueuePoller, with the mapping's own settings), and every AWS::Events::Rule
// schedule as EventBridge fires it, with its targets' retry policies and
// dead-letter queues. Functions are named by their template logical id and
// reached through an invoke.Invoker, so the same triggers drive the function
// runner on the live stack and in-process handlers in tests.
//
// The template is the source of every setting: MappingSpecs and RuleSpecs
// read it, resolving Ref and Fn::GetAtt through the provisioner's recorded
// physical resources (provision.ReadResources).
package trigger

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
	"github.com/oncepay/oncepay/internal/localcloud/provision"
)

// Source kinds of a mapping.
const (
	KindStream = "dynamodb-stream"
	KindQueue  = "sqs"
)

// MappingSpec is one AWS::Lambda::EventSourceMapping, resolved to the local
// cloud's physical resources.
type MappingSpec struct {
	ID        string // logical id of the mapping
	Function  string // logical id of the function it invokes
	Kind      string // KindStream or KindQueue
	SourceArn string // the stream's or the queue's ARN
	QueueURL  string // KindQueue
	Enabled   bool
	Stream    eventsource.Stream // KindStream
	Queue     eventsource.Queue  // KindQueue
	// OnFailureURL is the SQS on-failure destination of a stream mapping
	// (DestinationConfig.OnFailure), "" for none.
	OnFailureURL string
	FunctionArn  string // names the function in on-failure records
}

// RuleSpec is one AWS::Events::Rule with a ScheduleExpression.
type RuleSpec struct {
	ID         string
	Arn        string // arn:aws:events:<region>:<account>:rule/<name>
	Expression string
	// Period is a rate(...) expression's; 0 for an expression the local
	// cloud does not play (cron(...)), which Unsupported explains.
	Period      time.Duration
	Unsupported string
	Enabled     bool
	Targets     []TargetSpec
}

// TargetSpec is one target of a rule: a Lambda function, invoked
// asynchronously as EventBridge does.
type TargetSpec struct {
	ID       string // the target's Id in the rule
	Function string // logical id
	Arn      string // the function's ARN, for the DLQ's TARGET_ARN
	// Input is the target's constant JSON input; "" sends the scheduled event.
	Input string
	// EventBridge's RetryPolicy (defaults 185 attempts, 24 h) and
	// DeadLetterConfig: what happens when the invocation cannot be delivered.
	MaxRetryAttempts int
	MaxEventAge      time.Duration
	DeadLetterURL    string
	// The function's asynchronous invocation: Lambda's own retries of a
	// function error (AWS::Lambda::EventInvokeConfig, defaults 2 and 6 h)
	// and where an event that failed them goes (the function's
	// DeadLetterConfig or the config's OnFailure destination, SQS only).
	AsyncRetries   int
	AsyncMaxAge    time.Duration
	FunctionDLQURL string
}

// Lambda's and EventBridge's documented defaults.
const (
	defaultStreamBatch    = 100
	defaultQueueBatch     = 10
	eventBridgeRetries    = 185
	eventBridgeMaxAge     = 24 * time.Hour
	lambdaAsyncRetries    = 2
	lambdaAsyncMaxAge     = 6 * time.Hour
	defaultVisibility     = 30 * time.Second
	lambdaFunctionArnBase = "arn:aws:lambda:%s:%s:function:%s"
)

// Mappings returns the template's event-source mappings, sorted by logical id.
func Mappings(t *provision.Template, phys map[string]provision.Physical, region string) ([]MappingSpec, error) {
	var out []MappingSpec
	for _, id := range t.OfType("AWS::Lambda::EventSourceMapping") {
		m, err := mapping(t, phys, region, id)
		if err != nil {
			return nil, fmt.Errorf("trigger: mapping %s: %w", id, err)
		}
		out = append(out, m)
	}
	return out, nil
}

func mapping(t *provision.Template, phys map[string]provision.Physical, region, id string) (MappingSpec, error) {
	props := t.Resources[id].Properties
	fn, _, ok := provision.Ref(props["FunctionName"])
	if !ok || t.Resources[fn].Type != "AWS::Lambda::Function" {
		return MappingSpec{}, fmt.Errorf("FunctionName %v is not a function of this template", props["FunctionName"])
	}
	src, attr, ok := provision.Ref(props["EventSourceArn"])
	ph, known := phys[src]
	if !ok || !known {
		return MappingSpec{}, fmt.Errorf("EventSourceArn %v is not a provisioned resource", props["EventSourceArn"])
	}
	m := MappingSpec{ID: id, Function: fn, Enabled: true, FunctionArn: functionArn(region, phys, fn)}
	if v, set := props["Enabled"]; set {
		m.Enabled = truthy(v)
	}
	reportFailures := slices.Contains(strs(props["FunctionResponseTypes"]), "ReportBatchItemFailures")
	switch {
	case ph.Type == "AWS::DynamoDB::Table" && attr == "StreamArn":
		s := eventsource.DefaultStream()
		s.BatchSize = intOr(props["BatchSize"], defaultStreamBatch)
		s.MaxBatchingWindow = time.Duration(intOr(props["MaximumBatchingWindowInSeconds"], 0)) * time.Second
		if p, _ := props["StartingPosition"].(string); p != "" {
			s.StartingPosition = p
		}
		s.BisectOnError = truthy(props["BisectBatchOnFunctionError"])
		s.MaxRetryAttempts = intOr(props["MaximumRetryAttempts"], eventsource.Forever)
		s.MaxRecordAgeSeconds = intOr(props["MaximumRecordAgeInSeconds"], eventsource.Forever)
		s.ReportBatchItemFailures = reportFailures
		s.ParallelizationFactor = intOr(props["ParallelizationFactor"], 1)
		s.TumblingWindow = time.Duration(intOr(props["TumblingWindowInSeconds"], 0)) * time.Second
		if err := s.Validate(); err != nil {
			return MappingSpec{}, err
		}
		if s.ParallelizationFactor != 1 {
			// The poller keeps one batch per shard in flight; playing 1 for
			// a larger factor would hide the reordering it allows.
			return MappingSpec{}, fmt.Errorf("ParallelizationFactor %d: the local cloud plays only 1", s.ParallelizationFactor)
		}
		m.Kind, m.SourceArn, m.Stream = KindStream, ph.StreamArn, s
		if dest, ok := dig(props, "DestinationConfig", "OnFailure", "Destination"); ok {
			q, _, ok := provision.Ref(dest)
			qp, known := phys[q]
			if !ok || !known || qp.Type != "AWS::SQS::Queue" {
				return MappingSpec{}, fmt.Errorf("on-failure destination %v is not a queue of this template", dest)
			}
			m.OnFailureURL = qp.URL
		}
	case ph.Type == "AWS::SQS::Queue":
		q := eventsource.DefaultQueue()
		q.BatchSize = intOr(props["BatchSize"], defaultQueueBatch)
		q.MaxBatchingWindow = time.Duration(intOr(props["MaximumBatchingWindowInSeconds"], 0)) * time.Second
		q.ReportBatchItemFailures = reportFailures
		if c, ok := dig(props, "ScalingConfig", "MaximumConcurrency"); ok {
			q.MaxConcurrency = intOr(c, 0)
		}
		// Redelivery is the queue's own: its visibility timeout and redrive.
		qprops := t.Resources[src].Properties
		q.VisibilityTimeout = time.Duration(intOr(qprops["VisibilityTimeout"], int(defaultVisibility/time.Second))) * time.Second
		if rc, ok := dig(qprops, "RedrivePolicy", "maxReceiveCount"); ok {
			q.MaxReceiveCount = intOr(rc, 0)
		}
		if err := q.Validate(); err != nil {
			return MappingSpec{}, err
		}
		m.Kind, m.SourceArn, m.QueueURL, m.Queue = KindQueue, ph.Arn, ph.URL, q
	default:
		return MappingSpec{}, fmt.Errorf("event source %s (%s %q) is neither a table's stream nor a queue", src, ph.Type, attr)
	}
	return m, nil
}

// Rules returns the template's scheduled rules, sorted by logical id.
// Rules with an event pattern and no schedule are not triggers of this kind
// and are left out.
func Rules(t *provision.Template, phys map[string]provision.Physical, region string) ([]RuleSpec, error) {
	var out []RuleSpec
	for _, id := range t.OfType("AWS::Events::Rule") {
		props := t.Resources[id].Properties
		expr, _ := props["ScheduleExpression"].(string)
		if expr == "" {
			continue
		}
		name, _ := props["Name"].(string)
		if name == "" {
			name = id
		}
		r := RuleSpec{ID: id, Expression: expr, Enabled: true,
			Arn: fmt.Sprintf("arn:aws:events:%s:%s:rule/%s", region, account(phys), name)}
		if s, _ := props["State"].(string); s == "DISABLED" {
			r.Enabled = false
		}
		period, err := ParseRate(expr)
		if err != nil {
			r.Unsupported = err.Error()
		}
		r.Period = period
		targets, _ := props["Targets"].([]any)
		for i, raw := range targets {
			tg, err := target(t, phys, region, raw)
			if err != nil {
				return nil, fmt.Errorf("trigger: rule %s target %d: %w", id, i, err)
			}
			r.Targets = append(r.Targets, tg)
		}
		out = append(out, r)
	}
	return out, nil
}

func target(t *provision.Template, phys map[string]provision.Physical, region string, raw any) (TargetSpec, error) {
	m, _ := raw.(map[string]any)
	fn, _, ok := provision.Ref(m["Arn"])
	if !ok || t.Resources[fn].Type != "AWS::Lambda::Function" {
		return TargetSpec{}, fmt.Errorf("target arn %v is not a function of this template (only Lambda targets are played)", m["Arn"])
	}
	if _, set := m["InputPath"]; set {
		return TargetSpec{}, fmt.Errorf("target InputPath is not played locally")
	}
	if _, set := m["InputTransformer"]; set {
		return TargetSpec{}, fmt.Errorf("target InputTransformer is not played locally")
	}
	tg := TargetSpec{
		Function: fn, Arn: functionArn(region, phys, fn),
		MaxRetryAttempts: eventBridgeRetries, MaxEventAge: eventBridgeMaxAge,
		AsyncRetries: lambdaAsyncRetries, AsyncMaxAge: lambdaAsyncMaxAge,
	}
	tg.ID, _ = m["Id"].(string)
	if in, set := m["Input"].(string); set {
		if !json.Valid([]byte(in)) {
			return TargetSpec{}, fmt.Errorf("target input is not JSON: %q", in)
		}
		tg.Input = in
	}
	if v, ok := dig(m, "RetryPolicy", "MaximumRetryAttempts"); ok {
		tg.MaxRetryAttempts = intOr(v, eventBridgeRetries)
	}
	if v, ok := dig(m, "RetryPolicy", "MaximumEventAgeInSeconds"); ok {
		tg.MaxEventAge = time.Duration(intOr(v, int(eventBridgeMaxAge/time.Second))) * time.Second
	}
	if v, ok := dig(m, "DeadLetterConfig", "Arn"); ok {
		url, err := queueURL(phys, v)
		if err != nil {
			return TargetSpec{}, fmt.Errorf("DeadLetterConfig: %w", err)
		}
		tg.DeadLetterURL = url
	}
	fprops := t.Resources[fn].Properties
	if v, ok := dig(fprops, "DeadLetterConfig", "TargetArn"); ok {
		url, err := queueURL(phys, v)
		if err != nil {
			return TargetSpec{}, fmt.Errorf("function %s DeadLetterConfig: %w", fn, err)
		}
		tg.FunctionDLQURL = url
	}
	for _, id := range t.OfType("AWS::Lambda::EventInvokeConfig") {
		p := t.Resources[id].Properties
		if f, _, ok := provision.Ref(p["FunctionName"]); !ok || f != fn {
			continue
		}
		tg.AsyncRetries = intOr(p["MaximumRetryAttempts"], lambdaAsyncRetries)
		tg.AsyncMaxAge = time.Duration(intOr(p["MaximumEventAgeInSeconds"], int(lambdaAsyncMaxAge/time.Second))) * time.Second
		if v, ok := dig(p, "DestinationConfig", "OnFailure", "Destination"); ok {
			if url, err := queueURL(phys, v); err == nil {
				tg.FunctionDLQURL = url
			}
		}
	}
	return tg, nil
}

// ParseRate returns the period of a rate(...) expression. cron(...) is not
// played locally: ParseRate says so in its error.
func ParseRate(expr string) (time.Duration, error) {
	inner, ok := strings.CutPrefix(expr, "rate(")
	if !ok || !strings.HasSuffix(inner, ")") {
		return 0, fmt.Errorf("schedule %q: only rate(...) expressions are played locally", expr)
	}
	var n int
	var unit string
	if _, err := fmt.Sscanf(strings.TrimSuffix(inner, ")"), "%d %s", &n, &unit); err != nil || n < 1 {
		return 0, fmt.Errorf("schedule %q: not rate(<positive integer> <unit>)", expr)
	}
	// EventBridge wants the singular for 1 and the plural otherwise.
	units := map[string]time.Duration{"minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour}
	base := strings.TrimSuffix(unit, "s")
	d, known := units[base]
	if !known || (n == 1) != (unit == base) {
		return 0, fmt.Errorf("schedule %q: unit %q is not EventBridge's", expr, unit)
	}
	return time.Duration(n) * d, nil
}

func queueURL(phys map[string]provision.Physical, v any) (string, error) {
	q, _, ok := provision.Ref(v)
	ph, known := phys[q]
	if !ok || !known || ph.Type != "AWS::SQS::Queue" {
		return "", fmt.Errorf("%v is not a queue of this template", v)
	}
	return ph.URL, nil
}

// account is the emulators' account id, read from a provisioned ARN.
func account(phys map[string]provision.Physical) string {
	for _, ph := range phys {
		if ph.Type == "AWS::SQS::Queue" {
			if parts := strings.Split(ph.Arn, ":"); len(parts) == 6 {
				return parts[4]
			}
		}
	}
	return "000000000000"
}

func functionArn(region string, phys map[string]provision.Physical, fn string) string {
	return fmt.Sprintf(lambdaFunctionArnBase, region, account(phys), fn)
}

func dig(m map[string]any, path ...string) (any, bool) {
	var v any = m
	for _, k := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = mm[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

func intOr(v any, def int) int {
	switch n := v.(type) {
	case float64:
		return int(n)
	case string:
		var i int
		if _, err := fmt.Sscanf(n, "%d", &i); err == nil {
			return i
		}
	}
	return def
}

func truthy(v any) bool {
	switch b := v.(type) {
	case bool:
		return b
	case string:
		return b == "true"
	}
	return false
}

func strs(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, x := range l {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
