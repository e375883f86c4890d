package resolver_test

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/psp"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

// chargesOf counts the PSP's charges for one payment (our reference in
// their metadata).
func chargesOf(sim *pspsim.Sim, paymentID string) []pspsim.Charge {
	var out []pspsim.Charge
	for _, c := range sim.Charges() {
		if c.Metadata[psp.MetaPaymentID] == paymentID {
			out = append(out, c)
		}
	}
	return out
}

// The key window used to be decided when a run took the row, while the
// call left later: after the rate cap's wait and the rows before it. A
// replay that lands after the PSP pruned the key is a new charge. Two rows
// are taken 2.5 s before their window closes and reach the cap's turn
// 2.8 s and 5.6 s later, past it: one was charged 24 h ago (its replay
// would charge the buyer twice), one never reached the PSP (its replay,
// reply lost, is a charge the look-up after the window cannot see yet, and
// the row would end FAILED psp_no_charge with the card charged). Each is
// looked up by our reference at the moment of the call instead: the first
// settles SUCCEEDED with its original charge, the second stays UNKNOWN
// (NotFound proves nothing while the window may be open) until a run past
// the window fails it, with nothing charged.
func TestAReplayThatWouldLandAfterTheKeyWindowIsALookUpInstead(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	// A PSP that forgets a key the moment its 24 h are up (Stripe promises
	// no more), whose search lags a minute behind its writes.
	sim := pspsim.New(pspsim.Config{KeyPruneJitter: -1, SearchLag: time.Minute,
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	srv := httptest.NewServer(sim)
	t.Cleanup(func() { srv.Close(); sim.Close() })
	w.Sim, w.SimURL = sim, srv.URL
	w.PSP = w.NewPSP(nil)

	// Taken first, it uses the rate cap's one token at once.
	first := insertOpen(t, w, "u1", "K-first", "UNKNOWN", time.Minute)
	const left = 2500 * time.Millisecond // the window's time left when the rows are written
	charged := ids.PaymentID(ids.Scope("u1", "K-charged"))
	// The owner's call, field for field the request a replay of the row sends.
	orig, err := w.PSP.Charge(ctx, psp.ChargeRequest{IdempotencyKey: ids.ChargeKey(charged), PaymentID: charged, MerchantID: "m1",
		CallerID: "u1", ClientKey: "K-charged", Fingerprint: "H", Amount: 3000, Currency: "USD", PaymentMethod: "pm_card_visa"})
	if err != nil || orig.Outcome != psp.Succeeded {
		t.Fatalf("original charge: %+v %v", orig, err)
	}
	insertOpen(t, w, "u1", "K-charged", "UNKNOWN", 24*time.Hour-left)
	never := insertOpen(t, w, "u1", "K-never", "UNKNOWN", 24*time.Hour-left)
	// The PSP's clock agrees: its key is as old as the row (a hair older).
	sim.Advance(24*time.Hour - left)
	// A replay of the never-charged row would lose its reply.
	if err := sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.ChargeKey(never)}, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
		t.Fatal(err)
	}
	// Taken in this order: fewest attempts, then the oldest deadline.
	if _, err := w.Pool.Exec(ctx, `UPDATE payments SET deadline_at = deadline_at + CASE client_key
		WHEN 'K-charged' THEN interval '10 seconds' ELSE interval '20 seconds' END
		WHERE client_key IN ('K-charged', 'K-never')`); err != nil {
		t.Fatal(err)
	}

	cfg := w.ResolverConfig()
	// 0.4 calls/s (a token every 2.8 s), one row at a time: the late rows
	// wait 2.8 s and 5.6 s for their turn.
	cfg.PSPRate, cfg.Concurrency, cfg.CallTimeout, cfg.Limit, cfg.RefundLimit = 0.4, 1, time.Second, 10, 1
	rep := run(t, w.Resolver(cfg, worldtest.ResolverOptions{}))

	if got := chargesOf(sim, charged); len(got) != 1 {
		t.Fatalf("charges for the row charged 24 h ago = %+v: its replay landed after the PSP pruned the key and charged anew", got)
	}
	if p := w.Row("u1", "K-charged"); p.State != ledger.Succeeded || p.PSPCharge != orig.ChargeID {
		t.Fatalf("charged row = %s %q, want SUCCEEDED with the original %s", p.State, p.PSPCharge, orig.ChargeID)
	}
	if got := chargesOf(sim, never); len(got) != 0 {
		t.Fatalf("charges for the never-charged row = %+v: a replay after the window charged it", got)
	}
	if p := w.Row("u1", "K-never"); p.State != ledger.Unknown {
		t.Fatalf("never-charged row = %s %q, want UNKNOWN while the window may be open", p.State, p.DeclineCode)
	}
	if p := w.Row("u1", "K-first"); p.State != ledger.Succeeded || len(chargesOf(sim, first)) != 1 {
		t.Fatalf("first row = %s with %d charges", p.State, len(chargesOf(sim, first)))
	}
	if rep.Claimed != 3 || rep.Succeeded != 2 || rep.Open != 1 || rep.PSPCalls != 3 {
		t.Fatalf("report = %+v, want 3 taken, 2 settled, 1 open, one call each", rep)
	}

	// A run past the window: NotFound is now proof, and nothing was charged.
	rep = run(t, w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{}))
	if rep.Claimed != 1 || rep.Failed != 1 {
		t.Fatalf("run past the window = %+v", rep)
	}
	if p := w.Row("u1", "K-never"); p.State != ledger.Failed || p.DeclineCode != "psp_no_charge" || len(chargesOf(sim, never)) != 0 {
		t.Fatalf("never-charged row = %s %q with %d charges, want FAILED psp_no_charge and none",
			p.State, p.DeclineCode, len(chargesOf(sim, never)))
	}
}
