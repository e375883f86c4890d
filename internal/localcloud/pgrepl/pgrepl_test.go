package pgrepl

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"

	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// linked is a primary database in the first Region's cluster and a standby
// database in the second's, each a fresh clone of the migrated template,
// linked with lag; everything is dropped when the test ends.
type linked struct {
	link             *Link
	primary, standby *pgxpool.Pool
	standbyDSN       string
}

func newLinked(t *testing.T, lag time.Duration, before func(primary *pgxpool.Pool)) linked {
	t.Helper()
	return newFenced(t, lag, before, "")
}

// newFenced is newLinked with Config.Fence; onStandby, if set, runs on
// the standby database before the link.
func newFenced(t *testing.T, lag time.Duration, before func(primary *pgxpool.Pool), fence string, onStandby ...func(standby *pgxpool.Pool, dsn string)) linked {
	t.Helper()
	primary, primaryDSN := testenv.Ledger(t)
	standby, standbyDSN := testenv.R2Ledger(t)
	if before != nil {
		before(primary)
	}
	for _, f := range onStandby {
		f(standby, standbyDSN)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	link, err := New(ctx, Config{Name: "t_" + testenv.RandomID(6), Primary: primaryDSN, Standby: standbyDSN, Lag: lag, Fence: fence})
	if err != nil {
		t.Fatal(err)
	}
	// Registered after the databases' cleanups, so it runs before them: a
	// database with a subscription or a slot cannot be dropped.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := link.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return linked{link: link, primary: primary, standby: standby, standbyDSN: standbyDSN}
}

func credit(t *testing.T, db *pgxpool.Pool, event string) int64 {
	t.Helper()
	var id int64
	err := db.QueryRow(context.Background(),
		`INSERT INTO credits (merchant_id, cents, currency, event_id) VALUES ('m1', 3000, 'EUR', $1) RETURNING credit_id`, event).Scan(&id)
	if err != nil {
		t.Fatalf("credit %s: %v", event, err)
	}
	return id
}

func has(t *testing.T, db *pgxpool.Pool, event string) bool {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM credits WHERE event_id = $1`, event).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// A row committed before the link is copied by the initial sync, one
// committed after it is replicated; the standby's own rows (the clone's
// schema versions) are replaced by the primary's, not doubled.
func TestARowReplicates(t *testing.T) {
	t.Parallel()
	p := newLinked(t, 0, func(primary *pgxpool.Pool) { credit(t, primary, "before") })
	ctx := context.Background()
	if !has(t, p.standby, "before") {
		t.Error("the row committed before the link is not on the standby after the initial sync")
	}
	credit(t, p.primary, "after")
	if err := p.link.CaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if !has(t, p.standby, "after") {
		t.Error("the row committed after the link is not on the standby once caught up")
	}
	var prim, stby int
	if err := p.primary.QueryRow(ctx, `SELECT count(*) FROM goose_db_version`).Scan(&prim); err != nil {
		t.Fatal(err)
	}
	if err := p.standby.QueryRow(ctx, `SELECT count(*) FROM goose_db_version`).Scan(&stby); err != nil {
		t.Fatal(err)
	}
	if prim == 0 || prim != stby {
		t.Errorf("schema versions: primary %d rows, standby %d; want the primary's rows, once", prim, stby)
	}
}

// The lag is the WAL stream's: a row is not on the standby within the lag
// of its commit, and Measure reports at least the lag.
func TestTheLagIsReal(t *testing.T) {
	t.Parallel()
	for _, lag := range []time.Duration{0, 300 * time.Millisecond, time.Second} {
		t.Run(lag.String(), func(t *testing.T) {
			p := newLinked(t, lag, nil)
			ctx := context.Background()
			var worst, best time.Duration
			for i := range 3 {
				d, err := p.link.Measure(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 || d > worst {
					worst = d
				}
				if i == 0 || d < best {
					best = d
				}
			}
			t.Logf("lag %v: measured %v to %v over 3 probes", lag, best.Round(time.Millisecond), worst.Round(time.Millisecond))
			if best < lag {
				t.Errorf("measured %v with a lag of %v", best, lag)
			}
			if lag == 0 {
				return
			}
			if best > lag+2*time.Second {
				t.Errorf("measured %v with a lag of %v: the proxy holds back more than the lag", best, lag)
			}
			credit(t, p.primary, "in-flight")
			time.Sleep(lag / 2)
			if has(t, p.standby, "in-flight") {
				t.Errorf("the row is on the standby %v after its commit, within the lag %v", lag/2, lag)
			}
			if err := p.link.CaughtUp(ctx); err != nil {
				t.Fatal(err)
			}
			if !has(t, p.standby, "in-flight") {
				t.Error("the row is not on the standby once caught up")
			}
		})
	}
}

// Cut loses what is on its way: a row committed on the primary just before
// the cut (its WAL held back by the lag) and any row after it never reach
// the standby, while the primary keeps them.
func TestCutStopsReplicationMidStream(t *testing.T) {
	t.Parallel()
	const lag = time.Second
	p := newLinked(t, lag, nil)
	ctx := context.Background()
	credit(t, p.primary, "settled")
	if err := p.link.CaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	credit(t, p.primary, "in-flight")
	// Long enough for the walsender to have sent it into the proxy, well
	// within the lag.
	time.Sleep(200 * time.Millisecond)
	p.link.Cut()
	if lost := p.link.proxy.dropped.Load(); lost == 0 {
		t.Error("the cut lost no bytes: the in-flight row was not on its way")
	}
	credit(t, p.primary, "after-cut")
	time.Sleep(2 * lag)
	if !has(t, p.standby, "settled") {
		t.Error("the row replicated before the cut is gone from the standby")
	}
	for _, ev := range []string{"in-flight", "after-cut"} {
		if has(t, p.standby, ev) {
			t.Errorf("%s reached the standby after the cut", ev)
		}
		if !has(t, p.primary, ev) {
			t.Errorf("%s is not on the primary", ev)
		}
	}
	if err := p.link.CaughtUp(ctx); !errors.Is(err, ErrCut) {
		t.Errorf("CaughtUp after the cut: %v, want ErrCut", err)
	}
}

// Promote makes the standby writable: the subscription is gone and every
// sequence is past the rows that replicated, which PostgreSQL's logical
// replication does not do by itself.
func TestPromoteMakesTheStandbyWritable(t *testing.T) {
	t.Parallel()
	p := newLinked(t, 100*time.Millisecond, nil)
	ctx := context.Background()
	var last int64
	for i := range 5 {
		last = credit(t, p.primary, fmt.Sprintf("ev-%d", i))
	}
	if err := p.link.CaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	var seq int64
	if err := p.standby.QueryRow(ctx, `SELECT last_value FROM credits_credit_id_seq`).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if seq >= last {
		t.Fatalf("the standby's sequence is at %d before the promotion, past the replicated %d: nothing left to show", seq, last)
	}
	p.link.Cut()
	if err := p.link.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if id := credit(t, p.standby, "after-promotion"); id <= last {
		t.Errorf("the promoted standby's first credit got id %d, not past the replicated %d", id, last)
	}
	var subs int
	if err := p.standby.QueryRow(ctx, `SELECT count(*) FROM pg_subscription WHERE subname = $1`, p.link.cfg.Name).Scan(&subs); err != nil {
		t.Fatal(err)
	}
	if subs != 0 {
		t.Errorf("%d subscriptions left on the promoted standby", subs)
	}
	// Every sequence that feeds a column is past its column.
	rows, err := p.standby.Query(ctx, sequenceColumns)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var checked int
	for rows.Next() {
		var s, tbl, col string
		if err := rows.Scan(&s, &tbl, &col); err != nil {
			t.Fatal(err)
		}
		var behind bool
		q := fmt.Sprintf(`SELECT coalesce(max(%s), 0) >= (SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM %s) FROM %s`, col, s, tbl)
		if err := p.standby.QueryRow(ctx, q).Scan(&behind); err != nil {
			t.Fatal(err)
		}
		if behind {
			t.Errorf("sequence %s would hand out a value %s.%s already holds", s, tbl, col)
		}
		checked++
	}
	if checked < 3 {
		t.Errorf("checked %d sequences; the ledger has at least journal_entries', credits' and debits'", checked)
	}
	// Close drops the publication and the slot the promotion left on the primary.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.link.Close(cctx); err != nil {
		t.Fatal(err)
	}
	var slots, pubs int
	if err := p.primary.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, p.link.cfg.Name).Scan(&slots); err != nil {
		t.Fatal(err)
	}
	if err := p.primary.QueryRow(ctx, `SELECT count(*) FROM pg_publication WHERE pubname = $1`, p.link.cfg.Name).Scan(&pubs); err != nil {
		t.Fatal(err)
	}
	if slots != 0 || pubs != 0 {
		t.Errorf("after Close the primary holds %d slot(s) and %d publication(s) of the link", slots, pubs)
	}
}

// While the link follows, the fenced role's sessions on the standby are
// read-only (ledger.ReadOnly says so, and a write is refused) while the
// subscription goes on applying the primary's rows; a session the role
// held from before the link is ended. Promote lifts the fence and ends the
// fenced sessions: the role writes.
func TestTheFencedRoleIsReadOnlyOnTheStandbyUntilPromoted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	role := "fence_" + testenv.RandomID(6)
	// The role is made on the standby's cluster before the link and
	// dropped after the databases (cleanups run last-registered first).
	admin, err := pgxpool.New(ctx, testenv.Load(t).Get(localenv.R2LedgerAdminDSN))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) })
	as := func(dsn string) *pgx.Conn {
		t.Helper()
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.User = role
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	var before *pgx.Conn
	p := newFenced(t, 50*time.Millisecond, nil, role, func(standby *pgxpool.Pool, dsn string) {
		if _, err := standby.Exec(ctx, "GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA public TO "+role+"; GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO "+role); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = standby.Exec(context.Background(), "DROP OWNED BY "+role) })
		before = as(dsn)
		if err := before.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	})
	if err := before.Ping(ctx); err == nil {
		t.Error("the role's session from before the link still runs after it: it would write on the standby")
	}
	app := as(p.standbyDSN)
	if ro, err := ledger.ReadOnly(ctx, app); err != nil || !ro {
		t.Fatalf("the fenced role's session on the standby: read-only %v (%v), want true", ro, err)
	}
	_, err = app.Exec(ctx, `INSERT INTO credits (merchant_id, cents, currency, event_id) VALUES ('m1', 1, 'EUR', 'fenced')`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" { // read_only_sql_transaction
		t.Fatalf("a write of the fenced role on the standby: %v, want SQLSTATE 25006", err)
	}
	credit(t, p.primary, "while-fenced")
	if err := p.link.CaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	if !has(t, p.standby, "while-fenced") {
		t.Fatal("the fence stopped the subscription's own writes")
	}
	if err := p.link.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := app.Ping(ctx); err == nil {
		t.Error("the role's fenced session still runs after the promotion: it would keep its read-only setting")
	}
	after := as(p.standbyDSN)
	if ro, err := ledger.ReadOnly(ctx, after); err != nil || ro {
		t.Fatalf("the role's session after the promotion: read-only %v (%v), want false", ro, err)
	}
	if _, err := after.Exec(ctx, `INSERT INTO credits (merchant_id, cents, currency, event_id) VALUES ('m1', 1, 'EUR', 'promoted')`); err != nil {
		t.Fatalf("a write of the role on the promoted standby: %v", err)
	}
}

// A link whose Close never ran (its process killed) leaves a subscription
// on the standby and a publication and slots on the primary; DropStale
// removes them by the links' name prefix, and leaves another link's.
func TestDropStaleRemovesWhatAKilledLinkLeft(t *testing.T) {
	t.Parallel()
	p := newLinked(t, 0, nil)
	ctx := context.Background()
	credit(t, p.primary, "before-the-kill")
	if err := p.link.CaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	count := func(db *pgxpool.Pool, sql string) int {
		t.Helper()
		var n int
		if err := db.QueryRow(ctx, sql, p.link.cfg.Name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	const (
		subs  = `SELECT count(*) FROM pg_subscription WHERE subname = $1`
		pubs  = `SELECT count(*) FROM pg_publication WHERE pubname = $1`
		slots = `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`
	)
	if count(p.standby, subs) != 1 || count(p.primary, pubs) != 1 || count(p.primary, slots) != 1 {
		t.Fatal("the link has no subscription, publication and slot to leave behind: nothing to show")
	}
	// The kill: the proxy goes, nothing is dropped.
	p.link.proxy.close()
	if err := DropStale(ctx, p.primary, p.standby, "no_such_prefix_"); err != nil {
		t.Fatal(err)
	}
	if count(p.standby, subs) != 1 {
		t.Fatal("DropStale dropped a subscription its prefix does not name")
	}
	if err := DropStale(ctx, p.primary, p.standby, p.link.cfg.Name[:2]); err != nil {
		t.Fatal(err)
	}
	if s, pb := count(p.standby, subs), count(p.primary, pubs); s != 0 || pb != 0 {
		t.Errorf("after DropStale: %d subscriptions, %d publications left", s, pb)
	}
	deadline := time.Now().Add(10 * time.Second)
	for count(p.primary, slots) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stale link's slot is still on the primary")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
