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

	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/totals"
)

// QueueAPI is the SQS calls the function makes: holding a request back
// until its day is over, and handing a discarded batch's keys on.
type QueueAPI interface {
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// MaxHold is the longest a request is held back at once. SQS refuses a
// visibility timeout past 12 hours from the receive, and Lambda's poller
// received the message a moment before the function holds it.
const MaxHold = 12*time.Hour - 10*time.Minute

// Function is the recount Lambda: an SQS mapping on the stream job's
// recount queue and on its mapping's on-failure queue. A message is one of
//
//   - a late copy (totals.Late, from the job): its key;
//   - keys, {"keys": ["2026-12-02#USD#m1", …]}: what a discarded batch
//     left to recount once its days are over (see below);
//   - an operator's span, {"from": RFC 3339, "to": RFC 3339}: every key
//     with an event that occurred in it (docs/stream-job.md#stale-state);
//   - Lambda's on-failure record of a discarded stream batch: read back
//     from the stream at once (it keeps records 24 hours, and a day may be
//     longer to close), its keys recounted where their day is over and the
//     rest sent on as keys to RecountQueueURL. A batch the stream no longer
//     holds falls back to the keys of every event that occurred from its
//     first arrival minus the horizon to its last.
//
// A key whose day is over is recounted; the others are marked pending and
// their request is held back until the first closes (a batch item failure,
// its visibility moved there), which takes a few deliveries of at most
// MaxHold each.
type Function struct {
	Recounter *Recounter
	SQS       QueueAPI
	Streams   StreamAPI
	// QueueURLs are the consumed queues' URLs: a message is held back
	// through the one whose name ends its event source ARN.
	QueueURLs []string
	// RecountQueueURL is where a discarded batch's open keys go on.
	RecountQueueURL string
	Logger          *slog.Logger
	Metrics         *metrics.Emitter
}

// Handle implements the mapping's handler with partial batch failures.
func (f Function) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	log := f.Logger
	if log == nil {
		log = slog.Default()
	}
	var resp events.SQSEventResponse
	for _, m := range ev.Records {
		if err := f.one(ctx, log, m); err != nil {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
		}
	}
	return resp, nil
}

// errHeld is a request kept back for its day: not a failure of the recount.
var errHeld = errors.New("recount: held until its day is over")

// one handles one message; an error keeps it in its queue.
func (f Function) one(ctx context.Context, log *slog.Logger, m events.SQSMessage) error {
	log = log.With("scope", "recount", "message_id", m.MessageId)
	r, err := parse(m.Body)
	if err != nil {
		// Kept: after RecountMaxReceives deliveries it parks in the DLQ.
		log.Error("recount request unreadable", "err", err)
		return err
	}
	keys, err := f.keysOf(ctx, log, r)
	if err != nil {
		log.Error("recount request not resolved to keys", "err", err)
		return err
	}
	open, wait, err := f.Recounter.Keys(ctx, keys)
	if err != nil {
		log.Error("recount failed", "err", err)
		return err
	}
	if len(open) == 0 {
		return nil
	}
	if r.Batch != nil {
		// The stream forgets the batch before some of its days close: its
		// open keys go on as a request of their own.
		if err := f.sendKeys(ctx, open); err != nil {
			log.Error("a discarded batch's open keys not sent on: the record is kept", "err", err)
			return err
		}
		log.Info("a discarded batch's open keys sent on", "keys", len(open), "until", wait)
		return nil
	}
	hold := min(wait.Sub(f.Recounter.Now())+time.Minute, MaxHold)
	if err := f.hold(ctx, m, hold); err != nil {
		log.Warn("recount request not held back: it comes back after the queue's visibility timeout", "err", err)
	}
	log.Info("recount waits for its day to end", "keys", len(open), "until", wait, "held", hold.String())
	return errHeld
}

// keysOf resolves a request to the keys it names.
func (f Function) keysOf(ctx context.Context, log *slog.Logger, r request) ([]totals.Key, error) {
	switch {
	case r.Batch != nil:
		b := Batch{StreamArn: r.Batch.StreamArn, ShardID: r.Batch.ShardID, Start: r.Batch.StartSeq, End: r.Batch.EndSeq}
		keys, err := BatchKeys(ctx, f.Streams, b)
		if !errors.Is(err, ErrBatchGone) {
			return keys, err
		}
		first, last, serr := span("a batch's arrival times", r.Batch.First, r.Batch.Last)
		if serr != nil {
			return nil, errors.Join(err, serr)
		}
		f.Metrics.Count("RecountBatchGone", 1)
		log.Warn("the stream no longer holds the batch: recounting every key its arrival times allow", "err", err)
		from, to := f.Recounter.BatchRange(first, last)
		return f.Recounter.Range(ctx, from, to)
	case r.From != "" || r.To != "":
		from, to, err := span("a span to recount", r.From, r.To)
		if err != nil {
			return nil, err
		}
		return f.Recounter.Range(ctx, from, to)
	}
	return r.keys, nil
}

func (f Function) sendKeys(ctx context.Context, keys []totals.Key) error {
	out := keysRequest{Keys: make([]string, len(keys))}
	for i, k := range keys {
		out.Keys[i] = k.String()
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	if _, err := f.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(f.RecountQueueURL), MessageBody: aws.String(string(b))}); err != nil {
		return fmt.Errorf("recount: send keys: %w", err)
	}
	return nil
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

// keysRequest is the message a discarded batch's open keys travel in.
type keysRequest struct {
	Keys []string `json:"keys"`
}

// wire is any of the messages (see Function).
type wire struct {
	EventID    string   `json:"event_id"`
	MerchantID string   `json:"merchant_id"`
	Day        string   `json:"day"`
	Currency   string   `json:"currency"`
	Keys       []string `json:"keys"`
	Batch      *struct {
		ShardID   string `json:"shardId"`
		StartSeq  string `json:"startSequenceNumber"`
		EndSeq    string `json:"endSequenceNumber"`
		First     string `json:"approximateArrivalOfFirstRecord"`
		Last      string `json:"approximateArrivalOfLastRecord"`
		StreamArn string `json:"streamArn"`
	} `json:"DDBStreamBatchInfo"`
	From string `json:"from"`
	To   string `json:"to"`
}

// request is a message read: keys already known, or what names them.
type request struct {
	wire
	keys []totals.Key
}

// ErrUnknownRequest is a message that is none of the requests.
var ErrUnknownRequest = errors.New("recount: neither a late copy, keys, a span nor a stream batch's failure record")

// parse reads a message and checks what it names.
func parse(body string) (request, error) {
	var r request
	if err := json.Unmarshal([]byte(body), &r.wire); err != nil {
		return request{}, fmt.Errorf("recount: decode: %w", err)
	}
	switch {
	case r.Batch != nil:
		if r.Batch.StreamArn == "" || r.Batch.ShardID == "" || r.Batch.StartSeq == "" || r.Batch.EndSeq == "" {
			return request{}, errors.New("recount: a batch's failure record lacks its stream, shard or sequence numbers")
		}
	case r.From != "" || r.To != "":
	case len(r.Keys) > 0:
		for _, s := range r.Keys {
			k, err := totals.ParseKey(s)
			if err != nil {
				return request{}, fmt.Errorf("recount: keys: %w", err)
			}
			r.keys = append(r.keys, k)
		}
	case r.EventID != "":
		if r.MerchantID == "" {
			return request{}, fmt.Errorf("recount: late copy %s names no merchant", r.EventID)
		}
		k, err := totals.ParseKey(r.Day + "#" + r.Currency + "#" + r.MerchantID)
		if err != nil {
			return request{}, fmt.Errorf("recount: late copy %s: %w", r.EventID, err)
		}
		r.keys = []totals.Key{k}
	default:
		return request{}, ErrUnknownRequest
	}
	return r, nil
}

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
