// Package inspect reads everything the local cloud holds about one payment
// into one JSON document (`make -s inspect PAYMENT=<id>`): the ledger's
// payment row and refund, its events through the outbox and the consumer's
// inbox, the credits and debits they made, the notification intents per
// channel, and the pushes the local phone received. It reads only; the shape
// is stable and documented in docs/localcloud.md (fields may be added, never
// renamed or removed).
package inspect

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/localcloud/phone"
)

// ErrUnknownPayment means the ledger holds no payment with that id.
var ErrUnknownPayment = errors.New("inspect: no such payment in the ledger")

// Report is one payment as the local cloud holds it. Every field is always
// present: a value not known yet is null, a list with nothing in it is [].
type Report struct {
	Payment Payment `json:"payment"`
	Refund  *Refund `json:"refund"` // null: never refunded
	// Events are the payment's outbox intents, each with whether the
	// consumer's inbox took it (processed_at).
	Events        []Event        `json:"events"`
	Credits       []Entry        `json:"credits"`
	Debits        []Entry        `json:"debits"`
	Notifications []Notification `json:"notifications"`
	// Pushes are the distinct pushes the phone received about the payment,
	// in the order received (a copy the phone appended twice is one).
	Pushes []phone.Push `json:"pushes"`
	// Phone is what the phone shows for it: one entry per replace id (the
	// payment's id), the latest push with the number of alerts.
	Phone []phone.Entry `json:"phone"`
	// Emails are the messages the local SES (moto) took about the payment,
	// oldest first (AddEmails; [] when none, or moto was not asked).
	Emails []phone.Email `json:"emails"`
}

// AddEmails keeps, of every message the local SES took, those about r's
// payment (the body names it: "Payment: <id>").
func (r *Report) AddEmails(all []phone.Email) {
	for _, e := range all {
		if strings.Contains(e.Body, "Payment: "+r.Payment.PaymentID+"\n") {
			r.Emails = append(r.Emails, e)
		}
	}
}

// Payment is the ledger's payments row.
type Payment struct {
	PaymentID       string     `json:"payment_id"`
	CallerID        string     `json:"caller_id"`
	ClientKey       string     `json:"client_key"` // the Idempotency-Key
	State           string     `json:"state"`
	Amount          *int64     `json:"amount"` // minor units; null only on a VOID row
	Currency        *string    `json:"currency"`
	MerchantID      *string    `json:"merchant_id"`
	OrderID         *string    `json:"order_id"`
	PaymentMethod   *string    `json:"payment_method"`
	PSPCharge       *string    `json:"psp_charge"` // the PSP's charge id (ch_...) once known
	DeclineCode     *string    `json:"decline_code"`
	DeadlineAt      *time.Time `json:"deadline_at"`
	ResolveAttempts int        `json:"resolve_attempts"`
	CreatedAt       time.Time  `json:"created_at"`
	UpdatedAt       time.Time  `json:"updated_at"`
}

// Refund is the payment's refunds row.
type Refund struct {
	State         string    `json:"state"`
	Amount        int64     `json:"amount"`
	Currency      string    `json:"currency"`
	PSPRefund     *string   `json:"psp_refund"`
	FailureReason *string   `json:"failure_reason"`
	Attempts      int       `json:"attempts"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// Event is one outbox intent and its way to the consumer.
type Event struct {
	EventID string `json:"event_id"`
	State   string `json:"state"` // the state the event announces
	// ConsumedAt is when the outbox sweep saw the inbox hold it
	// (outbox_intents.published_at); ProcessedAt when the inbox took it.
	CreatedAt   time.Time  `json:"created_at"`
	ConsumedAt  *time.Time `json:"consumed_at"`
	ProcessedAt *time.Time `json:"processed_at"`
	Redrives    int        `json:"redrives"`
}

// Entry is a credits or debits row: money moved to or from the merchant.
type Entry struct {
	EventID    string    `json:"event_id"`
	MerchantID string    `json:"merchant_id"`
	Amount     int64     `json:"amount"` // minor units, > 0
	Currency   string    `json:"currency"`
	CreatedAt  time.Time `json:"created_at"`
}

// Notification is a notif row: one intent per event and channel.
type Notification struct {
	EventID   string     `json:"event_id"`
	Channel   string     `json:"channel"`
	State     string     `json:"state"` // PENDING, SENT, UNDELIVERABLE, STUCK or SUPERSEDED
	ReplaceID string     `json:"replace_id"`
	Attempts  int        `json:"attempts"`
	LastError *string    `json:"last_error"`
	CreatedAt time.Time  `json:"created_at"`
	SentAt    *time.Time `json:"sent_at"`
}

// Querier is the part of a pgx connection or pool Payment reads through.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Read builds the report of paymentID from the ledger db and the phone's
// pushes file at phonePath (a missing file: no pushes). It returns
// ErrUnknownPayment if the ledger has no such payment. It blocks for six
// queries and one file read.
func Read(ctx context.Context, db Querier, phonePath, paymentID string) (Report, error) {
	r := Report{Events: []Event{}, Credits: []Entry{}, Debits: []Entry{}, Notifications: []Notification{}, Pushes: []phone.Push{}, Phone: []phone.Entry{}, Emails: []phone.Email{}}
	p := &r.Payment
	err := db.QueryRow(ctx, `
		SELECT payment_id, caller_id, client_key, state, amount, currency, merchant_id, order_id, payment_method,
		       psp_charge, decline_code, deadline_at, resolve_attempts, created_at, updated_at
		FROM payments WHERE payment_id = $1`, paymentID).Scan(
		&p.PaymentID, &p.CallerID, &p.ClientKey, &p.State, &p.Amount, &p.Currency, &p.MerchantID, &p.OrderID, &p.PaymentMethod,
		&p.PSPCharge, &p.DeclineCode, &p.DeadlineAt, &p.ResolveAttempts, &p.CreatedAt, &p.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Report{}, fmt.Errorf("%w: %s", ErrUnknownPayment, paymentID)
	}
	if err != nil {
		return Report{}, fmt.Errorf("inspect: payment %s: %w", paymentID, err)
	}

	var f Refund
	err = db.QueryRow(ctx, `
		SELECT state, amount, currency, psp_refund, failure_reason, attempts, created_at, updated_at
		FROM refunds WHERE payment_id = $1`, paymentID).Scan(
		&f.State, &f.Amount, &f.Currency, &f.PSPRefund, &f.FailureReason, &f.Attempts, &f.CreatedAt, &f.UpdatedAt)
	switch {
	case err == nil:
		r.Refund = &f
	case !errors.Is(err, pgx.ErrNoRows):
		return Report{}, fmt.Errorf("inspect: refund of %s: %w", paymentID, err)
	}

	// An event's id is derived from its payment's (ids.EventID): the
	// consumer's tables hold no payment id of their own.
	if r.Events, err = collect(ctx, db, `
		SELECT i.event_id, i.created_at, i.published_at, p.processed_at, i.redrives
		FROM outbox_intents i LEFT JOIN processed p ON p.event_id = i.event_id
		WHERE i.payment_id = $1 ORDER BY i.created_at, i.event_id`, paymentID, func(row pgx.CollectableRow) (Event, error) {
		var e Event
		err := row.Scan(&e.EventID, &e.CreatedAt, &e.ConsumedAt, &e.ProcessedAt, &e.Redrives)
		_, e.State = cutEvent(e.EventID)
		return e, err
	}); err != nil {
		return Report{}, err
	}
	entry := func(row pgx.CollectableRow) (Entry, error) {
		var e Entry
		return e, row.Scan(&e.EventID, &e.MerchantID, &e.Amount, &e.Currency, &e.CreatedAt)
	}
	if r.Credits, err = collect(ctx, db, `
		SELECT event_id, merchant_id, cents, currency, created_at FROM credits
		WHERE split_part(event_id, ':', 1) = $1 ORDER BY created_at, credit_id`, paymentID, entry); err != nil {
		return Report{}, err
	}
	if r.Debits, err = collect(ctx, db, `
		SELECT event_id, merchant_id, cents, currency, created_at FROM debits
		WHERE split_part(event_id, ':', 1) = $1 ORDER BY created_at, debit_id`, paymentID, entry); err != nil {
		return Report{}, err
	}
	if r.Notifications, err = collect(ctx, db, `
		SELECT event_id, channel, state, replace_id, attempts, last_error, created_at, sent_at FROM notif
		WHERE split_part(event_id, ':', 1) = $1 ORDER BY created_at, event_id, channel`, paymentID, func(row pgx.CollectableRow) (Notification, error) {
		var n Notification
		return n, row.Scan(&n.EventID, &n.Channel, &n.State, &n.ReplaceID, &n.Attempts, &n.LastError, &n.CreatedAt, &n.SentAt)
	}); err != nil {
		return Report{}, err
	}

	all, err := phone.Read(phonePath)
	if err != nil {
		return Report{}, fmt.Errorf("inspect: %w", err)
	}
	mine := phone.ForPayment(all, paymentID)
	r.Pushes = append(r.Pushes, phone.Distinct(mine)...)
	r.Phone = append(r.Phone, phone.Show(mine)...)
	return r, nil
}

func collect[T any](ctx context.Context, db Querier, sql, paymentID string, scan pgx.RowToFunc[T]) ([]T, error) {
	rows, err := db.Query(ctx, sql, paymentID)
	if err != nil {
		return nil, fmt.Errorf("inspect: %s: %w", paymentID, err)
	}
	out, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, fmt.Errorf("inspect: %s: %w", paymentID, err)
	}
	if out == nil {
		out = []T{}
	}
	return out, nil
}

// cutEvent splits an event id into its payment and the state it announces.
func cutEvent(eventID string) (paymentID, state string) {
	paymentID = ids.PaymentOfEvent(eventID)
	if len(eventID) > len(paymentID) {
		state = eventID[len(paymentID)+1:]
	}
	return paymentID, state
}
