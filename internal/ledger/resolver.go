package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Claim says which open rows a resolver run takes, and for how long.
type Claim struct {
	// Now is the resolver's clock. A PENDING payment is taken only once
	// its deadline_at + Margin has passed on it (its owner crashed or
	// froze); leases are set and compared on it.
	Now    time.Time
	Margin time.Duration
	// Lease is how long the taken rows are the run's: another run skips
	// them until then. It must outlast the run's work on them.
	Lease time.Duration
	// KeyWindow is the PSP's idempotency key window. A payment whose row
	// was created less than KeyWindow - Margin ago, on the database's clock
	// (the one that stamped created_at), is inside it: its charge may be
	// replayed with the same key.
	KeyWindow time.Duration
	// Limit bounds the rows taken.
	Limit int
}

// Unsettled is a payment a resolver run has taken.
type Unsettled struct {
	Payment
	// InKeyWindow: replay the charge with its derived key; otherwise look
	// it up by our reference (a replay after the window would charge anew).
	// It is decided when the row is taken; the call may leave much later
	// (the rate cap, the rows before it), so a replay checks
	// KeyWindowCloses again when it is about to go.
	InKeyWindow bool
	// KeyWindowCloses is when the PSP's key window closes (created_at +
	// KeyWindow) on this process's clock: the time the window had left on
	// the database's clock (the one that stamped created_at) when the
	// statement ran, added to a reading of time.Now taken before it was
	// sent, so the round trip only moves it earlier. It carries the
	// monotonic reading: compare it with time.Now, which sees the real
	// waits between the claim and the call (a fake or stepped wall clock
	// does not), and no offset between the two clocks enters.
	KeyWindowCloses time.Time
	// Attempts counts the runs that have taken this row, this one included.
	Attempts int
}

// ClaimUnsettled takes up to c.Limit payments that need the resolver: every
// UNKNOWN one, and every PENDING one whose deadline plus the margin has
// passed, that no other run holds. It sets their lease in the same
// statement; FOR UPDATE SKIP LOCKED lets two runs at once take disjoint
// sets without waiting for each other. Fewest attempts first, then the
// oldest deadline: rows the PSP keeps answering open (a saved 5xx stays
// open for its whole 24 h key window) must not fill every run's Limit and
// starve a payment that crashed after its charge a minute ago (found by the
// chaos runner, whose long-lived worlds piled up such rows).
func (s *Store) ClaimUnsettled(ctx context.Context, c Claim) ([]Unsettled, error) {
	if c.Limit <= 0 {
		return nil, nil
	}
	window := (c.KeyWindow - c.Margin).Seconds()
	sent := time.Now()
	rows, err := s.pool.Query(ctx, `
		UPDATE payments SET resolve_lease_until = $1, resolve_attempts = resolve_attempts + 1
		FROM (
		  SELECT payment_id AS pick_id FROM payments
		  WHERE (state = 'UNKNOWN' OR (state = 'PENDING' AND deadline_at < $2))
		    AND (resolve_lease_until IS NULL OR resolve_lease_until < $3)
		  ORDER BY resolve_attempts, deadline_at
		  LIMIT $4
		  FOR UPDATE SKIP LOCKED
		) pick
		WHERE payment_id = pick.pick_id
		RETURNING `+columns+`, now() - created_at < make_interval(secs => $5), resolve_attempts,
		  extract(epoch FROM created_at + make_interval(secs => $6) - now())::float8`,
		c.Now.Add(c.Lease), c.Now.Add(-c.Margin), c.Now, c.Limit, window, c.KeyWindow.Seconds())
	if err != nil {
		return nil, unavailable("claim unsettled", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Unsettled, error) {
		var u Unsettled
		var state string
		var left float64 // seconds
		err := r.Scan(&u.ID, &u.CallerID, &u.ClientKey, &u.Fingerprint, &u.Amount, &u.Currency, &u.MerchantID,
			&u.OrderID, &u.PaymentMethod, &state, &u.PSPCharge, &u.DeclineCode, &u.DeadlineAt, &u.CreatedAt, &u.UpdatedAt,
			&u.InKeyWindow, &u.Attempts, &left)
		u.State = State(state)
		u.KeyWindowCloses = sent.Add(time.Duration(left * float64(time.Second)))
		return u, err
	})
	if err != nil {
		return nil, unavailable("claim unsettled", err)
	}
	return out, nil
}

// ReleaseUnsettled gives up a run's lease on payments it could not settle
// (the PSP's answer was still open), so the next run may take them at once.
func (s *Store) ReleaseUnsettled(ctx context.Context, paymentIDs []string) error {
	if len(paymentIDs) == 0 {
		return nil
	}
	if _, err := s.pool.Exec(ctx, `
		UPDATE payments SET resolve_lease_until = NULL
		WHERE payment_id = ANY($1) AND state IN ('PENDING', 'UNKNOWN')`, paymentIDs); err != nil {
		return unavailable(fmt.Sprintf("release %d leases", len(paymentIDs)), err)
	}
	return nil
}

// CountOpenBefore counts the payments still open — UNKNOWN, or PENDING —
// whose deadline passed before `before`: money in doubt for longer than the
// resolver's horizon, which its replays have not settled.
func (s *Store) CountOpenBefore(ctx context.Context, before time.Time) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `
		SELECT count(*) FROM payments WHERE state IN ('PENDING', 'UNKNOWN') AND deadline_at < $1`, before).Scan(&n); err != nil {
		return 0, unavailable("count open payments", err)
	}
	return n, nil
}
