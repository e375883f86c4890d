package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ids"
)

// What a reconciliation against the PSP's records reads and writes
// (package reconcile): the payments and refunds it joins to the PSP's, the
// payments it adopts, the reversals it sends, and its runs and findings.

// PaymentsByID reads the payments with the given ids; an id with no row is
// absent from the map.
func (s *Store) PaymentsByID(ctx context.Context, paymentIDs []string) (map[string]Payment, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+columns+` FROM payments WHERE payment_id = ANY($1)`, paymentIDs)
	if err != nil {
		return nil, unavailable("read payments", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Payment, error) { return scan(r) })
	if err != nil {
		return nil, unavailable("read payments", err)
	}
	out := make(map[string]Payment, len(list))
	for _, p := range list {
		out[p.ID] = p
	}
	return out, nil
}

// SucceededIDsCreated returns the ids of the payments created in [from, to)
// on the database's clock that are SUCCEEDED: each must have its charge at
// the PSP.
func (s *Store) SucceededIDsCreated(ctx context.Context, from, to time.Time) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT payment_id FROM payments WHERE state = 'SUCCEEDED' AND created_at >= $1 AND created_at < $2`, from, to)
	if err != nil {
		return nil, unavailable("read succeeded payments", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, unavailable("read succeeded payments", err)
	}
	return out, nil
}

// RefundsByPayment reads the refunds of the given payments.
func (s *Store) RefundsByPayment(ctx context.Context, paymentIDs []string) (map[string]Refund, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+refundColumns+` FROM refunds WHERE payment_id = ANY($1)`, paymentIDs)
	if err != nil {
		return nil, unavailable("read refunds", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Refund, error) { return scanRefund(r) })
	if err != nil {
		return nil, unavailable("read refunds", err)
	}
	out := make(map[string]Refund, len(list))
	for _, r := range list {
		out[r.PaymentID] = r
	}
	return out, nil
}

// Adopt writes, SUCCEEDED, a payment the PSP charged and the ledger has no
// row of (a failover lost it inside the replication lag), in ONE
// transaction with its charge's journal entries and its event's outbox
// intent, so the credit and the notification follow the ordinary path
// once. p carries the durable guard (caller, key), the fingerprint and
// the charge, as the PSP's record of the charge holds them. If a row with
// the payment's id or its (caller, key) exists, nothing is written and
// adopted is false: the caller judges that row instead.
func (s *Store) Adopt(ctx context.Context, p Payment, now time.Time) (row Payment, ev *event.Event, adopted bool, err error) {
	if p.ID == "" || p.CallerID == "" || p.ClientKey == "" || p.Fingerprint == "" || p.PSPCharge == "" ||
		p.MerchantID == "" || p.Amount <= 0 || len(p.Currency) != 3 {
		return Payment{}, nil, false, fmt.Errorf("ledger: adopt %s: the PSP's record lacks a field the row needs", p.ID)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Payment{}, nil, false, unavailable("begin adopt", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after commit
	// Stamped with the charge's time (p.CreatedAt, the PSP's clock), not
	// now: the row belongs to the day its charge does, so the run over
	// that day finds its charge beside it, and the next day's run does
	// not judge it without its charge.
	created := p.CreatedAt
	if created.IsZero() {
		created = now
	}
	row, err = scan(tx.QueryRow(ctx, `
		INSERT INTO payments (payment_id, caller_id, client_key, fingerprint, amount, currency, merchant_id,
		                      payment_method, state, psp_charge, deadline_at, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, NULLIF($8, ''), 'SUCCEEDED', $9, $10, $10)
		ON CONFLICT DO NOTHING
		RETURNING `+columns,
		p.ID, p.CallerID, p.ClientKey, p.Fingerprint, p.Amount, p.Currency, p.MerchantID, p.PaymentMethod, p.PSPCharge, created))
	if errors.Is(err, pgx.ErrNoRows) {
		_ = tx.Rollback(ctx)
		row, err = s.Get(ctx, p.ID)
		if errors.Is(err, ErrNotFound) {
			row, err = s.GetByKey(ctx, p.CallerID, p.ClientKey)
		}
		return row, nil, false, err
	}
	if err != nil {
		return Payment{}, nil, false, unavailable("adopt", err)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO journal_entries (payment_id, posting, account, amount, currency) VALUES
		  ($1, 'charge', 'psp_receivable', $2, $3),
		  ($1, 'charge', 'merchant_payable:' || $4, -$2, $3)`,
		row.ID, row.Amount, row.Currency, row.MerchantID); err != nil {
		return Payment{}, nil, false, unavailable("adopt: journal", err)
	}
	e := paymentEvent(row, now)
	if err := insertIntent(ctx, tx, e); err != nil {
		return Payment{}, nil, false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return Payment{}, nil, false, unavailable("commit adopt", err)
	}
	return row, &e, true, nil
}

// ReversalReason says why a charge is reversed.
type ReversalReason string

// The reasons for a reversal.
const (
	// ReversalLedgerFailed: the PSP charged a payment the ledger holds
	// FAILED; the buyer was told it was not charged and may have paid again.
	ReversalLedgerFailed ReversalReason = "ledger_failed"
	// ReversalLedgerVoid: the PSP charged a payment whose key a resolve
	// call voided ("never ran").
	ReversalLedgerVoid ReversalReason = "ledger_void"
	// ReversalExtraCharge: a second charge of one payment.
	ReversalExtraCharge ReversalReason = "extra_charge"
)

// Reversal is one reversals row: the refund of one PSP charge the ledger
// does not hold as its payment's. Its moves are a refund's
// (PENDING -> UNKNOWN -> SUCCEEDED | FAILED).
type Reversal struct {
	Key              string // ids.ReversalKey(PaymentID, PSPPaymentIntent): the refund's PSP key
	PaymentID        string
	PSPPaymentIntent string
	PSPCharge        string
	Amount           int64
	Currency         string
	MerchantID       string
	CallerID         string
	Reason           ReversalReason
	State            RefundState
	PSPRefund        string
	FailureReason    string
	Attempts         int
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

const reversalColumns = `refund_key, payment_id, psp_payment_intent, COALESCE(psp_charge, ''), amount, currency,
	merchant_id, caller_id, reason, state, COALESCE(psp_refund, ''), COALESCE(failure_reason, ''), attempts,
	created_at, updated_at`

func scanReversal(row pgx.Row) (Reversal, error) {
	var r Reversal
	var reason, state string
	err := row.Scan(&r.Key, &r.PaymentID, &r.PSPPaymentIntent, &r.PSPCharge, &r.Amount, &r.Currency,
		&r.MerchantID, &r.CallerID, &reason, &state, &r.PSPRefund, &r.FailureReason, &r.Attempts,
		&r.CreatedAt, &r.UpdatedAt)
	r.Reason, r.State = ReversalReason(reason), RefundState(state)
	return r, err
}

// ErrPaymentsOwnCharge refuses a reversal of the charge a SUCCEEDED row
// holds as its payment's: the row moved since the run read it (the
// resolver, the webhook or a takeover settled it with that charge).
var ErrPaymentsOwnCharge = errors.New("ledger: the charge is the payment's own")

// InsertReversal records the intent to reverse a charge, PENDING, before
// any PSP call. If the charge already has one, nothing is written and that
// row is returned with inserted == false. A charge the payment's row holds
// SUCCEEDED is refused (ErrPaymentsOwnCharge), checked in the same
// statement, so a run that read the row before another settler moved it
// never refunds the payment's own charge. The key is derived here.
func (s *Store) InsertReversal(ctx context.Context, r Reversal) (row Reversal, inserted bool, err error) {
	r.Key = ids.ReversalKey(r.PaymentID, r.PSPPaymentIntent)
	row, err = scanReversal(s.pool.QueryRow(ctx, `
		INSERT INTO reversals (refund_key, payment_id, psp_payment_intent, psp_charge, amount, currency,
		                       merchant_id, caller_id, reason, state)
		SELECT $1, $2, $3, NULLIF($4, ''), $5, $6, $7, $8, $9, 'PENDING'
		WHERE NOT EXISTS (SELECT 1 FROM payments WHERE payment_id = $2 AND state = 'SUCCEEDED'
		                  AND psp_charge IN ($3, NULLIF($4, '')))
		ON CONFLICT DO NOTHING
		RETURNING `+reversalColumns,
		r.Key, r.PaymentID, r.PSPPaymentIntent, r.PSPCharge, r.Amount, r.Currency, r.MerchantID, r.CallerID, string(r.Reason)))
	if err == nil {
		return row, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Reversal{}, false, unavailable("insert reversal", err)
	}
	row, err = scanReversal(s.pool.QueryRow(ctx, `SELECT `+reversalColumns+` FROM reversals WHERE psp_payment_intent = $1`,
		r.PSPPaymentIntent))
	if errors.Is(err, pgx.ErrNoRows) {
		return Reversal{}, false, fmt.Errorf("reverse %s of %s: %w", r.PSPPaymentIntent, r.PaymentID, ErrPaymentsOwnCharge)
	}
	if err != nil {
		return Reversal{}, false, unavailable("read reversal", err)
	}
	return row, false, nil
}

// Reversals reads the reversals of the given payments, and every open one
// whatever its payment (a run drives those to their end too).
func (s *Store) Reversals(ctx context.Context, paymentIDs []string) ([]Reversal, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+reversalColumns+` FROM reversals
		WHERE payment_id = ANY($1) OR state IN ('PENDING', 'UNKNOWN') ORDER BY created_at, refund_key`, paymentIDs)
	if err != nil {
		return nil, unavailable("read reversals", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Reversal, error) { return scanReversal(r) })
	if err != nil {
		return nil, unavailable("read reversals", err)
	}
	return out, nil
}

// ReversalEvent is the event a reversal that succeeded publishes: id
// <payment_id>:REVERSED, its amount, at the moment it became final. No
// merchant money moves; the buyer is told. A second reversal of one
// payment records no second event (one notification per payment and
// state: the replace id collapses them on the device anyway).
func ReversalEvent(r Reversal) event.Event {
	return event.Event{
		EventID: ids.EventID(r.PaymentID, event.Reversed), PaymentID: r.PaymentID, State: event.Reversed,
		MerchantID: r.MerchantID, CallerID: r.CallerID, Amount: r.Amount, Currency: r.Currency,
		PSPCharge: r.PSPCharge, OccurredAt: r.UpdatedAt.UTC(),
	}
}

// SettleReversal makes a reversal final with the PSP's definite answer (a
// CAS from PENDING or UNKNOWN) and, when the refund succeeded, records its
// event's outbox intent in the same transaction. The event is returned
// when one was recorded, to put on the outbox after the commit.
func (s *Store) SettleReversal(ctx context.Context, key string, o RefundOutcome) (r Reversal, ev *event.Event, moved bool, err error) {
	if o.State != RefundSucceeded && o.State != RefundFailed {
		return Reversal{}, nil, false, fmt.Errorf("ledger: settle reversal %s to %s: not a final PSP outcome", key, o.State)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Reversal{}, nil, false, unavailable("begin settle reversal", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after commit
	r, err = scanReversal(tx.QueryRow(ctx, `
		UPDATE reversals SET state = $2, psp_refund = COALESCE(NULLIF($3, ''), psp_refund), failure_reason = NULLIF($4, '')
		WHERE refund_key = $1 AND state IN ('PENDING', 'UNKNOWN')
		RETURNING `+reversalColumns, key, string(o.State), o.PSPRefund, o.FailureReason))
	if errors.Is(err, pgx.ErrNoRows) {
		_ = tx.Rollback(ctx)
		r, err = scanReversal(s.pool.QueryRow(ctx, `SELECT `+reversalColumns+` FROM reversals WHERE refund_key = $1`, key))
		if err != nil {
			return Reversal{}, nil, false, unavailable("read reversal", err)
		}
		return r, nil, false, nil
	}
	if err != nil {
		return Reversal{}, nil, false, unavailable("settle reversal", err)
	}
	if r.State == RefundSucceeded {
		e := ReversalEvent(r)
		payload, err := e.Marshal()
		if err != nil {
			return Reversal{}, nil, false, err
		}
		tag, err := tx.Exec(ctx, `
			INSERT INTO outbox_intents (event_id, payment_id, merchant_id, payload) VALUES ($1, $2, $3, $4)
			ON CONFLICT (event_id) DO NOTHING`, e.EventID, e.PaymentID, e.MerchantID, payload)
		if err != nil {
			return Reversal{}, nil, false, unavailable("reversal outbox intent", err)
		}
		if tag.RowsAffected() == 1 {
			ev = &e
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return Reversal{}, nil, false, unavailable("commit settle reversal", err)
	}
	return r, ev, true, nil
}

// RecordReversalAttempt counts an attempt that left the reversal open;
// sent says whether a refund call reached the PSP's wire (PENDING becomes
// UNKNOWN), pspRefund the PSP's id of a refund it answered pending.
func (s *Store) RecordReversalAttempt(ctx context.Context, key string, sent bool, pspRefund string) (Reversal, error) {
	r, err := scanReversal(s.pool.QueryRow(ctx, `
		UPDATE reversals SET state = CASE WHEN $2 THEN 'UNKNOWN' ELSE state END,
		                     psp_refund = COALESCE(NULLIF($3, ''), psp_refund), attempts = attempts + 1
		WHERE refund_key = $1 AND state IN ('PENDING', 'UNKNOWN')
		RETURNING `+reversalColumns, key, sent, pspRefund))
	if errors.Is(err, pgx.ErrNoRows) {
		r, err = scanReversal(s.pool.QueryRow(ctx, `SELECT `+reversalColumns+` FROM reversals WHERE refund_key = $1`, key))
	}
	if err != nil {
		return Reversal{}, unavailable("record reversal attempt", err)
	}
	return r, nil
}

// ReconcileRun is one reconcile_runs row: the report of one run over a
// span.
type ReconcileRun struct {
	ID         int64
	From, To   time.Time
	StartedAt  time.Time
	FinishedAt time.Time // zero while the run is open
	// Checkpoint is the last payment id the run judged (ids are judged in
	// order); a resumed run starts after it.
	Checkpoint string
	Counts     map[string]int
}

const runColumns = `run_id, span_from, span_to, started_at, COALESCE(finished_at, 'epoch'), checkpoint, counts`

func scanRun(row pgx.Row) (ReconcileRun, error) {
	var r ReconcileRun
	var counts []byte
	if err := row.Scan(&r.ID, &r.From, &r.To, &r.StartedAt, &r.FinishedAt, &r.Checkpoint, &counts); err != nil {
		return ReconcileRun{}, err
	}
	if r.FinishedAt.Equal(epoch) {
		r.FinishedAt = time.Time{}
	}
	r.Counts = map[string]int{}
	if err := json.Unmarshal(counts, &r.Counts); err != nil {
		return ReconcileRun{}, fmt.Errorf("ledger: reconcile run %d: counts: %w", r.ID, err)
	}
	return r, nil
}

// BeginReconcileRun returns the span's unfinished run, to resume it, or
// starts a new one. Two invocations at once get the same run (the partial
// unique index on the span), and each judgement is idempotent.
func (s *Store) BeginReconcileRun(ctx context.Context, from, to time.Time) (ReconcileRun, error) {
	if _, err := s.pool.Exec(ctx, `
		INSERT INTO reconcile_runs (span_from, span_to) VALUES ($1, $2)
		ON CONFLICT (span_from, span_to) WHERE finished_at IS NULL DO NOTHING`, from, to); err != nil {
		return ReconcileRun{}, unavailable("begin reconcile run", err)
	}
	r, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runColumns+` FROM reconcile_runs
		WHERE span_from = $1 AND span_to = $2 AND finished_at IS NULL`, from, to))
	if err != nil {
		return ReconcileRun{}, unavailable("read reconcile run", err)
	}
	return r, nil
}

// CheckpointReconcileRun records how far an open run got and its counts so
// far; finish also closes it.
func (s *Store) CheckpointReconcileRun(ctx context.Context, id int64, checkpoint string, counts map[string]int, finish bool) error {
	b, err := json.Marshal(counts)
	if err != nil {
		return fmt.Errorf("ledger: reconcile run %d: counts: %w", id, err)
	}
	if _, err := s.pool.Exec(ctx, `
		UPDATE reconcile_runs SET checkpoint = $2, counts = $3,
		       finished_at = CASE WHEN $4 THEN now() ELSE NULL END
		WHERE run_id = $1 AND finished_at IS NULL`, id, checkpoint, b, finish); err != nil {
		return unavailable("checkpoint reconcile run", err)
	}
	return nil
}

// ReconcileRuns returns the runs over [from, to), oldest first.
func (s *Store) ReconcileRuns(ctx context.Context, from, to time.Time) ([]ReconcileRun, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+runColumns+` FROM reconcile_runs
		WHERE span_from = $1 AND span_to = $2 ORDER BY run_id`, from, to)
	if err != nil {
		return nil, unavailable("read reconcile runs", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ReconcileRun, error) { return scanRun(r) })
	if err != nil {
		return nil, unavailable("read reconcile runs", err)
	}
	return out, nil
}

// Finding is what a reconciliation found that only a human can decide.
type Finding struct {
	RunID     int64
	PaymentID string
	Kind      string
	Detail    string
}

// RecordFinding writes a finding once per run, payment and kind.
func (s *Store) RecordFinding(ctx context.Context, f Finding) error {
	if _, err := s.pool.Exec(ctx, `
		INSERT INTO reconcile_findings (run_id, payment_id, kind, detail) VALUES ($1, $2, $3, $4)
		ON CONFLICT DO NOTHING`, f.RunID, f.PaymentID, f.Kind, f.Detail); err != nil {
		return unavailable("record finding", err)
	}
	return nil
}

// Findings returns a run's findings.
func (s *Store) Findings(ctx context.Context, runID int64) ([]Finding, error) {
	rows, err := s.pool.Query(ctx, `SELECT run_id, payment_id, kind, detail FROM reconcile_findings
		WHERE run_id = $1 ORDER BY payment_id, kind`, runID)
	if err != nil {
		return nil, unavailable("read findings", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Finding])
	if err != nil {
		return nil, unavailable("read findings", err)
	}
	return out, nil
}
