package oncepay_test

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay"
	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
)

// reconcileParts is what a Reconciliation alone needs: a VPC, the ledger,
// the PSP's secrets and an outbox table, each with its defaults.
type reconcileParts struct {
	ledger *oncepay.Ledger
	psp    *oncepay.Psp
	outbox *oncepay.OutboxTable
}

func newReconcileParts(s awscdk.Stack) reconcileParts {
	net := oncepay.NewNetwork(s, "Network", nil)
	return reconcileParts{
		ledger: oncepay.NewLedger(s, "Ledger", &oncepay.LedgerProps{Vpc: net.Vpc}),
		psp:    oncepay.NewPsp(s, "Psp", nil),
		outbox: oncepay.NewOutboxTable(s, "Outbox", nil),
	}
}

func (p reconcileParts) props(s awscdk.Stack) *oncepay.ReconciliationProps {
	return &oncepay.ReconciliationProps{
		Code: oncepay.CodeFromBuild(s, oncepay.FnReconcile), Ledger: p.ledger, Psp: p.psp, Outbox: p.outbox,
	}
}

// TestReconciliationAlone: with its defaults the construct makes the
// function in the ledger's VPC (15 min, 512 MB, no reserved concurrency),
// its daily rule, a dead-letter queue of its own for both the rule and the
// function's async invocations, and six alarms; cdk-nag clean.
func TestReconciliationAlone(t *testing.T) {
	var c *oncepay.Reconciliation
	var parts reconcileParts
	stack, tmpl, js := synthAlone(t, func(s awscdk.Stack) {
		parts = newReconcileParts(s)
		c = oncepay.NewReconciliation(s, "Reconcile", parts.props(s))
	})
	if c.Function == nil || c.Schedule == nil || c.DeadLetterQueue == nil {
		t.Fatalf("parts not exposed: %+v", c)
	}
	fn := logicalIDIn(t, stack, c.Function.Function)
	dlq := logicalIDIn(t, stack, c.DeadLetterQueue)
	p := propsOf(t, js, fn)
	for k, v := range map[string]any{
		"Timeout": 900, "MemorySize": 512,
		"DeadLetterConfig": map[string]any{"TargetArn": getAtt(dlq, "Arn")},
	} {
		if !jsonEqual(p[k], v) {
			t.Errorf("function %s = %s, want %s", k, show(p[k]), show(v))
		}
	}
	if p["ReservedConcurrentExecutions"] != nil {
		t.Errorf("reserved concurrency %v, want none", p["ReservedConcurrentExecutions"])
	}
	if _, ok := p["VpcConfig"]; !ok {
		t.Error("the function is not in the ledger's VPC")
	}
	check(t, "daily rule, the DLQ and retries", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Events::Rule"), obj(map[string]any{
			"ScheduleExpression": oncepay.ReconcileSchedule, "State": "ENABLED",
			"Targets": exact(obj(map[string]any{
				"Arn":              getAtt(fn, "Arn"),
				"DeadLetterConfig": map[string]any{"Arn": getAtt(dlq, "Arn")},
				"RetryPolicy":      map[string]any{"MaximumEventAgeInSeconds": 86400, "MaximumRetryAttempts": 2},
			})),
		}))
	})
	if oncepay.ReconcileSchedule != "cron(30 0 * * ? *)" {
		t.Errorf("schedule %s, want daily at 00:30 UTC", oncepay.ReconcileSchedule)
	}
	var ids []string
	for k := range c.Alarms {
		ids = append(ids, k)
	}
	sort.Strings(ids)
	if want := []string{"Adopted", "Errors", "FailuresNotEmpty", "NeedsHuman", "ReversalOpen", "Reversed"}; !slices.Equal(ids, want) {
		t.Errorf("alarms %v, want %v", ids, want)
	}
	if n := len(ofType(js, "AWS::CloudWatch::Alarm")); n != 6 {
		t.Errorf("%d alarms in the template, want 6", n)
	}
	a := propsOf(t, js, logicalIDIn(t, stack, c.Alarms[oncepay.AlarmReconciliationNeedsHuman]))
	if a["Namespace"] != stackenv.MetricsNamespace || a["MetricName"] != oncepay.MetricReconcileNeedsHuman || a["Threshold"] != float64(1) ||
		!jsonEqual(a["Dimensions"], []any{map[string]any{"Name": "Function", "Value": oncepay.FnReconcile}}) {
		t.Errorf("NeedsHuman alarm %s", show(a))
	}
	retainedAndProtected(t, js)
	nagClean(t, stack)
}

// TestReconciliationGrants: least privilege, on the construct alone: the
// ledger login, the PSP key secret (never the webhook's), outbox puts and
// its dead-letter queue; no DynamoDB action but PutItem on the outbox, so
// nothing of a claim table.
func TestReconciliationGrants(t *testing.T) {
	var c *oncepay.Reconciliation
	var parts reconcileParts
	stack, _, js := synthAlone(t, func(s awscdk.Stack) {
		parts = newReconcileParts(s)
		c = oncepay.NewReconciliation(s, "Reconcile", parts.props(s))
	})
	got := grantsOf(js, logicalIDIn(t, stack, c.Function.Role))
	outbox := "${" + logicalIDIn(t, stack, parts.outbox.Table) + ".Arn}"
	keySecret := "${" + logicalIDIn(t, stack, parts.psp.KeySecret) + "}"
	webhookSecret := "${" + logicalIDIn(t, stack, parts.psp.WebhookSecret) + "}"
	for action, resources := range got {
		if strings.HasPrefix(action, "dynamodb:") && (action != "dynamodb:PutItem" || !slices.Equal(resources, []string{outbox})) {
			t.Errorf("%s on %v: the reconciliation puts outbox items and touches no other table", action, resources)
		}
		if strings.HasPrefix(action, "sqs:") && action != "sqs:SendMessage" {
			t.Errorf("%s on %v", action, resources)
		}
		if strings.HasPrefix(action, "secretsmanager:") && (action != "secretsmanager:GetSecretValue" || !slices.Equal(resources, []string{keySecret})) {
			t.Errorf("%s on %v: the PSP key secret alone", action, resources)
		}
		if slices.Contains(resources, webhookSecret) {
			t.Errorf("%s on the webhook's signing secret", action)
		}
	}
	if len(got["dynamodb:PutItem"]) != 1 {
		t.Errorf("no outbox put: %v", got["dynamodb:PutItem"])
	}
	if g := got["rds-db:connect"]; len(g) != 1 || !strings.HasSuffix(g[0], "/"+oncepay.LedgerAppUser) {
		t.Errorf("rds-db:connect %v, want the app user alone", g)
	}
	if g := got["sqs:SendMessage"]; !slices.Equal(g, []string{"${" + logicalIDIn(t, stack, c.DeadLetterQueue) + ".Arn}"}) {
		t.Errorf("sqs:SendMessage %v, want its dead-letter queue alone", g)
	}
	if _, ok := got["secretsmanager:GetSecretValue"]; !ok {
		t.Error("it may not read the PSP key")
	}
}

// TestReconciliationWithoutItsSchedule: NoSchedule makes no rule (the
// function runs when invoked); a given dead-letter queue is used, none is
// made, and its alarm is its owner's.
func TestReconciliationWithoutItsSchedule(t *testing.T) {
	var c *oncepay.Reconciliation
	_, tmpl, js := synthAlone(t, func(s awscdk.Stack) {
		parts := newReconcileParts(s)
		p := parts.props(s)
		p.NoSchedule = true
		p.DeadLetterQueue = oncepay.NewEventQueue(s, "Given", nil).Dlq
		c = oncepay.NewReconciliation(s, "Reconcile", p)
	})
	if c.Schedule != nil {
		t.Error("a Schedule with NoSchedule")
	}
	check(t, "no rule", func() { tmpl.ResourceCountIs(jsii.String("AWS::Events::Rule"), jsii.Number(0)) })
	if _, ok := c.Alarms[oncepay.AlarmReconciliationFailed]; ok {
		t.Error("an alarm on a dead-letter queue it was given")
	}
	if n := len(ofType(js, "AWS::CloudWatch::Alarm")); n != 5 {
		t.Errorf("%d alarms, want 5", n)
	}
}

// TestReconciliationRefusesMissingParts: no Code, no Ledger or no Psp is
// refused at synth, naming what to set.
func TestReconciliationRefusesMissingParts(t *testing.T) {
	panicsWith(t, "ReconciliationProps.Code is required", func(s awscdk.Stack) {
		oncepay.NewReconciliation(s, "Reconcile", &oncepay.ReconciliationProps{})
	})
	panicsWith(t, "needs ReconciliationProps.Ledger and .Psp", func(s awscdk.Stack) {
		oncepay.NewReconciliation(s, "Reconcile", &oncepay.ReconciliationProps{
			Code: oncepay.CodeFromBuild(s, oncepay.FnReconcile), Psp: oncepay.NewPsp(s, "Psp", nil),
		})
	})
	panicsWith(t, "needs ReconciliationProps.Ledger and .Psp", func(s awscdk.Stack) {
		net := oncepay.NewNetwork(s, "Network", nil)
		oncepay.NewReconciliation(s, "Reconcile", &oncepay.ReconciliationProps{
			Code: oncepay.CodeFromBuild(s, oncepay.FnReconcile), Ledger: oncepay.NewLedger(s, "Ledger", &oncepay.LedgerProps{Vpc: net.Vpc}),
		})
	})
}

// TestOnlyThePrimaryReconcilesOnItsOwn: across Regions every stack has the
// function, but only the primary's runs daily: a standby's ledger is
// read-only, so its run would fail every day.
func TestOnlyThePrimaryReconcilesOnItsOwn(t *testing.T) {
	for _, s := range synthTwoRegions(t).each() {
		if s.stack.Reconciliation == nil || s.stack.Reconciliation.Function == nil {
			t.Errorf("%s: no reconciliation function", s)
			continue
		}
		fn := getAtt(s.logicalID(t, s.stack.Reconciliation.Function.Function), "Arn")
		rules := 0
		for _, r := range s.resourcesOfType("AWS::Events::Rule") {
			for _, tg := range r["Properties"].(map[string]any)["Targets"].([]any) {
				if jsonEqual(tg.(map[string]any)["Arn"], fn) {
					rules++
				}
			}
		}
		if want := map[bool]int{true: 1, false: 0}[s.isPrimary()]; rules != want || (s.stack.Reconciliation.Schedule != nil) != s.isPrimary() {
			t.Errorf("%s (primary %v): %d rules invoke the reconciliation, want %d", s, s.isPrimary(), rules, want)
		}
	}
}
