// Package outbox moves a payment's event from the ledger into the DynamoDB
// outbox table, whose stream feeds the relay (docs/mechanism.md#seed-part-6).
//
// The ledger transaction that makes a payment final also records an
// outbox_intents row (same commit). After that commit the API calls
// Publisher.Publish: one conditional PutItem of the outbox item, keyed by the
// derived event id. A ConditionalCheckFailed answer means the item is already
// there, which is success.
//
// "Published" means delivered: an intent is marked published only once the
// consumer's inbox (processed, in the same PostgreSQL) holds its event id.
// An item in the table proves nothing: the relay's stream mapping may have
// given up on its record after its retries (the on-failure destination then
// holds only shard and sequence numbers, never the event). Nothing on the
// hot path marks anything: the happy path of a payment makes at most five
// durable writes (the key claim, the PENDING row, the settle transaction, the
// outbox put and the key record's completion), and an UPDATE of
// published_at would be a sixth. The resolver calls Sweeper.Sweep on its
// schedule instead, which
//
//   - marks every unpublished intent whose event the inbox holds, in ONE
//     batched UPDATE ... FROM processed;
//   - re-drives every intent older than the grace period (30 s) that the
//     inbox does not hold: an UpdateItem that rewrites the outbox item and
//     bumps its redrive counter (creating it if the API's put was lost or
//     TTL removed it). A changed item always puts a new stream record (MODIFY
//     or INSERT) carrying the same event id, so the relay sends the event
//     again. Re-drives back off per intent (5 min, doubling, at most 1 h,
//     on the intent row); SQS FIFO drops a re-send with the same dedup id
//     within 5 minutes of a real send anyway, and the worker's inbox drops
//     any later copy. Events the worker dead-lettered are re-driven the same
//     way, so once their cause is fixed they arrive without an operator's
//     DLQ redrive.
//
// A sweep's work is bounded by a limit per call, and sweeps running at once
// are harmless: same derived event id, and the consumer's inbox is the
// guard that can't be skipped.
//
// Items carry expires_at (now + 24 h by default, renewed by each re-drive):
// DynamoDB's TTL deletes them for free, long after the relay has sent them.
// See package relay for why the relay does not delete them.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncepay/oncepay/internal/event"
)

// Attribute names of an outbox item (the table's partition key is EventID).
const (
	AttrEventID    = "event_id"
	AttrMerchantID = "merchant_id"
	AttrPayload    = "payload"
	AttrExpiresAt  = "expires_at"
	// AttrRedrive counts the sweep's re-drives of the item. Bumping it is
	// what makes a re-drive a change, and only a change puts a stream
	// record: DynamoDB writes none for an update that changes nothing.
	AttrRedrive = "redrive"
)

// ItemAPI is the DynamoDB calls the Publisher makes: PutItem to publish,
// UpdateItem to re-drive.
type ItemAPI interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// Config configures a Publisher. Zero fields take the defaults.
type Config struct {
	// Table is the outbox table's name (required).
	Table string
	// TTL is how long an item lives before DynamoDB's TTL may delete it
	// (default 24 h): far longer than the relay needs, short enough to keep
	// the table small.
	TTL time.Duration
	// Now is the clock for expires_at (default time.Now).
	Now func() time.Time
	// Logger receives one line per put (default slog.Default()).
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.Table == "" {
		return errors.New("outbox: Config.Table is required")
	}
	if c.TTL == 0 {
		c.TTL = 24 * time.Hour
	}
	if c.TTL < 0 {
		return fmt.Errorf("outbox: Config.TTL %s is negative", c.TTL)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Publisher puts events into the outbox table. It is safe for concurrent use.
type Publisher struct {
	db  ItemAPI
	cfg Config
}

// NewPublisher returns a Publisher writing to cfg.Table through db.
func NewPublisher(db ItemAPI, cfg Config) (*Publisher, error) {
	if db == nil {
		return nil, errors.New("outbox: nil DynamoDB client")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &Publisher{db: db, cfg: cfg}, nil
}

// Publish puts e's outbox item if no item with its event id exists. It
// blocks for one DynamoDB call. An item already there is success: the event
// id is derived, so it is the same event. It returns an error only when the
// put's outcome is not known to be "the item exists".
func (p *Publisher) Publish(ctx context.Context, e event.Event) error {
	_, err := p.put(ctx, e)
	return err
}

// put reports whether this call created the item.
func (p *Publisher) put(ctx context.Context, e event.Event) (created bool, err error) {
	payload, expires, err := p.encode(e)
	if err != nil {
		return false, fmt.Errorf("outbox: publish %q: %w", e.EventID, err)
	}
	_, err = p.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(p.cfg.Table),
		Item: map[string]types.AttributeValue{
			AttrEventID:    &types.AttributeValueMemberS{Value: e.EventID},
			AttrMerchantID: &types.AttributeValueMemberS{Value: e.MerchantID},
			AttrPayload:    &types.AttributeValueMemberS{Value: payload},
			AttrExpiresAt:  &types.AttributeValueMemberN{Value: expires},
		},
		ConditionExpression: aws.String("attribute_not_exists(" + AttrEventID + ")"),
	})
	var exists *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &exists):
		p.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "outbox item already present",
			slog.String("event_id", e.EventID), slog.String("payment_id", e.PaymentID))
		return false, nil
	case err != nil:
		return false, fmt.Errorf("outbox: put item %s: %w", e.EventID, err)
	}
	p.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "outbox item put",
		slog.String("event_id", e.EventID), slog.String("payment_id", e.PaymentID))
	return true, nil
}

// encode checks e and returns its payload and the item's expires_at.
func (p *Publisher) encode(e event.Event) (payload, expires string, err error) {
	if e.EventID == "" || e.MerchantID == "" {
		return "", "", errors.New("event lacks event_id or merchant_id")
	}
	b, err := e.Marshal()
	if err != nil {
		return "", "", err
	}
	return string(b), strconv.FormatInt(p.cfg.Now().Add(p.cfg.TTL).Unix(), 10), nil
}

// Redrive rewrites e's outbox item, creating it if it is absent, and bumps
// its redrive counter, so the table's stream carries a new record (MODIFY,
// or INSERT when the item was gone) with e's event id and the relay sends
// the event again. It blocks for one DynamoDB call and reports whether the
// item had to be created. Unlike Publish it always writes: it is for an
// event the consumer has not had, whatever the table holds.
func (p *Publisher) Redrive(ctx context.Context, e event.Event) (created bool, err error) {
	payload, expires, err := p.encode(e)
	if err != nil {
		return false, fmt.Errorf("outbox: redrive %q: %w", e.EventID, err)
	}
	out, err := p.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(p.cfg.Table),
		Key:       map[string]types.AttributeValue{AttrEventID: &types.AttributeValueMemberS{Value: e.EventID}},
		// The counter makes the write a change even when every other
		// attribute is the same; expires_at is renewed so TTL cannot
		// remove the item while its new record is on its way.
		UpdateExpression: aws.String("SET #m = :m, #p = :p, #e = :e ADD #r :one"),
		ExpressionAttributeNames: map[string]string{
			"#m": AttrMerchantID, "#p": AttrPayload, "#e": AttrExpiresAt, "#r": AttrRedrive,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":m":   &types.AttributeValueMemberS{Value: e.MerchantID},
			":p":   &types.AttributeValueMemberS{Value: payload},
			":e":   &types.AttributeValueMemberN{Value: expires},
			":one": &types.AttributeValueMemberN{Value: "1"},
		},
		ReturnValues: types.ReturnValueUpdatedOld, // nothing came back: the item was created
	})
	if err != nil {
		return false, fmt.Errorf("outbox: redrive %s: %w", e.EventID, err)
	}
	return len(out.Attributes) == 0, nil
}

// Intent is an outbox_intents row.
type Intent struct {
	EventID    string
	PaymentID  string
	MerchantID string
	Payload    []byte // the event's JSON, as the ledger stored it
	CreatedAt  time.Time
}

// EventFromIntent decodes the event an intent row carries and checks it
// against the row's own columns, so a row whose payload names another event
// is refused rather than published under the wrong id.
func EventFromIntent(in Intent) (event.Event, error) {
	e, err := event.Unmarshal(in.Payload)
	if err != nil {
		return event.Event{}, fmt.Errorf("outbox: intent %s: %w", in.EventID, err)
	}
	if e.EventID != in.EventID || e.PaymentID != in.PaymentID || e.MerchantID != in.MerchantID {
		return event.Event{}, fmt.Errorf("outbox: intent %s: payload names event %s of payment %s for merchant %s",
			in.EventID, e.EventID, e.PaymentID, e.MerchantID)
	}
	return e, nil
}
