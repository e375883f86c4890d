package inbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/inbox"
)

// A global database's secondary serves nothing at its writer endpoint
// until the promotion, so a standby's notification sweep cannot ask
// whether its ledger is read-only: outside the home Region that is the
// standby's wait (no error, so no retries, no AsyncFailures, no alarm every
// minute); in the home Region, or with no home record to ask, it fails.
func TestAnUnreachableLedgerOutsideTheHomeIsAStandbysWait(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, nil)
	gone, err := pgxpool.New(ctx, "postgres://oncepay@127.0.0.1:1/oncepay?connect_timeout=1&sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gone.Close)
	unreadable := errors.New("home table unreachable")
	for _, c := range []struct {
		name    string
		isHome  func(context.Context) (bool, error)
		wantErr bool
	}{
		{"standby", func(context.Context) (bool, error) { return false, nil }, false},
		{"home", func(context.Context) (bool, error) { return true, nil }, true},
		{"home record unreadable", func(context.Context) (bool, error) { return false, unreadable }, true},
		{"no home record to ask", nil, true},
	} {
		sw, err := inbox.NewNotifSweeper(gone, w.pusher, inbox.SweepConfig{Logger: quiet, CheckStandby: true, IsHome: c.isHome})
		if err != nil {
			t.Fatal(err)
		}
		n, err := sw.FinishPending(ctx, 10)
		if (err != nil) != c.wantErr || n != 0 {
			t.Errorf("%s: finished %d, err %v; want an error: %v", c.name, n, err, c.wantErr)
		}
	}
}
