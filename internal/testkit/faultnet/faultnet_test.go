package faultnet_test

import (
	"context"
	"net"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/testkit/faultnet"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

var ctx = context.Background()

// proxied returns a pool that reaches the test's own database through a
// proxy, and a direct pool to look at what really committed.
func proxied(t *testing.T) (*faultnet.Proxy, *pgxpool.Pool, *pgxpool.Pool) {
	t.Helper()
	direct, dsn := testenv.Ledger(t)
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
	if _, err := direct.Exec(ctx, `CREATE TABLE fn (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return p, pool, direct
}

func count(t *testing.T, db *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM fn`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A COMMIT whose reply is lost: the client gets an error, the row is there.
func TestACommitWhoseReplyIsLostCommittedAnyway(t *testing.T) {
	p, pool, direct := proxied(t)
	if err := p.Arm(faultnet.Rule{Statement: "COMMIT"}); err != nil {
		t.Fatal(err)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO fn VALUES ($1)`, 1)
		return err
	})
	if err == nil {
		t.Fatal("the commit's reply was dropped, yet the client heard success")
	}
	if n := count(t, direct); n != 1 {
		t.Fatalf("%d rows after the ambiguous commit; want 1 (it committed)", n)
	}
	if f := p.Fired()["COMMIT"]; f != 1 {
		t.Fatalf("fired %v", p.Fired())
	}
	// The pool carries on with a new connection.
	if _, err := pool.Exec(ctx, `INSERT INTO fn VALUES ($1)`, 2); err != nil {
		t.Fatalf("after the drop: %v", err)
	}
	if n := count(t, direct); n != 2 {
		t.Fatalf("%d rows", n)
	}
}

// An implicit transaction (one statement with arguments, extended protocol)
// commits at its Sync: dropping that round trip's reply leaves the row.
func TestAStatementWhoseReplyIsLostAfterNRoundTrips(t *testing.T) {
	p, pool, direct := proxied(t)
	// Two inserts pass, the third one's reply is lost.
	if err := p.Arm(faultnet.Rule{Name: "third insert", Statement: "insert into fn", Skip: 2}); err != nil {
		t.Fatal(err)
	}
	var errs []error
	for i := range 4 {
		// A connection check never counts.
		if c, err := pool.Acquire(ctx); err == nil {
			_ = c.Ping(ctx)
			c.Release()
		}
		_, err := pool.Exec(ctx, `INSERT INTO fn VALUES ($1)`, i)
		errs = append(errs, err)
	}
	if errs[0] != nil || errs[1] != nil || errs[2] == nil || errs[3] != nil {
		t.Fatalf("errors %v; want only the third to fail", errs)
	}
	if n := count(t, direct); n != 4 {
		t.Fatalf("%d rows; want 4: the third committed though its reply was lost", n)
	}
	if p.Fired()["third insert"] != 1 || p.Disarm() != 0 {
		t.Fatalf("fired %v", p.Fired())
	}
}

// Arming errors are errors, and a disarmed rule never fires.
func TestDisarmedRulesNeverFire(t *testing.T) {
	p, pool, _ := proxied(t)
	if err := p.Arm(faultnet.Rule{Skip: -1}); err == nil {
		t.Fatal("a negative Skip was accepted")
	}
	_ = p.Arm(faultnet.Rule{Statement: "INSERT"})
	if n := p.Disarm(); n != 1 {
		t.Fatalf("disarmed %d", n)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO fn VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	if len(p.Fired()) != 0 {
		t.Fatalf("fired %v", p.Fired())
	}
	if _, _, err := net.SplitHostPort(p.Addr()); err != nil {
		t.Fatal(err)
	}
}

// A ledger outage: while it lasts, statements on open connections fail
// before they reach the server (nothing of them commits, an open
// transaction rolls back) and new connections are refused; after Up the
// pool reconnects and works, and Up counts what the outage failed.
func TestALedgerOutageFailsEveryCallBeforeTheServerAndThePoolRecovers(t *testing.T) {
	p, pool, direct := proxied(t)
	if err := p.Down(0); err == nil {
		t.Fatal("an outage of 0 calls was accepted")
	}
	if _, err := pool.Exec(ctx, `INSERT INTO fn VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	// A transaction open when the ledger goes down: its INSERT was
	// forwarded, its COMMIT never is.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO fn VALUES (2)`); err != nil {
		t.Fatal(err)
	}
	if err := p.Down(1 << 20); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("a COMMIT in the outage succeeded")
	}
	if _, err := pool.Exec(ctx, `INSERT INTO fn VALUES (3)`); err == nil {
		t.Fatal("a statement in the outage succeeded")
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO fn VALUES (4)`)
		return err
	}); err == nil {
		t.Fatal("a transaction in the outage succeeded")
	}
	if n := count(t, direct); n != 1 {
		t.Fatalf("%d rows after the outage's calls; want 1: nothing of them reached the server", n)
	}
	if p.DownFired() < 3 {
		t.Fatalf("the outage counted %d failed calls, want at least the 3 that failed", p.DownFired())
	}
	fired := p.Up()
	if fired < 3 || p.DownFired() != 0 || p.Up() != 0 {
		t.Fatalf("Up counted %d failed calls, want at least 3, then 0", fired)
	}
	// Recovery: the pool dials again and works.
	if _, err := pool.Exec(ctx, `INSERT INTO fn VALUES (5)`); err != nil {
		t.Fatalf("after Up: %v", err)
	}
	if n := count(t, direct); n != 2 {
		t.Fatalf("%d rows after recovery; want 2", n)
	}
	if len(p.Fired()) != 0 {
		t.Fatalf("the outage counted as lost replies: %v", p.Fired())
	}
}

// An outage of n calls fails exactly n: a statement on an open connection
// (the session closes; pgx's CancelRequest after it is no call), then a new
// connection (refused); a connection check is no call; the next connection
// works with no Up.
func TestALedgerOutageOfNCallsFailsExactlyN(t *testing.T) {
	// One connection of the test's own, no pool: every call is the test's.
	direct, dsn := testenv.Ledger(t)
	if _, err := direct.Exec(ctx, `CREATE TABLE fn (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
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
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := p.Down(2); err != nil {
		t.Fatal(err)
	}
	// pgx's connection check is no call: it passes, uncounted (the pool
	// sends it only after a second of idle real time).
	if err := conn.Ping(ctx); err != nil || p.DownFired() != 0 {
		t.Fatalf("a connection check in the outage: %v, fired %d", err, p.DownFired())
	}
	if _, err := conn.Exec(ctx, `INSERT INTO fn VALUES (1)`); err == nil {
		t.Fatal("the outage's first call succeeded")
	}
	if c, err := pgx.Connect(ctx, u.String()); err == nil {
		_ = c.Close(ctx)
		t.Fatalf("a connection in the outage was accepted (fired %d)", p.DownFired())
	}
	if p.DownFired() != 2 {
		t.Fatalf("fired %d, want 2", p.DownFired())
	}
	c, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatalf("the outage's n calls are spent, yet: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `INSERT INTO fn VALUES (2)`); err != nil {
		t.Fatal(err)
	}
	if n := count(t, direct); n != 1 {
		t.Fatalf("%d rows; want 1 (the outage's insert never reached the server)", n)
	}
	if f := p.Up(); f != 2 {
		t.Fatalf("Up counted %d, want 2", f)
	}
}
