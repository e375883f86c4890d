// Package ledger is the payment service's PostgreSQL ledger: the payments row
// that is the durable guard (UNIQUE (caller_id, client_key), written before
// any external call), the compare-and-set moves of its state along the
// allowed edges, the double-entry journal and the outbox intent, all in the
// transaction that makes a payment final.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ids"
)

// State is a payment's state.
type State string

// The payment states (docs/mechanism.md#seed-part-5). VOID means the key was
// voided by a resolve call before any request with it ran.
const (
	Pending   State = "PENDING"
	Unknown   State = "UNKNOWN"
	Succeeded State = "SUCCEEDED"
	Failed    State = "FAILED"
	Void      State = "VOID"
)

// Final reports whether no further move is allowed from s.
func (s State) Final() bool { return s == Succeeded || s == Failed || s == Void }

// Payment is one payments row.
type Payment struct {
	ID            string
	CallerID      string
	ClientKey     string
	Fingerprint   string
	Amount        int64
	Currency      string
	MerchantID    string
	OrderID       string
	PaymentMethod string
	State         State
	PSPCharge     string
	DeclineCode   string
	DeadlineAt    time.Time
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// ErrNotFound means no payments row matched.
var ErrNotFound = errors.New("ledger: payment not found")

// ErrUnavailable wraps every failure to reach the database.
var ErrUnavailable = errors.New("ledger: unavailable")

// Store is the ledger over a pgx pool.
type Store struct {
	pool *pgxpool.Pool
}

// New returns a Store over pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

const columns = `payment_id, caller_id, client_key, COALESCE(fingerprint, ''), COALESCE(amount, 0),
	COALESCE(currency, ''), COALESCE(merchant_id, ''), COALESCE(order_id, ''), COALESCE(payment_method, ''),
	state, COALESCE(psp_charge, ''), COALESCE(decline_code, ''), COALESCE(deadline_at, 'epoch'), created_at, updated_at`

func scan(row pgx.Row) (Payment, error) {
	var p Payment
	var state string
	err := row.Scan(&p.ID, &p.CallerID, &p.ClientKey, &p.Fingerprint, &p.Amount, &p.Currency, &p.MerchantID,
		&p.OrderID, &p.PaymentMethod, &state, &p.PSPCharge, &p.DeclineCode, &p.DeadlineAt, &p.CreatedAt, &p.UpdatedAt)
	p.State = State(state)
	return p, err
}

// unavailable classifies err: a server-side SQL error is the caller's bug and
// is returned as is; anything else (no connection, timeout) is ErrUnavailable.
func unavailable(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return fmt.Errorf("ledger: %s: %w", op, err)
	}
	return fmt.Errorf("ledger: %s: %w: %w", op, ErrUnavailable, err)
}

// ErrOutcomeUnknown marks an InsertPending, InsertRefund or InsertVoid error
// after which it is not known whether the row exists: the statement may have
// committed with its reply lost (a deadline, a reset connection), or it met a
// row it could not read. It always comes with ErrUnavailable. Without it, an
// insert's error means the statement was definitely not executed: nothing
// was written.
var ErrOutcomeUnknown = errors.New("ledger: outcome unknown")

// InsertPending writes the PENDING row before any external call, with
// receiptEmail, where the payment's emails go ("" none: personal data, read
// only by the email channel, notify.EmailSender; never logged, never in an
// event, and kept out of Payment so no copy of a row carries it). If a row
// for the same (caller, key) exists, it writes nothing and returns that row
// with inserted == false: the caller answers from it. It is safe to call
// again with the same p after an ErrOutcomeUnknown: a row the first call
// wrote comes back with inserted == false.
func (s *Store) InsertPending(ctx context.Context, p Payment, receiptEmail string) (row Payment, inserted bool, err error) {
	// A connection that cannot be had means nothing was sent.
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return Payment{}, false, unavailable("insert pending: acquire a connection", err)
	}
	defer conn.Release()
	row, err = scan(conn.QueryRow(ctx, `
		INSERT INTO payments (payment_id, caller_id, client_key, fingerprint, amount, currency, merchant_id,
		                      order_id, payment_method, state, deadline_at, receipt_email)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'PENDING', $10, NULLIF($11, ''))
		ON CONFLICT DO NOTHING
		RETURNING `+columns,
		p.ID, p.CallerID, p.ClientKey, p.Fingerprint, p.Amount, p.Currency, p.MerchantID, p.OrderID, p.PaymentMethod, p.DeadlineAt, receiptEmail))
	if err == nil {
		return row, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		if mayHaveCommitted(err) {
			return Payment{}, false, fmt.Errorf("ledger: insert pending: %w: %w: %w", ErrUnavailable, ErrOutcomeUnknown, err)
		}
		return Payment{}, false, unavailable("insert pending", err)
	}
	row, err = getByKey(ctx, conn, p.CallerID, p.ClientKey)
	if errors.Is(err, ErrNotFound) {
		// The conflict was on payment_id alone: the id is derived from the
		// scope, so this is the same payment under an escaped caller spelling.
		row, err = get(ctx, conn, p.ID)
	}
	if err != nil && !errors.Is(err, ErrNotFound) {
		// A row holds the key and could not be read: its payment may be
		// anywhere along its path.
		return Payment{}, false, fmt.Errorf("ledger: insert pending: a row exists: %w: %w", ErrOutcomeUnknown, err)
	}
	return row, false, err
}

// mayHaveCommitted reports whether a failed single statement (its own
// implicit transaction) may still have committed. Not when pgx never sent it
// (SafeToRetry: a refused connection, a context that ended before the
// write), nor when the server answered it with an ERROR (the statement and
// its transaction were rolled back). Anything else — a deadline or a reset
// while the reply was awaited, a FATAL that ended the session — leaves its
// fate open.
func mayHaveCommitted(err error) bool {
	if pgconn.SafeToRetry(err) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Severity == "FATAL" || pgErr.Severity == "PANIC"
	}
	return true
}

// InsertVoid records "not found, and it never will be" for (caller, key) if
// no row exists: the resolve call's insert-if-absent, racing fairly with a
// late original under the same unique key.
func (s *Store) InsertVoid(ctx context.Context, paymentID, caller, key string) (row Payment, inserted bool, err error) {
	row, err = scan(s.pool.QueryRow(ctx, `
		INSERT INTO payments (payment_id, caller_id, client_key, state) VALUES ($1, $2, $3, 'VOID')
		ON CONFLICT DO NOTHING RETURNING `+columns, paymentID, caller, key))
	if err == nil {
		return row, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		if mayHaveCommitted(err) {
			// Its reply was lost: the VOID row may exist (InsertPending's rule).
			return Payment{}, false, fmt.Errorf("ledger: insert void: %w: %w: %w", ErrUnavailable, ErrOutcomeUnknown, err)
		}
		return Payment{}, false, unavailable("insert void", err)
	}
	row, err = s.GetByKey(ctx, caller, key)
	if err != nil && !errors.Is(err, ErrNotFound) {
		// A row holds the key and could not be read: it may be the VOID a
		// try whose reply was lost wrote, or a late original's.
		return Payment{}, false, fmt.Errorf("ledger: insert void: a row exists: %w: %w", ErrOutcomeUnknown, err)
	}
	return row, false, err
}

// Get reads a payment by id.
func (s *Store) Get(ctx context.Context, paymentID string) (Payment, error) {
	return get(ctx, s.pool, paymentID)
}

// GetByKey reads a payment by its caller and client key.
func (s *Store) GetByKey(ctx context.Context, caller, key string) (Payment, error) {
	return getByKey(ctx, s.pool, caller, key)
}

func get(ctx context.Context, q rowQuerier, paymentID string) (Payment, error) {
	p, err := scan(q.QueryRow(ctx, `SELECT `+columns+` FROM payments WHERE payment_id = $1`, paymentID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, ErrNotFound
	}
	if err != nil {
		return Payment{}, unavailable("get", err)
	}
	return p, nil
}

func getByKey(ctx context.Context, q rowQuerier, caller, key string) (Payment, error) {
	p, err := scan(q.QueryRow(ctx, `SELECT `+columns+` FROM payments WHERE caller_id = $1 AND client_key = $2`, caller, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, ErrNotFound
	}
	if err != nil {
		return Payment{}, unavailable("get by key", err)
	}
	return p, nil
}

// MarkUnknown moves PENDING -> UNKNOWN (compare-and-set): the deadline came
// before the PSP's reply, so a charge may or may not exist. It returns the
// row as it stands afterwards and whether this call moved it.
func (s *Store) MarkUnknown(ctx context.Context, paymentID string) (Payment, bool, error) {
	p, err := scan(s.pool.QueryRow(ctx, `
		UPDATE payments SET state = 'UNKNOWN' WHERE payment_id = $1 AND state = 'PENDING'
		RETURNING `+columns, paymentID))
	if err == nil {
		return p, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, false, unavailable("mark unknown", err)
	}
	p, err = s.Get(ctx, paymentID)
	return p, false, err
}

// Outcome is a definite answer from the PSP.
type Outcome struct {
	State       State // Succeeded or Failed
	PSPCharge   string
	DeclineCode string
}

// Hook runs inside a settle transaction after the compare-and-set succeeded:
// the webhook handler writes its inbox row there, so the row and the move
// commit together.
type Hook func(ctx context.Context, tx pgx.Tx) error

// Settle makes the payment final in ONE transaction: the compare-and-set
// from PENDING or UNKNOWN, the journal entries of a charge, and the outbox
// intent of its event. If the row had already left those states, nothing is
// written and moved is false; the row as it stands is returned either way.
// The event to publish after the commit is returned when moved.
func (s *Store) Settle(ctx context.Context, paymentID string, o Outcome, now time.Time, hooks ...Hook) (p Payment, ev *event.Event, moved bool, err error) {
	if o.State != Succeeded && o.State != Failed {
		return Payment{}, nil, false, fmt.Errorf("ledger: settle %s to %s: not a final PSP outcome", paymentID, o.State)
	}
	if len(hooks) == 0 {
		return s.settleOne(ctx, paymentID, o, now)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Payment{}, nil, false, unavailable("begin settle", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after commit
	p, err = scan(tx.QueryRow(ctx, `
		UPDATE payments SET state = $2, psp_charge = NULLIF($3, ''), decline_code = NULLIF($4, '')
		WHERE payment_id = $1 AND state IN ('PENDING', 'UNKNOWN')
		RETURNING `+columns, paymentID, string(o.State), o.PSPCharge, o.DeclineCode))
	if errors.Is(err, pgx.ErrNoRows) {
		_ = tx.Rollback(ctx)
		p, err = s.Get(ctx, paymentID)
		return p, nil, false, err
	}
	if err != nil {
		return Payment{}, nil, false, unavailable("settle", err)
	}
	if o.State == Succeeded {
		// Double entry: the PSP owes us the amount; we owe it to the merchant.
		if _, err := tx.Exec(ctx, `
			INSERT INTO journal_entries (payment_id, posting, account, amount, currency) VALUES
			  ($1, 'charge', 'psp_receivable', $2, $3),
			  ($1, 'charge', 'merchant_payable:' || $4, -$2, $3)`,
			p.ID, p.Amount, p.Currency, p.MerchantID); err != nil {
			return Payment{}, nil, false, unavailable("journal", err)
		}
	}
	e := paymentEvent(p, now)
	if err := insertIntent(ctx, tx, e); err != nil {
		return Payment{}, nil, false, err
	}
	for _, h := range hooks {
		if err := h(ctx, tx); err != nil {
			return Payment{}, nil, false, fmt.Errorf("ledger: settle hook: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return Payment{}, nil, false, unavailable("commit settle", err)
	}
	return p, &e, true, nil
}

// settleStatement is Settle's transaction as ONE statement: the CAS, the
// journal entries and the outbox intent commit together in one round trip.
// The payload is built by jsonb_build_object with event.Event's JSON names;
// TestSettlePayloadIsTheEvent pins the two together.
const settleStatement = `
WITH moved AS (
  UPDATE payments SET state = $2, psp_charge = NULLIF($3, ''), decline_code = NULLIF($4, '')
  WHERE payment_id = $1 AND state IN ('PENDING', 'UNKNOWN')
  RETURNING *
), journal AS (
  INSERT INTO journal_entries (payment_id, posting, account, amount, currency)
  SELECT payment_id, 'charge', 'psp_receivable', amount, currency FROM moved WHERE state = 'SUCCEEDED'
  UNION ALL
  SELECT payment_id, 'charge', 'merchant_payable:' || merchant_id, -amount, currency FROM moved WHERE state = 'SUCCEEDED'
), intent AS (
  INSERT INTO outbox_intents (event_id, payment_id, merchant_id, payload)
  SELECT payment_id || ':' || state, payment_id, merchant_id, jsonb_build_object(
    'event_id', payment_id || ':' || state, 'payment_id', payment_id, 'state', state,
    'merchant_id', merchant_id, 'caller_id', caller_id, 'amount', amount, 'currency', currency,
    'psp_charge', COALESCE(psp_charge, ''), 'occurred_at', $5::text,
    'client_key', client_key, 'fingerprint', COALESCE(fingerprint, ''))
  FROM moved
)
SELECT ` + columns + ` FROM moved`

func (s *Store) settleOne(ctx context.Context, paymentID string, o Outcome, now time.Time) (Payment, *event.Event, bool, error) {
	p, e, moved, err := settleIn(ctx, s.pool, paymentID, o, now)
	if err == nil && !moved {
		p, err = s.Get(ctx, paymentID)
	}
	return p, e, moved, err
}

// rowQuerier is a pool, one of its connections, or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// settleIn runs settleStatement on q (the pool, or a transaction that
// writes something else first, as the webhook's inbox row). moved is false,
// and nothing is written, when the row had left PENDING and UNKNOWN or does
// not exist.
func settleIn(ctx context.Context, q rowQuerier, paymentID string, o Outcome, now time.Time) (Payment, *event.Event, bool, error) {
	occurred := now.UTC()
	p, err := scan(q.QueryRow(ctx, settleStatement, paymentID, string(o.State), o.PSPCharge, o.DeclineCode,
		occurred.Format(time.RFC3339Nano)))
	if errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, nil, false, nil
	}
	if err != nil {
		return Payment{}, nil, false, unavailable("settle", err)
	}
	e := paymentEvent(p, occurred)
	return p, &e, true, nil
}

// paymentEvent is the event a payment that just became final publishes.
func paymentEvent(p Payment, at time.Time) event.Event {
	return event.Event{
		EventID: ids.EventID(p.ID, string(p.State)), PaymentID: p.ID, State: string(p.State),
		MerchantID: p.MerchantID, CallerID: p.CallerID, Amount: p.Amount, Currency: p.Currency,
		PSPCharge: p.PSPCharge, OccurredAt: at.UTC(), ClientKey: p.ClientKey, Fingerprint: p.Fingerprint,
	}
}

// insertIntent records e's outbox intent inside tx.
func insertIntent(ctx context.Context, tx pgx.Tx, e event.Event) error {
	payload, err := e.Marshal()
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO outbox_intents (event_id, payment_id, merchant_id, payload) VALUES ($1, $2, $3, $4)`,
		e.EventID, e.PaymentID, e.MerchantID, payload); err != nil {
		return unavailable("outbox intent "+e.EventID, err)
	}
	return nil
}

// Row is what ReadOnly needs of a pool or a connection.
type Row interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ReadOnly reports whether the ledger refuses writes: an Aurora global
// database's secondary cluster before its promotion (docs/regions.md), or
// a server in recovery. A standby Region's scheduled functions find their
// ledger so and wait, instead of failing every run.
func ReadOnly(ctx context.Context, db Row) (bool, error) {
	var ro bool
	err := db.QueryRow(ctx, `SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'`).Scan(&ro)
	if err != nil {
		return false, fmt.Errorf("ledger: read-only check: %w", err)
	}
	return ro, nil
}

// EndpointNotFound reports whether err is the ledger's host name not
// resolving: what a global database's secondary cluster endpoint is taken
// to answer before its promotion. Any other connection failure (refused,
// timed out, IAM login, TLS) is not it.
func EndpointNotFound(err error) bool {
	var dns *net.DNSError
	return errors.As(err, &dns) && dns.IsNotFound
}

// StandbyWait decides for a sweep whose ReadOnly check failed with err:
// outside the home Region (isHome false) a host that does not resolve is a
// standby's wait (true, nil); anything else is the error, joined with the
// home record's when that could not be read. A nil isHome (one Region)
// never waits.
func StandbyWait(ctx context.Context, err error, isHome func(context.Context) (bool, error)) (bool, error) {
	if isHome == nil || !EndpointNotFound(err) {
		return false, err
	}
	home, herr := isHome(ctx)
	if herr != nil || home {
		return false, errors.Join(err, herr)
	}
	return true, nil
}

// ReadOnly reports whether this ledger refuses writes (see ReadOnly).
func (s *Store) ReadOnly(ctx context.Context) (bool, error) { return ReadOnly(ctx, s.pool) }
