package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/oncepay/oncepay/internal/ledger/migrations"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

func TestMigratingTwiceIsANoOp(t *testing.T) {
	_, dsn := testenv.Ledger(t) // cloned from the migrated template
	ctx := context.Background()
	applied, err := migrations.Apply(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 0 {
		t.Errorf("second migration applied %v, want nothing", applied)
	}
}

func TestMigrationsApplyToAnEmptyDatabase(t *testing.T) {
	pool, dsn := testenv.Ledger(t)
	ctx := context.Background()
	// Empty the clone, then migrate from nothing.
	for _, stmt := range []string{"DROP SCHEMA public CASCADE", "CREATE SCHEMA public"} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	applied, err := migrations.Apply(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) == 0 || applied[0] != 1 {
		t.Fatalf("applied %v, want [1 ...]", applied)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema='public' AND table_name = ANY($1)`,
		[]string{"payments", "journal_entries", "outbox_intents", "webhook_inbox", "processed", "credits", "merchant_balances", "notif"}).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 8 {
		t.Errorf("found %d of the 8 ledger tables", n)
	}
}

const insertPending = `INSERT INTO payments (payment_id, caller_id, client_key, fingerprint, amount, currency, state, merchant_id)
VALUES ($1, $2, $3, 'H1', 3000, 'USD', $4, 'm1')`

func TestDurableGuardRejectsASecondRowForTheSameCallerAndKey(t *testing.T) {
	pool, _ := testenv.Ledger(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, insertPending, "pay_1", "u1", "K1", "PENDING"); err != nil {
		t.Fatal(err)
	}
	_, err := pool.Exec(ctx, insertPending, "pay_2", "u1", "K1", "PENDING")
	if pgCode(err) != "23505" {
		t.Fatalf("second row for (u1, K1): err = %v, want unique_violation", err)
	}
	// Another caller may use the same key: scopes never collide.
	if _, err := pool.Exec(ctx, insertPending, "pay_3", "u2", "K1", "PENDING"); err != nil {
		t.Fatalf("u2 with K1: %v", err)
	}
}

func TestIllegalStateValueIsRejected(t *testing.T) {
	pool, _ := testenv.Ledger(t)
	_, err := pool.Exec(context.Background(), insertPending, "pay_1", "u1", "K1", "DONE")
	if pgCode(err) != "23514" {
		t.Fatalf("state DONE: err = %v, want check_violation", err)
	}
}

func TestVoidRowNeedsNoPaymentFieldsButOthersDo(t *testing.T) {
	pool, _ := testenv.Ledger(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO payments (payment_id, caller_id, client_key, state) VALUES ('pay_v', 'u1', 'K9', 'VOID')`); err != nil {
		t.Fatalf("VOID row: %v", err)
	}
	_, err := pool.Exec(ctx, `INSERT INTO payments (payment_id, caller_id, client_key, state) VALUES ('pay_p', 'u1', 'K8', 'PENDING')`)
	if pgCode(err) != "23514" {
		t.Fatalf("PENDING row without amount: err = %v, want check_violation", err)
	}
}

func TestOnlyAllowedStateMovesAreAccepted(t *testing.T) {
	pool, _ := testenv.Ledger(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, insertPending, "pay_1", "u1", "K1", "PENDING"); err != nil {
		t.Fatal(err)
	}
	move := func(to string) error {
		_, err := pool.Exec(ctx, `UPDATE payments SET state = $1 WHERE payment_id = 'pay_1'`, to)
		return err
	}
	for _, step := range []struct {
		to    string
		legal bool
	}{
		{"VOID", false}, {"UNKNOWN", true}, {"PENDING", false}, {"SUCCEEDED", true}, {"FAILED", false}, {"UNKNOWN", false},
	} {
		err := move(step.to)
		if step.legal && err != nil {
			t.Errorf("move to %s: %v", step.to, err)
		}
		if !step.legal && pgCode(err) != "23514" {
			t.Errorf("move to %s: err = %v, want it refused", step.to, err)
		}
	}
}

// Issue 13 defect 2 left events behind in any database that ran the old
// sweep: intents it marked published because an outbox item existed,
// although the worker never consumed them (the relay had given up). 00007
// re-arms exactly those, so the sweep re-drives them; a consumed one stays
// marked.
func TestIntentsMarkedPublishedButNeverConsumedAreReArmed(t *testing.T) {
	ctx := context.Background()
	_, dsn := testenv.Ledger(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := migrations.Provider(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 6); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO payments (payment_id, caller_id, client_key, state) VALUES ('pay_lost', 'u1', 'K-lost', 'VOID'), ('pay_done', 'u1', 'K-done', 'VOID')`,
		`INSERT INTO outbox_intents (event_id, payment_id, merchant_id, payload, published_at) VALUES
		   ('pay_lost:SUCCEEDED', 'pay_lost', 'm1', '{}', now()), ('pay_done:SUCCEEDED', 'pay_done', 'm1', '{}', now())`,
		`INSERT INTO processed (event_id) VALUES ('pay_done:SUCCEEDED')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	for id, wantPublished := range map[string]bool{"pay_lost:SUCCEEDED": false, "pay_done:SUCCEEDED": true} {
		var published bool
		if err := db.QueryRowContext(ctx, `SELECT published_at IS NOT NULL FROM outbox_intents WHERE event_id = $1`, id).Scan(&published); err != nil {
			t.Fatal(err)
		}
		if published != wantPublished {
			t.Errorf("%s published = %v after the migration, want %v", id, published, wantPublished)
		}
	}
}
