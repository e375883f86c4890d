package pspsim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/psp"
)

// Stripe saves a result once execution has begun, so a saved 500 can sit in
// front of a charged PaymentIntent: every replay of the key answers 500,
// and only a look-up by our reference finds the money.
func TestSaved500AfterTheChargeHidesAChargedIntentThatLookupFinds(t *testing.T) {
	e := setup(t)
	req := chargeReq("pay_500c")
	mustAddFault(t, e, pspsim.Fault{Match: pspsim.Match{IdempotencyKey: req.IdempotencyKey}, Kind: pspsim.FaultError5xxAfterCharge})

	first := mustCharge(t, e, req)
	if first.Outcome != psp.Unknown || first.HTTPStatus != 500 || first.Replayed {
		t.Fatalf("first: %+v, want Unknown 500", first)
	}
	for range 3 {
		again := mustCharge(t, e, req)
		if again.Outcome != psp.Unknown || again.HTTPStatus != 500 || !again.Replayed {
			t.Fatalf("replay: %+v, want the saved 500, replayed", again)
		}
	}
	charges := wantCharges(t, e, 1) // the money was taken once, replays took none
	if charges[0].Amount != 3000 || charges[0].Metadata["payment_id"] != "pay_500c" {
		t.Fatalf("charge: %+v", charges[0])
	}
	found, err := e.psp.Lookup(context.Background(), req.PaymentID)
	if err != nil || found.Outcome != psp.Succeeded || found.ChargeID != charges[0].ID {
		t.Fatalf("Lookup: %+v, %v; want the charged intent %s", found, err, charges[0].ID)
	}
	// The charge happened, so its webhook goes out: the other path to the truth.
	if n := flush(t, e); n != 1 {
		t.Errorf("%d webhooks, want the charge's payment_intent.succeeded", n)
	}
}

// A request that fails validation never began execution: the fault stays
// armed for the request that does run.
func TestSaved500AfterTheChargeWaitsForARequestThatRuns(t *testing.T) {
	e := setup(t)
	req := chargeReq("pay_500v")
	mustAddFault(t, e, pspsim.Fault{Match: pspsim.Match{PathPrefix: "/v1/payment_intents"}, Kind: pspsim.FaultError5xxAfterCharge})
	bad := req
	bad.IdempotencyKey, bad.Currency = "pay_500v:bad", "us1"
	if _, err := e.psp.Charge(context.Background(), bad); !errors.Is(err, psp.ErrInvalidRequest) {
		t.Fatalf("invalid charge: %v", err)
	}
	if got := mustCharge(t, e, req); got.HTTPStatus != 500 {
		t.Fatalf("the first charge that ran: %+v, want the 500", got)
	}
	wantCharges(t, e, 1)
}

// Stripe keeps keys "at least 24 hours" and prunes them some time after:
// no key is forgotten before the window, and keys made together are not all
// forgotten on the same second.
func TestKeysAreKeptAtLeastTheWindowAndPrunedAtJitteredTimes(t *testing.T) {
	e := setup(t)
	const n = 12
	for i := range n {
		mustCharge(t, e, chargeReq(fmt.Sprintf("pay_j%d", i)))
	}
	e.clock.Advance(24 * time.Hour) // exactly the window: every key still answers
	kept := 0
	for i := range n {
		if mustCharge(t, e, chargeReq(fmt.Sprintf("pay_j%d", i))).Replayed {
			kept++
		}
	}
	if kept != n {
		t.Fatalf("%d of %d keys replayed at exactly 24 h, want all (kept at least the window)", kept, n)
	}
	e.clock.Advance(30 * time.Minute)
	replayed := 0
	for i := range n {
		if mustCharge(t, e, chargeReq(fmt.Sprintf("pay_j%d", i))).Replayed {
			replayed++
		}
	}
	if replayed == 0 || replayed == n {
		t.Fatalf("%d of %d keys still kept half an hour past the window, want some but not all (jittered pruning)", replayed, n)
	}
}

// The resolver replays a key for 24 h on Stripe's promise; a simulator
// keeping keys for less would turn those replays into second charges.
func TestAKeyWindowUnder24HoursIsRefused(t *testing.T) {
	err := pspsim.Config{KeyWindow: time.Hour}.Validate()
	if err == nil || !strings.Contains(err.Error(), "24 h") {
		t.Fatalf("Validate(1 h) = %v, want a refusal naming Stripe's 24 h", err)
	}
	if err := (pspsim.Config{KeyWindow: 48 * time.Hour}).Validate(); err != nil {
		t.Errorf("Validate(48 h) = %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("New accepted a 1 h key window")
		}
	}()
	pspsim.New(pspsim.Config{KeyWindow: time.Hour, Logger: quiet()})
}

// Search lags behind writes, and the lag is a knob at run time (admin API).
func TestSearchLagIsSetOverTheAdminAPI(t *testing.T) {
	e := setup(t)
	if status, _, body := adminDo(t, "POST", e.url+"/_sim/search_lag", `{"lag_ms":5000}`); status != 200 || !strings.Contains(body, `"lag_ms":5000`) {
		t.Fatalf("POST search_lag: %d %s", status, body)
	}
	if status, _, _ := adminDo(t, "POST", e.url+"/_sim/search_lag", `{"lag_ms":-1}`); status != 400 {
		t.Errorf("negative lag: %d, want 400", status)
	}
	paid := mustCharge(t, e, chargeReq("pay_lag"))
	if got, err := e.psp.Lookup(context.Background(), "pay_lag"); err != nil || got.Outcome != psp.NotFound {
		t.Fatalf("inside the lag: %+v, %v; want NotFound", got, err)
	}
	e.clock.Advance(5 * time.Second)
	if got, err := e.psp.Lookup(context.Background(), "pay_lag"); err != nil || got.PaymentIntentID != paid.PaymentIntentID {
		t.Fatalf("after the lag: %+v, %v", got, err)
	}
	e.sim.Reset()
	if lag := e.sim.SearchLag(); lag != 0 {
		t.Errorf("Reset left the lag at %s, want the configured 0", lag)
	}
}

// A PaymentMethod used without a Customer may not be used again: a second
// PaymentIntent confirmed with it gets Stripe's 400, and nothing is charged.
// Test tokens (pm_card_...) mint a new PaymentMethod per use; an attached
// one is reusable.
func TestAnUnattachedPaymentMethodIsSingleUse(t *testing.T) {
	e := setup(t)
	if err := e.sim.AddPaymentMethod("pm_1Reused"); err != nil {
		t.Fatal(err)
	}
	first := chargeReq("pay_pm1")
	first.PaymentMethod = "pm_1Reused"
	if got := mustCharge(t, e, first); got.Outcome != psp.Succeeded {
		t.Fatalf("first use: %+v", got)
	}
	second := chargeReq("pay_pm2")
	second.PaymentMethod = "pm_1Reused"
	_, err := e.psp.Charge(context.Background(), second)
	var apiErr *psp.APIError
	if !errors.Is(err, psp.ErrInvalidRequest) || !errors.As(err, &apiErr) || apiErr.Code != "payment_method_unexpected_state" || apiErr.Param != "payment_method" {
		t.Fatalf("second use: %v, want 400 payment_method_unexpected_state", err)
	}
	wantCharges(t, e, 1)
	// The refusal saved nothing: once the method is attached, the same key works.
	if status, _, body := adminDo(t, "POST", e.url+"/_sim/payment_methods/attach", `{"payment_method":"pm_1Reused"}`); status != 204 {
		t.Fatalf("attach: %d %s", status, body)
	}
	if got := mustCharge(t, e, second); got.Outcome != psp.Succeeded || got.Replayed {
		t.Fatalf("after attaching: %+v", got)
	}
	for i := range 2 {
		if got := mustCharge(t, e, chargeReq(fmt.Sprintf("pay_tok%d", i))); got.Outcome != psp.Succeeded {
			t.Fatalf("pm_card_visa use %d: %+v", i, got)
		}
	}
	wantCharges(t, e, 4)
}

// A refund can be pending and settle later, as succeeded or failed; the
// key keeps replaying the answer it first gave (pending), and only a GET of
// the refund (or its webhooks) tells the outcome. A failed refund gives the
// money back to the merchant.
func TestPendingRefundSettlesLaterOrFails(t *testing.T) {
	e := setup(t, func(c *pspsim.Config) { c.WebhookEvents = []string{"*"} })
	ctx := context.Background()
	ok := mustCharge(t, e, chargeReq("pay_rp"))
	bad := mustCharge(t, e, chargeReq("pay_rf"))
	mustAddFault(t, e, pspsim.Fault{Match: pspsim.Match{IdempotencyKey: "pay_rp:cancel:refund"}, Kind: pspsim.FaultRefundPending, DelayMS: time.Hour.Milliseconds()})
	mustAddFault(t, e, pspsim.Fault{Match: pspsim.Match{IdempotencyKey: "pay_rf:cancel:refund"}, Kind: pspsim.FaultRefundFail, DelayMS: time.Hour.Milliseconds()})
	flush(t, e)
	e.hooks.reset()

	rp := psp.RefundRequest{IdempotencyKey: "pay_rp:cancel:refund", PaymentIntentID: ok.PaymentIntentID, PaymentID: "pay_rp"}
	rf := psp.RefundRequest{IdempotencyKey: "pay_rf:cancel:refund", PaymentIntentID: bad.PaymentIntentID, PaymentID: "pay_rf"}
	var ids []string
	for _, r := range []psp.RefundRequest{rp, rf} {
		got, err := e.psp.Refund(ctx, r)
		if err != nil || got.Outcome != psp.Pending || got.RefundID == "" {
			t.Fatalf("refund %s: %+v, %v; want Pending", r.PaymentID, got, err)
		}
		ids = append(ids, got.RefundID)
	}
	if got := wantCharges(t, e, 2); got[0].AmountRefunded != 3000 || got[1].AmountRefunded != 3000 {
		t.Fatalf("a pending refund holds the amount: %+v", got)
	}
	e.clock.Advance(time.Hour)
	for i, want := range []string{"succeeded", "failed"} {
		if st, _ := e.sim.RefundStatus(ids[i]); st != want {
			t.Errorf("refund %s settled %q, want %q", ids[i], st, want)
		}
		status, body := stripeGet(t, e, "/v1/refunds/"+ids[i])
		if status != 200 || !strings.Contains(body, `"status": "`+want+`"`) {
			t.Errorf("GET refund %s: %d %s", ids[i], status, body)
		}
	}
	if got := wantCharges(t, e, 2); got[0].AmountRefunded != 3000 || got[1].AmountRefunded != 0 {
		t.Errorf("after settling: refunded %d and %d, want 3000 and 0 (the failed refund's money is back)", got[0].AmountRefunded, got[1].AmountRefunded)
	}
	// The key still answers what it first said: pending.
	if again, err := e.psp.Refund(ctx, rp); err != nil || !again.Replayed || again.Outcome != psp.Pending {
		t.Errorf("replay after settling: %+v, %v; want the saved pending answer", again, err)
	}

	flush(t, e)
	types := map[string][]string{}
	for _, ev := range e.hooks.events(t) {
		types[ev.PaymentID] = append(types[ev.PaymentID], ev.Type)
	}
	wantTypes := map[string]string{
		"pay_rp": "refund.created charge.refunded refund.updated charge.refund.updated",
		"pay_rf": "refund.created charge.refunded refund.updated refund.failed charge.refund.updated",
	}
	for pid, want := range wantTypes {
		if got := strings.Join(types[pid], " "); got != want {
			t.Errorf("%s events: %s, want %s", pid, got, want)
		}
	}
}

// A refund's succeeded is not final: Stripe's refund can begin succeeded
// and turn failed later (refund.failed), the money back with the merchant.
func TestASucceededRefundCanFailLater(t *testing.T) {
	e := setup(t, func(c *pspsim.Config) { c.WebhookEvents = []string{"refund.failed"} })
	paid := mustCharge(t, e, chargeReq("pay_rl"))
	mustAddFault(t, e, pspsim.Fault{Match: pspsim.Match{IdempotencyKey: "pay_rl:cancel:refund"}, Kind: pspsim.FaultRefundFailLater, DelayMS: time.Hour.Milliseconds()})
	got, err := e.psp.Refund(context.Background(), psp.RefundRequest{IdempotencyKey: "pay_rl:cancel:refund", PaymentIntentID: paid.PaymentIntentID})
	if err != nil || got.Outcome != psp.Succeeded {
		t.Fatalf("refund: %+v, %v; want succeeded at first", got, err)
	}
	e.clock.Advance(time.Hour)
	if st, _ := e.sim.RefundStatus(got.RefundID); st != "failed" {
		t.Fatalf("an hour later the refund is %q, want failed", st)
	}
	if c := wantCharges(t, e, 1)[0]; c.AmountRefunded != 0 {
		t.Errorf("charge refunded %d after the refund failed, want 0", c.AmountRefunded)
	}
	if n := flush(t, e); n != 1 {
		t.Errorf("%d events, want the one refund.failed", n)
	}
}

// One charge, two events: an endpoint subscribed to payment_intent.* and
// charge.* hears payment_intent.succeeded and charge.succeeded, with two
// ids, and they can arrive in either order.
func TestOneChargeRaisesTwoEventsThatCanArriveOutOfOrder(t *testing.T) {
	e := setup(t, func(c *pspsim.Config) {
		c.WebhookEvents = []string{"payment_intent.succeeded", "charge.succeeded"}
	})
	// The first event the charge raises (payment_intent.succeeded) is held back.
	mustAddFault(t, e, pspsim.Fault{Match: pspsim.Match{IdempotencyKey: "pay_two:charge"}, Kind: pspsim.FaultWebhookDelay, DelayMS: time.Hour.Milliseconds()})
	paid := mustCharge(t, e, chargeReq("pay_two"))
	if _, err := e.sim.DeliverDueWebhooks(context.Background()); err != nil {
		t.Fatal(err)
	}
	flush(t, e)
	evs := e.hooks.events(t)
	if len(evs) != 2 || evs[0].Type != "charge.succeeded" || evs[1].Type != "payment_intent.succeeded" {
		t.Fatalf("events: %+v, want charge.succeeded before the delayed payment_intent.succeeded", evs)
	}
	if evs[0].ID == evs[1].ID {
		t.Errorf("one id for two events: %s", evs[0].ID)
	}
	for _, ev := range evs {
		if ev.PaymentID != "pay_two" || ev.PaymentIntentID != paid.PaymentIntentID || ev.ChargeID != paid.ChargeID {
			t.Errorf("event %s: %+v, want pay_two / %s / %s", ev.Type, ev, paid.PaymentIntentID, paid.ChargeID)
		}
	}
}

// Stripe retries a refused event for up to three days with backoff, not a
// fixed handful of times: an endpoint down for more than eight attempts
// still gets the event, with the same id.
func TestWebhooksAreRetriedPastEightAttempts(t *testing.T) {
	e := setup(t)
	e.hooks.mu.Lock()
	e.hooks.refuse = 12
	e.hooks.mu.Unlock()
	mustCharge(t, e, chargeReq("pay_days"))
	for range 13 {
		_, _ = e.sim.FlushWebhooks(context.Background())
	}
	d := e.hooks.deliveries()
	if len(d) != 13 || e.sim.PendingWebhooks() != 0 {
		t.Fatalf("%d attempts, %d pending; want 13 attempts, the last accepted", len(d), e.sim.PendingWebhooks())
	}
	evs := e.hooks.events(t)
	if evs[0].ID != evs[12].ID {
		t.Errorf("the retry changed the id")
	}
}

// Retries stop at the horizon (WebhookRetryFor), counted from the first
// attempt.
func TestWebhookRetriesStopAtTheHorizon(t *testing.T) {
	e := setup(t, func(c *pspsim.Config) { c.WebhookRetryFor = 50 * time.Millisecond })
	e.hooks.mu.Lock()
	e.hooks.refuse = 1000
	e.hooks.mu.Unlock()
	mustCharge(t, e, chargeReq("pay_horizon"))
	_, _ = e.sim.FlushWebhooks(context.Background())
	time.Sleep(60 * time.Millisecond) // the horizon is real time: it concerns real HTTP
	_, _ = e.sim.FlushWebhooks(context.Background())
	if n := e.sim.PendingWebhooks(); n != 0 || len(e.hooks.deliveries()) != 2 {
		t.Errorf("%d pending after %d attempts past the horizon, want given up after 2", n, len(e.hooks.deliveries()))
	}
}

// stripeGet sends an authenticated GET to the simulator's Stripe API.
func stripeGet(t *testing.T, e *env, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.url+path, nil)
	req.Header.Set("Authorization", "Bearer sk_test_sim")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

// A refund behind a saved 500 (error_5xx_after_charge on /v1/refunds):
// the PSP refunded, every replay of the key answers the saved 500, and the
// list of the charge's refunds (GET /v1/refunds?charge=, ?payment_intent=)
// is what shows it, newest first, paged by limit and starting_after, in
// Stripe's list shape.
func TestARefundBehindASaved500IsListedByItsCharge(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	paid := mustCharge(t, e, chargeReq("pay_ls"))
	other := mustCharge(t, e, chargeReq("pay_lo"))
	mustAddFault(t, e, pspsim.Fault{Match: pspsim.Match{IdempotencyKey: "pay_ls:cancel:refund"}, Kind: pspsim.FaultError5xxAfterCharge})
	req := psp.RefundRequest{IdempotencyKey: "pay_ls:cancel:refund", ChargeID: paid.ChargeID, Amount: 1000, PaymentID: "pay_ls"}
	for i := range 2 {
		got, err := e.psp.Refund(ctx, req)
		if err != nil || got.Outcome != psp.Unknown || got.HTTPStatus != http.StatusInternalServerError || got.Replayed != (i == 1) {
			t.Fatalf("refund call %d: %+v, %v; want the saved 500", i, got, err)
		}
	}
	if _, err := e.psp.Refund(ctx, psp.RefundRequest{IdempotencyKey: "pay_ls:second", ChargeID: paid.ChargeID, Amount: 500, PaymentID: "pay_ls"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.psp.Refund(ctx, psp.RefundRequest{IdempotencyKey: "pay_lo:cancel:refund", ChargeID: other.ChargeID, PaymentID: "pay_lo"}); err != nil {
		t.Fatal(err)
	}
	if n := len(e.sim.Refunds()); n != 3 {
		t.Fatalf("%d refunds at the PSP, want 3 (the one behind the 500 among them)", n)
	}
	list := func(query string) (ids []string, hasMore bool) {
		t.Helper()
		r, _ := http.NewRequest(http.MethodGet, e.url+"/v1/refunds?"+query, nil)
		r.Header.Set("Authorization", "Bearer sk_test_sim")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Object  string `json:"object"`
			URL     string `json:"url"`
			HasMore bool   `json:"has_more"`
			Data    []struct {
				ID, Charge, Status string
				Amount             int64
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK || body.Object != "list" || body.URL != "/v1/refunds" {
			t.Fatalf("GET /v1/refunds?%s: %d %+v %v", query, resp.StatusCode, body, err)
		}
		for _, d := range body.Data {
			if d.Charge != paid.ChargeID || d.Status != "succeeded" {
				t.Fatalf("GET /v1/refunds?%s listed %+v", query, d)
			}
			ids = append(ids, d.ID)
		}
		return ids, body.HasMore
	}
	all, more := list("charge=" + paid.ChargeID)
	if len(all) != 2 || more {
		t.Fatalf("by charge: %v (has_more %v), want the charge's two refunds", all, more)
	}
	if byPI, _ := list("payment_intent=" + paid.PaymentIntentID); !slices.Equal(byPI, all) {
		t.Fatalf("by payment intent %v, by charge %v", byPI, all)
	}
	first, more := list("charge=" + paid.ChargeID + "&limit=1")
	second, last := list("charge=" + paid.ChargeID + "&limit=1&starting_after=" + first[0])
	if !more || last || !slices.Equal(append(first, second...), all) {
		t.Fatalf("pages %v (more %v), %v (more %v); want %v", first, more, second, last, all)
	}
	// The client's look-up picks the refund of our reference.
	found, err := e.psp.FindRefund(ctx, "", paid.ChargeID, "pay_ls")
	if err != nil || found.Outcome != psp.Succeeded || found.RefundID == "" {
		t.Fatalf("FindRefund: %+v, %v", found, err)
	}
}
