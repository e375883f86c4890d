package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/testkit/faultnet"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// In a ledger outage only the ledger's own errors are an outcome Lambda
// retries: what pgx returns when the faultnet proxy refuses a connection or
// cuts a session is excused, wrapped as the hops wrap it; an error of the
// code's own in the same hop (a bug that happens to coincide with the
// outage) is not, and fails the schedule.
func TestOnlyALedgerErrorIsExcusedInALedgerOutage(t *testing.T) {
	ctx := context.Background()
	_, dsn := testenv.Ledger(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultnet.Listen(u.Host, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	u.Host = p.Addr()
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// One open connection (a statement on it fails), then new ones refused.
	if _, err := pool.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	if err := p.Down(1 << 20); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		_, err := pool.Exec(ctx, `SELECT 1`)
		if err == nil {
			t.Fatalf("call %d: a statement passed the outage", i)
		}
		if !isLedgerError(fmt.Errorf("resolver: claim: %w", err)) {
			t.Errorf("call %d in the outage: %T %v not taken for a ledger error", i, err, err)
		}
	}
	p.Up()
	if p.DownFired() != 0 {
		t.Fatal("the outage did not end")
	}
	for _, err := range []error{
		errors.New("worker: the push carried the wrong amount"),
		fmt.Errorf("resolver: %w", context.Canceled),
		nil,
	} {
		if isLedgerError(err) {
			t.Errorf("%v excused as a ledger error", err)
		}
	}
}
