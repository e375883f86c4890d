package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/metrics"
)

func TestFirstPaymentChargesOnceAndTheRepeatReplays(t *testing.T) {
	w := newWorld(t)
	first := w.pay("u1", "K1", body3000)
	a := expectStatus(t, first, http.StatusCreated)
	if a.State != "SUCCEEDED" || a.Amount != 3000 || a.PSPCharge == "" || replayedHeader(first) {
		t.Fatalf("first answer = %+v replayed=%v", a, replayedHeader(first))
	}
	if a.PaymentID != ids.PaymentID(ids.Scope("u1", "K1")) {
		t.Fatalf("payment id %q is not derived from the scope", a.PaymentID)
	}
	second := w.pay("u1", "K1", body3000)
	if second.Status != http.StatusCreated || string(second.Body) != string(first.Body) || !replayedHeader(second) {
		t.Fatalf("repeat = %d %s replayed=%v", second.Status, second.Body, replayedHeader(second))
	}
	ch := w.charges()
	if len(ch) != 1 || ch[0].IdempotencyKey != a.PaymentID+":charge" || ch[0].Amount != 3000 {
		t.Fatalf("charges = %+v", ch)
	}
	if n := w.countRows(`SELECT count(*) FROM outbox_intents WHERE event_id = $1`, a.PaymentID+":SUCCEEDED"); n != 1 {
		t.Fatalf("outbox intents = %d", n)
	}
}

// TestBothFormsOfTheKeyNameOneScope (issue 17 item 9): the IETF draft's
// structured-field form `"K1"` and Stripe's bare `K1` are one key, so a
// retry that changes form replays; a malformed structured value is a 400
// that runs nothing.
func TestBothFormsOfTheKeyNameOneScope(t *testing.T) {
	w := newWorld(t)
	first := w.pay("u1", `"K1"`, body3000)
	a := expectStatus(t, first, http.StatusCreated)
	if a.PaymentID != ids.PaymentID(ids.Scope("u1", "K1")) {
		t.Fatalf("the quoted key's payment %q is not K1's", a.PaymentID)
	}
	for _, k := range []string{"K1"} {
		again := w.pay("u1", k, body3000)
		if again.Status != http.StatusCreated || string(again.Body) != string(first.Body) || !replayedHeader(again) {
			t.Errorf("retry with %q: %d %s replayed=%v, want the replay", k, again.Status, again.Body, replayedHeader(again))
		}
	}
	for _, k := range []string{`"K2`, `"K2";v=1`, `"K2", "K3"`, `"K 2"`, ` "K2"`} {
		r := w.pay("u1", k, body3000)
		if r.Status != http.StatusBadRequest || r.Headers.Get("Content-Type") != "application/problem+json" {
			t.Errorf("key %q: %d %s, want a 400 problem", k, r.Status, r.Body)
		}
	}
	if n := len(w.charges()); n != 1 {
		t.Errorf("%d charges, want 1", n)
	}
	if n := w.countRows(`SELECT count(*) FROM payments`); n != 1 {
		t.Errorf("%d payment rows, want 1", n)
	}
}

func TestSixtyFourConcurrentDuplicatesMakeOneCharge(t *testing.T) {
	w := newWorld(t)
	w.timing = config.Default() // 64 requests share one process's small pool: give them the real deadline
	w.rebuild()
	// A slow PSP keeps the first request in flight while the others arrive.
	if err := w.sim.AddFault(pspsim.Fault{Kind: pspsim.FaultSlow, DelayMS: 150}); err != nil {
		t.Fatal(err)
	}
	const n = 64
	answers := make([]api.Response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i] = w.pay("u1", "K64", body3000)
		}()
	}
	close(start)
	wg.Wait()
	var final string
	var created, conflicts int
	for _, r := range answers {
		switch r.Status {
		case http.StatusCreated:
			created++
			if final == "" {
				final = string(r.Body)
			} else if string(r.Body) != final {
				t.Errorf("two different final answers:\n%s\n%s", final, r.Body)
			}
		case http.StatusConflict:
			conflicts++
			if r.Headers.Get("Retry-After") == "" {
				t.Error("409 without Retry-After")
			}
		default:
			t.Errorf("unexpected answer %d %s", r.Status, r.Body)
		}
	}
	if created == 0 {
		t.Fatal("no request got the final answer")
	}
	if got := len(w.charges()); got != 1 {
		t.Fatalf("PSP charges = %d, want 1", got)
	}
	if got := w.countRows(`SELECT count(*) FROM payments`); got != 1 {
		t.Fatalf("payments rows = %d, want 1", got)
	}
	t.Logf("64 duplicates: %d final answers, %d in progress", created, conflicts)
}

func TestReorderedBodyReplaysAndAChangedAmountIs422(t *testing.T) {
	w := newWorld(t)
	first := w.pay("u1", "K1", body3000)
	expectStatus(t, first, http.StatusCreated)
	before, _ := w.record("u1", "K1")

	reordered := `{ "payment_method": "pm_card_visa", "currency": "USD", "client_ts": "2026-11-30T12:00:01Z",
	  "amount": 3000, "order_id": "42", "merchant_id": "m1" }`
	again := w.pay("u1", "K1", reordered)
	if again.Status != http.StatusCreated || string(again.Body) != string(first.Body) || !replayedHeader(again) {
		t.Fatalf("reordered body: %d %s", again.Status, again.Body)
	}
	// Side trace 3d: the same key with 3,500. The claim fails and the
	// record it returns (ALL_OLD) carries the other fingerprint.
	reuse := w.pay("u1", "K1", strings.Replace(body3000, "3000", "3500", 1))
	if a := expectStatus(t, reuse, http.StatusUnprocessableEntity); !strings.HasSuffix(a.Type, "/key-reused") {
		t.Fatalf("422 type = %q", a.Type)
	}
	if reuse.Headers.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("content type %q", reuse.Headers.Get("Content-Type"))
	}
	after, _ := w.record("u1", "K1")
	if after.Fingerprint != before.Fingerprint || after.Owner != before.Owner || !after.ExpiresAt.Equal(before.ExpiresAt) {
		t.Fatalf("the key record changed: %+v -> %+v", before, after)
	}
	if got := len(w.charges()); got != 1 {
		t.Fatalf("charges = %d", got)
	}
	if p := w.row("u1", "K1"); p.Amount != 3000 {
		t.Fatalf("row amount = %d", p.Amount)
	}
}

func TestLostReplyAnswers202AndThePointerRendersTheRowAsItStands(t *testing.T) {
	w := newWorld(t)
	pid := ids.PaymentID(ids.Scope("u1", "K1"))
	// The PSP charges, then holds its reply past our deadline.
	if err := w.sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.ChargeKey(pid)}, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
		t.Fatal(err)
	}
	first := w.pay("u1", "K1", body3000)
	a := expectStatus(t, first, http.StatusAccepted)
	if a.State != "PROCESSING" || first.Headers.Get("Location") != "/payments/K1/resolve" {
		t.Fatalf("202 answer = %+v location %q", a, first.Headers.Get("Location"))
	}
	if p := w.row("u1", "K1"); p.State != ledger.Unknown {
		t.Fatalf("row state = %s, want UNKNOWN", p.State)
	}
	rec, _ := w.record("u1", "K1")
	if rec.State != idem.Completed || !rec.Pointer || rec.Answer != nil {
		t.Fatalf("key record = %+v, want a pointer", rec)
	}
	if got := len(w.charges()); got != 1 {
		t.Fatalf("the simulator charged %d times, want 1 (the reply was lost, not the charge)", got)
	}
	// The retry at 10.00 hears "processing", rendered from the row.
	w.clock.Advance(10 * time.Second)
	retry := w.pay("u1", "K1", body3000)
	if expectStatus(t, retry, http.StatusAccepted).State != "PROCESSING" || !replayedHeader(retry) {
		t.Fatalf("retry = %d %s", retry.Status, retry.Body)
	}
	// Once the row is SUCCEEDED (the resolver's job), the same retry renders
	// SUCCEEDED, and the key record is not rewritten.
	if _, _, moved, err := w.ledger.Settle(context.Background(), pid, ledger.Outcome{State: ledger.Succeeded, PSPCharge: w.charges()[0].ID}, w.clock.Now()); err != nil || !moved {
		t.Fatalf("settle: moved=%v err=%v", moved, err)
	}
	done := w.pay("u1", "K1", body3000)
	if expectStatus(t, done, http.StatusCreated).State != "SUCCEEDED" || !replayedHeader(done) {
		t.Fatalf("after settle = %d %s", done.Status, done.Body)
	}
	rec2, _ := w.record("u1", "K1")
	if !rec2.Pointer || rec2.Answer != nil || !rec2.ExpiresAt.Equal(rec.ExpiresAt) {
		t.Fatalf("the pointer was rewritten: %+v -> %+v", rec, rec2)
	}
	if got := len(w.charges()); got != 1 {
		t.Fatalf("charges = %d", got)
	}
}

// Beat 3a: the owner dies after writing the intent (before the PSP call, or
// after the PSP charged). After lease + margin a repeat takes over, checks
// the row, replays the derived PSP key and answers; one charge either way.
func TestCrashedOwnerIsTakenOverAfterLeaseAndMargin(t *testing.T) {
	for _, tc := range []struct {
		name        string
		crashPoint  func(h *api.Hooks, f func(context.Context) error)
		chargedByA1 int
	}{
		{"after the PENDING insert", func(h *api.Hooks, f func(context.Context) error) { h.AfterPendingInsert = f }, 0},
		{"after the PSP charged", func(h *api.Hooks, f func(context.Context) error) { h.AfterPSPReply = f }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			crashed := false
			tc.crashPoint(&w.hooks, func(context.Context) error {
				if !crashed {
					crashed = true
					return api.ErrCrash
				}
				return nil
			})
			w.rebuild()
			if r := w.pay("u1", "K1", body3000); r.Status != http.StatusInternalServerError {
				t.Fatalf("crashed request answered %d", r.Status)
			}
			if p := w.row("u1", "K1"); p.State != ledger.Pending {
				t.Fatalf("row = %s", p.State)
			}
			if got := len(w.charges()); got != tc.chargedByA1 {
				t.Fatalf("charges before takeover = %d", got)
			}
			// Inside the lease (+ margin): 409 with Retry-After.
			w.clock.Advance(w.timing.Deadline)
			early := w.pay("u1", "K1", body3000)
			if early.Status != http.StatusConflict || early.Headers.Get("Retry-After") == "" {
				t.Fatalf("repeat inside the lease = %d %v", early.Status, early.Headers)
			}
			w.clock.Advance(w.timing.Margin + time.Millisecond)
			late := w.pay("u1", "K1", body3000)
			if a := expectStatus(t, late, http.StatusCreated); a.State != "SUCCEEDED" {
				t.Fatalf("takeover answer = %+v", a)
			}
			ch := w.charges()
			if len(ch) != 1 || ch[0].IdempotencyKey != ids.ChargeKey(ids.PaymentID(ids.Scope("u1", "K1"))) {
				t.Fatalf("charges = %+v, want exactly one under the derived key", ch)
			}
			if p := w.row("u1", "K1"); p.State != ledger.Succeeded || p.PSPCharge == "" {
				t.Fatalf("row = %+v", p)
			}
		})
	}
}

// Beat 3c: the owner freezes after the PSP answered; a repeat takes over and
// finishes; the zombie wakes, its completion is refused, and it answers what
// the record holds. One charge.
func TestPausedOwnerCannotComplete(t *testing.T) {
	w := newWorld(t)
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	w.hooks.AfterPSPReply = func(context.Context) error {
		first := false
		once.Do(func() { first = true })
		if first {
			close(paused)
			<-resume
		}
		return nil
	}
	w.rebuild()
	zombie := make(chan api.Response)
	go func() { zombie <- w.pay("u1", "K1", body3000) }()
	<-paused
	firstOwner, _ := w.record("u1", "K1")

	w.clock.Advance(w.timing.Deadline + w.timing.Margin + time.Second)
	taker := w.pay("u1", "K1", body3000)
	want := expectStatus(t, taker, http.StatusCreated)

	close(resume)
	z := <-zombie
	if z.Status != http.StatusCreated || decode(t, z).PaymentID != want.PaymentID || !replayedHeader(z) {
		t.Fatalf("zombie answered %d %s (replayed=%v), want the record's answer", z.Status, z.Body, replayedHeader(z))
	}
	rec, _ := w.record("u1", "K1")
	if rec.Owner == firstOwner.Owner || rec.Answer == nil {
		t.Fatalf("record = %+v: the zombie overwrote it", rec)
	}
	if got := len(w.charges()); got != 1 {
		t.Fatalf("charges = %d", got)
	}
	if p := w.row("u1", "K1"); p.State != ledger.Succeeded {
		t.Fatalf("row = %s", p.State)
	}
}

// Snapshot P6: the buyer comes back two hours later. The key record has
// expired but is still present (this table has no TTL); the ledger answers.
func TestExpiredKeyRecordStillPresentIsAnsweredFromTheLedger(t *testing.T) {
	w := newWorld(t)
	first := w.pay("u1", "K1", body3000)
	expectStatus(t, first, http.StatusCreated)
	w.clock.Advance(2 * time.Hour)
	if _, found := w.record("u1", "K1"); found {
		t.Fatal("the record should read as expired")
	}
	back := w.pay("u1", "K1", body3000)
	if back.Status != http.StatusCreated || !replayedHeader(back) || decode(t, back).PaymentID != decode(t, first).PaymentID {
		t.Fatalf("two hours later = %d %s", back.Status, back.Body)
	}
	if got := len(w.charges()); got != 1 {
		t.Fatalf("charges = %d: the expired key reached the PSP", got)
	}
	// The duplicate rewrote the expired record with the final answer.
	if rec, found := w.record("u1", "K1"); !found || rec.Answer == nil {
		t.Fatalf("record after the return = %+v found=%v", rec, found)
	}
}

func TestARequestOlderThanTheDeadlineRunsNothing(t *testing.T) {
	w := newWorld(t)
	r := w.payAt("u1", "K1", body3000, w.clock.Now().Add(-w.timing.Deadline-time.Millisecond))
	if a := expectStatus(t, r, http.StatusServiceUnavailable); !strings.HasSuffix(a.Type, "/deadline-exceeded") {
		t.Fatalf("type = %q", a.Type)
	}
	if _, found := w.record("u1", "K1"); found {
		t.Fatal("a stale request claimed the key")
	}
	if n := w.countRows(`SELECT count(*) FROM payments`); n != 0 {
		t.Fatalf("rows = %d", n)
	}
	if len(w.charges()) != 0 {
		t.Fatal("a stale request reached the PSP")
	}
}

func TestKeyStoreDownThePaymentStillHappensOnce(t *testing.T) {
	w := newWorld(t)
	w.timing = config.Default()
	realClaims := w.claims
	w.claims = idem.NewStore(unreachableDynamo(), "idem")
	w.rebuild()
	if err := w.sim.AddFault(pspsim.Fault{Kind: pspsim.FaultSlow, DelayMS: 150}); err != nil {
		t.Fatal(err)
	}
	const n = 64
	var wg sync.WaitGroup
	answers := make([]api.Response, n)
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); answers[i] = w.pay("u1", "K1", body3000) }()
	}
	wg.Wait()
	created := 0
	for _, r := range answers {
		switch r.Status {
		case http.StatusCreated:
			created++
		case http.StatusConflict:
		default:
			t.Errorf("answer %d %s", r.Status, r.Body)
		}
	}
	if created == 0 || len(w.charges()) != 1 {
		t.Fatalf("created=%d charges=%d, want >=1 and exactly 1", created, len(w.charges()))
	}
	if got := metrics.Sum(w.logs.Bytes(), "KeyStoreDegraded"); got < n {
		t.Fatalf("KeyStoreDegraded = %v, want >= %d", got, n)
	}
	// The key store comes back: a repeat is answered from the ledger.
	w.claims = realClaims
	w.rebuild()
	back := w.pay("u1", "K1", body3000)
	if back.Status != http.StatusCreated || !replayedHeader(back) || len(w.charges()) != 1 {
		t.Fatalf("after recovery = %d %s, charges %d", back.Status, back.Body, len(w.charges()))
	}
}

func TestLedgerDownIs503AndNoPSPCall(t *testing.T) {
	w := newWorld(t)
	w.ledger = unreachableLedger(t)
	w.rebuild()
	r := w.pay("u1", "K1", body3000)
	if a := expectStatus(t, r, http.StatusServiceUnavailable); !strings.HasSuffix(a.Type, "/ledger-unavailable") {
		t.Fatalf("type %q", a.Type)
	}
	if len(w.charges()) != 0 {
		t.Fatal("a PSP call without a durable intent")
	}
	if _, found := w.record("u1", "K1"); found {
		t.Fatal("the claim was not released: a retry would wait out the lease")
	}
}

func TestACallerNeverSeesAnotherCallersKey(t *testing.T) {
	w := newWorld(t)
	u1 := expectStatus(t, w.pay("u1", "K1", body3000), http.StatusCreated)
	r := w.pay("u2", "K1", strings.Replace(body3000, "3000", "5000", 1))
	u2 := expectStatus(t, r, http.StatusCreated)
	if replayedHeader(r) || u2.PaymentID == u1.PaymentID || u2.Amount != 5000 {
		t.Fatalf("u2 got %+v (u1: %+v)", u2, u1)
	}
	if got := len(w.charges()); got != 2 {
		t.Fatalf("charges = %d", got)
	}
}

func TestADeclineIsAStoredFinalAnswer(t *testing.T) {
	w := newWorld(t)
	body := strings.Replace(body3000, "pm_card_visa", "pm_card_chargeDeclined", 1)
	first := w.pay("u1", "K1", body)
	a := expectStatus(t, first, http.StatusPaymentRequired)
	if a.State != "FAILED" || a.DeclineCode == "" {
		t.Fatalf("decline = %+v", a)
	}
	again := w.pay("u1", "K1", body)
	if again.Status != http.StatusPaymentRequired || string(again.Body) != string(first.Body) || !replayedHeader(again) {
		t.Fatalf("repeat = %d %s", again.Status, again.Body)
	}
	if n := w.countRows(`SELECT count(*) FROM journal_entries`); n != 0 {
		t.Fatalf("a decline was journaled")
	}
}

func TestBadInputIs400AndChangesNothing(t *testing.T) {
	w := newWorld(t)
	for _, tc := range []struct{ key, body, field string }{
		{"", body3000, "Idempotency-Key"},
		{"K1", `{"merchant_id":"m1","order_id":"42","amount":-5,"currency":"USD","payment_method":"pm_1"}`, "amount"},
		{"K1", `{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"US","payment_method":"pm_1"}`, "currency"},
		{"K1", `not json`, ""},
	} {
		r := w.pay("u1", tc.key, tc.body)
		a := expectStatus(t, r, http.StatusBadRequest)
		if r.Headers.Get("Content-Type") != "application/problem+json" || (tc.field != "" && a.Field != tc.field) {
			t.Errorf("%q: %s", tc.body, r.Body)
		}
	}
	big := `{"merchant_id":"m1","pad":"` + strings.Repeat("x", 20000) + `"}`
	if r := w.pay("u1", "K1", big); r.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("large body: %d", r.Status)
	}
	if _, found := w.record("u1", "K1"); found {
		t.Fatal("bad input claimed the key")
	}
	if n := w.countRows(`SELECT count(*) FROM payments`); n != 0 || len(w.charges()) != 0 {
		t.Fatal("bad input changed something")
	}
}

// An amount or currency Stripe refuses (under its minimum charge, over
// eight digits, a currency it does not support) is refused at the API: 400
// problem+json naming the field, no key claimed, no payment stored, no PSP
// call. Before, the payment was stored and sent, Stripe answered 400, and
// the key became a stored FAILED answered 502.
func TestAnAmountOrCurrencyThePSPRefusesIs400AndNothingIsStored(t *testing.T) {
	w := newWorld(t)
	for _, tc := range []struct{ body, field string }{
		{`{"merchant_id":"m1","order_id":"42","amount":1,"currency":"USD","payment_method":"pm_card_visa"}`, "amount"},
		{`{"merchant_id":"m1","order_id":"42","amount":49,"currency":"usd","payment_method":"pm_card_visa"}`, "amount"},
		{`{"merchant_id":"m1","order_id":"42","amount":100000000,"currency":"USD","payment_method":"pm_card_visa"}`, "amount"},
		{`{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"XYZ","payment_method":"pm_card_visa"}`, "currency"},
	} {
		r := w.pay("u1", "K1", tc.body)
		a := expectStatus(t, r, http.StatusBadRequest)
		if r.Headers.Get("Content-Type") != "application/problem+json" || a.Field != tc.field {
			t.Errorf("%s: %d %s, want 400 problem+json naming %s", tc.body, r.Status, r.Body, tc.field)
		}
	}
	if _, found := w.record("u1", "K1"); found {
		t.Fatal("a refused amount claimed the key")
	}
	if n := w.countRows(`SELECT count(*) FROM payments`); n != 0 || len(w.charges()) != 0 {
		t.Fatalf("%d payments, %d PSP charges: a refused amount was stored or sent", n, len(w.charges()))
	}
}

func TestAVoidedKeyIs409AndNothingRuns(t *testing.T) {
	w := newWorld(t)
	pid := ids.PaymentID(ids.Scope("u1", "K1"))
	if _, _, err := w.ledger.InsertVoid(context.Background(), pid, "u1", "K1"); err != nil {
		t.Fatal(err)
	}
	r := w.pay("u1", "K1", body3000)
	if a := expectStatus(t, r, http.StatusConflict); !strings.HasSuffix(a.Type, "/key-voided") {
		t.Fatalf("type %q", a.Type)
	}
	if len(w.charges()) != 0 {
		t.Fatal("a voided key reached the PSP")
	}
	// The key record now says VOID too: the next repeat stops there.
	rec, found := w.record("u1", "K1")
	if !found || rec.State != idem.Void {
		t.Fatalf("record = %+v", rec)
	}
	if r := w.pay("u1", "K1", body3000); r.Status != http.StatusConflict {
		t.Fatalf("repeat = %d", r.Status)
	}
}

func TestNoCallerIs401(t *testing.T) {
	w := newWorld(t)
	if r := w.pay("", "K1", body3000); r.Status != http.StatusUnauthorized {
		t.Fatalf("status %d", r.Status)
	}
}

var _ = errors.New

// TestTheWebhookSettlingFirstWithThisRequestsChargeLeavesTheAnswerItsOwn:
// the PSP's event about this request's own charge settles the row between
// the PSP's reply and the api's settle (on the live stack the simulator's
// webhook often wins). The answer is still this request's own result, not
// a replay; a row settled with another outcome is the record's answer.
func TestTheWebhookSettlingFirstWithThisRequestsChargeLeavesTheAnswerItsOwn(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sameCharg bool
	}{{"the same charge", true}, {"another outcome", false}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.hooks.AfterPSPReply = func(ctx context.Context) error {
				ch := w.charges()
				if len(ch) != 1 {
					return fmt.Errorf("%d charges at the PSP reply", len(ch))
				}
				o := ledger.Outcome{State: ledger.Succeeded, PSPCharge: ch[0].ID}
				if !tc.sameCharg {
					o = ledger.Outcome{State: ledger.Failed, PSPCharge: ch[0].PaymentIntent, DeclineCode: "card_declined"}
				}
				_, _, _, err := w.ledger.Settle(ctx, w.row("u1", "K1").ID, o, w.clock.Now())
				return err
			}
			w.rebuild()
			r := w.pay("u1", "K1", body3000)
			if tc.sameCharg {
				expectStatus(t, r, http.StatusCreated)
				if replayedHeader(r) {
					t.Fatalf("the first call's own charge answered as a replay: %s", r.Body)
				}
				return
			}
			expectStatus(t, r, http.StatusPaymentRequired)
			if !replayedHeader(r) {
				t.Fatalf("a row settled with another outcome answered as this request's own: %s", r.Body)
			}
		})
	}
}

// receipt_email is part of the meaning when present: the same key with the
// same address replays, with another address or none it is 422 and the
// address stays the first request's (an address corrected on a retry is
// refused, never silently dropped).
func TestAnotherReceiptAddressUnderTheSameKeyIs422(t *testing.T) {
	w := newWorld(t)
	with := func(email string) string {
		if email == "" {
			return body3000
		}
		return strings.TrimSuffix(strings.TrimSpace(body3000), "}") + `,"receipt_email":"` + email + `"}`
	}
	first := w.pay("u1", "K1", with("buyer@example.com"))
	expectStatus(t, first, http.StatusCreated)
	if again := w.pay("u1", "K1", with("buyer@example.com")); again.Status != http.StatusCreated || !replayedHeader(again) {
		t.Fatalf("the same address: %d %s", again.Status, again.Body)
	}
	for _, other := range []string{"buyer2@example.com", ""} {
		reuse := w.pay("u1", "K1", with(other))
		if a := expectStatus(t, reuse, http.StatusUnprocessableEntity); !strings.HasSuffix(a.Type, "/key-reused") {
			t.Fatalf("address %q: 422 type %q", other, a.Type)
		}
	}
	var to string
	if err := w.pool.QueryRow(context.Background(), `SELECT receipt_email FROM payments`).Scan(&to); err != nil || to != "buyer@example.com" {
		t.Fatalf("receipt_email %q %v", to, err)
	}
	if got := len(w.charges()); got != 1 {
		t.Fatalf("charges = %d", got)
	}
}

// receipt_email is read by the strict parser, as the five meaning fields
// are: a second spelling of it ("RECEIPT_EMAIL", which a case-insensitive
// reader takes, the last one winning) or a second copy is 400 naming the
// field, and nothing is claimed, stored, charged or mailed. Before, the
// first body below stored (and so mailed) its receipt to the second
// address.
func TestAReceiptEmailSpelledTwiceIs400AndWritesNothing(t *testing.T) {
	w := newWorld(t)
	base := strings.TrimSuffix(strings.TrimSpace(body3000), "}")
	for i, body := range []string{
		base + `,"receipt_email":"a@x.example","RECEIPT_EMAIL":"b@y.example"}`,
		base + `,"Receipt_Email":"b@y.example"}`,
		base + `,"receipt_email":"a@x.example","receipt_emaiL":"b@y.example"}`,
		base + `,"receipt_email":"a@x.example","receipt_email":"b@y.example"}`,
	} {
		key := fmt.Sprintf("K%d", i)
		r := w.pay("u1", key, body)
		var a answer
		if r.Status == http.StatusBadRequest {
			a = decode(t, r)
		}
		if r.Status != http.StatusBadRequest || r.Headers.Get("Content-Type") != "application/problem+json" ||
			a.Field != "receipt_email" || strings.Contains(string(r.Body), "y.example") {
			t.Errorf("%s: %d %s, want 400 problem+json naming receipt_email, without the address", body, r.Status, r.Body)
		}
		if _, found := w.record("u1", key); found {
			t.Errorf("%s claimed the key", body)
		}
	}
	rows, err := w.pool.Query(context.Background(), `SELECT client_key, COALESCE(receipt_email, '') FROM payments ORDER BY client_key`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var key, to string
		if err := rows.Scan(&key, &to); err != nil {
			t.Fatal(err)
		}
		t.Errorf("key %s stored a payment whose receipt goes to %q", key, to)
	}
	if n := len(w.charges()); n != 0 {
		t.Errorf("%d charges: a body with two receipt addresses was sent to the PSP", n)
	}
}
