package api_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

// resolveAnswer is the JSON of an answer (payment or problem).
type resolveAnswer struct {
	PaymentID string `json:"payment_id"`
	State     string `json:"state"`
	PSPCharge string `json:"psp_charge"`
	Type      string `json:"type"`
}

func mustAnswer(t *testing.T, r api.Response, status int) resolveAnswer {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status = %d, want %d; body %s", r.Status, status, r.Body)
	}
	var a resolveAnswer
	if err := json.Unmarshal(r.Body, &a); err != nil {
		t.Fatalf("answer %d %q: %v", r.Status, r.Body, err)
	}
	return a
}

// The resolve call (docs/mechanism.md#seed-part-4): an absent key is voided
// in BOTH stores, and a late original with it gets 409 with no PSP call —
// also after the key record's window, when only the ledger's VOID row under
// UNIQUE (caller, key) is left to answer.
func TestResolveVoidsAnAbsentKeyAndTheLateOriginalGets409EvenAfterTheWindow(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	pid := ids.PaymentID(ids.Scope("u1", "K1"))

	r := w.Resolve("u1", "K1")
	if a := mustAnswer(t, r, http.StatusOK); a.State != "VOID" || a.PaymentID != pid {
		t.Fatalf("resolve = %+v", a)
	}
	if p := w.Row("u1", "K1"); p.State != ledger.Void || p.ID != pid {
		t.Fatalf("ledger row = %+v, want VOID", p)
	}
	if rec, found := w.Record("u1", "K1"); !found || rec.State != idem.Void {
		t.Fatalf("key record = %+v found=%v, want VOID", rec, found)
	}
	// Asking again is the same answer and changes nothing.
	if a := mustAnswer(t, w.Resolve("u1", "K1"), http.StatusOK); a.State != "VOID" {
		t.Fatalf("second resolve = %+v", a)
	}

	// The late original, inside the key window: the VOID record stops it.
	if a := mustAnswer(t, w.Pay("u1", "K1", worldtest.Body3000), http.StatusConflict); !strings.HasSuffix(a.Type, "/key-voided") {
		t.Fatalf("late original: type %q", a.Type)
	}
	// Two hours later the record has expired; the ledger's VOID row answers.
	w.Clock.Advance(2 * time.Hour)
	if _, found := w.Record("u1", "K1"); found {
		t.Fatal("the key record should read as expired")
	}
	if a := mustAnswer(t, w.Pay("u1", "K1", worldtest.Body3000), http.StatusConflict); !strings.HasSuffix(a.Type, "/key-voided") {
		t.Fatalf("late original after the window: type %q", a.Type)
	}
	if n := len(w.Sim.Charges()); n != 0 {
		t.Fatalf("the PSP charged %d times for a voided key", n)
	}
	if n := w.Count(`SELECT count(*) FROM payments`); n != 1 {
		t.Fatalf("%d payments rows, want the one VOID row", n)
	}
	// And resolve, after the window, still says VOID.
	if a := mustAnswer(t, w.Resolve("u1", "K1"), http.StatusOK); a.State != "VOID" {
		t.Fatalf("resolve after the window = %+v", a)
	}
}

// Found: the payment's own state — "still confirming" (202 PROCESSING)
// while PENDING or UNKNOWN, the final answer once final. Resolve never
// voids a key that has a payment.
func TestResolveReportsAKnownPaymentsState(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	paid := w.Pay("u1", "K1", worldtest.Body3000)
	mustAnswer(t, paid, http.StatusCreated)
	r := w.Resolve("u1", "K1")
	if r.Status != http.StatusCreated || string(r.Body) != string(paid.Body) {
		t.Fatalf("resolve of a succeeded payment = %d %s, want the payment's answer %s", r.Status, r.Body, paid.Body)
	}

	pid2 := ids.PaymentID(ids.Scope("u1", "K2"))
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.ChargeKey(pid2)}, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
		t.Fatal(err)
	}
	mustAnswer(t, w.Pay("u1", "K2", worldtest.Body3000), http.StatusAccepted)
	if a := mustAnswer(t, w.Resolve("u1", "K2"), http.StatusAccepted); a.State != "PROCESSING" || a.PaymentID != pid2 {
		t.Fatalf("resolve of an UNKNOWN payment = %+v", a)
	}
	if p := w.Row("u1", "K2"); p.State != ledger.Unknown {
		t.Fatalf("resolve changed an UNKNOWN row: %s", p.State)
	}

	declined := strings.Replace(worldtest.Body3000, "pm_card_visa", "pm_card_chargeDeclined", 1)
	mustAnswer(t, w.Pay("u1", "K3", declined), http.StatusPaymentRequired)
	if a := mustAnswer(t, w.Resolve("u1", "K3"), http.StatusPaymentRequired); a.State != "FAILED" {
		t.Fatalf("resolve of a declined payment = %+v", a)
	}
	if n := len(w.Sim.Charges()); n != 2 {
		t.Fatalf("charges = %d, want 2", n)
	}
}

// The scope is the caller's: resolving someone else's key looks at (and
// voids) only the caller's own scope.
func TestResolveSeesOnlyTheCallersOwnKey(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	u1 := mustAnswer(t, w.Pay("u1", "K1", worldtest.Body3000), http.StatusCreated)
	u2 := mustAnswer(t, w.Resolve("u2", "K1"), http.StatusOK)
	if u2.State != "VOID" || u2.PaymentID == u1.PaymentID {
		t.Fatalf("u2's resolve of K1 = %+v (u1's payment %s)", u2, u1.PaymentID)
	}
	if p := w.Row("u1", "K1"); p.State != ledger.Succeeded {
		t.Fatalf("u1's payment became %s", p.State)
	}
}

func TestResolveAndRefundRoutes(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	for _, tc := range []struct {
		method, path, caller string
		status               int
	}{
		{http.MethodGet, "/payments/K1/resolve", "u1", http.StatusMethodNotAllowed},
		{http.MethodPost, "/payments/K1/resolve", "", http.StatusUnauthorized},
		{http.MethodPost, "/payments/K1/cancel", "u1", http.StatusNotFound},
		{http.MethodPost, "/payments//resolve", "u1", http.StatusNotFound},
		{http.MethodPost, "/payments/K1", "u1", http.StatusNotFound},
	} {
		r := w.Call(tc.method, tc.path, tc.caller, "", "")
		if r.Status != tc.status || !strings.HasPrefix(r.Headers.Get("Content-Type"), "application/problem+json") {
			t.Errorf("%s %s as %q = %d %s, want %d problem+json", tc.method, tc.path, tc.caller, r.Status, r.Body, tc.status)
		}
	}
	if n := w.Count(`SELECT count(*) FROM payments`); n != 0 {
		t.Fatalf("a refused call wrote %d rows", n)
	}
}

// The insert-if-absent races fairly with a late original's claim: whichever
// gets the unique row first wins (docs/mechanism.md#seed-part-4). Fifty
// rounds of a resolve and an original with the same new key, started together
// with a little random skew: each round exactly one wins. Either the original
// runs (one charge; resolve reports it in progress or final) or the void wins
// (resolve says VOID; the original gets 409; no charge). Never both.
func TestResolveRacingALateOriginalExactlyOneWinsEveryRound(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	const rounds = 50
	var originalWon, voidWon int
	for i := range rounds {
		key := fmt.Sprintf("race-%02d", i)
		pid := ids.PaymentID(ids.Scope("u1", key))
		var pay, res api.Response
		var wg sync.WaitGroup
		start := make(chan struct{})
		skew := func() { time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond) }
		wg.Add(2)
		go func() { defer wg.Done(); <-start; skew(); pay = w.Pay("u1", key, worldtest.Body3000) }()
		go func() { defer wg.Done(); <-start; skew(); res = w.Resolve("u1", key) }()
		close(start)
		wg.Wait()

		row := w.Row("u1", key)
		charges := w.Charges(ids.ChargeKey(pid))
		var ra resolveAnswer
		_ = json.Unmarshal(res.Body, &ra)
		if row.State == ledger.Void {
			voidWon++
			var pa resolveAnswer
			_ = json.Unmarshal(pay.Body, &pa)
			if res.Status != http.StatusOK || ra.State != "VOID" || pay.Status != http.StatusConflict ||
				!strings.HasSuffix(pa.Type, "/key-voided") || charges != 0 {
				t.Fatalf("round %d, void won: resolve %d %s, original %d %s, charges %d", i, res.Status, res.Body, pay.Status, pay.Body, charges)
			}
			continue
		}
		originalWon++
		okResolve := (res.Status == http.StatusAccepted && ra.State == "PROCESSING") ||
			(res.Status == http.StatusCreated && ra.State == "SUCCEEDED")
		if pay.Status != http.StatusCreated || !okResolve || charges != 1 || row.State != ledger.Succeeded {
			t.Fatalf("round %d, original won: original %d %s, resolve %d %s, row %s, charges %d",
				i, pay.Status, pay.Body, res.Status, res.Body, row.State, charges)
		}
	}
	t.Logf("%d rounds: the original won %d, the void won %d", rounds, originalWon, voidWon)
	if n := w.Count(`SELECT count(*) FROM payments`); n != rounds {
		t.Fatalf("%d rows for %d keys", n, rounds)
	}
}
