package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/refund"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

type refundAnswer struct {
	Object    string `json:"object"`
	PaymentID string `json:"payment_id"`
	State     string `json:"state"`
	Amount    int64  `json:"amount"`
	PSPRefund string `json:"psp_refund"`
	Type      string `json:"type"`
}

func mustRefund(t *testing.T, r api.Response, status int) refundAnswer {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status = %d, want %d; body %s", r.Status, status, r.Body)
	}
	var a refundAnswer
	if err := json.Unmarshal(r.Body, &a); err != nil {
		t.Fatalf("answer %d %q: %v", r.Status, r.Body, err)
	}
	return a
}

func refundRow(t *testing.T, w *worldtest.World, pid string) ledger.Refund {
	t.Helper()
	r, err := w.Ledger.GetRefund(context.Background(), pid)
	if err != nil {
		t.Fatalf("refund of %s: %v", pid, err)
	}
	return r
}

// The journal of a payment nets to zero per account once it is refunded.
func expectJournalReversed(t *testing.T, w *worldtest.World, pid string) {
	t.Helper()
	if n := w.Count(`SELECT count(*) FROM journal_entries WHERE payment_id = $1 AND posting = 'refund'`, pid); n != 2 {
		t.Fatalf("refund journal entries = %d, want 2", n)
	}
	if n := w.Count(`SELECT count(*) FROM (SELECT account FROM journal_entries WHERE payment_id = $1
		GROUP BY account HAVING sum(amount) <> 0) x`, pid); n != 0 {
		t.Fatalf("%d accounts do not net to zero after the refund", n)
	}
}

func TestRefundOfASucceededPaymentRefundsOnceAndItsRepeatReplays(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	pid := ids.PaymentID(ids.Scope("u1", "K1"))
	mustAnswer(t, w.Pay("u1", "K1", worldtest.Body3000), http.StatusCreated)

	first := w.Refund("u1", "K1", "RK1")
	a := mustRefund(t, first, http.StatusCreated)
	if a.Object != "refund" || a.State != "SUCCEEDED" || a.PaymentID != pid || a.Amount != 3000 || a.PSPRefund == "" {
		t.Fatalf("refund answer = %+v", a)
	}
	again := w.Refund("u1", "K1", "RK1")
	if again.Status != http.StatusCreated || string(again.Body) != string(first.Body) || again.Headers.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("repeat = %d %s replayed=%q", again.Status, again.Body, again.Headers.Get("Idempotent-Replayed"))
	}
	rf := w.Sim.Refunds()
	if len(rf) != 1 || rf[0].IdempotencyKey != ids.RefundKey(pid) || rf[0].Amount != 3000 || rf[0].ID != a.PSPRefund {
		t.Fatalf("PSP refunds = %+v, want one under %s", rf, ids.RefundKey(pid))
	}
	if row := refundRow(t, w, pid); row.State != ledger.RefundSucceeded || row.Attempts != 0 || row.PSPPaymentIntent == "" {
		t.Fatalf("refund row = %+v", row)
	}
	expectJournalReversed(t, w, pid)
}

// Concurrent copies of one refund request: one refund at the PSP.
func TestConcurrentCopiesOfARefundRequestMakeOneRefund(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	mustAnswer(t, w.Pay("u1", "K1", worldtest.Body3000), http.StatusCreated)
	const n = 16
	answers := make([]api.Response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); <-start; answers[i] = w.Refund("u1", "K1", "RK1") }()
	}
	close(start)
	wg.Wait()
	created := 0
	for _, r := range answers {
		switch r.Status {
		case http.StatusCreated:
			created++
		case http.StatusConflict: // the first copy still running
		default:
			t.Errorf("answer %d %s", r.Status, r.Body)
		}
	}
	if created == 0 || len(w.Sim.Refunds()) != 1 {
		t.Fatalf("%d copies got the refund, the PSP made %d refunds; want >= 1 and exactly 1", created, len(w.Sim.Refunds()))
	}
}

// The refund's own key has the payment key's semantics: reused for another
// payment it is 422 and nothing runs; a second refund key for a payment that
// already has a refund is 409.
func TestRefundKeySemantics(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	mustAnswer(t, w.Pay("u1", "K1", worldtest.Body3000), http.StatusCreated)
	mustAnswer(t, w.Pay("u1", "K2", worldtest.Body3000), http.StatusCreated)
	mustRefund(t, w.Refund("u1", "K1", "RK1"), http.StatusCreated)

	if a := mustRefund(t, w.Refund("u1", "K2", "RK1"), http.StatusUnprocessableEntity); !strings.HasSuffix(a.Type, "/key-reused") {
		t.Fatalf("refund key reused for another payment: type %q", a.Type)
	}
	if a := mustRefund(t, w.Refund("u1", "K1", "RK2"), http.StatusConflict); a.Type != api.TypeRefundExists {
		t.Fatalf("second refund key for K1: type %q", a.Type)
	}
	if n := len(w.Sim.Refunds()); n != 1 {
		t.Fatalf("PSP refunds = %d, want 1", n)
	}
	if n := w.Count(`SELECT count(*) FROM refunds`); n != 1 {
		t.Fatalf("refund rows = %d", n)
	}
	// Another caller's refund key space is its own, and it cannot refund u1's payment.
	if r := w.Refund("u2", "K1", "RK1"); r.Status != http.StatusNotFound {
		t.Fatalf("u2 refunding u1's K1 = %d %s", r.Status, r.Body)
	}
	if r := w.Refund("u1", "K1", ""); r.Status != http.StatusBadRequest {
		t.Fatalf("no refund key = %d", r.Status)
	}
}

// Only a SUCCEEDED payment can be refunded: a declined, an UNKNOWN or a
// voided one is 409 and nothing runs; an unknown key is 404.
func TestOnlyASucceededPaymentCanBeRefunded(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	declined := strings.Replace(worldtest.Body3000, "pm_card_visa", "pm_card_chargeDeclined", 1)
	mustAnswer(t, w.Pay("u1", "KD", declined), http.StatusPaymentRequired)
	pidU := ids.PaymentID(ids.Scope("u1", "KU"))
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.ChargeKey(pidU)}, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
		t.Fatal(err)
	}
	mustAnswer(t, w.Pay("u1", "KU", worldtest.Body3000), http.StatusAccepted)
	mustAnswer(t, w.Resolve("u1", "KV"), http.StatusOK)

	for _, key := range []string{"KD", "KU", "KV"} {
		if a := mustRefund(t, w.Refund("u1", key, "R-"+key), http.StatusConflict); a.Type != api.TypeNotRefundable {
			t.Errorf("refund of %s: type %q", key, a.Type)
		}
	}
	if r := w.Refund("u1", "K-none", "R-none"); r.Status != http.StatusNotFound {
		t.Errorf("refund of an unknown key = %d", r.Status)
	}
	if n := w.Count(`SELECT count(*) FROM refunds`); n != 0 || len(w.Sim.Refunds()) != 0 {
		t.Fatalf("refund rows %d, PSP refunds %d: a refused refund ran", n, len(w.Sim.Refunds()))
	}
}

// A compensation that times out (docs/mechanism.md#refunds): the refund
// call's reply is lost. That is UNKNOWN (202), not a failure; the resolver
// retries it with the same derived key, the PSP replays its saved refund, and
// there is one refund in all.
func TestARefundThatTimesOutIsUnknownAndTheResolverRetriesItWithTheSameKey(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	pid := ids.PaymentID(ids.Scope("u1", "K1"))
	mustAnswer(t, w.Pay("u1", "K1", worldtest.Body3000), http.StatusCreated)
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.RefundKey(pid)}, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
		t.Fatal(err)
	}
	first := w.Refund("u1", "K1", "RK1")
	if a := mustRefund(t, first, http.StatusAccepted); a.State != "PROCESSING" || first.Headers.Get("Location") != "/payments/K1/refund" {
		t.Fatalf("timed-out refund = %+v, Location %q", a, first.Headers.Get("Location"))
	}
	row := refundRow(t, w, pid)
	if row.State != ledger.RefundUnknown || row.Attempts != 1 {
		t.Fatalf("refund row = %+v, want UNKNOWN after 1 attempt", row)
	}
	// The PSP did refund; only its reply was lost.
	if n := len(w.Sim.Refunds()); n != 1 {
		t.Fatalf("PSP refunds = %d", n)
	}
	// A repeat meanwhile says "processing", from the row.
	if a := mustRefund(t, w.Refund("u1", "K1", "RK1"), http.StatusAccepted); a.State != "PROCESSING" {
		t.Fatalf("repeat while UNKNOWN = %+v", a)
	}

	rep, err := w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{}).Run(context.Background())
	if err != nil || rep.Refunds.Claimed != 1 || rep.Refunds.Succeeded != 1 {
		t.Fatalf("resolver run = %+v, %v", rep, err)
	}
	rf := w.Sim.Refunds()
	if len(rf) != 1 || rf[0].IdempotencyKey != ids.RefundKey(pid) {
		t.Fatalf("PSP refunds = %+v, want exactly one, under %s", rf, ids.RefundKey(pid))
	}
	if row := refundRow(t, w, pid); row.State != ledger.RefundSucceeded || row.PSPRefund != rf[0].ID {
		t.Fatalf("refund row = %+v", row)
	}
	expectJournalReversed(t, w, pid)
	if a := mustRefund(t, w.Refund("u1", "K1", "RK1"), http.StatusCreated); a.PSPRefund != rf[0].ID {
		t.Fatalf("repeat after the retry = %+v", a)
	}
}

// A refund whose every answer stays open (the PSP saved a 500 under its key,
// and replays it) is retried on its backoff schedule — never before it is
// due — always with the same key; after the budget each open attempt alerts
// (metric RefundStuck, an error log), and the state stays UNKNOWN: never a
// guess.
func TestAStuckRefundIsRetriedOnScheduleThenAlertsAndStaysUnknown(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	w := worldtest.New(t, worldtest.Options{WrapSim: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && r.URL.Path == "/v1/refunds" {
				mu.Lock()
				keys = append(keys, r.Header.Get("Idempotency-Key"))
				mu.Unlock()
			}
			h.ServeHTTP(rw, r)
		})
	}})
	pid := ids.PaymentID(ids.Scope("u1", "K1"))
	mustAnswer(t, w.Pay("u1", "K1", worldtest.Body3000), http.StatusCreated)
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.RefundKey(pid)}, Kind: pspsim.FaultError5xx}); err != nil {
		t.Fatal(err)
	}
	mustRefund(t, w.Refund("u1", "K1", "RK1"), http.StatusAccepted)

	cfg := w.ResolverConfig()
	cfg.Refund = refund.Backoff{Base: time.Minute, Max: 4 * time.Minute, Budget: 4}
	res := w.Resolver(cfg, worldtest.ResolverOptions{})
	run := func() {
		t.Helper()
		if _, err := res.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	type step struct {
		advance      time.Duration
		wantAttempts int
		wantStuck    float64
	}
	for i, s := range []step{
		{0, 2, 0},                // the API's attempt left it due at once
		{0, 2, 0},                // not due yet: untouched
		{59 * time.Second, 2, 0}, // still not due (Delay(2) = 2 min)
		{61 * time.Second, 3, 0}, // due
		{4 * time.Minute, 4, 1},  // Delay(3) = 4 min; budget reached: alert
		{4 * time.Minute, 5, 2},  // capped at 4 min; alerts go on
	} {
		w.Clock.Advance(s.advance)
		run()
		row := refundRow(t, w, pid)
		if row.Attempts != s.wantAttempts || row.State != ledger.RefundUnknown {
			t.Fatalf("step %d: refund row attempts %d state %s, want %d UNKNOWN", i, row.Attempts, row.State, s.wantAttempts)
		}
		if got := w.Metric("RefundStuck"); got != s.wantStuck {
			t.Fatalf("step %d: RefundStuck = %v, want %v", i, got, s.wantStuck)
		}
	}
	if row := refundRow(t, w, pid); row.AlertedAt.IsZero() {
		t.Fatal("the alert was not stamped")
	}
	if !strings.Contains(string(w.Logs.Bytes()), `"alert":"RefundStuck"`) {
		t.Fatal("no error log carries the alert")
	}
	if n := len(w.Sim.Refunds()); n != 0 {
		t.Fatalf("PSP refunds = %d: the saved 500 did nothing", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 5 {
		t.Fatalf("%d refund calls, want 5 (one per attempt)", len(keys))
	}
	for _, k := range keys {
		if k != ids.RefundKey(pid) {
			t.Fatalf("refund call with key %q, want %q every time", k, ids.RefundKey(pid))
		}
	}
}
