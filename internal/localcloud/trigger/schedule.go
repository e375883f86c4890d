package trigger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncepay/oncepay/internal/localcloud/invoke"
)

// SendAPI is the SQS call dead-letter queues and on-failure destinations need.
type SendAPI interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// TimeScaleVar names the knob that speeds local schedules up: every rate,
// retry delay and event age of a schedule is divided by it. Default 1 (real
// time); 10 fires a rate(1 minute) rule every 6 s. The mappings are not
// scaled: they run at the pace of the data.
const TimeScaleVar = "ONCEPAY_LOCAL_TIME_SCALE"

// TimeScaleFromEnv reads TimeScaleVar (unset: 1).
func TimeScaleFromEnv() (float64, error) {
	v := os.Getenv(TimeScaleVar)
	if v == "" {
		return 1, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 || f > 3600 {
		return 0, fmt.Errorf("trigger: %s=%q is not a number in (0, 3600]", TimeScaleVar, v)
	}
	return f, nil
}

// Schedule fires one scheduled rule's targets on its rate, each invocation
// asynchronous as EventBridge makes it (a slow run never delays the next
// tick), with the target's and the function's failure handling:
//   - the invocation could not be delivered (the runner refused it, the
//     function is unknown): EventBridge retries with back-off up to the
//     target's RetryPolicy, then sends the event to the target's
//     DeadLetterConfig queue with EventBridge's attributes;
//   - the function was throttled (reserved concurrency reached): Lambda's
//     asynchronous queue keeps the event and retries it with back-off
//     (1 s doubling to 5 min) until its maximum event age, no retry counted;
//   - the function failed (*invoke.FunctionError): Lambda's asynchronous
//     retries (AsyncRetries, default 2, one minute then two minutes apart),
//     then the function's dead-letter queue, or nothing (logged).
type Schedule struct {
	Spec  RuleSpec
	inv   invoke.Invoker
	send  SendAPI
	scale float64
	log   *slog.Logger
	now   func() time.Time

	mu      sync.Mutex
	state   string
	lastRun time.Time
	nextRun time.Time
	lastErr string
	fired   int
	failed  int
	dlq     int
	wg      sync.WaitGroup
}

// ScheduleOptions tunes a schedule (zero: real time, slog.Default()).
type ScheduleOptions struct {
	TimeScale float64
	Logger    *slog.Logger
}

// NewSchedule returns the schedule of spec over inv; send writes dead letters.
func NewSchedule(spec RuleSpec, inv invoke.Invoker, send SendAPI, o ScheduleOptions) *Schedule {
	if o.TimeScale <= 0 {
		o.TimeScale = 1
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Schedule{Spec: spec, inv: inv, send: send, scale: o.TimeScale, now: time.Now,
		log: o.Logger.With("rule", spec.ID), state: StateCreated}
}

// scaled is d in local time.
func (s *Schedule) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) / s.scale)
}

// Run fires the rule every period until ctx ends, then waits for the
// deliveries under way (their retries stop at once) and returns nil. The
// first tick is one period after the start, as a new rate rule's is.
func (s *Schedule) Run(ctx context.Context) error {
	if !s.Spec.Enabled || s.Spec.Period == 0 {
		st := StateDisabled
		if s.Spec.Unsupported != "" {
			st = "Unsupported"
			s.log.Warn("schedule not played", "expression", s.Spec.Expression, "reason", s.Spec.Unsupported)
		}
		s.setState(st)
		<-ctx.Done()
		return nil
	}
	period := s.scaled(s.Spec.Period)
	tick := time.NewTicker(period)
	defer tick.Stop()
	s.mu.Lock()
	s.state, s.nextRun = StateEnabled, s.now().Add(period)
	s.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			s.wg.Wait()
			s.setState(StateStopped)
			return nil
		case <-tick.C:
			s.Fire(ctx)
			s.mu.Lock()
			s.nextRun = s.now().Add(period)
			s.mu.Unlock()
		}
	}
}

// Fire sends the rule's event to every target now, without blocking: each
// delivery runs on its own until it succeeds, lands in a dead-letter queue
// or ctx ends.
func (s *Schedule) Fire(ctx context.Context) {
	at := s.now().UTC()
	s.mu.Lock()
	s.lastRun = at
	s.fired++
	s.mu.Unlock()
	for _, tg := range s.Spec.Targets {
		payload := []byte(tg.Input)
		if tg.Input == "" {
			payload = s.event(at)
		}
		s.wg.Go(func() { s.deliver(ctx, tg, payload, at) })
	}
}

// event is the JSON EventBridge sends for a scheduled rule.
func (s *Schedule) event(at time.Time) []byte {
	parts := strings.Split(s.Spec.Arn, ":")
	region, account := "", ""
	if len(parts) == 6 {
		region, account = parts[3], parts[4]
	}
	b, _ := json.Marshal(map[string]any{
		"version": "0", "id": uuid(), "detail-type": "Scheduled Event", "source": "aws.events",
		"account": account, "time": at.Format("2006-01-02T15:04:05Z"), "region": region,
		"resources": []string{s.Spec.Arn}, "detail": map[string]any{},
	})
	return b
}

func (s *Schedule) deliver(ctx context.Context, tg TargetSpec, payload []byte, at time.Time) {
	log := s.log.With("target", tg.ID, "function", tg.Function)
	deliveryRetries, functionRetries := 0, 0
	pause := s.scaled(time.Second)
	for {
		_, err := s.inv.Invoke(ctx, tg.Function, payload)
		age := s.now().Sub(at)
		var fe *invoke.FunctionError
		switch {
		case err == nil:
			log.Info("scheduled invocation", "outcome", "ok", "function_retries", functionRetries)
			return
		case ctx.Err() != nil:
			return // stopping: EventBridge's retries are not ours to keep
		case errors.As(err, &fe):
			s.noteError(err)
			log.Warn("scheduled invocation", "outcome", "function error", "error", err.Error(), "function_retries", functionRetries)
			if functionRetries >= tg.AsyncRetries || age > s.scaled(tg.AsyncMaxAge) {
				s.functionDeadLetter(ctx, log, tg, payload, fe)
				return
			}
			functionRetries++
			// Lambda waits one minute before the second attempt, two before the third.
			if !s.sleep(ctx, s.scaled(time.Duration(functionRetries)*time.Minute)) {
				return
			}
		case errors.Is(err, invoke.ErrThrottled):
			s.noteError(err)
			if age > s.scaled(tg.AsyncMaxAge) {
				s.functionDeadLetter(ctx, log, tg, payload, &invoke.FunctionError{Function: tg.Function, Type: "TooManyRequestsException", Message: err.Error()})
				return
			}
			if !s.sleep(ctx, pause) {
				return
			}
			pause = min(2*pause, s.scaled(5*time.Minute))
		default:
			s.noteError(err)
			log.Warn("scheduled invocation", "outcome", "not delivered", "error", err.Error(), "delivery_retries", deliveryRetries)
			condition := ""
			switch {
			case deliveryRetries >= tg.MaxRetryAttempts:
				condition = "MaximumRetryAttemptsExhausted"
			case age > s.scaled(tg.MaxEventAge):
				condition = "MaximumEventAgeExhausted"
			}
			if condition != "" {
				s.targetDeadLetter(ctx, log, tg, payload, err, condition, deliveryRetries)
				return
			}
			deliveryRetries++
			if !s.sleep(ctx, pause) {
				return
			}
			pause = min(2*pause, s.scaled(time.Minute))
		}
	}
}

func (s *Schedule) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func (s *Schedule) noteError(err error) {
	s.mu.Lock()
	s.lastErr = err.Error()
	s.failed++
	s.mu.Unlock()
}

// targetDeadLetter sends what EventBridge sends to a target's DLQ: the event
// as the body, the reason in message attributes.
func (s *Schedule) targetDeadLetter(ctx context.Context, log *slog.Logger, tg TargetSpec, payload []byte, cause error, condition string, retries int) {
	if tg.DeadLetterURL == "" {
		log.Error("scheduled event dropped: no dead-letter queue", "condition", condition, "error", cause.Error())
		return
	}
	attrs := map[string]sqstypes.MessageAttributeValue{
		"RULE_ARN":                  str(s.Spec.Arn),
		"TARGET_ARN":                str(tg.Arn),
		"ERROR_CODE":                str("SDK_CLIENT_ERROR"),
		"ERROR_MESSAGE":             str(cause.Error()),
		"EXHAUSTED_RETRY_CONDITION": str(condition),
		"RETRY_ATTEMPTS":            {DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(retries))},
	}
	s.deadLetter(ctx, log, tg.DeadLetterURL, payload, attrs)
}

// functionDeadLetter sends what Lambda sends to a function's DLQ after its
// asynchronous retries: the event as the body, the error in attributes.
func (s *Schedule) functionDeadLetter(ctx context.Context, log *slog.Logger, tg TargetSpec, payload []byte, fe *invoke.FunctionError) {
	if tg.FunctionDLQURL == "" {
		log.Error("scheduled event dropped after the function's retries: no dead-letter queue", "error", fe.Error())
		return
	}
	attrs := map[string]sqstypes.MessageAttributeValue{
		"RequestID":    str(uuid()),
		"ErrorCode":    {DataType: aws.String("Number"), StringValue: aws.String("200")},
		"ErrorMessage": str(fe.Message),
	}
	s.deadLetter(ctx, log, tg.FunctionDLQURL, payload, attrs)
}

func (s *Schedule) deadLetter(ctx context.Context, log *slog.Logger, url string, payload []byte, attrs map[string]sqstypes.MessageAttributeValue) {
	_, err := s.send.SendMessage(context.WithoutCancel(ctx), &sqs.SendMessageInput{
		QueueUrl: aws.String(url), MessageBody: aws.String(string(payload)), MessageAttributes: attrs,
	})
	if err != nil {
		log.Error("scheduled event lost: dead-letter queue refused it", "queue", url, "error", err.Error())
		return
	}
	s.mu.Lock()
	s.dlq++
	s.mu.Unlock()
	log.Error("scheduled event sent to its dead-letter queue", "queue", url)
}

func (s *Schedule) setState(st string) {
	s.mu.Lock()
	s.state = st
	s.mu.Unlock()
}

// ScheduleStatus is a rule's line in the local cloud's status.
type ScheduleStatus struct {
	Rule       string     `json:"rule"`
	Expression string     `json:"expression"`
	Targets    []string   `json:"targets"`
	State      string     `json:"state"`
	LastRun    *time.Time `json:"last_run,omitempty"`
	NextRun    *time.Time `json:"next_run,omitempty"`
	LastError  string     `json:"last_error,omitempty"`
	Fired      int        `json:"fired"`
	Failed     int        `json:"failed_invocations"`
	DeadLetter int        `json:"dead_lettered"`
	TimeScale  float64    `json:"time_scale"`
}

// Status reports the schedule.
func (s *Schedule) Status() ScheduleStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := ScheduleStatus{Rule: s.Spec.ID, Expression: s.Spec.Expression, State: s.state, LastError: s.lastErr,
		Fired: s.fired, Failed: s.failed, DeadLetter: s.dlq, TimeScale: s.scale}
	for _, tg := range s.Spec.Targets {
		st.Targets = append(st.Targets, tg.Function)
	}
	if !s.lastRun.IsZero() {
		t := s.lastRun
		st.LastRun = &t
	}
	if !s.nextRun.IsZero() && s.state == StateEnabled {
		t := s.nextRun
		st.NextRun = &t
	}
	return st
}

func str(v string) sqstypes.MessageAttributeValue {
	return sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

func uuid() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
