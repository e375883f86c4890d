package inbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// A global database's secondary serves nothing at its writer endpoint
// until the promotion, so a standby's notification sweep cannot ask
// whether its ledger is read-only: outside the home Region a host that does
// not resolve is the standby's wait (no error, so no retries, no
// AsyncFailures, no alarm every minute); any other failure, or any in the
// home Region, or with no home record to ask, is an error.
func TestAnUnreachableLedgerOutsideTheHomeIsAStandbysWait(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, nil)
	poolAt := func(host string) *pgxpool.Pool { return testenv.UnreachableLedger(t, host) }
	// A name that does not resolve: the secondary's endpoint.
	gone, refused := poolAt("oncepay-ledger.cluster-x.invalid:5432"), poolAt("127.0.0.1:1")
	unreadable := errors.New("home table unreachable")
	standby := func(context.Context) (bool, error) { return false, nil }
	for _, c := range []struct {
		name    string
		pool    *pgxpool.Pool
		isHome  func(context.Context) (bool, error)
		wantErr bool
	}{
		{"standby", gone, standby, false},
		{"standby, connection refused", refused, standby, true},
		{"home", gone, func(context.Context) (bool, error) { return true, nil }, true},
		{"home record unreadable", gone, func(context.Context) (bool, error) { return false, unreadable }, true},
		{"no home record to ask", gone, nil, true},
	} {
		sw, err := inbox.NewNotifSweeper(c.pool, w.pusher, inbox.SweepConfig{Logger: quiet, CheckStandby: true, IsHome: c.isHome})
		if err != nil {
			t.Fatal(err)
		}
		n, err := sw.FinishPending(ctx, 10)
		if (err != nil) != c.wantErr || n != 0 {
			t.Errorf("%s: finished %d, err %v; want an error: %v", c.name, n, err, c.wantErr)
		}
	}
}
