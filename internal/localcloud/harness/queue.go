package harness

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
)

// QueueHandler is a Lambda handler for SQS batches.
type QueueHandler func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)

// QueueAPI is the SQS calls a QueuePoller makes.
type QueueAPI interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

// QueueConfig configures a QueuePoller. Zero fields take the defaults.
type QueueConfig struct {
	// QueueURL is the queue to poll (required).
	QueueURL string
	// QueueArn goes into each message's eventSourceARN.
	QueueArn string
	// Settings are the mapping's (default eventsource.DefaultQueue()). The
	// visibility timeout and maxReceiveCount are the queue's own attributes;
	// the poller does not override them.
	Settings eventsource.Queue
	// WaitTime is Run's long poll, in whole seconds (default 1 s). Below a
	// second Run short-polls and pauses WaitTime after an empty receive:
	// moto's long poll wakes only when a message is sent, not when a FIFO
	// group unlocks, so a long poll there adds up to a second per batch of a
	// busy group. Step never waits.
	WaitTime time.Duration
	// Pollers is how many concurrent pollers Run starts (default
	// Settings.MaxConcurrency, or 2 when that is 0).
	Pollers int
	// Region goes into each message's awsRegion (default $AWS_REGION or us-east-1).
	Region string
	// MaxDrainSteps bounds Drain (default 10,000).
	MaxDrainSteps int
	// Logger receives a line per invocation outcome (default slog.Default()).
	Logger *slog.Logger
}

// QueueStats counts what a QueuePoller did.
type QueueStats struct {
	Invocations    int // handler invocations
	Received       int // messages received, redeliveries included
	Deleted        int // messages deleted after success
	ItemFailures   int // messages reported failed
	FunctionErrors int // invocations that returned an error (or panicked)
	Throttles      int // invocation attempts that did not run (ErrNotInvoked)
}

// QueuePoller plays an SQS event-source mapping. It is safe for concurrent
// use: concurrent Steps are concurrent pollers.
type QueuePoller struct {
	api     QueueAPI
	handler QueueHandler
	cfg     QueueConfig

	mu       sync.Mutex
	inflight map[string]string // message id -> receipt handle of messages left in flight
	stats    QueueStats
}

// NewQueuePoller returns a poller that feeds handler from the queue.
func NewQueuePoller(api QueueAPI, handler QueueHandler, cfg QueueConfig) (*QueuePoller, error) {
	if api == nil || handler == nil {
		return nil, errors.New("harness: NewQueuePoller needs a QueueAPI and a handler")
	}
	if cfg.QueueURL == "" {
		return nil, errors.New("harness: QueueConfig.QueueURL is required")
	}
	if cfg.Settings == (eventsource.Queue{}) {
		cfg.Settings = eventsource.DefaultQueue()
	}
	if err := cfg.Settings.Validate(); err != nil {
		return nil, err
	}
	if cfg.WaitTime == 0 {
		cfg.WaitTime = time.Second
	}
	if cfg.Pollers == 0 {
		cfg.Pollers = max(cfg.Settings.MaxConcurrency, 2)
	}
	if cfg.Region == "" {
		cfg.Region = os.Getenv("AWS_REGION")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.MaxDrainSteps == 0 {
		cfg.MaxDrainSteps = 10000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &QueuePoller{api: api, handler: handler, cfg: cfg, inflight: map[string]string{}}, nil
}

// Stats returns a copy of the counters.
func (p *QueuePoller) Stats() QueueStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Step makes one receive without waiting and, if it got messages, one
// invocation; then it deletes the messages the handler did not report
// failed. It blocks for those calls and the handler, and returns the number of
// messages received.
func (p *QueuePoller) Step(ctx context.Context) (int, error) {
	return p.poll(ctx, 0)
}

// Drain steps until a receive returns nothing. Messages left in flight by a
// failure stay invisible until their visibility timeout (or Expire). It
// blocks for every step.
func (p *QueuePoller) Drain(ctx context.Context) (int, error) {
	total := 0
	for range p.cfg.MaxDrainSteps {
		n, err := p.Step(ctx)
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
	return total, fmt.Errorf("harness: queue not drained after %d steps", p.cfg.MaxDrainSteps)
}

// Run starts Pollers concurrent pollers, each long-polling and invoking,
// and blocks until ctx ends; it then returns nil.
func (p *QueuePoller) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range p.cfg.Pollers {
		wg.Go(func() {
			for ctx.Err() == nil {
				n, err := p.poll(ctx, p.cfg.WaitTime)
				if err != nil && ctx.Err() == nil {
					p.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "queue poll failed", slog.String("error", err.Error()))
				}
				if err != nil || (n == 0 && p.cfg.WaitTime < time.Second) {
					select {
					case <-ctx.Done():
					case <-time.After(p.cfg.WaitTime):
					}
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// Expire makes every message this poller left in flight visible again now,
// as if its visibility timeout had run out, and returns how many it
// released. Messages SQS has meanwhile moved or deleted are skipped.
func (p *QueuePoller) Expire(ctx context.Context) (int, error) {
	p.mu.Lock()
	handles := p.inflight
	p.inflight = map[string]string{}
	p.mu.Unlock()
	var entries []sqstypes.ChangeMessageVisibilityBatchRequestEntry
	for _, h := range handles {
		entries = append(entries, sqstypes.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(len(entries))), ReceiptHandle: aws.String(h), VisibilityTimeout: 0,
		})
	}
	released := 0
	for start := 0; start < len(entries); start += 10 {
		chunk := entries[start:min(start+10, len(entries))]
		out, err := p.api.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(p.cfg.QueueURL), Entries: chunk})
		if err != nil {
			return released, fmt.Errorf("harness: release in-flight messages: %w", err)
		}
		released += len(out.Successful)
	}
	return released, nil
}

func (p *QueuePoller) poll(ctx context.Context, wait time.Duration) (int, error) {
	out, err := p.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(p.cfg.QueueURL),
		MaxNumberOfMessages:         int32(p.cfg.Settings.BatchSize),
		WaitTimeSeconds:             int32(wait / time.Second),
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		return 0, fmt.Errorf("harness: receive from %s: %w", p.cfg.QueueURL, err)
	}
	if len(out.Messages) == 0 {
		return 0, nil
	}
	ev, err := sqsEvent(out.Messages, p.cfg.QueueArn, p.cfg.Region)
	if err != nil {
		return 0, err
	}
	resp, herr := p.invoke(ctx, ev, wait > 0)
	if errors.Is(herr, ErrNotInvoked) {
		// Still not invoked after the retries: the messages stay in flight
		// and SQS delivers them again after their visibility timeout.
		p.mu.Lock()
		for _, m := range out.Messages {
			p.inflight[aws.ToString(m.MessageId)] = aws.ToString(m.ReceiptHandle)
		}
		p.mu.Unlock()
		p.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "queue batch not invoked", slog.Int("messages", len(out.Messages)), slog.String("error", herr.Error()))
		return len(out.Messages), nil
	}
	failed := map[string]bool{}
	if herr == nil && p.cfg.Settings.ReportBatchItemFailures {
		known := map[string]bool{}
		for _, m := range out.Messages {
			known[aws.ToString(m.MessageId)] = true
		}
		for _, f := range resp.BatchItemFailures {
			if !known[f.ItemIdentifier] {
				herr = fmt.Errorf("harness: batch item failure %q is not a message of the batch", f.ItemIdentifier)
				break
			}
			failed[f.ItemIdentifier] = true
		}
	}
	var del []sqstypes.DeleteMessageBatchRequestEntry
	p.mu.Lock()
	p.stats.Invocations++
	p.stats.Received += len(out.Messages)
	if herr != nil {
		p.stats.FunctionErrors++
	}
	p.stats.ItemFailures += len(failed)
	for _, m := range out.Messages {
		id := aws.ToString(m.MessageId)
		if herr != nil || failed[id] {
			p.inflight[id] = aws.ToString(m.ReceiptHandle)
			continue
		}
		delete(p.inflight, id)
		del = append(del, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(len(del))), ReceiptHandle: m.ReceiptHandle})
	}
	p.mu.Unlock()
	outcome := slog.String("outcome", "ok")
	if herr != nil {
		outcome = slog.String("outcome", "function error: "+herr.Error())
	} else if len(failed) > 0 {
		outcome = slog.String("outcome", "partial failure")
	}
	p.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "queue batch", slog.Int("messages", len(out.Messages)), slog.Int("failed", len(failed)), outcome)
	// A stop arriving during the invocation must not leave its processed
	// messages to be delivered again: the deletes outlive ctx.
	dctx := context.WithoutCancel(ctx)
	for start := 0; start < len(del); start += 10 {
		chunk := del[start:min(start+10, len(del))]
		res, err := p.api.DeleteMessageBatch(dctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(p.cfg.QueueURL), Entries: chunk})
		if err != nil {
			return len(out.Messages), fmt.Errorf("harness: delete processed messages: %w", err)
		}
		p.mu.Lock()
		p.stats.Deleted += len(res.Successful)
		p.mu.Unlock()
		if len(res.Failed) > 0 {
			return len(out.Messages), fmt.Errorf("harness: delete processed messages: %d refused, first %s: %s",
				len(res.Failed), aws.ToString(res.Failed[0].Code), aws.ToString(res.Failed[0].Message))
		}
	}
	return len(out.Messages), nil
}

// invoke calls the handler. When the call did not run (ErrNotInvoked) and
// retry is set (Run's pollers), it tries again with a back-off while the
// batch is within half its visibility timeout, as Lambda retries a
// throttled SQS batch before letting the messages go back to the queue.
func (p *QueuePoller) invoke(ctx context.Context, ev events.SQSEvent, retry bool) (events.SQSEventResponse, error) {
	began := time.Now()
	pause := 100 * time.Millisecond
	for {
		resp, err := invokeQueue(ctx, p.handler, ev)
		if !errors.Is(err, ErrNotInvoked) {
			return resp, err
		}
		p.mu.Lock()
		p.stats.Throttles++
		p.mu.Unlock()
		if !retry || time.Since(began)+pause > p.cfg.Settings.VisibilityTimeout/2 {
			return resp, err
		}
		select {
		case <-ctx.Done():
			return resp, err
		case <-time.After(pause):
		}
		pause = min(2*pause, 5*time.Second)
	}
}

func invokeQueue(ctx context.Context, h QueueHandler, ev events.SQSEvent) (resp events.SQSEventResponse, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("harness: queue handler panicked: %v", r)
		}
	}()
	return h(ctx, ev)
}

// sqsEvent renders messages as the JSON Lambda sends and decodes it into the
// aws-lambda-go type.
func sqsEvent(msgs []sqstypes.Message, queueArn, region string) (events.SQSEvent, error) {
	type attr struct {
		StringValue      *string  `json:"stringValue,omitempty"`
		BinaryValue      []byte   `json:"binaryValue,omitempty"`
		StringListValues []string `json:"stringListValues"`
		BinaryListValues [][]byte `json:"binaryListValues"`
		DataType         string   `json:"dataType"`
	}
	type record struct {
		MessageID         string            `json:"messageId"`
		ReceiptHandle     string            `json:"receiptHandle"`
		Body              string            `json:"body"`
		Attributes        map[string]string `json:"attributes"`
		MessageAttributes map[string]attr   `json:"messageAttributes"`
		MD5OfBody         string            `json:"md5OfBody"`
		EventSource       string            `json:"eventSource"`
		EventSourceARN    string            `json:"eventSourceARN"`
		AWSRegion         string            `json:"awsRegion"`
	}
	out := struct {
		Records []record `json:"Records"`
	}{}
	for _, m := range msgs {
		body := aws.ToString(m.Body)
		sum := md5.Sum([]byte(body))
		r := record{
			MessageID: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: body,
			Attributes: map[string]string{}, MessageAttributes: map[string]attr{},
			MD5OfBody: hex.EncodeToString(sum[:]), EventSource: "aws:sqs", EventSourceARN: queueArn, AWSRegion: region,
		}
		for k, v := range m.Attributes {
			r.Attributes[k] = v
		}
		for k, v := range m.MessageAttributes {
			r.MessageAttributes[k] = attr{StringValue: v.StringValue, BinaryValue: v.BinaryValue,
				StringListValues: v.StringListValues, BinaryListValues: v.BinaryListValues, DataType: aws.ToString(v.DataType)}
		}
		out.Records = append(out.Records, r)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return events.SQSEvent{}, fmt.Errorf("harness: encode SQS event: %w", err)
	}
	var ev events.SQSEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		return events.SQSEvent{}, fmt.Errorf("harness: decode SQS event: %w", err)
	}
	return ev, nil
}
