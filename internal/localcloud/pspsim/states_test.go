package pspsim_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/psp"
)

// piBody is the part of a PaymentIntent these tests read from a raw reply.
type piBody struct {
	ID               string  `json:"id"`
	Status           string  `json:"status"`
	AmountCapturable int64   `json:"amount_capturable"`
	LatestCharge     *string `json:"latest_charge"`
	NextAction       *struct {
		Type string `json:"type"`
	} `json:"next_action"`
}

func decodePI(t *testing.T, body string) piBody {
	t.Helper()
	var pi piBody
	if err := json.Unmarshal([]byte(body), &pi); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return pi
}

const confirmForm = "amount=3000&currency=usd&confirm=true&metadata[payment_id]=pay_s&payment_method="

// Stripe's 3-D Secure test cards, confirmed without
// error_on_requires_action, park the PaymentIntent in requires_action
// (next_action use_stripe_sdk) and charge nothing; the client reads that
// as Pending, never as paid.
func TestAThreeDSecureCardWithoutErrorOnRequiresActionWaitsInRequiresAction(t *testing.T) {
	for _, pm := range []string{"pm_card_threeDSecure2Required", "pm_card_authenticationRequired"} {
		t.Run(pm, func(t *testing.T) {
			e := setup(t)
			status, body := post(t, e.url+"/v1/payment_intents", "pay_s:charge", confirmForm+pm)
			pi := decodePI(t, body)
			if status != http.StatusOK || pi.Status != "requires_action" || pi.NextAction == nil || pi.NextAction.Type != "use_stripe_sdk" {
				t.Fatalf("confirm = %d %s, want 200 requires_action with next_action use_stripe_sdk", status, body)
			}
			wantCharges(t, e, 0)
			got, err := e.psp.Retrieve(context.Background(), pi.ID)
			if err != nil || got.Outcome != psp.Pending {
				t.Fatalf("Retrieve = %+v, %v; want Pending", got, err)
			}
		})
	}
}

// The client confirms with error_on_requires_action (a server-side flow
// has nobody to authenticate): Stripe then declines a card that needs
// authentication, a 402 card_error authentication_required, and the
// PaymentIntent waits for another payment method. Definite: nothing
// charged, a payment_failed webhook, and the same answer on a replay and
// on a read.
func TestErrorOnRequiresActionDeclinesAThreeDSecureCardWithAuthenticationRequired(t *testing.T) {
	e := setup(t)
	req := chargeReq("pay_3ds")
	req.PaymentMethod = "pm_card_threeDSecure2Required"
	res := mustCharge(t, e, req)
	if res.Outcome != psp.Declined || res.DeclineCode != "authentication_required" || res.HTTPStatus != http.StatusPaymentRequired || res.PaymentIntentID == "" {
		t.Fatalf("charge = %+v, want a 402 decline authentication_required", res)
	}
	wantCharges(t, e, 0)
	again := mustCharge(t, e, req)
	if !again.Replayed || again.Outcome != psp.Declined || again.DeclineCode != "authentication_required" {
		t.Fatalf("replay = %+v, want the saved decline", again)
	}
	got, err := e.psp.Retrieve(context.Background(), res.PaymentIntentID)
	if err != nil || got.Outcome != psp.Declined || got.DeclineCode != "authentication_required" {
		t.Fatalf("Retrieve = %+v, %v", got, err)
	}
	flush(t, e)
	if evs := e.hooks.events(t); len(evs) != 1 || evs[0].Type != "payment_intent.payment_failed" || evs[0].DeclineCode != "authentication_required" {
		t.Fatalf("webhooks = %+v, want one payment_failed authentication_required", evs)
	}
}

// A bank debit (Stripe's pm_usBankAccount_success) is accepted and left
// processing: not charged yet, and Pending to the client, so the resolver
// keeps asking instead of settling it either way. Days later (ACH: up to
// four business days) Stripe finishes it by itself: succeeded, charged,
// and a payment_intent.succeeded webhook; a replay of the confirm still
// answers the saved "processing".
func TestABankDebitIsProcessingAndPendingNotCharged(t *testing.T) {
	// An endpoint subscribed to processing as well as the defaults.
	e := setup(t, func(c *pspsim.Config) {
		c.WebhookEvents = []string{"payment_intent.processing", "payment_intent.succeeded", "payment_intent.payment_failed"}
	})
	req := chargeReq("pay_ach")
	req.PaymentMethod = "pm_usBankAccount_success"
	res := mustCharge(t, e, req)
	if res.Outcome != psp.Pending || res.HTTPStatus != http.StatusOK || res.PaymentIntentID == "" {
		t.Fatalf("charge = %+v, want Pending", res)
	}
	wantCharges(t, e, 0)
	got, err := e.psp.Retrieve(context.Background(), res.PaymentIntentID)
	if err != nil || got.Outcome != psp.Pending {
		t.Fatalf("Retrieve = %+v, %v; want Pending", got, err)
	}
	found, err := e.psp.Lookup(context.Background(), "pay_ach")
	if err != nil || found.Outcome != psp.Pending || found.PaymentIntentID != res.PaymentIntentID {
		t.Fatalf("Lookup = %+v, %v; want the processing PaymentIntent", found, err)
	}

	e.clock.Advance(4*24*time.Hour - time.Minute)
	if got, err := e.psp.Retrieve(context.Background(), res.PaymentIntentID); err != nil || got.Outcome != psp.Pending {
		t.Fatalf("a minute before settlement: %+v, %v; want Pending", got, err)
	}
	e.clock.Advance(time.Minute)
	done, err := e.psp.Lookup(context.Background(), "pay_ach")
	if err != nil || done.Outcome != psp.Succeeded || done.ChargeID == "" {
		t.Fatalf("after settlement: %+v, %v; want Succeeded with its charge", done, err)
	}
	if ch := wantCharges(t, e, 1); ch[0].PaymentIntent != res.PaymentIntentID || ch[0].IdempotencyKey != req.IdempotencyKey || ch[0].ID != done.ChargeID {
		t.Fatalf("charge = %+v", ch[0])
	}
	if got, err := e.psp.Retrieve(context.Background(), res.PaymentIntentID); err != nil || got.Outcome != psp.Succeeded {
		t.Fatalf("Retrieve after settlement = %+v, %v", got, err)
	}
	wantCharges(t, e, 1) // settled once
	flush(t, e)
	var types []string
	for _, ev := range e.hooks.events(t) {
		types = append(types, ev.Type)
	}
	if len(types) != 2 || types[0] != "payment_intent.processing" || types[1] != "payment_intent.succeeded" {
		t.Fatalf("webhooks = %v, want processing then succeeded", types)
	}
}

// capture_method=manual authorizes and stops at requires_capture: the
// amount is capturable, nothing is taken, and the client reads it as
// Pending, never as Succeeded (no merchant is credited for a hold).
func TestManualCaptureStopsAtRequiresCaptureAndTakesNothing(t *testing.T) {
	e := setup(t)
	status, body := post(t, e.url+"/v1/payment_intents", "pay_s:charge", confirmForm+"pm_card_visa&capture_method=manual")
	pi := decodePI(t, body)
	if status != http.StatusOK || pi.Status != "requires_capture" || pi.AmountCapturable != 3000 {
		t.Fatalf("confirm = %d %s, want requires_capture with 3000 capturable", status, body)
	}
	wantCharges(t, e, 0)
	got, err := e.psp.Retrieve(context.Background(), pi.ID)
	if err != nil || got.Outcome != psp.Pending {
		t.Fatalf("Retrieve = %+v, %v; want Pending", got, err)
	}
	if status, body := post(t, e.url+"/v1/payment_intents", "pay_s2:charge", confirmForm+"pm_card_visa&capture_method=later"); status != http.StatusBadRequest {
		t.Fatalf("capture_method=later = %d %s, want 400", status, body)
	}
}

// Stripe refuses a payment method id it does not hold with 400
// invalid_request_error resource_missing, before any attempt: nothing is
// charged and nothing is saved under the key, so the key still works for
// a correct request.
func TestAnUnknownPaymentMethodIsRefusedAsResourceMissing(t *testing.T) {
	e := setup(t)
	req := chargeReq("pay_x")
	req.PaymentMethod = "pm_card_madeUp"
	res, err := e.psp.Charge(context.Background(), req)
	var apiErr *psp.APIError
	if !errors.Is(err, psp.ErrInvalidRequest) || !errors.As(err, &apiErr) || apiErr.HTTPStatus != http.StatusBadRequest ||
		apiErr.Type != "invalid_request_error" || apiErr.Code != "resource_missing" || apiErr.Param != "payment_method" {
		t.Fatalf("charge = %+v, %v; want 400 invalid_request_error resource_missing on payment_method", res, err)
	}
	wantCharges(t, e, 0)
	req.PaymentMethod = "pm_card_visa"
	if res := mustCharge(t, e, req); res.Outcome != psp.Succeeded || res.Replayed {
		t.Fatalf("the same key with a known method = %+v, want a fresh success", res)
	}
}

// Every payment method the rest of the suite, the demo and the chaos
// runner send still does what they expect.
func TestThePaymentMethodsTheSuiteUsesAreKnown(t *testing.T) {
	e := setup(t)
	for pm, want := range map[string]string{
		"pm_card_visa":                            "",
		"pm_card_chargeDeclined":                  "generic_decline",
		"pm_card_chargeDeclinedInsufficientFunds": "insufficient_funds",
		"pm_card_chargeDeclinedExpiredCard":       "expired_card",
	} {
		req := chargeReq("pay_" + pm)
		req.PaymentMethod = pm
		res := mustCharge(t, e, req)
		switch {
		case want == "" && res.Outcome != psp.Succeeded:
			t.Errorf("%s = %+v, want Succeeded", pm, res)
		case want != "" && (res.Outcome != psp.Declined || res.DeclineCode != want):
			t.Errorf("%s = %+v, want Declined %s", pm, res, want)
		}
	}
}
