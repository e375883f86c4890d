package recount

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncepay/oncepay/internal/totals"
)

// VisibilityAPI is the SQS call that holds a message back until its day is
// over.
type VisibilityAPI interface {
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

// maxVisibility is SQS's longest visibility timeout: a message whose day
// ends later comes back and is held again.
const maxVisibility = 12 * time.Hour

// Function is the recount Lambda: an SQS mapping on the stream job's
// recount queue and on its mapping's on-failure queue. A message is one of
//
//   - a late copy (totals.Late, from the job): its key;
//   - Lambda's on-failure record of a discarded stream batch: every key
//     with an event its records may have counted (Recounter.BatchRange);
//   - an operator's request, {"from": RFC 3339, "to": RFC 3339}: every key
//     with an event that occurred in that span (after a stale state, say:
//     docs/stream-job.md#stale-state).
//
// What is over is recounted; a message with a day still open is held back
// until it ends (a batch item failure, its visibility moved to the day's
// close).
type Function struct {
	Recounter *Recounter
	SQS       VisibilityAPI
	// QueueURLs are the consumed queues' URLs: a message is held back
	// through the one whose name ends its event source ARN.
	QueueURLs []string
	Logger    *slog.Logger
}

// Handle implements the mapping's handler with partial batch failures.
func (f Function) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	log := f.Logger
	if log == nil {
		log = slog.Default()
	}
	var resp events.SQSEventResponse
	fail := func(m events.SQSMessage) {
		resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
	}
	for _, m := range ev.Records {
		keys, err := f.keys(ctx, m.Body)
		if err != nil {
			// Unreadable stays in the queue: its age alarms (RecountStuck).
			log.Error("recount request unreadable", "scope", "recount", "message_id", m.MessageId, "err", err)
			fail(m)
			continue
		}
		wait, err := f.Recounter.Keys(ctx, keys)
		if err != nil {
			log.Error("recount failed", "scope", "recount", "message_id", m.MessageId, "err", err)
			fail(m)
			continue
		}
		if wait.IsZero() {
			continue
		}
		hold := min(time.Until(wait)+time.Minute, maxVisibility)
		if err := f.hold(ctx, m, hold); err != nil {
			log.Warn("recount request not held back: it comes back after the queue's visibility timeout", "scope", "recount",
				"message_id", m.MessageId, "err", err)
		}
		log.Info("recount waits for its day to end", "scope", "recount", "message_id", m.MessageId, "until", wait, "held", hold.String())
		fail(m)
	}
	return resp, nil
}

func (f Function) hold(ctx context.Context, m events.SQSMessage, d time.Duration) error {
	name := m.EventSourceARN[strings.LastIndex(m.EventSourceARN, ":")+1:]
	for _, u := range f.QueueURLs {
		if strings.HasSuffix(u, "/"+name) {
			_, err := f.SQS.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
				QueueUrl: aws.String(u), ReceiptHandle: aws.String(m.ReceiptHandle), VisibilityTimeout: int32(d.Seconds()),
			})
			return err
		}
	}
	return fmt.Errorf("recount: no queue URL for %s", m.EventSourceARN)
}

// request is any of the three messages (see Function).
type request struct {
	EventID    string `json:"event_id"`
	MerchantID string `json:"merchant_id"`
	Day        string `json:"day"`
	Currency   string `json:"currency"`
	Batch      *struct {
		First string `json:"approximateArrivalOfFirstRecord"`
		Last  string `json:"approximateArrivalOfLastRecord"`
	} `json:"DDBStreamBatchInfo"`
	From string `json:"from"`
	To   string `json:"to"`
}

// ErrUnknownRequest is a message that is none of the three requests.
var ErrUnknownRequest = errors.New("recount: neither a late copy, a stream batch's failure record nor a span to recount")

// span reads two RFC 3339 times, from no later than to.
func span(what, a, b string) (from, to time.Time, err error) {
	from, err1 := time.Parse(time.RFC3339Nano, a)
	to, err2 := time.Parse(time.RFC3339Nano, b)
	if err := errors.Join(err1, err2); err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("recount: %s: %w", what, err)
	}
	if to.Before(from) {
		return time.Time{}, time.Time{}, fmt.Errorf("recount: %s ends (%s) before it starts (%s)", what, to, from)
	}
	return from, to, nil
}

// keys reads a message into the keys it asks to recount.
func (f Function) keys(ctx context.Context, body string) ([]totals.Key, error) {
	var r request
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return nil, fmt.Errorf("recount: decode: %w", err)
	}
	switch {
	case r.Batch != nil:
		first, last, err := span("a batch's arrival times", r.Batch.First, r.Batch.Last)
		if err != nil {
			return nil, err
		}
		from, to := f.Recounter.BatchRange(first, last)
		return f.Recounter.Range(ctx, from, to)
	case r.From != "" || r.To != "":
		from, to, err := span("a span to recount", r.From, r.To)
		if err != nil {
			return nil, err
		}
		return f.Recounter.Range(ctx, from, to)
	case r.EventID != "":
		if r.MerchantID == "" {
			return nil, fmt.Errorf("recount: late copy %s names no merchant", r.EventID)
		}
		k, err := totals.ParseKey(r.Day + "#" + r.Currency + "#" + r.MerchantID)
		if err != nil {
			return nil, fmt.Errorf("recount: late copy %s: %w", r.EventID, err)
		}
		return []totals.Key{k}, nil
	}
	return nil, ErrUnknownRequest
}
