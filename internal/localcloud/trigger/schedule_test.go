package trigger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncepay/oncepay/internal/localcloud/invoke"
	"github.com/oncepay/oncepay/internal/localcloud/provision"
	"github.com/oncepay/oncepay/internal/localcloud/trigger"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// resolverRule is the template's resolver schedule, its dead-letter queue
// (the target's and the function's) a queue of the test's own.
func resolverRule(t *testing.T) (trigger.RuleSpec, *sqs.Client, testenv.Queue) {
	tpl := testenv.Template(t)
	q := testenv.SQS(t)
	dlq := testenv.NewStandardQueue(t, q)
	phys := placeholders(tpl)
	phys[logicalID(t, tpl, "AWS::SQS::Queue", "AsyncFailures")] = provision.Physical{Type: "AWS::SQS::Queue", Arn: dlq.Arn, URL: dlq.URL}
	rules, err := trigger.Rules(tpl, phys, region)
	if err != nil {
		t.Fatal(err)
	}
	resolverFn := logicalID(t, tpl, "AWS::Lambda::Function", "ResolverFunction")
	for _, r := range rules {
		if len(r.Targets) == 1 && r.Targets[0].Function == resolverFn {
			return r, q, dlq
		}
	}
	t.Fatalf("no schedule targets the resolver: %+v", rules)
	return trigger.RuleSpec{}, nil, testenv.Queue{}
}

type scheduledEvent struct {
	ID         string         `json:"id"`
	DetailType string         `json:"detail-type"`
	Source     string         `json:"source"`
	Time       string         `json:"time"`
	Region     string         `json:"region"`
	Resources  []string       `json:"resources"`
	Detail     map[string]any `json:"detail"`
}

func TestResolverScheduleFiresItsTargetAtTheScaledRate(t *testing.T) {
	rule, q, _ := resolverRule(t)
	if rule.Expression != "rate(1 minute)" || rule.Period != time.Minute || !rule.Enabled {
		t.Fatalf("resolver rule = %+v", rule)
	}
	resolver := &recorder{}
	// 600x: the minute is 100 ms.
	s := trigger.NewSchedule(rule, invoke.Func{rule.Targets[0].Function: resolver.handle}, q, trigger.ScheduleOptions{TimeScale: 600, Logger: quiet})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); _ = s.Run(ctx) }()
	eventually(t, 10*time.Second, "three ticks", func() bool { return len(resolver.calls()) >= 3 })
	elapsed := time.Since(start)
	cancel()
	<-done
	if elapsed < 300*time.Millisecond {
		t.Errorf("three ticks of a scaled 100 ms rate took only %s", elapsed)
	}
	var ev scheduledEvent
	if err := json.Unmarshal(resolver.calls()[0], &ev); err != nil {
		t.Fatal(err)
	}
	if _, err := time.Parse(time.RFC3339, ev.Time); err != nil || ev.ID == "" || ev.DetailType != "Scheduled Event" || ev.Source != "aws.events" ||
		len(ev.Resources) != 1 || ev.Resources[0] != rule.Arn || ev.Detail == nil || len(ev.Detail) != 0 || ev.Region != region {
		t.Fatalf("scheduled event = %s", resolver.calls()[0])
	}
	st := s.Status()
	if st.State != trigger.StateStopped || st.Fired < 3 || st.LastRun == nil || st.LastError != "" {
		t.Fatalf("status = %+v", st)
	}
}

// deadLetters receives what the queue holds, with its message attributes.
func deadLetters(t *testing.T, q *sqs.Client, url string) []sqstypes.Message {
	t.Helper()
	out, err := q.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Messages
}

// A resolver run that fails is retried by Lambda's asynchronous invocation
// (two retries, a minute then two apart: scaled here) and then lands in the
// function's dead-letter queue with the error, the event as its body.
func TestFailingScheduledTargetLandsItsEventInTheDLQAfterItsRetries(t *testing.T) {
	rule, q, dlq := resolverRule(t)
	tg := rule.Targets[0]
	resolver := &recorder{fn: func(int, []byte) ([]byte, error) { return nil, errors.New("resolver: ledger down") }}
	s := trigger.NewSchedule(rule, invoke.Func{tg.Function: resolver.handle}, q, trigger.ScheduleOptions{TimeScale: 600, Logger: quiet})
	s.Fire(context.Background())
	var got []sqstypes.Message
	eventually(t, 10*time.Second, "the event in the dead-letter queue", func() bool {
		got = append(got, deadLetters(t, q, dlq.URL)...)
		return len(got) > 0
	})
	calls := resolver.calls()
	if len(calls) != tg.AsyncRetries+1 || tg.AsyncRetries != 2 {
		t.Fatalf("%d invocations, want 1 + %d retries", len(calls), tg.AsyncRetries)
	}
	var ev scheduledEvent
	if err := json.Unmarshal([]byte(aws.ToString(got[0].Body)), &ev); err != nil || string(calls[0]) != aws.ToString(got[0].Body) {
		t.Fatalf("dead letter body %q, event sent %s", aws.ToString(got[0].Body), calls[0])
	}
	if msg := got[0].MessageAttributes["ErrorMessage"]; aws.ToString(msg.StringValue) != "resolver: ledger down" {
		t.Fatalf("dead letter attributes = %+v", got[0].MessageAttributes)
	}
	// The count follows the queue's reply, so the message can be received
	// before the status counts it.
	eventually(t, 5*time.Second, "the dead letter counted", func() bool { return s.Status().DeadLetter >= 1 })
	if st := s.Status(); st.DeadLetter != 1 || st.Failed != 3 || st.LastError == "" {
		t.Fatalf("status = %+v", st)
	}
}

// An invocation that cannot be delivered at all (the runner refuses it) is
// EventBridge's to retry: its RetryPolicy's attempts, then the target's
// DeadLetterConfig with EventBridge's attributes.
func TestUndeliverableScheduledEventGoesToTheTargetDLQAfterTheRetryPolicy(t *testing.T) {
	rule, q, dlq := resolverRule(t)
	tg := rule.Targets[0]
	if tg.MaxRetryAttempts != 2 || tg.MaxEventAge != 60*time.Second || tg.DeadLetterURL != dlq.URL {
		t.Fatalf("target = %+v", tg)
	}
	var attempts atomic.Int32
	inv := invokerFunc(func(context.Context, string, []byte) ([]byte, error) {
		attempts.Add(1)
		return nil, fmt.Errorf("lambdarun: start %s: exec format error", tg.Function)
	})
	s := trigger.NewSchedule(rule, inv, q, trigger.ScheduleOptions{TimeScale: 60, Logger: quiet})
	s.Fire(context.Background())
	var got []sqstypes.Message
	eventually(t, 10*time.Second, "the event in the target's dead-letter queue", func() bool {
		got = append(got, deadLetters(t, q, dlq.URL)...)
		return len(got) > 0
	})
	a := got[0].MessageAttributes
	if attempts.Load() != 3 || aws.ToString(a["RULE_ARN"].StringValue) != rule.Arn || aws.ToString(a["TARGET_ARN"].StringValue) != tg.Arn ||
		aws.ToString(a["EXHAUSTED_RETRY_CONDITION"].StringValue) != "MaximumRetryAttemptsExhausted" || aws.ToString(a["RETRY_ATTEMPTS"].StringValue) != "2" {
		t.Fatalf("%d attempts; attributes %+v", attempts.Load(), a)
	}
}

// A throttle (the resolver's reserved concurrency of 1 busy) is held by
// Lambda's asynchronous queue and retried: it counts as no retry and the
// event is not dead-lettered.
func TestThrottledScheduledInvocationIsRetriedWithoutCountingARetry(t *testing.T) {
	rule, q, dlq := resolverRule(t)
	tg := rule.Targets[0]
	resolver := &recorder{}
	var n atomic.Int32
	inv := invokerFunc(func(ctx context.Context, fn string, p []byte) ([]byte, error) {
		if n.Add(1) <= int32(tg.AsyncRetries+tg.MaxRetryAttempts+2) {
			return nil, invoke.ErrThrottled
		}
		return resolver.handle(ctx, p)
	})
	s := trigger.NewSchedule(rule, inv, q, trigger.ScheduleOptions{TimeScale: 100, Logger: quiet})
	s.Fire(context.Background())
	eventually(t, 10*time.Second, "the run after the throttles", func() bool { return len(resolver.calls()) == 1 })
	if d := deadLetters(t, q, dlq.URL); len(d) != 0 {
		t.Fatalf("dead letters: %d", len(d))
	}
}

func TestTimeScaleKnobIsOffByDefaultAndRefusesNonsense(t *testing.T) {
	t.Setenv(trigger.TimeScaleVar, "")
	if f, err := trigger.TimeScaleFromEnv(); err != nil || f != 1 {
		t.Fatalf("default = %v, %v", f, err)
	}
	t.Setenv(trigger.TimeScaleVar, "10")
	if f, err := trigger.TimeScaleFromEnv(); err != nil || f != 10 {
		t.Fatalf("10 = %v, %v", f, err)
	}
	for _, bad := range []string{"0", "-2", "fast", "1e9"} {
		t.Setenv(trigger.TimeScaleVar, bad)
		if _, err := trigger.TimeScaleFromEnv(); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
