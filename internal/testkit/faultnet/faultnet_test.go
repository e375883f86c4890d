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
