package ledger_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

func claimIDs(us []ledger.Unsettled) []string {
	out := make([]string, 0, len(us))
	for _, u := range us {
		out = append(out, u.ID)
	}
	slices.Sort(out)
	return out
}

// The resolver takes UNKNOWN rows and PENDING rows past deadline + margin,
// never final or VOID ones, and not again while its lease holds.
func TestClaimUnsettledTakesOpenRowsAndLeasesThem(t *testing.T) {
	pool, _ := testenv.Ledger(t)
	st := ledger.New(pool)
	ctx := context.Background()
	for _, p := range []ledger.Payment{pending("pay_pending_stale", "K1"), pending("pay_pending_fresh", "K2"),
		pending("pay_unknown", "K3"), pending("pay_done", "K4")} {
		if _, _, err := st.InsertPending(ctx, p, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE payments SET deadline_at = $1 WHERE payment_id = 'pay_pending_fresh'`, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.MarkUnknown(ctx, "pay_unknown"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := st.Settle(ctx, "pay_done", ledger.Outcome{State: ledger.Succeeded, PSPCharge: "ch"}, now); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.InsertVoid(ctx, "pay_void", "u1", "K5"); err != nil {
		t.Fatal(err)
	}
	c := ledger.Claim{Now: now.Add(10 * time.Second), Margin: time.Second, Lease: time.Minute, KeyWindow: 24 * time.Hour, Limit: 10}
	got, err := st.ClaimUnsettled(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if ids := claimIDs(got); !slices.Equal(ids, []string{"pay_pending_stale", "pay_unknown"}) {
		t.Fatalf("claimed %v", ids)
	}
	for _, u := range got {
		if !u.InKeyWindow || u.Attempts != 1 {
			t.Fatalf("%+v: want inside the key window, first attempt", u)
		}
	}
	if again, _ := st.ClaimUnsettled(ctx, c); len(again) != 0 {
		t.Fatalf("claimed %v again under a live lease", claimIDs(again))
	}
	if err := st.ReleaseUnsettled(ctx, []string{"pay_unknown"}); err != nil {
		t.Fatal(err)
	}
	if again, _ := st.ClaimUnsettled(ctx, c); !slices.Equal(claimIDs(again), []string{"pay_unknown"}) {
		t.Fatalf("after release: claimed %v", claimIDs(again))
	}
	c.Now = c.Now.Add(2 * time.Minute) // every lease lapsed
	c.KeyWindow = time.Second          // and the window is gone
	got, _ = st.ClaimUnsettled(ctx, c)
	if len(got) != 2 || got[0].InKeyWindow || got[1].InKeyWindow {
		t.Fatalf("after the lease and window: %+v", got)
	}
	if n, err := st.CountOpenBefore(ctx, now.Add(time.Minute)); err != nil || n != 2 {
		t.Fatalf("open before = %d, %v (the fresh PENDING row's deadline is later)", n, err)
	}
}

// The claim says when each row's PSP key window closes, on the caller's
// own monotonic clock, from the database's clock that stamped created_at:
// a run decides at each call whether a replay still lands inside it.
func TestClaimUnsettledSaysWhenTheKeyWindowCloses(t *testing.T) {
	pool, _ := testenv.Ledger(t)
	st := ledger.New(pool)
	ctx := context.Background()
	if _, _, err := st.InsertPending(ctx, pending("pay_old", "K1"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE payments SET created_at = now() - interval '23 hours 58 minutes 30 seconds'`); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	got, err := st.ClaimUnsettled(ctx, ledger.Claim{Now: now.Add(10 * time.Second), Margin: time.Second, Lease: time.Minute,
		KeyWindow: 24 * time.Hour, Limit: 10})
	if err != nil || len(got) != 1 {
		t.Fatalf("claimed %+v, %v", got, err)
	}
	u := got[0]
	// 90 s were left when the statement ran, counted from before it was
	// sent: never later than that, and not much earlier.
	if lo, hi := before.Add(80*time.Second), time.Now().Add(90*time.Second); !u.InKeyWindow || u.KeyWindowCloses.Before(lo) || u.KeyWindowCloses.After(hi) {
		t.Fatalf("in window %v, closes in %s; want inside, in about 90 s", u.InKeyWindow, time.Until(u.KeyWindowCloses))
	}
}

// Rows the PSP keeps answering open are taken after fresh ones: with more
// such rows than a run's Limit, a payment that just crashed after its charge
// is still taken by the next run.
func TestClaimUnsettledTakesFewestAttemptsFirst(t *testing.T) {
	pool, _ := testenv.Ledger(t)
	st := ledger.New(pool)
	ctx := context.Background()
	for _, p := range []ledger.Payment{pending("pay_old_1", "K1"), pending("pay_old_2", "K2"), pending("pay_new", "K3")} {
		if _, _, err := st.InsertPending(ctx, p, ""); err != nil {
			t.Fatal(err)
		}
	}
	// The two old rows have been open for many runs and have the earlier
	// deadlines: oldest-deadline-first alone would take them every time.
	if _, err := pool.Exec(ctx, `UPDATE payments SET resolve_attempts = 40, deadline_at = deadline_at - interval '1 hour' WHERE payment_id LIKE 'pay_old_%'`); err != nil {
		t.Fatal(err)
	}
	c := ledger.Claim{Now: now.Add(10 * time.Second), Margin: time.Second, Lease: time.Minute, KeyWindow: 24 * time.Hour, Limit: 1}
	got, err := st.ClaimUnsettled(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if ids := claimIDs(got); !slices.Equal(ids, []string{"pay_new"}) {
		t.Fatalf("claimed %v, want the fresh row first", ids)
	}
	c.Limit = 10
	if rest, _ := st.ClaimUnsettled(ctx, c); !slices.Equal(claimIDs(rest), []string{"pay_old_1", "pay_old_2"}) {
		t.Fatalf("then claimed %v, want the old rows", claimIDs(rest))
	}
}

func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// A refund moves only along the allowed edges, whoever attempts it.
func TestRefundMovesAreGuarded(t *testing.T) {
	pool, _ := testenv.Ledger(t)
	st := ledger.New(pool)
	ctx := context.Background()
	if _, _, err := st.InsertPending(ctx, pending("pay_7", "K1"), ""); err != nil {
		t.Fatal(err)
	}
	r, inserted, err := st.InsertRefund(ctx, ledger.Refund{PaymentID: "pay_7", CallerID: "u1", RefundKey: "RK1", Fingerprint: "F",
		Amount: 3000, Currency: "USD", MerchantID: "m1", DeadlineAt: now})
	if err != nil || !inserted || r.State != ledger.RefundPending {
		t.Fatalf("insert: %+v %v %v", r, inserted, err)
	}
	// A second refund of the same payment, or the same key again: nothing written.
	if _, inserted, _ := st.InsertRefund(ctx, ledger.Refund{PaymentID: "pay_7", CallerID: "u1", RefundKey: "RK2", Fingerprint: "F",
		Amount: 3000, Currency: "USD", MerchantID: "m1", DeadlineAt: now}); inserted {
		t.Fatal("a second refund of one payment")
	}
	r, err = st.RecordRefundAttempt(ctx, "pay_7", true, "", now.Add(time.Minute))
	if err != nil || r.State != ledger.RefundUnknown || r.Attempts != 1 || !r.NextAttemptAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("attempt: %+v %v", r, err)
	}
	r, moved, err := st.SettleRefund(ctx, "pay_7", ledger.RefundOutcome{State: ledger.RefundSucceeded, PSPRefund: "re_1"})
	if err != nil || !moved || r.State != ledger.RefundSucceeded || !r.NextAttemptAt.IsZero() {
		t.Fatalf("settle: %+v %v %v", r, moved, err)
	}
	// FAILED after SUCCEEDED is Stripe failing the refund later, and only
	// for the PSP refund that succeeded (migration 00006).
	if _, moved, _ := st.SettleRefund(ctx, "pay_7", ledger.RefundOutcome{State: ledger.RefundFailed}); moved {
		t.Fatal("a settled refund moved again on a FAILED naming no refund")
	}
	if _, moved, _ := st.SettleRefund(ctx, "pay_7", ledger.RefundOutcome{State: ledger.RefundFailed, PSPRefund: "re_2"}); moved {
		t.Fatal("a settled refund moved again on another refund's failure")
	}
	for _, to := range []string{"UNKNOWN", "PENDING"} {
		if _, err := pool.Exec(ctx, `UPDATE refunds SET state = $1 WHERE payment_id = 'pay_7'`, to); pgCode(err) != "23514" {
			t.Errorf("SUCCEEDED -> %s: err = %v, want check_violation", to, err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE refunds SET state = 'FAILED', psp_refund = 're_2' WHERE payment_id = 'pay_7'`); pgCode(err) != "23514" {
		t.Errorf("SUCCEEDED -> FAILED for another refund: err = %v, want check_violation", err)
	}
}

// The webhook's inbox row is written first and decides: a repeat writes
// nothing at all; an event for no known payment is still recorded.
func TestApplyWebhookRecordsTheInboxRowFirst(t *testing.T) {
	pool, _ := testenv.Ledger(t)
	st := ledger.New(pool)
	ctx := context.Background()
	if _, _, err := st.InsertPending(ctx, pending("pay_7", "K1"), ""); err != nil {
		t.Fatal(err)
	}
	o := &ledger.Outcome{State: ledger.Succeeded, PSPCharge: "ch_1"}
	ev := ledger.InboxEvent{ID: "evt_1", Type: "payment_intent.succeeded", PaymentID: "pay_7", Amount: 3000, Currency: "usd", PaymentIntentID: "pi_1", ChargeID: "ch_1"}
	res, err := st.ApplyWebhook(ctx, ev, o, now)
	if err != nil || res.Duplicate || !res.Moved || res.Event == nil || res.Payment.State != ledger.Succeeded {
		t.Fatalf("first delivery: %+v %v", res, err)
	}
	res, err = st.ApplyWebhook(ctx, ev, o, now)
	if err != nil || !res.Duplicate || res.Moved {
		t.Fatalf("repeat: %+v %v", res, err)
	}
	ev.ID, ev.PaymentID = "evt_2", "pay_nobody"
	res, err = st.ApplyWebhook(ctx, ev, o, now)
	if err != nil || res.Duplicate || res.Found || res.Moved {
		t.Fatalf("unknown payment: %+v %v", res, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_inbox`); n != 2 {
		t.Fatalf("inbox rows = %d", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox_intents`); n != 1 {
		t.Fatalf("outbox intents = %d", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM journal_entries`); n != 2 {
		t.Fatalf("journal entries = %d", n)
	}
}

// Stripe can fail a refund after it succeeded (refund.failed; test card
// 4000000000005126). The ledger moves it SUCCEEDED -> FAILED in one
// transaction with the refund's journal entries reversed (every posting
// still sums to zero, the merchant is owed the charge again) and the
// compensating <payment_id>:REFUND_FAILED intent beside the REFUNDED one;
// a repeat of the failure writes nothing.
func TestARefundThatSucceededThenFailedIsReversedAndCompensated(t *testing.T) {
	pool, _ := testenv.Ledger(t)
	st := ledger.New(pool)
	ctx := context.Background()
	if _, _, err := st.InsertPending(ctx, pending("pay_7", "K1"), ""); err != nil {
		t.Fatal(err)
	}
	if _, _, moved, err := st.Settle(ctx, "pay_7", ledger.Outcome{State: ledger.Succeeded, PSPCharge: "ch_1"}, now); err != nil || !moved {
		t.Fatalf("settle payment: %v %v", moved, err)
	}
	if _, _, err := st.InsertRefund(ctx, ledger.Refund{PaymentID: "pay_7", CallerID: "u1", RefundKey: "RK1", Fingerprint: "F",
		Amount: 3000, Currency: "USD", MerchantID: "m1", PSPCharge: "ch_1", DeadlineAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, moved, err := st.SettleRefund(ctx, "pay_7", ledger.RefundOutcome{State: ledger.RefundSucceeded, PSPRefund: "re_1"}); err != nil || !moved {
		t.Fatalf("refund succeeded: %v %v", moved, err)
	}
	r, moved, err := st.SettleRefund(ctx, "pay_7", ledger.RefundOutcome{State: ledger.RefundFailed, PSPRefund: "re_1", FailureReason: "lost_or_stolen_card"})
	if err != nil || !moved || r.State != ledger.RefundFailed || r.PSPRefund != "re_1" || r.FailureReason != "lost_or_stolen_card" {
		t.Fatalf("refund failed later: %+v %v %v", r, moved, err)
	}
	if _, moved, _ := st.SettleRefund(ctx, "pay_7", ledger.RefundOutcome{State: ledger.RefundFailed, PSPRefund: "re_1"}); moved {
		t.Fatal("the failure applied twice")
	}
	var owed, sum int64
	if err := pool.QueryRow(ctx, `SELECT COALESCE(sum(amount) FILTER (WHERE account = 'merchant_payable:m1'), 0), COALESCE(sum(amount), 0)
		FROM journal_entries WHERE payment_id = 'pay_7'`).Scan(&owed, &sum); err != nil {
		t.Fatal(err)
	}
	var charged int64
	if err := pool.QueryRow(ctx, `SELECT amount FROM journal_entries WHERE payment_id = 'pay_7' AND posting = 'charge' AND account = 'merchant_payable:m1'`).Scan(&charged); err != nil {
		t.Fatal(err)
	}
	if owed != charged || sum != 0 {
		t.Fatalf("merchant_payable %d (charge posted %d), journal sum %d: the refund's reversal must restore the charge's balance", owed, charged, sum)
	}
	var payload string
	if err := pool.QueryRow(ctx, `SELECT payload::text FROM outbox_intents WHERE event_id = 'pay_7:REFUND_FAILED' AND merchant_id = 'm1'`).Scan(&payload); err != nil {
		t.Fatalf("the compensating intent: %v", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_intents WHERE payment_id = 'pay_7'`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d intents (%v), want SUCCEEDED, REFUNDED and REFUND_FAILED", n, err)
	}
}
