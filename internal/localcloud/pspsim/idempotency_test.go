package pspsim_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/psp"
)

// 64 concurrent copies of one charge (the story's concurrent duplicates):
// exactly one charge; every other copy is a replay of it or a 409 while it
// runs; none is a second charge.
func TestOneChargePerKeyUnder64ConcurrentRequests(t *testing.T) {
	e := setup(t)
	req := chargeReq("pay_64")
	// Whoever arrives first holds the key a little, so copies overlap it.
	mustAddFault(t, e, pspsim.Fault{Match: pspsim.Match{IdempotencyKey: req.IdempotencyKey}, Kind: pspsim.FaultSlow, DelayMS: 200})

	const n = 64
	results := make([]psp.Result, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = e.psp.Charge(context.Background(), req)
		})
	}
	close(start)
	wg.Wait()

	charges := wantCharges(t, e, 1)
	fresh, replays, inFlight := 0, 0, 0
	for i, res := range results {
		switch {
		case errs[i] != nil:
			t.Errorf("copy %d: %v", i, errs[i])
		case res.Outcome == psp.Succeeded && !res.Replayed:
			fresh++
		case res.Outcome == psp.Succeeded && res.Replayed:
			replays++
		case res.Outcome == psp.Unknown && res.HTTPStatus == http.StatusConflict:
			inFlight++
		default:
			t.Errorf("copy %d: %+v, want a success, a replay or a 409", i, res)
		}
		if res.Outcome == psp.Succeeded && res.PaymentIntentID != charges[0].PaymentIntent {
			t.Errorf("copy %d answered with %s, the charge is on %s", i, res.PaymentIntentID, charges[0].PaymentIntent)
		}
	}
	t.Logf("%d fresh, %d replays, %d answered 409", fresh, replays, inFlight)
	if fresh != 1 {
		t.Errorf("%d copies ran the charge, want exactly 1 (replays %d, 409s %d)", fresh, replays, inFlight)
	}
	// A copy that got 409 retries with the same key and hears the one result.
	again := mustCharge(t, e, req)
	if again.Outcome != psp.Succeeded || !again.Replayed || again.ChargeID != charges[0].ID {
		t.Errorf("retry after the storm: %+v, want the saved success", again)
	}
	wantCharges(t, e, 1)
}

// A repeat while the first request still runs gets 409 and nothing is saved
// for it: its own retry later replays the first request's result.
func TestRepeatWhileInFlightGets409(t *testing.T) {
	e := setup(t)
	req := chargeReq("pay_409")
	mustAddFault(t, e, pspsim.Fault{Match: pspsim.Match{IdempotencyKey: req.IdempotencyKey}, Kind: pspsim.FaultSlow, DelayMS: 300})

	first := make(chan psp.Result, 1)
	go func() {
		res, err := e.psp.Charge(context.Background(), req)
		if err != nil {
			t.Errorf("first: %v", err)
		}
		first <- res
	}()
	waitFor(t, func() bool { return e.sim.InFlight(req.IdempotencyKey) })

	second := mustCharge(t, e, req)
	if second.Outcome != psp.Unknown || second.HTTPStatus != http.StatusConflict {
		t.Fatalf("repeat in flight: %+v, want Unknown with 409", second)
	}
	if r := <-first; r.Outcome != psp.Succeeded || r.Replayed {
		t.Fatalf("first: %+v, want a fresh success", r)
	}
	third := mustCharge(t, e, req)
	if third.Outcome != psp.Succeeded || !third.Replayed {
		t.Errorf("retry of the 409: %+v, want the replayed success", third)
	}
	wantCharges(t, e, 1)
}

func TestReplayIsMarked(t *testing.T) {
	e := setup(t)
	first := mustCharge(t, e, chargeReq("pay_r"))
	second := mustCharge(t, e, chargeReq("pay_r"))
	if first.Replayed || first.Outcome != psp.Succeeded {
		t.Errorf("first: %+v, want a fresh success", first)
	}
	if !second.Replayed || second.PaymentIntentID != first.PaymentIntentID || second.ChargeID != first.ChargeID {
		t.Errorf("second: %+v, want a replay of %+v", second, first)
	}
	wantCharges(t, e, 1)
}

// docs/mechanism.md#seed-part-2: the same key with another amount is a
// different request; nothing runs. The endpoint is part of the parameters
// too.
func TestKeyReuseWithOtherParameters(t *testing.T) {
	e := setup(t)
	req := chargeReq("pay_k")
	first := mustCharge(t, e, req)

	other := req
	other.Amount = 3500
	if _, err := e.psp.Charge(context.Background(), other); !errors.Is(err, psp.ErrKeyReuse) {
		t.Errorf("other amount: err = %v, want ErrKeyReuse", err)
	}
	_, err := e.psp.Refund(context.Background(), psp.RefundRequest{IdempotencyKey: req.IdempotencyKey, PaymentIntentID: first.PaymentIntentID})
	if !errors.Is(err, psp.ErrKeyReuse) {
		t.Errorf("same key on /v1/refunds: err = %v, want ErrKeyReuse", err)
	}
	wantCharges(t, e, 1)
	if len(e.sim.Refunds()) != 0 {
		t.Error("a refund ran under a reused key")
	}
}

// docs/mechanism.md#seed-part-1: Stripe saves a 500 like any result, so a
// retry with the same key keeps hearing it; the way forward is to look the
// payment up.
func TestSaved500KeepsComingBack(t *testing.T) {
	e := setup(t)
	req := chargeReq("pay_500")
	mustAddFault(t, e, pspsim.Fault{Match: pspsim.Match{IdempotencyKey: req.IdempotencyKey}, Kind: pspsim.FaultError5xx})

	first := mustCharge(t, e, req)
	if first.Outcome != psp.Unknown || first.HTTPStatus != 500 || first.Replayed {
		t.Fatalf("first: %+v, want Unknown 500", first)
	}
	for range 2 {
		again := mustCharge(t, e, req)
		if again.Outcome != psp.Unknown || again.HTTPStatus != 500 || !again.Replayed {
			t.Fatalf("retry: %+v, want the saved 500, replayed", again)
		}
	}
	wantCharges(t, e, 0)
	found, err := e.psp.Lookup(context.Background(), req.PaymentID)
	if err != nil || found.Outcome != psp.NotFound {
		t.Fatalf("Lookup: %+v, %v; want NotFound", found, err)
	}
	if n := len(e.hooks.deliveries()); n != 0 || e.sim.PendingWebhooks() != 0 {
		t.Errorf("a 500 without a charge produced webhooks")
	}
}

// After the PSP key window (docs/mechanism.md#seed-part-1): the PSP forgets
// the key and a repeat is a new request, a second charge. That is why a
// resolver looks up after the window instead of replaying.
func TestKeyForgottenAfterWindow(t *testing.T) {
	e := setup(t, func(c *pspsim.Config) { c.KeyWindow = 24 * time.Hour })
	req := chargeReq("pay_w")
	first := mustCharge(t, e, req)

	e.clock.Advance(24*time.Hour - time.Second)
	inside := mustCharge(t, e, req)
	if !inside.Replayed || inside.PaymentIntentID != first.PaymentIntentID {
		t.Fatalf("inside the window: %+v, want a replay", inside)
	}
	wantCharges(t, e, 1)

	e.clock.Advance(time.Hour + time.Second) // past the window and its pruning jitter
	after := mustCharge(t, e, req)
	if after.Replayed || after.Outcome != psp.Succeeded || after.PaymentIntentID == first.PaymentIntentID {
		t.Fatalf("after the window: %+v, want a new charge", after)
	}
	wantCharges(t, e, 2)

	// Lookup by our reference sees both: a double charge a resolver would
	// have avoided by looking up instead of replaying.
	found, err := e.psp.Lookup(context.Background(), req.PaymentID)
	if err != nil || found.Outcome != psp.Succeeded {
		t.Errorf("Lookup: %+v, %v", found, err)
	}
}

// The story's gray failure: the PSP charges and the reply is lost. The client
// sees a timeout (Unknown), the charge exists, and a retry with the same
// key inside the window returns the saved success without charging again.
func TestLostReplyThenRetry(t *testing.T) {
	e := setup(t)
	req := chargeReq("pay_7")
	mustAddFault(t, e, pspsim.Fault{Match: pspsim.Match{IdempotencyKey: req.IdempotencyKey}, Kind: pspsim.FaultLoseReply, DelayMS: 10_000})

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	lost, err := e.psp.Charge(ctx, req)
	if err != nil {
		t.Fatalf("Charge: %v, want an Unknown result, not an error", err)
	}
	if lost.Outcome != psp.Unknown || !errors.Is(lost.Cause, context.DeadlineExceeded) {
		t.Fatalf("lost reply: %+v, want Unknown after the deadline", lost)
	}
	charges := wantCharges(t, e, 1) // charged all the same
	if charges[0].IdempotencyKey != req.IdempotencyKey || charges[0].Metadata["payment_id"] != "pay_7" || charges[0].Amount != 3000 {
		t.Errorf("charge record: %+v", charges[0])
	}

	retry := mustCharge(t, e, req)
	if retry.Outcome != psp.Succeeded || !retry.Replayed || retry.ChargeID != charges[0].ID || retry.PaymentIntentID != charges[0].PaymentIntent {
		t.Fatalf("retry: %+v, want the saved success of %+v", retry, charges[0])
	}
	wantCharges(t, e, 1)

	// The webhook still tells the truth about the charge whose reply was lost.
	flush(t, e)
	evs := e.hooks.events(t)
	if len(evs) != 1 || evs[0].Type != "payment_intent.succeeded" || evs[0].PaymentID != "pay_7" || evs[0].ChargeID != charges[0].ID {
		t.Errorf("webhooks: %+v", evs)
	}
}

// drop_before: the connection closes before the PSP does anything, so the
// client sees Unknown, nothing is saved, and the retry charges (once).
func TestDropBeforeSavesNothing(t *testing.T) {
	e := setup(t)
	req := chargeReq("pay_d")
	mustAddFault(t, e, pspsim.Fault{Match: pspsim.Match{IdempotencyKey: req.IdempotencyKey}, Kind: pspsim.FaultDropBefore})

	dropped, err := e.client(t).Charge(context.Background(), req) // a fresh connection
	if err != nil || dropped.Outcome != psp.Unknown || dropped.HTTPStatus != 0 {
		t.Fatalf("dropped: %+v, %v; want Unknown with no reply", dropped, err)
	}
	wantCharges(t, e, 0)
	retry := mustCharge(t, e, req)
	if retry.Outcome != psp.Succeeded || retry.Replayed {
		t.Fatalf("retry: %+v, want a fresh success", retry)
	}
	wantCharges(t, e, 1)
}

func TestDecline(t *testing.T) {
	e := setup(t)
	req := chargeReq("pay_x")
	req.PaymentMethod = "pm_card_chargeDeclined"

	res := mustCharge(t, e, req)
	if res.Outcome != psp.Declined || res.DeclineCode != "generic_decline" || res.PaymentIntentID == "" || res.ChargeID == "" || res.HTTPStatus != 402 {
		t.Fatalf("decline: %+v", res)
	}
	wantCharges(t, e, 0)
	again := mustCharge(t, e, req)
	if again.Outcome != psp.Declined || !again.Replayed || again.PaymentIntentID != res.PaymentIntentID {
		t.Errorf("repeat: %+v, want the saved decline", again)
	}
	got, err := e.psp.Retrieve(context.Background(), res.PaymentIntentID)
	if err != nil || got.Outcome != psp.Declined || got.DeclineCode != "generic_decline" {
		t.Errorf("Retrieve: %+v, %v", got, err)
	}
	flush(t, e)
	evs := e.hooks.events(t)
	if len(evs) != 1 || evs[0].Type != "payment_intent.payment_failed" || evs[0].DeclineCode != "generic_decline" || evs[0].PaymentIntentID != res.PaymentIntentID {
		t.Errorf("webhooks: %+v", evs)
	}
}

// A request that fails validation saves nothing: the key stays free for a
// correct request.
func TestValidationFailureSavesNothing(t *testing.T) {
	e := setup(t)
	for _, body := range []string{
		"amount=3000&currency=usd&payment_method=pm_card_visa",                   // no confirm
		"amount=3000&currency=usd&confirm=true&payment_method=pm_card_visa&x=1",  // unknown parameter
		"amount=-5&currency=usd&confirm=true&payment_method=pm_card_visa",        // bad amount
		"amount=3000&currency=usdollar&confirm=true&payment_method=pm_card_visa", // bad currency
	} {
		status, _ := post(t, e.url+"/v1/payment_intents", "pay_v:charge", body)
		if status != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", body, status)
		}
	}
	res := mustCharge(t, e, chargeReq("pay_v"))
	if res.Outcome != psp.Succeeded || res.Replayed {
		t.Errorf("after failed validations: %+v, want a fresh success", res)
	}
	if status, _ := post(t, e.url+"/v1/payment_intents", "", "amount=1"); status != http.StatusBadRequest {
		t.Errorf("no key, bad body: %d", status)
	}
	req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/payment_intents", strings.NewReader("amount=1"))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no API key: %v %v, want 401", resp.Status, err)
	}
}

func TestLookupByMetadata(t *testing.T) {
	e := setup(t, func(c *pspsim.Config) { c.SearchLag = time.Minute })
	a := mustCharge(t, e, chargeReq("pay_a"))
	b := mustCharge(t, e, chargeReq("pay_b"))

	// Stripe's search lags behind writes: right after the charge it is not
	// visible yet, so NotFound is not proof inside the lag.
	early, err := e.psp.Lookup(context.Background(), "pay_a")
	if err != nil || early.Outcome != psp.NotFound {
		t.Fatalf("inside the search lag: %+v, %v; want NotFound", early, err)
	}
	e.clock.Advance(time.Minute)
	for id, want := range map[string]psp.Result{"pay_a": a, "pay_b": b} {
		got, err := e.psp.Lookup(context.Background(), id)
		if err != nil || got.Outcome != psp.Succeeded || got.PaymentIntentID != want.PaymentIntentID || got.ChargeID != want.ChargeID || got.Replayed {
			t.Errorf("Lookup(%s) = %+v, %v; want %s", id, got, err, want.PaymentIntentID)
		}
	}
	none, err := e.psp.Lookup(context.Background(), "pay_none")
	if err != nil || none.Outcome != psp.NotFound {
		t.Errorf("Lookup(pay_none) = %+v, %v", none, err)
	}
	if _, err := e.psp.Retrieve(context.Background(), "pi_missing"); !errors.Is(err, psp.ErrInvalidRequest) {
		t.Errorf("Retrieve(pi_missing): %v, want ErrInvalidRequest (404)", err)
	}
}

// A compensation that times out (docs/mechanism.md#refunds): the refund has
// its own key, and every retry of it is the same refund.
func TestRefundIdempotency(t *testing.T) {
	e := setup(t)
	paid := mustCharge(t, e, chargeReq("pay_f"))
	ctx := context.Background()
	refund := psp.RefundRequest{IdempotencyKey: "pay_f:cancel:refund", PaymentIntentID: paid.PaymentIntentID, Amount: 1000, PaymentID: "pay_f"}

	first, err := e.psp.Refund(ctx, refund)
	if err != nil || first.Outcome != psp.Succeeded || first.Replayed || first.RefundID == "" || first.ChargeID != paid.ChargeID {
		t.Fatalf("first refund: %+v, %v", first, err)
	}
	second, err := e.psp.Refund(ctx, refund)
	if err != nil || !second.Replayed || second.RefundID != first.RefundID {
		t.Fatalf("repeat: %+v, %v; want a replay of %s", second, err, first.RefundID)
	}
	other := refund
	other.Amount = 2000
	if _, err := e.psp.Refund(ctx, other); !errors.Is(err, psp.ErrKeyReuse) {
		t.Errorf("same key, other amount: %v, want ErrKeyReuse", err)
	}
	tooMuch := psp.RefundRequest{IdempotencyKey: "pay_f:refund-2", PaymentIntentID: paid.PaymentIntentID, Amount: 5000}
	for range 2 { // refused by the endpoint, and that answer is saved
		if _, err := e.psp.Refund(ctx, tooMuch); !errors.Is(err, psp.ErrInvalidRequest) {
			t.Errorf("over-refund: %v, want ErrInvalidRequest", err)
		}
	}
	rest, err := e.psp.Refund(ctx, psp.RefundRequest{IdempotencyKey: "pay_f:refund-3", PaymentIntentID: paid.PaymentIntentID})
	if err != nil || rest.Outcome != psp.Succeeded {
		t.Fatalf("refund of the rest: %+v, %v", rest, err)
	}
	refunds := e.sim.Refunds()
	if len(refunds) != 2 || refunds[0].Amount != 1000 || refunds[1].Amount != 2000 || refunds[0].IdempotencyKey != refund.IdempotencyKey {
		t.Errorf("refunds: %+v, want 1000 then 2000", refunds)
	}
	if c := wantCharges(t, e, 1)[0]; c.AmountRefunded != 3000 {
		t.Errorf("charge refunded %d, want 3000", c.AmountRefunded)
	}
	if _, err := e.psp.Refund(ctx, psp.RefundRequest{IdempotencyKey: "r-missing", PaymentIntentID: "pi_missing"}); !errors.Is(err, psp.ErrInvalidRequest) {
		t.Errorf("refund of an unknown PaymentIntent: %v", err)
	}
}

// Ids are never reused, even across Reset, so a persistent webhook inbox
// never mistakes a new event for an old one.
func TestIDsSurviveReset(t *testing.T) {
	e := setup(t)
	before := mustCharge(t, e, chargeReq("pay_i"))
	e.sim.Reset()
	wantCharges(t, e, 0)
	after := mustCharge(t, e, chargeReq("pay_i"))
	if after.Replayed || after.PaymentIntentID == before.PaymentIntentID || after.ChargeID == before.ChargeID {
		t.Errorf("after Reset: %+v; before: %+v", after, before)
	}
}

// post sends a raw form POST, as stripe-go would but with any body.
func post(t *testing.T, u, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk_test_sim")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitFor polls cond (the state of another goroutine) for up to 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
