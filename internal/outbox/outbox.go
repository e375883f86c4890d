// Package outbox moves a payment's event from the ledger into the DynamoDB
// outbox table, whose stream feeds the relay (DESIGN §4, seed Part 6).
//
// The ledger transaction that makes a payment final also records an
// outbox_intents row (same commit). After that commit the API calls
// Publisher.Publish: one conditional PutItem of the outbox item, keyed by the
// derived event id. A ConditionalCheckFailed answer means the item is already
// there, which is success.
//
// Why the API does not mark the intent published. The happy path of a
// payment may make at most five durable writes: the key claim, the PENDING
// row, the settle transaction, the outbox put and the key record's
// completion. An UPDATE of published_at would be a sixth. So the hot path
// leaves published_at NULL, and the resolver calls Sweeper.Sweep on its
// schedule: every intent still unpublished after a grace period (30 s by
// default, longer than a normal request's commit-to-put gap) is put again —
// conditionally, so an item already there costs one failed condition and no
// stream record — and then all of them are marked published in ONE batched
// UPDATE. A sweep's work is bounded by a limit per call. A re-put is harmless
// even when it does create an item (the first put was lost): it carries the
// same derived event id, and the consumer's inbox is the guard that can't be
// skipped. Sweeps running at once are harmless for the same reason.
//
// Items carry expires_at (now + 24 h by default): DynamoDB's TTL deletes them
// for free, long after the relay has sent them. See package relay for why the
// relay does not delete them.
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
)

// PutItemAPI is the DynamoDB call the Publisher makes.
type PutItemAPI interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
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
	db  PutItemAPI
	cfg Config
}

// NewPublisher returns a Publisher writing to cfg.Table through db.
func NewPublisher(db PutItemAPI, cfg Config) (*Publisher, error) {
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
	if e.EventID == "" || e.MerchantID == "" {
		return false, fmt.Errorf("outbox: publish %q: event lacks event_id or merchant_id", e.EventID)
	}
	payload, err := e.Marshal()
	if err != nil {
		return false, fmt.Errorf("outbox: publish %s: %w", e.EventID, err)
	}
	expires := p.cfg.Now().Add(p.cfg.TTL).Unix()
	_, err = p.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(p.cfg.Table),
		Item: map[string]types.AttributeValue{
			AttrEventID:    &types.AttributeValueMemberS{Value: e.EventID},
			AttrMerchantID: &types.AttributeValueMemberS{Value: e.MerchantID},
			AttrPayload:    &types.AttributeValueMemberS{Value: string(payload)},
			AttrExpiresAt:  &types.AttributeValueMemberN{Value: strconv.FormatInt(expires, 10)},
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
