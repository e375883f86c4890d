// Package relay forwards the outbox table's stream to the SQS FIFO events
// queue (docs/mechanism.md#seed-part-6).
//
// Each INSERT or MODIFY record's new image is one outbox item; it becomes one
// message: body = the item's payload, MessageDeduplicationId = the item's
// event id, MessageGroupId = its merchant id. The ids come from the item, so
// every re-send of a record (a retried batch, a crashed invocation, a re-drive
// by the resolver's sweep) carries the original event id: the queue's
// five-minute window drops fast repeats and the worker's inbox drops the
// rest. Messages go out in stream order, at most 10 per SendMessageBatch
// call. A MODIFY is how the resolver's sweep re-drives an event the consumer
// never processed (package outbox): it is sent like an INSERT.
//
// Ids SQS would refuse. Every group id and deduplication id is checked
// against SQS's documented alphabet and length (CheckMessageID) before it
// is sent, because moto does not check and a refusal on AWS would be the
// sender's fault for every retry. One SQS would refuse (a merchant id with
// a space, say, written before the API checked merchant ids) is replaced by
// a stand-in derived from it (safeMessageID): the event is still delivered,
// in its merchant's order, and the replacement is logged as an error and
// counted (RelayIDDerived) so the data can be fixed. Refusing the record
// instead would stall its shard through every retry, then drop it to the
// on-failure destination, and the sweep's re-drives would bring it back to
// do the same again.
//
// Failures. The relay stops at the first record it could not send and
// reports it as the batch item failure; Lambda checkpoints before it and
// resumes from it, so nothing after it is sent out of order by this
// invocation. A record that can never be sent (not an outbox item, or refused
// by SQS as the sender's fault) is reported the same way when good records
// precede it; when it is the first record of the batch the relay fails the
// whole invocation instead, so the mapping's bisect-on-error splits the batch
// until the record is alone and only it goes to the on-failure destination.
//
// Delete or TTL. Items are left in the table and DynamoDB's TTL removes them
// (expires_at, 24 h): a delete after each send would be one more write per
// event, would put a REMOVE record on the stream for every event, and, if it
// ran before a retry, could not make a re-send any safer, since the id in the
// message already makes repeats harmless. TTL deletions are free and arrive as
// REMOVE records, which the relay ignores.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/outbox"
)

// MaxBatch is SQS's limit of messages per SendMessageBatch call.
const MaxBatch = 10

// SendMessageBatchAPI is the SQS call the relay makes.
type SendMessageBatchAPI interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// MetricIDDerived counts messages sent under a derived group or
// deduplication id because SQS would refuse the item's own.
const MetricIDDerived = "RelayIDDerived"

// Config configures a Relay. Zero fields take the defaults.
type Config struct {
	// QueueURL is the events FIFO queue (required).
	QueueURL string
	// Logger receives a line per sent message and per failure (default slog.Default()).
	Logger *slog.Logger
	// Metrics receives RelaySent, RelayFailed and RelayIDDerived counts
	// (default: none).
	Metrics *metrics.Emitter
}

// Relay turns stream batches into queue messages. It is safe for concurrent use.
type Relay struct {
	sqs SendMessageBatchAPI
	cfg Config
}

// New returns a Relay sending to cfg.QueueURL through client.
func New(client SendMessageBatchAPI, cfg Config) (*Relay, error) {
	if client == nil {
		return nil, errors.New("relay: nil SQS client")
	}
	if cfg.QueueURL == "" {
		return nil, errors.New("relay: Config.QueueURL is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Relay{sqs: client, cfg: cfg}, nil
}

// ErrUnsendable marks a record that no retry can send.
var ErrUnsendable = errors.New("relay: record can never be sent")

// message is one record to send.
type message struct {
	index    int // in the batch
	seq      string
	eventID  string
	merchant string
	payload  string
}

// Handle sends the batch's INSERT and MODIFY records in order and blocks
// until SQS has answered for each sent chunk. It returns the first record it
// could not send as the only batch item failure, or an error (the whole
// invocation failed) when that record is the batch's first and can never be
// sent. REMOVE records are skipped.
func (r *Relay) Handle(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	var resp events.DynamoDBEventResponse
	var chunk []message
	for i, rec := range ev.Records {
		if rec.EventName != string(events.DynamoDBOperationTypeInsert) && rec.EventName != string(events.DynamoDBOperationTypeModify) {
			continue
		}
		m, err := decode(i, rec)
		if err != nil {
			// Send what precedes it first, so that the checkpoint covers it.
			if failed, ferr := r.flush(ctx, ev, chunk); failed >= 0 {
				return r.fail(ctx, ev, failed, ferr)
			}
			return r.fail(ctx, ev, i, err)
		}
		chunk = append(chunk, m)
		if len(chunk) == MaxBatch {
			if failed, err := r.flush(ctx, ev, chunk); failed >= 0 {
				return r.fail(ctx, ev, failed, err)
			}
			chunk = chunk[:0]
		}
	}
	if failed, err := r.flush(ctx, ev, chunk); failed >= 0 {
		return r.fail(ctx, ev, failed, err)
	}
	return resp, nil
}

// fail reports record i as the batch's first failure, or fails the whole
// invocation when i is the first record and err says it can never be sent.
func (r *Relay) fail(ctx context.Context, ev events.DynamoDBEvent, i int, err error) (events.DynamoDBEventResponse, error) {
	rec := ev.Records[i]
	r.cfg.Metrics.Count("RelayFailed", 1)
	r.cfg.Logger.LogAttrs(ctx, slog.LevelError, "relay: record not sent",
		slog.String("event_id", attr(rec, outbox.AttrEventID)),
		slog.String("payment_id", ids.PaymentOfEvent(attr(rec, outbox.AttrEventID))),
		slog.String("sequence_number", rec.Change.SequenceNumber),
		slog.Int("remaining", len(ev.Records)-i),
		slog.String("error", err.Error()))
	if i == 0 && errors.Is(err, ErrUnsendable) {
		return events.DynamoDBEventResponse{}, fmt.Errorf("relay: first record %s of the batch: %w", rec.Change.SequenceNumber, err)
	}
	return events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{
		{ItemIdentifier: rec.Change.SequenceNumber},
	}}, nil
}

// flush sends chunk in one call. It returns the batch index of the first
// message not known to be sent (and why), or -1 when all were sent.
func (r *Relay) flush(ctx context.Context, ev events.DynamoDBEvent, chunk []message) (int, error) {
	if len(chunk) == 0 {
		return -1, nil
	}
	entries := make([]sqstypes.SendMessageBatchRequestEntry, len(chunk))
	for k, m := range chunk {
		group, groupDerived := safeMessageID(m.merchant)
		dedup, dedupDerived := safeMessageID(m.eventID)
		if groupDerived || dedupDerived {
			r.cfg.Metrics.Count(MetricIDDerived, 1)
			r.cfg.Logger.LogAttrs(ctx, slog.LevelError, "relay: SQS would refuse the item's message group or deduplication id; sent under one derived from it",
				slog.String("event_id", m.eventID), slog.String("payment_id", ids.PaymentOfEvent(m.eventID)),
				slog.String("sequence_number", m.seq),
				slog.Bool("group_id_derived", groupDerived), slog.String("group_id", group),
				slog.Bool("dedup_id_derived", dedupDerived), slog.String("dedup_id", dedup))
		}
		entries[k] = sqstypes.SendMessageBatchRequestEntry{
			Id:                     aws.String(strconv.Itoa(k)),
			MessageBody:            aws.String(m.payload),
			MessageDeduplicationId: aws.String(dedup),
			MessageGroupId:         aws.String(group),
		}
	}
	out, err := r.sqs.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(r.cfg.QueueURL), Entries: entries})
	if err != nil {
		return chunk[0].index, fmt.Errorf("relay: send %d messages from %s: %w", len(chunk), chunk[0].eventID, err)
	}
	first, why := len(chunk), error(nil)
	for _, f := range out.Failed {
		k, err := strconv.Atoi(aws.ToString(f.Id))
		if err != nil || k < 0 || k >= len(chunk) {
			return chunk[0].index, fmt.Errorf("relay: SQS answered for unknown entry %q", aws.ToString(f.Id))
		}
		if k < first {
			first = k
			why = fmt.Errorf("relay: send %s: %s: %s", chunk[k].eventID, aws.ToString(f.Code), aws.ToString(f.Message))
			if f.SenderFault {
				why = fmt.Errorf("%w: %w", ErrUnsendable, why)
			}
		}
	}
	for _, m := range chunk[:first] {
		r.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "relay: sent",
			slog.String("event_id", m.eventID), slog.String("payment_id", ids.PaymentOfEvent(m.eventID)),
			slog.String("sequence_number", m.seq))
	}
	r.cfg.Metrics.Count("RelaySent", first)
	if first < len(chunk) {
		return chunk[first].index, why
	}
	return -1, nil
}

func attr(rec events.DynamoDBEventRecord, name string) string {
	v, ok := rec.Change.NewImage[name]
	if !ok || v.DataType() != events.DataTypeString {
		return ""
	}
	return v.String()
}

// decode reads the outbox item from a record's new image.
func decode(i int, rec events.DynamoDBEventRecord) (message, error) {
	m := message{
		index:    i,
		seq:      rec.Change.SequenceNumber,
		eventID:  attr(rec, outbox.AttrEventID),
		merchant: attr(rec, outbox.AttrMerchantID),
		payload:  attr(rec, outbox.AttrPayload),
	}
	if m.eventID == "" || m.merchant == "" || m.payload == "" {
		return message{}, fmt.Errorf("%w: record %s is not an outbox item (needs string %s, %s and %s in its new image)",
			ErrUnsendable, m.seq, outbox.AttrEventID, outbox.AttrMerchantID, outbox.AttrPayload)
	}
	return m, nil
}
