package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

// Issue 13 defect 7: the owner charged and died; the buyer comes back a day
// later, past the PSP's 24 h key window (the simulator has forgotten the
// key). A replay of <payment_id>:charge there is a new charge. The takeover
// must leave it to the resolver's look-up: UNKNOWN behind a pointer, 202;
// the resolver finds the owner's charge by our reference.
func TestTakeoverPastPSPKeyWindowLooksUp(t *testing.T) {
	w := newWorld(t)
	pid := crashAfterCharging(t, w, "K1")
	day := 25 * time.Hour
	w.clock.Advance(day)
	w.sim.Advance(day)
	// The database's clock stamped created_at; age the row the same day.
	if _, err := w.pool.Exec(context.Background(), `UPDATE payments SET created_at = created_at - interval '25 hours' WHERE payment_id = $1`, pid); err != nil {
		t.Fatal(err)
	}

	r := w.pay("u1", "K1", body3000)
	if a := expectStatus(t, r, http.StatusAccepted); a.State != "PROCESSING" {
		t.Fatalf("takeover answer = %+v", a)
	}
	if n := len(w.charges()); n != 1 {
		t.Fatalf("charges = %d: the expired key was replayed into a new charge", n)
	}
	if p := w.row("u1", "K1"); p.State != ledger.Unknown {
		t.Fatalf("row = %s, want UNKNOWN for the resolver's look-up", p.State)
	}
	if rec, found := w.record("u1", "K1"); !found || rec.State != idem.Completed || !rec.Pointer {
		t.Fatalf("key record = %+v found=%v, want a pointer", rec, found)
	}
	if got := w.wt.Metric("TakeoverPastPSPKeyWindow"); got != 1 {
		t.Fatalf("TakeoverPastPSPKeyWindow = %v", got)
	}

	rep, err := w.wt.Resolver(w.wt.ResolverConfig(), worldtest.ResolverOptions{}).Run(context.Background())
	if err != nil || rep.Succeeded != 1 {
		t.Fatalf("resolver = %+v, %v", rep, err)
	}
	ch := w.charges()
	if p := w.row("u1", "K1"); len(ch) != 1 || p.State != ledger.Succeeded || p.PSPCharge != ch[0].ID {
		t.Fatalf("row %s %q, charges %+v", p.State, p.PSPCharge, ch)
	}
	if got := w.intents(pid); len(got) != 1 || got[0] != ids.EventID(pid, "SUCCEEDED") {
		t.Fatalf("outbox intents = %v", got)
	}
	again := w.pay("u1", "K1", body3000)
	if a := expectStatus(t, again, http.StatusCreated); a.PSPCharge != ch[0].ID {
		t.Fatalf("repeat = %+v", a)
	}
}
