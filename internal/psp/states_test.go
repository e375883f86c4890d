package psp

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"
)

// bodyRecorder keeps the form bodies of the POSTs it passes on.
type bodyRecorder struct {
	mu    sync.Mutex
	forms []url.Values
}

func (b *bodyRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && r.Body != nil {
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		_ = r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(raw))
		form, _ := url.ParseQuery(string(raw))
		b.mu.Lock()
		b.forms = append(b.forms, form)
		b.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (b *bodyRecorder) last() url.Values {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.forms) == 0 {
		return nil
	}
	return b.forms[len(b.forms)-1]
}

var threeDS = ChargeRequest{
	IdempotencyKey: "pay_3ds:charge", PaymentID: "pay_3ds", MerchantID: "m1",
	Amount: 3000, Currency: "USD", PaymentMethod: "pm_card_threeDSecure2Required",
}

// The charge is confirmed with error_on_requires_action=true, and Stripe's
// own mock accepts that request as valid against Stripe's OpenAPI spec: a
// card needing 3-D Secure is declined instead of parked in requires_action
// with nobody to authenticate it.
func TestContractStripeMockAcceptsErrorOnRequiresAction(t *testing.T) {
	baseURL := startStripeMock(t)
	rec := &bodyRecorder{}
	c, err := New(Config{APIKey: "sk_test_contract", BaseURL: baseURL, HTTPClient: &http.Client{Transport: rec, Timeout: 20 * time.Second},
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Charge(context.Background(), threeDS)
	if err != nil {
		t.Fatalf("Charge: stripe-mock refused the request: %v", err)
	}
	if res.HTTPStatus != http.StatusOK || res.PaymentIntentID == "" {
		t.Fatalf("Charge = %+v, want a decoded PaymentIntent", res)
	}
	if f := rec.last(); f.Get("error_on_requires_action") != "true" || f.Get("confirm") != "true" {
		t.Fatalf("sent %v, want confirm=true and error_on_requires_action=true", f)
	}
}

// Each PaymentIntent state reduced to an outcome: only succeeded is money
// taken; a 3-D Secure decline (402 authentication_required, what
// error_on_requires_action yields) is definite; processing, requires_action
// and requires_capture are open (Pending), never paid and never failed.
func TestPaymentIntentStatesAreClassified(t *testing.T) {
	pi := func(status string) string {
		return `{"id":"pi_1","object":"payment_intent","amount":3000,"currency":"usd","status":"` + status + `","latest_charge":null,"metadata":{"payment_id":"pay_3ds"}}`
	}
	authDecline := `{"error":{"type":"card_error","code":"authentication_required","decline_code":"authentication_required",` +
		`"message":"Your card was declined. This transaction requires authentication.","charge":"ch_1",` +
		`"payment_intent":{"id":"pi_1","object":"payment_intent","status":"requires_payment_method","latest_charge":"ch_1",` +
		`"last_payment_error":{"type":"card_error","code":"authentication_required","decline_code":"authentication_required"}}}}`
	for _, tc := range []struct {
		name, body  string
		status      int
		want        Outcome
		wantDecline string
	}{
		{"402 authentication_required is declined", authDecline, 402, Declined, "authentication_required"},
		{"requires_action is pending", pi("requires_action"), 200, Pending, ""},
		{"requires_capture is pending, not succeeded", pi("requires_capture"), 200, Pending, ""},
		{"processing is pending", pi("processing"), 200, Pending, ""},
		{"canceled is declined", pi("canceled"), 200, Declined, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &bodyRecorder{}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			c, err := New(Config{APIKey: "sk_test_unit", BaseURL: srv.URL, HTTPClient: &http.Client{Transport: rec},
				Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Charge(context.Background(), threeDS)
			if err != nil || res.Outcome != tc.want || res.DeclineCode != tc.wantDecline || res.PaymentIntentID != "pi_1" {
				t.Fatalf("Charge = %+v, %v; want %v %q on pi_1", res, err, tc.want, tc.wantDecline)
			}
			if rec.last().Get("error_on_requires_action") != "true" {
				t.Fatalf("sent %v without error_on_requires_action=true", rec.last())
			}
		})
	}
}
