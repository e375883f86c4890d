package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ids"
)

// RefundState is a refund's state. The moves allowed are those of a payment
// without VOID: PENDING -> UNKNOWN -> SUCCEEDED | FAILED, and PENDING ->
// SUCCEEDED | FAILED; plus SUCCEEDED -> FAILED for the PSP refund that
// succeeded and failed later (migration 00006). A trigger refuses any other.
type RefundState string

// The refund states.
const (
	RefundPending   RefundState = "PENDING"   // intent recorded; no PSP answer yet
	RefundUnknown   RefundState = "UNKNOWN"   // a PSP call's outcome is open: retried with the same key
	RefundSucceeded RefundState = "SUCCEEDED" // the PSP refunded
	RefundFailed    RefundState = "FAILED"    // the PSP definitely refused the refund
)

// Final reports whether the refund is settled: no attempt is made any
// more (only the PSP's later failure of a SUCCEEDED one moves it).
func (s RefundState) Final() bool { return s == RefundSucceeded || s == RefundFailed }

// Refund is one refunds row: the compensation of one payment's charge.
type Refund struct {
	PaymentID        string
	CallerID         string
	RefundKey        string // the refund request's Idempotency-Key
	Fingerprint      string
	Amount           int64
	Currency         string
	MerchantID       string
	State            RefundState
	PSPCharge        string // the payment's charge, copied when the intent was recorded
	PSPPaymentIntent string // the PaymentIntent refunded, once known
	PSPRefund        string
	FailureReason    string
	Attempts         int
	DeadlineAt       time.Time // the request's deadline
	NextAttemptAt    time.Time // zero: none scheduled
	AlertedAt        time.Time // zero: never alerted
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

const refundColumns = `payment_id, caller_id, refund_key, fingerprint, amount, currency, merchant_id, state,
	COALESCE(psp_charge, ''), COALESCE(psp_payment_intent, ''), COALESCE(psp_refund, ''), COALESCE(failure_reason, ''),
	attempts, deadline_at, COALESCE(next_attempt_at, 'epoch'), COALESCE(alerted_at, 'epoch'), created_at, updated_at`

var epoch = time.Unix(0, 0)

func scanRefund(row pgx.Row) (Refund, error) {
	var r Refund
	var state string
	err := row.Scan(&r.PaymentID, &r.CallerID, &r.RefundKey, &r.Fingerprint, &r.Amount, &r.Currency, &r.MerchantID,
		&state, &r.PSPCharge, &r.PSPPaymentIntent, &r.PSPRefund, &r.FailureReason, &r.Attempts, &r.DeadlineAt,
		&r.NextAttemptAt, &r.AlertedAt, &r.CreatedAt, &r.UpdatedAt)
	r.State = RefundState(state)
	if r.NextAttemptAt.Equal(epoch) {
		r.NextAttemptAt = time.Time{}
	}
	if r.AlertedAt.Equal(epoch) {
		r.AlertedAt = time.Time{}
	}
	return r, err
}

// ErrRefundNotFound means no refunds row matched.
var ErrRefundNotFound = errors.New("ledger: refund not found")

func (s *Store) oneRefund(ctx context.Context, op, sql string, args ...any) (Refund, error) {
	r, err := scanRefund(s.pool.QueryRow(ctx, sql, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return Refund{}, ErrRefundNotFound
	}
	if err != nil {
		return Refund{}, unavailable(op, err)
	}
	return r, nil
}

// InsertRefund records the intent to refund, PENDING, before any PSP call.
// If the payment already has a refund, or the caller already used the
// refund key, it writes nothing and returns the row that holds the key (or,
// failing that, the payment's refund) with inserted == false.
func (s *Store) InsertRefund(ctx context.Context, r Refund) (row Refund, inserted bool, err error) {
	row, err = scanRefund(s.pool.QueryRow(ctx, `
		INSERT INTO refunds (payment_id, caller_id, refund_key, fingerprint, amount, currency, merchant_id, state,
		                     psp_charge, deadline_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'PENDING', NULLIF($8, ''), $9)
		ON CONFLICT DO NOTHING
		RETURNING `+refundColumns,
		r.PaymentID, r.CallerID, r.RefundKey, r.Fingerprint, r.Amount, r.Currency, r.MerchantID, r.PSPCharge, r.DeadlineAt))
	if err == nil {
		return row, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		if mayHaveCommitted(err) {
			// Its reply was lost: the row may exist (InsertPending's rule).
			return Refund{}, false, fmt.Errorf("ledger: insert refund: %w: %w: %w", ErrUnavailable, ErrOutcomeUnknown, err)
		}
		return Refund{}, false, unavailable("insert refund", err)
	}
	row, err = s.GetRefundByKey(ctx, r.CallerID, r.RefundKey)
	if errors.Is(err, ErrRefundNotFound) {
		row, err = s.GetRefund(ctx, r.PaymentID)
	}
	if err != nil && !errors.Is(err, ErrRefundNotFound) {
		// A row holds the payment's refund and could not be read: it may be
		// this request's own, written by a try whose reply was lost.
		return Refund{}, false, fmt.Errorf("ledger: insert refund: a row exists: %w: %w", ErrOutcomeUnknown, err)
	}
	return row, false, err
}

// GetRefund reads the refund of a payment.
func (s *Store) GetRefund(ctx context.Context, paymentID string) (Refund, error) {
	return s.oneRefund(ctx, "get refund", `SELECT `+refundColumns+` FROM refunds WHERE payment_id = $1`, paymentID)
}

// GetRefundByKey reads the refund a caller requested with refundKey.
func (s *Store) GetRefundByKey(ctx context.Context, caller, refundKey string) (Refund, error) {
	return s.oneRefund(ctx, "get refund by key",
		`SELECT `+refundColumns+` FROM refunds WHERE caller_id = $1 AND refund_key = $2`, caller, refundKey)
}

// SetRefundIntent records which PaymentIntent the refund is for, once known.
func (s *Store) SetRefundIntent(ctx context.Context, paymentID, paymentIntentID string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE refunds SET psp_payment_intent = $2 WHERE payment_id = $1`,
		paymentID, paymentIntentID); err != nil {
		return unavailable("set refund intent", err)
	}
	return nil
}

// RefundOutcome is a definite answer from the PSP about a refund.
type RefundOutcome struct {
	State         RefundState // RefundSucceeded or RefundFailed
	PSPRefund     string
	FailureReason string
	// PSPPaymentIntent, when set, is the PaymentIntent the PSP's answer
	// names; recorded if the row does not know it yet (a refund sent by
	// charge=). Only a final row gets it, so no later attempt's parameters
	// change under the refund's key.
	PSPPaymentIntent string
}

// RefundEvent is the event a succeeded refund publishes: id
// <payment_id>:REFUNDED (derived like every event id), the refund's amount,
// merchant and caller, at the moment the refund became final (updated_at,
// which only the state move sets). It is a function of the settled row, so
// the outbox intent SettleRefund records and a later put of the same row's
// event are the same event.
func RefundEvent(r Refund) event.Event {
	return event.Event{
		EventID: ids.EventID(r.PaymentID, event.Refunded), PaymentID: r.PaymentID, State: event.Refunded,
		MerchantID: r.MerchantID, CallerID: r.CallerID, Amount: r.Amount, Currency: r.Currency,
		PSPCharge: r.PSPCharge, OccurredAt: r.UpdatedAt.UTC(),
	}
}

// RefundFailedEvent is the event that compensates RefundEvent when the PSP
// fails a refund after it succeeded: id <payment_id>:REFUND_FAILED, the
// same amount, merchant and caller, at the moment the refund became FAILED.
// The worker credits the merchant back once and tells the buyer (same
// replace id as every push of the payment).
func RefundFailedEvent(r Refund) event.Event {
	e := RefundEvent(r)
	e.EventID, e.State = ids.EventID(r.PaymentID, event.RefundFailed), event.RefundFailed
	return e
}

// SettleRefund makes the refund final in ONE transaction: the
// compare-and-set from PENDING or UNKNOWN and, for a refund that succeeded,
// the journal entries that reverse the charge and the outbox intent of its
// event (RefundEvent), which the outbox path publishes like a payment's: the
// merchant's balance is debited and the buyer told by the worker.
//
// A FAILED outcome for the refund that is SUCCEEDED (same psp_refund) is
// the PSP failing it later (refund.failed): the move SUCCEEDED -> FAILED
// reverses the refund's journal entries and records the compensating
// RefundFailedEvent intent, so the worker credits the merchant back.
//
// If the row allows no such move nothing is written and moved is false; the
// row as it stands is returned either way. SettledRefundEvent names the
// event a move recorded, to put on the outbox after the commit.
func (s *Store) SettleRefund(ctx context.Context, paymentID string, o RefundOutcome) (r Refund, moved bool, err error) {
	if o.State != RefundSucceeded && o.State != RefundFailed {
		return Refund{}, false, fmt.Errorf("ledger: settle refund of %s to %s: not a final PSP outcome", paymentID, o.State)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Refund{}, false, unavailable("begin settle refund", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after commit
	r, moved, err = settleRefundTx(ctx, tx, paymentID, o)
	if err != nil || !moved {
		_ = tx.Rollback(ctx)
		if errors.Is(err, ErrRefundNotFound) || (err == nil && !moved) {
			r, err = s.GetRefund(ctx, paymentID)
		}
		return r, false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return Refund{}, false, unavailable("commit settle refund", err)
	}
	return r, true, nil
}

// SettledRefundEvent is the event a refund row that just moved recorded:
// REFUNDED for SUCCEEDED, REFUND_FAILED for a FAILED row that was
// SUCCEEDED before the move (fromSucceeded); ok is false when the move
// recorded none (a refund that failed before any money moved).
func SettledRefundEvent(r Refund, fromSucceeded bool) (event.Event, bool) {
	switch {
	case r.State == RefundSucceeded:
		return RefundEvent(r), true
	case r.State == RefundFailed && fromSucceeded:
		return RefundFailedEvent(r), true
	}
	return event.Event{}, false
}

// settleRefundTx is SettleRefund's statements inside tx. moved false with
// no error: the row allows no such move (nothing written).
func settleRefundTx(ctx context.Context, tx pgx.Tx, paymentID string, o RefundOutcome) (Refund, bool, error) {
	var prior, priorRefund string
	err := tx.QueryRow(ctx, `SELECT state, COALESCE(psp_refund, '') FROM refunds WHERE payment_id = $1 FOR UPDATE`,
		paymentID).Scan(&prior, &priorRefund)
	if errors.Is(err, pgx.ErrNoRows) {
		return Refund{}, false, ErrRefundNotFound
	}
	if err != nil {
		return Refund{}, false, unavailable("settle refund: read", err)
	}
	open := prior == string(RefundPending) || prior == string(RefundUnknown)
	failsLater := prior == string(RefundSucceeded) && o.State == RefundFailed && o.PSPRefund != "" && o.PSPRefund == priorRefund
	if !open && !failsLater {
		return Refund{}, false, nil
	}
	r, err := scanRefund(tx.QueryRow(ctx, `
		UPDATE refunds SET state = $2, psp_refund = COALESCE(NULLIF($3, ''), psp_refund), failure_reason = NULLIF($4, ''),
		                   psp_payment_intent = COALESCE(psp_payment_intent, NULLIF($5, '')),
		                   next_attempt_at = NULL, lease_until = NULL
		WHERE payment_id = $1
		RETURNING `+refundColumns, paymentID, string(o.State), o.PSPRefund, o.FailureReason, o.PSPPaymentIntent))
	if err != nil {
		return Refund{}, false, unavailable("settle refund", err)
	}
	var e event.Event
	switch {
	case r.State == RefundSucceeded:
		// The charge's entries, reversed: the PSP no longer owes us the
		// amount, and we no longer owe it to the merchant.
		if _, err := tx.Exec(ctx, `
			INSERT INTO journal_entries (payment_id, posting, account, amount, currency) VALUES
			  ($1, 'refund', 'psp_receivable', -$2::bigint, $3),
			  ($1, 'refund', 'merchant_payable:' || $4, $2::bigint, $3)`,
			r.PaymentID, r.Amount, r.Currency, r.MerchantID); err != nil {
			return Refund{}, false, unavailable("refund journal", err)
		}
		e = RefundEvent(r)
	case failsLater:
		// The refund's entries, reversed: the money is back with us and
		// owed to the merchant again, as before the refund.
		if _, err := tx.Exec(ctx, `
			INSERT INTO journal_entries (payment_id, posting, account, amount, currency) VALUES
			  ($1, 'refund_failed', 'psp_receivable', $2::bigint, $3),
			  ($1, 'refund_failed', 'merchant_payable:' || $4, -$2::bigint, $3)`,
			r.PaymentID, r.Amount, r.Currency, r.MerchantID); err != nil {
			return Refund{}, false, unavailable("refund failed journal", err)
		}
		e = RefundFailedEvent(r)
	default:
		return r, true, nil // failed before any money moved: nothing to publish
	}
	if err := insertIntent(ctx, tx, e); err != nil {
		return Refund{}, false, err
	}
	return r, true, nil
}

// RecordRefundAttempt counts an attempt that left the refund open and
// schedules the next one at next. pspRefund, when set, is the PSP's id of
// a refund it answered pending: recorded on the row ("at the PSP,
// pending"), so the next attempt follows it by id (a GET) instead of
// replaying the key, which keeps answering the saved "pending". sent says whether a refund call reached
// the PSP's wire (its outcome is then unknown, and a PENDING refund becomes
// UNKNOWN); an attempt that sent nothing (the PaymentIntent could not be
// found yet) leaves the state as it is. It releases the run's lease.
func (s *Store) RecordRefundAttempt(ctx context.Context, paymentID string, sent bool, pspRefund string, next time.Time) (Refund, error) {
	r, err := scanRefund(s.pool.QueryRow(ctx, `
		UPDATE refunds SET state = CASE WHEN $2 THEN 'UNKNOWN' ELSE state END,
		                   psp_refund = COALESCE(NULLIF($4, ''), psp_refund),
		                   attempts = attempts + 1, next_attempt_at = $3, lease_until = NULL
		WHERE payment_id = $1 AND state IN ('PENDING', 'UNKNOWN')
		RETURNING `+refundColumns, paymentID, sent, next, pspRefund))
	if errors.Is(err, pgx.ErrNoRows) {
		// Settled meanwhile (another attempt's answer came first).
		return s.GetRefund(ctx, paymentID)
	}
	if err != nil {
		return Refund{}, unavailable("record refund attempt", err)
	}
	return r, nil
}

// MarkRefundAlerted stamps the first alert about a refund whose retry
// budget ran out. Later alerts keep the first stamp.
func (s *Store) MarkRefundAlerted(ctx context.Context, paymentID string, at time.Time) error {
	if _, err := s.pool.Exec(ctx, `UPDATE refunds SET alerted_at = COALESCE(alerted_at, $2) WHERE payment_id = $1`,
		paymentID, at); err != nil {
		return unavailable("mark refund alerted", err)
	}
	return nil
}

// ClaimRefunds takes up to c.Limit open refunds that are due: UNKNOWN ones
// whose next attempt time has come, and PENDING ones whose request's
// deadline plus the margin has passed (their owner died before it could
// record an answer) and that are due too. It sets their lease in the same
// statement, skipping rows another run holds (FOR UPDATE SKIP LOCKED).
// c.KeyWindow is not used: a refund is always replayed with its key.
func (s *Store) ClaimRefunds(ctx context.Context, c Claim) ([]Refund, error) {
	if c.Limit <= 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `
		UPDATE refunds SET lease_until = $1
		FROM (
		  SELECT payment_id AS pick_id FROM refunds
		  WHERE state IN ('PENDING', 'UNKNOWN')
		    AND (next_attempt_at IS NULL OR next_attempt_at <= $3)
		    AND (state = 'UNKNOWN' OR deadline_at < $2)
		    AND (lease_until IS NULL OR lease_until < $3)
		  ORDER BY next_attempt_at NULLS FIRST
		  LIMIT $4
		  FOR UPDATE SKIP LOCKED
		) pick
		WHERE payment_id = pick.pick_id
		RETURNING `+refundColumns,
		c.Now.Add(c.Lease), c.Now.Add(-c.Margin), c.Now, c.Limit)
	if err != nil {
		return nil, unavailable("claim refunds", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Refund, error) { return scanRefund(r) })
	if err != nil {
		return nil, unavailable("claim refunds", err)
	}
	return out, nil
}
