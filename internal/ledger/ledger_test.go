package ledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

var now = time.Unix(1_800_000_000, 0).UTC()

func pending(id, key string) ledger.Payment {
	return ledger.Payment{ID: id, CallerID: "u1", ClientKey: key, Fingerprint: "H1", Amount: 3000, Currency: "USD",
		MerchantID: "m1", OrderID: "42", PaymentMethod: "pm_1", DeadlineAt: now.Add(5 * time.Second)}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestInsertPendingTwiceAnswersFromTheRow(t *testing.T) {
	pool, _ := testenv.Ledger(t)
	st := ledger.New(pool)
	ctx := context.Background()
	row, inserted, err := st.InsertPending(ctx, pending("pay_7", "K1"), "")
	if err != nil || !inserted || row.State != ledger.Pending || row.Amount != 3000 {
		t.Fatalf("first insert: %+v inserted=%v err=%v", row, inserted, err)
	}
	p2 := pending("pay_7", "K1")
	p2.Fingerprint = "H2"
	row, inserted, err = st.InsertPending(ctx, p2, "")
	if err != nil || inserted || row.Fingerprint != "H1" {
		t.Fatalf("second insert: %+v inserted=%v err=%v", row, inserted, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM payments`); n != 1 {
		t.Fatalf("%d rows", n)
	}
}

func TestSettleIsOneCompareAndSetWithJournalAndOutboxIntent(t *testing.T) {
	pool, _ := testenv.Ledger(t)
	st := ledger.New(pool)
	ctx := context.Background()
	if _, _, err := st.InsertPending(ctx, pending("pay_7", "K1"), ""); err != nil {
		t.Fatal(err)
	}
	p, ev, moved, err := st.Settle(ctx, "pay_7", ledger.Outcome{State: ledger.Succeeded, PSPCharge: "pi_1"}, now)
	if err != nil || !moved || p.State != ledger.Succeeded || p.PSPCharge != "pi_1" {
		t.Fatalf("settle: %+v moved=%v err=%v", p, moved, err)
	}
	if ev == nil || ev.EventID != "pay_7:SUCCEEDED" || ev.MerchantID != "m1" || ev.Amount != 3000 {
		t.Fatalf("event = %+v", ev)
	}
	// A late second answer (a webhook, a resolver replay) changes nothing.
	p, ev, moved, err = st.Settle(ctx, "pay_7", ledger.Outcome{State: ledger.Failed, DeclineCode: "x"}, now)
	if err != nil || moved || ev != nil || p.State != ledger.Succeeded {
		t.Fatalf("second settle: %+v moved=%v err=%v", p, moved, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM journal_entries WHERE payment_id = 'pay_7'`); n != 2 {
		t.Fatalf("journal entries = %d, want 2", n)
	}
	if n := count(t, pool, `SELECT COALESCE(sum(amount), 99) FROM journal_entries WHERE payment_id = 'pay_7'`); n != 0 {
		t.Fatalf("journal does not balance: %d", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox_intents WHERE event_id = 'pay_7:SUCCEEDED' AND published_at IS NULL`); n != 1 {
		t.Fatalf("outbox intents = %d", n)
	}
}

func TestUnknownThenSettleAndDeclineHasNoJournal(t *testing.T) {
	pool, _ := testenv.Ledger(t)
	st := ledger.New(pool)
	ctx := context.Background()
	for _, k := range []string{"K1", "K2"} {
		if _, _, err := st.InsertPending(ctx, pending("pay_"+k, k), ""); err != nil {
			t.Fatal(err)
		}
	}
	p, moved, err := st.MarkUnknown(ctx, "pay_K1")
	if err != nil || !moved || p.State != ledger.Unknown {
		t.Fatalf("mark unknown: %+v %v %v", p, moved, err)
	}
	if _, moved, _ := st.MarkUnknown(ctx, "pay_K1"); moved {
		t.Fatal("second MarkUnknown moved")
	}
	if p, _, moved, err := st.Settle(ctx, "pay_K1", ledger.Outcome{State: ledger.Succeeded, PSPCharge: "pi_1"}, now); err != nil || !moved || p.State != ledger.Succeeded {
		t.Fatalf("settle from UNKNOWN: %+v %v %v", p, moved, err)
	}
	p, ev, moved, err := st.Settle(ctx, "pay_K2", ledger.Outcome{State: ledger.Failed, DeclineCode: "generic_decline"}, now)
	if err != nil || !moved || p.DeclineCode != "generic_decline" || ev.EventID != "pay_K2:FAILED" {
		t.Fatalf("decline: %+v %v %v", p, moved, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM journal_entries WHERE payment_id = 'pay_K2'`); n != 0 {
		t.Fatalf("a decline was journaled: %d entries", n)
	}
}

func TestVoidWinsTheUniqueKeyAndALateOriginalMeetsIt(t *testing.T) {
	pool, _ := testenv.Ledger(t)
	st := ledger.New(pool)
	ctx := context.Background()
	v, inserted, err := st.InsertVoid(ctx, "pay_7", "u1", "K1")
	if err != nil || !inserted || v.State != ledger.Void {
		t.Fatalf("void: %+v %v %v", v, inserted, err)
	}
	row, inserted, err := st.InsertPending(ctx, pending("pay_7", "K1"), "")
	if err != nil || inserted || row.State != ledger.Void {
		t.Fatalf("late original: %+v inserted=%v err=%v", row, inserted, err)
	}
}

func TestUnreachableLedgerIsUnavailable(t *testing.T) {
	testenv.Load(t)
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, _, err = ledger.New(pool).InsertPending(context.Background(), pending("pay_7", "K1"), "")
	if !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

func TestSettlePayloadIsTheEvent(t *testing.T) {
	pool, _ := testenv.Ledger(t)
	st := ledger.New(pool)
	ctx := context.Background()
	for _, tc := range []struct {
		key string
		o   ledger.Outcome
	}{
		{"K1", ledger.Outcome{State: ledger.Succeeded, PSPCharge: "ch_1"}},
		{"K2", ledger.Outcome{State: ledger.Failed, DeclineCode: "generic_decline"}},
	} {
		if _, _, err := st.InsertPending(ctx, pending("pay_"+tc.key, tc.key), ""); err != nil {
			t.Fatal(err)
		}
		at := now.Add(123456789 * time.Nanosecond)
		_, ev, moved, err := st.Settle(ctx, "pay_"+tc.key, tc.o, at)
		if err != nil || !moved {
			t.Fatalf("settle: %v %v", moved, err)
		}
		var payload []byte
		if err := pool.QueryRow(ctx, `SELECT payload::text FROM outbox_intents WHERE event_id = $1`, ev.EventID).Scan(&payload); err != nil {
			t.Fatal(err)
		}
		stored, err := event.Unmarshal(payload)
		if err != nil {
			t.Fatal(err)
		}
		if !stored.OccurredAt.Equal(ev.OccurredAt) {
			t.Fatalf("occurred_at %v != %v", stored.OccurredAt, ev.OccurredAt)
		}
		stored.OccurredAt = ev.OccurredAt
		if stored != *ev {
			t.Fatalf("stored payload %+v\n!= returned event %+v", stored, *ev)
		}
	}
}
