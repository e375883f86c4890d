package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/event"
)

// InboxEvent is a verified PSP webhook event, as the inbox records it.
type InboxEvent struct {
	ID        string // the PSP's event id (evt_...): the inbox key
	Type      string // e.g. payment_intent.succeeded
	PaymentID string // our reference from the object's metadata; "" if none

	// The object's own terms, which ApplyWebhook compares with the row the
	// payment id names before any move: a metadata key is anyone's to set
	// (another integration of the same PSP account may use payment_id),
	// the terms are the charge's. Amount is in minor units, Currency in any
	// case; PaymentIntentID and ChargeID are the PSP's ids the object is
	// about ("" if none).
	Amount          int64
	Currency        string
	PaymentIntentID string
	ChargeID        string
}

// Mismatch names what of an event's object differs from the payment's row
// (ApplyWebhook): amount, currency, the PSP reference. Empty: nothing.
type Mismatch []string

// mismatch compares the event's object with the row p. Amount and currency
// are compared on every row that holds them (a resolve's VOID row holds
// none, and never moves); the PSP reference once the row names one (a
// decline names its PaymentIntent, a charge its charge id): an open row has
// none yet.
func (in InboxEvent) mismatch(p Payment) Mismatch {
	var m Mismatch
	if p.Currency != "" && in.Amount != p.Amount {
		m = append(m, "amount")
	}
	if p.Currency != "" && !strings.EqualFold(in.Currency, p.Currency) {
		m = append(m, "currency")
	}
	if p.PSPCharge != "" && p.PSPCharge != in.PaymentIntentID && p.PSPCharge != in.ChargeID {
		m = append(m, "psp_reference")
	}
	return m
}

// WebhookResult says what ApplyWebhook did.
type WebhookResult struct {
	// Duplicate: the inbox already held the event, so nothing was written.
	Duplicate bool
	// Found: the payment the event names exists (Payment is its row as it
	// stands after the transaction).
	Found   bool
	Payment Payment
	// Moved: this event moved the payment's state; Event is then the event
	// to publish after the commit.
	Moved bool
	Event *event.Event
	// Mismatch: the event would move the payment, but its object is not
	// the row's (another amount, currency or PSP reference): nothing moved,
	// the inbox row is committed.
	Mismatch Mismatch
}

// ApplyWebhook records a PSP event in the webhook inbox and, only if the
// inbox did not hold it yet, applies o (nil: no state move for this event
// type) as the allowed compare-and-set with the journal entries and the
// outbox intent: the statements Settle runs, in the same transaction as the
// inbox row (docs/mechanism.md#seed-part-5). A repeat of the event changes
// nothing. A move that is no longer allowed (the resolver or the API settled
// first) is not an error: the inbox row is committed and Moved is false.
// Nor is an event whose object does not match the row (in.mismatch): it
// moves nothing, and Mismatch says what differs.
func (s *Store) ApplyWebhook(ctx context.Context, in InboxEvent, o *Outcome, now time.Time) (WebhookResult, error) {
	if in.ID == "" || in.Type == "" {
		return WebhookResult{}, fmt.Errorf("ledger: webhook event without id or type")
	}
	if o != nil {
		if err := o.check(in.PaymentID); err != nil {
			return WebhookResult{}, err
		}
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return WebhookResult{}, unavailable("begin webhook", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after commit
	tag, err := tx.Exec(ctx, `
		INSERT INTO webhook_inbox (psp_event_id, event_type, payment_id) VALUES ($1, $2, NULLIF($3, ''))
		ON CONFLICT (psp_event_id) DO NOTHING`, in.ID, in.Type, in.PaymentID)
	if err != nil {
		return WebhookResult{}, unavailable("webhook inbox", err)
	}
	if tag.RowsAffected() == 0 {
		return WebhookResult{Duplicate: true}, nil
	}
	var res WebhookResult
	if o != nil && in.PaymentID != "" {
		// Held until the commit: the comparison and the move see one row.
		p, err := scan(tx.QueryRow(ctx, `SELECT `+columns+` FROM payments WHERE payment_id = $1 FOR UPDATE`, in.PaymentID))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return WebhookResult{}, unavailable("webhook payment", err)
		default:
			res = WebhookResult{Found: true, Payment: p, Mismatch: in.mismatch(p)}
		}
		if res.Found && len(res.Mismatch) == 0 {
			p, ev, moved, err := settleIn(ctx, tx, in.PaymentID, *o, now)
			if err != nil {
				return WebhookResult{}, err
			}
			if moved {
				res.Payment, res.Moved, res.Event = p, true, ev
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return WebhookResult{}, unavailable("commit webhook", err)
	}
	if o == nil && in.PaymentID != "" {
		p, err := s.Get(ctx, in.PaymentID)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			// The inbox row is committed; only the report is incomplete.
			return res, err
		default:
			res.Found, res.Payment = true, p
		}
	}
	return res, nil
}

// check refuses an outcome that is not final, as Settle does.
func (o Outcome) check(paymentID string) error {
	if o.State != Succeeded && o.State != Failed {
		return fmt.Errorf("ledger: settle %s to %s: not a final PSP outcome", paymentID, o.State)
	}
	return nil
}

// RefundWebhookResult says what ApplyRefundWebhook did.
type RefundWebhookResult struct {
	Duplicate bool         // the inbox already held the event: nothing written
	Found     bool         // the payment has a refund row (Refund is it, as it stands)
	Refund    Refund       //
	Moved     bool         // this event settled the refund (or failed a succeeded one)
	Event     *event.Event // the event to publish after the commit, if any
}

// ApplyRefundWebhook records a PSP refund event (refund.updated,
// refund.failed, charge.refund.updated) in the webhook inbox and, only if
// the inbox did not hold it yet, settles the payment's refund with o in the
// same transaction (SettleRefund's statements): a pending refund's final
// state, or a succeeded refund failing later. o nil: the event's refund is
// still pending; only the inbox row is written.
func (s *Store) ApplyRefundWebhook(ctx context.Context, in InboxEvent, o *RefundOutcome) (RefundWebhookResult, error) {
	if in.ID == "" || in.Type == "" {
		return RefundWebhookResult{}, fmt.Errorf("ledger: webhook event without id or type")
	}
	if o != nil && o.State != RefundSucceeded && o.State != RefundFailed {
		return RefundWebhookResult{}, fmt.Errorf("ledger: refund webhook for %s with %s: not a final PSP outcome", in.PaymentID, o.State)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return RefundWebhookResult{}, unavailable("begin refund webhook", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after commit
	tag, err := tx.Exec(ctx, `
		INSERT INTO webhook_inbox (psp_event_id, event_type, payment_id) VALUES ($1, $2, NULLIF($3, ''))
		ON CONFLICT (psp_event_id) DO NOTHING`, in.ID, in.Type, in.PaymentID)
	if err != nil {
		return RefundWebhookResult{}, unavailable("webhook inbox", err)
	}
	if tag.RowsAffected() == 0 {
		return RefundWebhookResult{Duplicate: true}, nil
	}
	var res RefundWebhookResult
	if o != nil && in.PaymentID != "" {
		before, err := scanRefund(tx.QueryRow(ctx, `SELECT `+refundColumns+` FROM refunds WHERE payment_id = $1`, in.PaymentID))
		if err == nil {
			r, moved, err := settleRefundTx(ctx, tx, in.PaymentID, *o)
			if err != nil {
				return RefundWebhookResult{}, err
			}
			if moved {
				res = RefundWebhookResult{Found: true, Refund: r, Moved: true}
				if e, ok := SettledRefundEvent(r, before.State == RefundSucceeded); ok {
					res.Event = &e
				}
			}
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return RefundWebhookResult{}, unavailable("refund webhook: read refund", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return RefundWebhookResult{}, unavailable("commit refund webhook", err)
	}
	if !res.Moved && in.PaymentID != "" {
		r, err := s.GetRefund(ctx, in.PaymentID)
		switch {
		case errors.Is(err, ErrRefundNotFound):
		case err != nil:
			return res, err // the inbox row is committed; only the report is incomplete
		default:
			res.Found, res.Refund = true, r
		}
	}
	return res, nil
}
