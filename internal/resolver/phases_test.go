package resolver_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/resolver"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

// phasedResolver is World.Resolver with its outbox sweep.
func phasedResolver(t *testing.T, w *worldtest.World, cfg resolver.Config) *resolver.Resolver {
	t.Helper()
	sw, err := outbox.NewSweeper(w.Outbox, w.Pool, outbox.SweepConfig{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r, err := resolver.New(cfg, resolver.Deps{
		Ledger: w.Ledger, PSP: w.PSP, Claims: w.Claims, Publisher: w.Outbox, Sweeper: sw,
		Clock: w.Clock, Log: w.Log, Metrics: metrics.New(w.Logs, "resolver"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Issue 13, defect 8: during an incident a backlog of UNKNOWN payments
// larger than one run can settle used to take every run whole (payments,
// then refunds, then the sweep, each only if time was left), so refund
// retries and the outbox sweep never ran. The phases now run side by side
// under the one PSP cap: in the very run the backlog overflows, the open
// refund is retried (one refund at the PSP, the row SUCCEEDED), the
// intent never put is swept into the outbox, while the payments the run had no time for
// are given back, unsettled and uncharged, for the next run.
func TestPaymentsBacklogDoesNotStarveRefundsOrSweep(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})

	// An open refund: the payment was charged, the refund's reply lost.
	if r := w.Pay("u1", "KR", worldtest.Body3000); r.Status != http.StatusCreated {
		t.Fatalf("payment to refund = %d %s", r.Status, r.Body)
	}
	refunded := ids.PaymentID(ids.Scope("u1", "KR"))
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.RefundKey(refunded)}, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
		t.Fatal(err)
	}
	if r := w.Refund("u1", "KR", "RKR"); r.Status != http.StatusAccepted {
		t.Fatalf("refund with its reply lost = %d %s, want 202", r.Status, r.Body)
	}

	// An outbox intent recorded and never put (its API died before the put).
	swept := insertOpen(t, w, "u1", "KS", "UNKNOWN", time.Minute)
	if _, _, moved, err := w.Ledger.Settle(ctx, swept, ledger.Outcome{State: ledger.Succeeded, PSPCharge: "ch_swept"}, w.Clock.Now()); err != nil || !moved {
		t.Fatal(moved, err)
	}
	sweptEvent := ids.EventID(swept, "SUCCEEDED")
	if _, err := w.Pool.Exec(ctx, `UPDATE outbox_intents SET created_at = now() - interval '1 minute' WHERE event_id = $1`, sweptEvent); err != nil {
		t.Fatal(err)
	}

	// The backlog: 60 UNKNOWN payments, one PSP call each, at a cap of 10
	// calls/s in a run with 2 s to start work: far more than one run.
	const backlog = 60
	if _, err := w.Pool.Exec(ctx, `
		INSERT INTO payments (payment_id, caller_id, client_key, fingerprint, amount, currency, merchant_id, order_id,
		                      payment_method, state, deadline_at)
		SELECT 'pay_backlog_' || i, 'backlog', 'K' || i, 'H', 100 + i, 'USD', 'm1', 'o' || i, 'pm_card_visa', 'UNKNOWN', $1
		FROM generate_series(1, $2) AS i`, w.Clock.Now().Add(-time.Minute), backlog); err != nil {
		t.Fatal(err)
	}
	chargesBefore := len(w.Sim.Charges())

	cfg := w.ResolverConfig()
	cfg.PSPRate, cfg.Limit, cfg.Concurrency, cfg.CallTimeout = 10, backlog, 4, time.Second
	res := phasedResolver(t, w, cfg)
	// The run stops starting work CallTimeout + 2 s before its deadline.
	budget := 2 * time.Second
	rctx, cancel := context.WithTimeout(ctx, cfg.CallTimeout+2*time.Second+budget)
	defer cancel()
	start := time.Now()
	rep, err := res.Run(rctx)
	if err != nil {
		t.Fatalf("run: %v (%+v)", err, rep)
	}
	elapsed := time.Since(start)

	// The backlog overflowed the run: some settled, the rest given back.
	if rep.Claimed != backlog || rep.Succeeded == 0 || rep.Succeeded >= backlog || rep.Errors != 0 {
		t.Fatalf("payments: %+v, want %d taken and only part of them settled", rep, backlog)
	}
	if open := w.Count(`SELECT count(*) FROM payments WHERE caller_id = 'backlog' AND state = 'UNKNOWN' AND resolve_lease_until IS NULL`); open != backlog-rep.Succeeded {
		t.Fatalf("%d backlog rows given back unsettled, want %d", open, backlog-rep.Succeeded)
	}
	if got := len(w.Sim.Charges()) - chargesBefore; got != rep.Succeeded {
		t.Fatalf("%d new charges for %d settled payments", got, rep.Succeeded)
	}
	// The refund was retried in the same run: one refund in all, settled.
	if rep.Refunds.Claimed != 1 || rep.Refunds.Succeeded != 1 {
		t.Fatalf("refunds: %+v, want the open refund retried and settled in this run (payments %d/%d)", rep.Refunds, rep.Succeeded, backlog)
	}
	rf := w.Sim.Refunds()
	if len(rf) != 1 || rf[0].IdempotencyKey != ids.RefundKey(refunded) || rf[0].Amount != 3000 {
		t.Fatalf("PSP refunds = %+v, want exactly one of 3000 under %s", rf, ids.RefundKey(refunded))
	}
	if n := w.Count(`SELECT count(*) FROM refunds WHERE payment_id = $1 AND state = 'SUCCEEDED' AND psp_refund = $2`, refunded, rf[0].ID); n != 1 {
		t.Fatalf("the refund row is not SUCCEEDED with %s", rf[0].ID)
	}
	// The sweep ran in the same run: the lost intent is in the outbox.
	if rep.Sweep.Found < 1 || rep.Sweep.Created < 1 || !outboxItem(t, w, sweptEvent) {
		t.Fatalf("sweep = %+v, want the intent never put to be put", rep.Sweep)
	}
	// Published means consumed: no worker ran here, so it stays unmarked.
	if n := w.Count(`SELECT count(*) FROM outbox_intents WHERE event_id = $1 AND published_at IS NOT NULL`, sweptEvent); n != 0 {
		t.Fatal("the swept intent was marked published before the inbox held it")
	}
	if deadline, _ := rctx.Deadline(); time.Now().After(deadline) {
		t.Fatalf("the run outlived its deadline (%s)", elapsed)
	}
	t.Logf("in %s: %d of %d backlog payments settled, refund retried, %d intents swept, notifications finished",
		elapsed.Round(time.Millisecond), rep.Succeeded, backlog, rep.Sweep.Found)
}
