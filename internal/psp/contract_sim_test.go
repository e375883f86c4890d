package psp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/psp/stripespec"
)

const contractSecret = "whsec_contract"

// simWorld is the simulator behind a real server, a client whose traffic
// goes through the spec check, and a webhook endpoint that checks every
// event against the spec.
type simWorld struct {
	sim    *pspsim.Sim
	url    string
	check  *specCheck
	client *Client
	mu     sync.Mutex
	events []string // event types received
}

func newSimWorld(t *testing.T) *simWorld {
	t.Helper()
	w := &simWorld{check: newSpecCheck(t)}
	hooks := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if _, err := ParseWebhook(body, r.Header.Get("Stripe-Signature"), contractSecret, time.Minute); err != nil {
			w.check.flag("webhook", "does not verify: %v", err)
		}
		if err := w.check.spec.ValidateEvent(body); err != nil {
			w.check.flag("webhook", "payload against the spec: %v", err)
		}
		var ev struct{ Type string }
		_ = jsonUnmarshal(body, &ev)
		w.mu.Lock()
		w.events = append(w.events, ev.Type)
		w.mu.Unlock()
	}))
	t.Cleanup(hooks.Close)
	w.sim = pspsim.New(pspsim.Config{
		WebhookURL: hooks.URL, WebhookSecret: contractSecret, WebhookEvents: []string{"*"}, ManualWebhooks: true,
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	srv := httptest.NewServer(w.sim)
	t.Cleanup(func() { srv.Close(); w.sim.Close() })
	w.url = srv.URL
	var err error
	w.client, err = New(Config{APIKey: "sk_test_sim", BaseURL: srv.URL, HTTPClient: w.check.client(),
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestContractSimulatorSpeaksStripesSpec runs every call the client makes
// against the simulator — success, decline, key reuse, a search long
// enough for a second page, a missing object, a refund that settles later —
// and checks every request, every answer (error bodies included) and every
// webhook payload against Stripe's OpenAPI spec, so what passes locally has
// Stripe's shape.
func TestContractSimulatorSpeaksStripesSpec(t *testing.T) {
	w := newSimWorld(t)
	defer w.check.report(t, 24)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	req := ChargeRequest{IdempotencyKey: "pay_c:charge", PaymentID: "pay_c", MerchantID: "m1", Amount: 3000, Currency: "USD", PaymentMethod: "pm_card_visa"}
	paid, err := w.client.Charge(ctx, req)
	if err != nil || paid.Outcome != Succeeded {
		t.Fatalf("Charge: %+v, %v", paid, err)
	}
	if again, err := w.client.Charge(ctx, req); err != nil || !again.Replayed {
		t.Fatalf("replay: %+v, %v", again, err)
	}
	reuse := req
	reuse.Amount = 4000
	if _, err := w.client.Charge(ctx, reuse); !errors.Is(err, ErrKeyReuse) {
		t.Fatalf("key reuse: %v", err)
	}
	declined, err := w.client.Charge(ctx, ChargeRequest{IdempotencyKey: "pay_d:charge", PaymentID: "pay_d", Amount: 3000, Currency: "usd", PaymentMethod: "pm_card_chargeDeclined"})
	if err != nil || declined.Outcome != Declined {
		t.Fatalf("decline: %+v, %v", declined, err)
	}

	// Twelve attempts carrying one reference: the client's search (limit
	// 10) needs a second page.
	for i := range 12 {
		if _, err := w.client.Charge(ctx, ChargeRequest{IdempotencyKey: fmt.Sprintf("pay_many:attempt-%d:sim", i), PaymentID: "pay_many",
			Amount: 3000, Currency: "usd", PaymentMethod: "pm_card_visa"}); err != nil {
			t.Fatal(err)
		}
	}
	if found, err := w.client.Lookup(ctx, "pay_many"); err != nil || found.Outcome != Succeeded {
		t.Fatalf("Lookup: %+v, %v", found, err)
	}
	if got, err := w.client.Retrieve(ctx, paid.PaymentIntentID); err != nil || got.PaymentIntentID != paid.PaymentIntentID {
		t.Fatalf("Retrieve: %+v, %v", got, err)
	}
	if _, err := w.client.Retrieve(ctx, "pi_missing"); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("Retrieve missing: %v", err)
	}

	if err := w.sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: "pay_c:cancel:refund"}, Kind: pspsim.FaultRefundPending}); err != nil {
		t.Fatal(err)
	}
	refunded, err := w.client.Refund(ctx, RefundRequest{IdempotencyKey: "pay_c:cancel:refund", PaymentIntentID: paid.PaymentIntentID, PaymentID: "pay_c"})
	if err != nil || refunded.Outcome != Pending {
		t.Fatalf("Refund: %+v, %v", refunded, err)
	}
	// A pending refund is followed by its id (GET /v1/refunds/{id}); the
	// fault's zero delay has settled it by the time it is read.
	if got, err := w.client.RetrieveRefund(ctx, refunded.RefundID); err != nil || got.Outcome != Succeeded || got.RefundID != refunded.RefundID {
		t.Fatalf("RetrieveRefund: %+v, %v", got, err)
	}
	if _, err := w.client.RetrieveRefund(ctx, "re_missing"); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("RetrieveRefund missing: %v", err)
	}
	// A refund by the charge the ledger holds (no search needed).
	other, err := w.client.Charge(ctx, ChargeRequest{IdempotencyKey: "pay_e:charge", PaymentID: "pay_e", Amount: 3000, Currency: "usd", PaymentMethod: "pm_card_visa"})
	if err != nil || other.Outcome != Succeeded || other.ChargeID == "" {
		t.Fatalf("Charge: %+v, %v", other, err)
	}
	if byCharge, err := w.client.Refund(ctx, RefundRequest{IdempotencyKey: "pay_e:cancel:refund", ChargeID: other.ChargeID, PaymentID: "pay_e"}); err != nil ||
		byCharge.Outcome != Succeeded || byCharge.ChargeID != other.ChargeID {
		t.Fatalf("Refund by charge: %+v, %v", byCharge, err)
	}
	// A refund made behind a saved 500 (error_5xx_after_charge): the key
	// answers 500, the list of the charge's refunds (GET /v1/refunds?charge=,
	// and ?payment_intent=) finds it; another payment's reference finds
	// nothing.
	third, err := w.client.Charge(ctx, ChargeRequest{IdempotencyKey: "pay_f:charge", PaymentID: "pay_f", Amount: 3000, Currency: "usd", PaymentMethod: "pm_card_visa"})
	if err != nil || third.Outcome != Succeeded {
		t.Fatalf("Charge: %+v, %v", third, err)
	}
	if err := w.sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: "pay_f:cancel:refund"}, Kind: pspsim.FaultError5xxAfterCharge}); err != nil {
		t.Fatal(err)
	}
	if saved, err := w.client.Refund(ctx, RefundRequest{IdempotencyKey: "pay_f:cancel:refund", ChargeID: third.ChargeID, PaymentID: "pay_f"}); err != nil ||
		saved.Outcome != Unknown || saved.HTTPStatus != http.StatusInternalServerError {
		t.Fatalf("Refund behind a saved 500: %+v, %v", saved, err)
	}
	for _, by := range [][2]string{{"", third.ChargeID}, {third.PaymentIntentID, ""}} {
		found, err := w.client.FindRefund(ctx, by[0], by[1], "pay_f")
		if err != nil || found.Outcome != Succeeded || found.RefundID == "" || found.ChargeID != third.ChargeID || found.PaymentIntentID != third.PaymentIntentID {
			t.Fatalf("FindRefund %v: %+v, %v", by, found, err)
		}
	}
	if none, err := w.client.FindRefund(ctx, "", third.ChargeID, "pay_other"); err != nil || none.Outcome != NotFound {
		t.Fatalf("FindRefund of another reference: %+v, %v", none, err)
	}

	if _, err := w.sim.FlushWebhooks(ctx); err != nil {
		t.Fatalf("webhooks: %v", err)
	}
	pages := 0
	for _, s := range w.check.seen {
		if strings.HasPrefix(s, "GET /v1/payment_intents/search") {
			pages++
		}
	}
	if pages < 2 {
		t.Errorf("%d search pages checked, want the second page too", pages)
	}
	w.mu.Lock()
	got := strings.Join(w.events, " ")
	w.mu.Unlock()
	for _, want := range []string{"payment_intent.succeeded", "charge.succeeded", "payment_intent.payment_failed", "charge.failed",
		"refund.created", "charge.refunded", "refund.updated", "charge.refund.updated"} {
		if !strings.Contains(got, want) {
			t.Errorf("no %s among the webhooks checked (%s)", want, got)
		}
	}
}

// TestSimulatorRefusesWhatStripeRefuses sends what stripe-mock accepted and
// Stripe refuses (issue 22): the simulator answers each with Stripe's 400
// invalid_request_error naming the parameter, saves nothing and charges
// nothing — so a request that passes locally passes at Stripe.
func TestSimulatorRefusesWhatStripeRefuses(t *testing.T) {
	w := newSimWorld(t)
	const charge = "amount=3000&currency=usd&confirm=true&payment_method=pm_card_visa&automatic_payment_methods[enabled]=true&automatic_payment_methods[allow_redirects]=never&metadata[payment_id]=pay_r"
	manyKeys := charge
	for i := range 50 {
		manyKeys += fmt.Sprintf("&metadata[k%d]=v", i)
	}
	for _, tc := range []struct {
		name, method, path, body, key, param string
	}{
		{"amount 1", "POST", "/v1/payment_intents", strings.Replace(charge, "3000", "1", 1), "r1", "amount"},
		{"amount 10^12", "POST", "/v1/payment_intents", strings.Replace(charge, "3000", "1000000000000", 1), "r2", "amount"},
		{"currency xyz", "POST", "/v1/payment_intents", strings.Replace(charge, "usd", "xyz", 1), "r3", "currency"},
		{"51 metadata keys", "POST", "/v1/payment_intents", manyKeys, "r4", "metadata"},
		{"300-character key", "POST", "/v1/payment_intents", charge, strings.Repeat("k", 300), ""},
		{"malformed query", "GET", "/v1/payment_intents/search?query=" + url.QueryEscape("metadata['payment_id']:pay_r"), "", "", "query"},
	} {
		var body io.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
		}
		req, _ := http.NewRequest(tc.method, w.url+tc.path, body)
		req.Header.Set("Authorization", "Bearer sk_test_sim")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if tc.key != "" {
			req.Header.Set("Idempotency-Key", tc.key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error struct{ Type, Param string }
		}
		_ = jsonUnmarshal(raw, &e)
		if resp.StatusCode != http.StatusBadRequest || e.Error.Type != "invalid_request_error" || e.Error.Param != tc.param {
			t.Errorf("%s: %d %s, want 400 invalid_request_error param %q", tc.name, resp.StatusCode, raw, tc.param)
		}
		if err := w.check.spec.ValidateResponse(tc.method, strings.SplitN(tc.path, "?", 2)[0], resp.StatusCode, raw); err != nil {
			t.Errorf("%s: the refusal is not Stripe's error shape: %v", tc.name, err)
		}
		// The rule that refused it is the one the contract check applies
		// to the client's own requests.
		vals, _ := url.ParseQuery(tc.body)
		if tc.method == "GET" {
			vals = req.URL.Query()
		}
		if v := stripespec.Check(tc.method, req.URL.Path, vals, tc.key); v == nil {
			t.Errorf("%s: stripespec.Check accepts it", tc.name)
		}
	}
	if n := len(w.sim.Charges()); n != 0 {
		t.Errorf("%d charges made by refused requests", n)
	}
	// Nothing was saved: a key refused for its request can be used again.
	if _, err := w.client.Charge(context.Background(), ChargeRequest{IdempotencyKey: "r1", PaymentID: "pay_r", Amount: 3000, Currency: "usd", PaymentMethod: "pm_card_visa"}); err != nil {
		t.Errorf("the key of a refused request: %v", err)
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
