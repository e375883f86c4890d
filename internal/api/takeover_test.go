package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

// refusingPSP answers every charge (POST /v1/payment_intents) with a Stripe
// error of the given status while on is set, without reaching the PSP: a
// rotated or restricted key (401/403), a wrong route (404), a request the
// PSP finds invalid (400). Everything else goes to the simulator.
type refusingPSP struct {
	status int
	on     *atomic.Bool
	next   http.RoundTripper
}

func (p refusingPSP) RoundTrip(r *http.Request) (*http.Response, error) {
	if !p.on.Load() || r.Method != http.MethodPost || r.URL.Path != "/v1/payment_intents" {
		next := p.next
		if next == nil {
			next = http.DefaultTransport
		}
		return next.RoundTrip(r)
	}
	msg := map[int]string{
		400: `"code":"parameter_invalid_integer","message":"Invalid integer: amount"`,
		401: `"message":"Invalid API Key provided: sk_test_****"`,
		403: `"message":"The provided key does not have the required permissions for this endpoint."`,
		404: `"message":"Unrecognized request URL (POST: /v1/payment_intents)."`,
	}[p.status]
	body := fmt.Sprintf(`{"error":{"type":"invalid_request_error",%s}}`, msg)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Request-Id", "req_refused")
	return &http.Response{
		StatusCode: p.status, Status: fmt.Sprintf("%d %s", p.status, http.StatusText(p.status)), Header: h,
		Body: io.NopCloser(strings.NewReader(body)), Request: r, ProtoMajor: 1, ProtoMinor: 1,
	}, nil
}

// refuseCharges swaps the handler's PSP client for one whose charges are
// refused with status while the returned switch is on.
func (w *world) refuseCharges(status int) *atomic.Bool {
	on := &atomic.Bool{}
	on.Store(true)
	w.psp = w.wt.NewPSP(refusingPSP{status: status, on: on})
	w.rebuild()
	return on
}

func (w *world) intents(pid string) []string {
	w.t.Helper()
	rows, err := w.pool.Query(context.Background(), `SELECT event_id FROM outbox_intents WHERE payment_id = $1 ORDER BY event_id`, pid)
	if err != nil {
		w.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			w.t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

// crashAfterCharging makes the first request charge at the PSP and die
// before it writes anything more: the row stays PENDING with one charge.
func crashAfterCharging(t *testing.T, w *world, key string) string {
	t.Helper()
	w.hooks.AfterPSPReply = crashOnce()
	w.rebuild()
	if r := w.pay("u1", key, body3000); r.Status != http.StatusInternalServerError {
		t.Fatalf("crashed owner answered %d %s", r.Status, r.Body)
	}
	w.hooks.AfterPSPReply = nil
	w.rebuild()
	if n := len(w.charges()); n != 1 {
		t.Fatalf("charges by the dead owner = %d, want 1", n)
	}
	if p := w.row("u1", key); p.State != ledger.Pending {
		t.Fatalf("row after the crash = %s", p.State)
	}
	return ids.PaymentID(ids.Scope("u1", key))
}

// Issue 13 defect 4: the owner charged and died; the key is then rotated
// (401), restricted (403) or the route is wrong (404). The takeover's replay
// is refused before the PSP looks at the key, which says nothing about the
// owner's call: the payment must stay open (UNKNOWN behind a pointer, 202),
// never FAILED with a stored 502, a FAILED event and a "not charged" push.
// Once the key is fixed the resolver replays and finds the charge.
func TestTakeoverReplay401IsNotANotCharged(t *testing.T) {
	for _, status := range []int{401, 403, 404} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			w := newWorld(t)
			pid := crashAfterCharging(t, w, "K1")
			refuse := w.refuseCharges(status)
			w.clock.Advance(w.timing.Deadline + w.timing.Margin + time.Millisecond)

			r := w.pay("u1", "K1", body3000)
			if a := expectStatus(t, r, http.StatusAccepted); a.State != "PROCESSING" {
				t.Fatalf("takeover answer = %+v", a)
			}
			if p := w.row("u1", "K1"); p.State != ledger.Unknown {
				t.Fatalf("row = %s %q, want UNKNOWN: a refused replay proves nothing", p.State, p.DeclineCode)
			}
			if rec, _ := w.record("u1", "K1"); !rec.Pointer || rec.Answer != nil {
				t.Fatalf("key record = %+v, want a pointer (no stored final answer)", rec)
			}
			if got := w.intents(pid); len(got) != 0 {
				t.Fatalf("outbox intents = %v: an event (and its push) for an open payment", got)
			}
			if got := w.wt.Metric("PSPRefusedReplay"); got != 1 {
				t.Fatalf("PSPRefusedReplay = %v", got)
			}

			// The key is fixed; the resolver replays the derived key and
			// the PSP answers with the owner's saved charge.
			refuse.Store(false)
			rep, err := w.wt.Resolver(w.wt.ResolverConfig(), worldtest.ResolverOptions{}).Run(context.Background())
			if err != nil || rep.Succeeded != 1 {
				t.Fatalf("resolver = %+v, %v", rep, err)
			}
			ch := w.charges()
			p := w.row("u1", "K1")
			if len(ch) != 1 || p.State != ledger.Succeeded || p.PSPCharge != ch[0].ID {
				t.Fatalf("row %s %q, charges %+v: want SUCCEEDED with the one charge", p.State, p.PSPCharge, ch)
			}
			if got := w.intents(pid); len(got) != 1 || got[0] != ids.EventID(pid, "SUCCEEDED") {
				t.Fatalf("outbox intents = %v, want only SUCCEEDED", got)
			}
			again := w.pay("u1", "K1", body3000)
			if a := expectStatus(t, again, http.StatusCreated); a.PSPCharge != ch[0].ID || !replayedHeader(again) {
				t.Fatalf("repeat = %+v", a)
			}
		})
	}
}

// The decision for a first call: this request wrote the PENDING row, so no
// call with the key existed before; a 401/403 (or any refusal) means the PSP
// did not act. The payment is FAILED at once — one final answer (502), a
// FAILED event — and a metric and an error log tell operators about the
// key; it is never left for the resolver to charge hours later.
func TestFirstCall401IsNotChargedAndSaysSo(t *testing.T) {
	w := newWorld(t)
	pid := ids.PaymentID(ids.Scope("u1", "K1"))
	w.refuseCharges(401)
	r := w.pay("u1", "K1", body3000)
	if a := expectStatus(t, r, http.StatusBadGateway); !strings.HasSuffix(a.Type, "/psp-rejected") {
		t.Fatalf("type %q", a.Type)
	}
	if p := w.row("u1", "K1"); p.State != ledger.Failed || p.DeclineCode != "psp_invalid_request" {
		t.Fatalf("row = %s %q", p.State, p.DeclineCode)
	}
	if n := len(w.charges()); n != 0 {
		t.Fatalf("charges = %d", n)
	}
	if got := w.intents(pid); len(got) != 1 || got[0] != ids.EventID(pid, "FAILED") {
		t.Fatalf("outbox intents = %v", got)
	}
	if got := w.wt.Metric("PSPRejected"); got != 1 {
		t.Fatalf("PSPRejected = %v", got)
	}
	rep, err := w.wt.Resolver(w.wt.ResolverConfig(), worldtest.ResolverOptions{}).Run(context.Background())
	if err != nil || rep.Claimed != 0 || len(w.charges()) != 0 {
		t.Fatalf("resolver = %+v, %v, charges %d: a FAILED payment was taken up", rep, err, len(w.charges()))
	}
}

// Issue 13 defect 9: a PSP "invalid request" was stored as 502 while every
// rendering of the row said 402. One answer: the stored answer, the
// ledger's rendering once the key record is gone, and the resolver's
// rewrite of a pointer are the same status and bytes.
func TestInvalidRequestOneAnswer(t *testing.T) {
	w := newWorld(t)
	w.refuseCharges(400)
	first := w.pay("u1", "K1", body3000)
	expectStatus(t, first, http.StatusBadGateway)
	p := w.row("u1", "K1")
	if p.State != ledger.Failed {
		t.Fatalf("row = %s", p.State)
	}
	rec, _ := w.record("u1", "K1")
	if rec.Answer == nil || rec.Answer.Status != first.Status || string(rec.Answer.Body) != string(first.Body) {
		t.Fatalf("stored answer = %+v, want the first answer", rec.Answer)
	}
	rendered := api.Render(p)
	if rendered.Status != first.Status || string(rendered.Body) != string(first.Body) ||
		rendered.Headers.Get("Content-Type") != first.Headers.Get("Content-Type") {
		t.Fatalf("the ledger renders %d %s, the key stores %d %s", rendered.Status, rendered.Body, first.Status, first.Body)
	}
	if fa, ok := api.FinalAnswer(p); !ok || fa.Status != first.Status || string(fa.Body) != string(first.Body) {
		t.Fatalf("the resolver's rewrite would store %+v", fa)
	}
	// The key record's window passes: the ledger answers, the same.
	w.clock.Advance(2 * time.Hour)
	back := w.pay("u1", "K1", body3000)
	if back.Status != first.Status || string(back.Body) != string(first.Body) || !replayedHeader(back) {
		t.Fatalf("from the ledger = %d %s, first = %d %s", back.Status, back.Body, first.Status, first.Body)
	}
	var pr problem.Problem
	if err := pr.UnmarshalJSON(back.Body); err != nil || pr.Extensions["payment_id"] != p.ID || pr.Extensions["state"] != "FAILED" {
		t.Fatalf("problem = %+v, %v: it names neither the payment nor its state", pr, err)
	}
	if n := len(w.charges()); n != 0 {
		t.Fatalf("charges = %d", n)
	}
}
