package oas_test

import (
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/oncepay/oncepay/internal/psp/stripespec/oas"
)

var (
	specOnce sync.Once
	spec     *oas.Spec
	specErr  error
)

// load reads the spec once per test binary. Outside CI a missing module
// cache entry skips; in CI it fails.
func load(t *testing.T) *oas.Spec {
	t.Helper()
	specOnce.Do(func() {
		var path string
		if path, specErr = oas.SpecPath(); specErr == nil {
			spec, specErr = oas.Load(path,
				[]string{"/v1/payment_intents", "/v1/payment_intents/search", "/v1/payment_intents/{intent}", "/v1/refunds", "/v1/refunds/{refund}"},
				[]string{"event", "charge", "refund", "payment_intent"})
		}
	})
	if specErr != nil {
		if os.Getenv("CI") == "" {
			t.Skip(specErr)
		}
		t.Fatal(specErr)
	}
	return spec
}

func form(s string) url.Values {
	v, err := url.ParseQuery(s)
	if err != nil {
		panic(err)
	}
	return v
}

// The spec is the version stripe-mock v0.203.0 embeds; say which, so a
// reader can compare it with the API version stripe-go pins.
func TestSpecVersionIsKnown(t *testing.T) {
	if v := load(t).Version(); !strings.Contains(v, ".") {
		t.Fatalf("spec version %q", v)
	}
	t.Logf("Stripe OpenAPI spec version %s (stripe-mock %s)", load(t).Version(), oas.StripeMockVersion)
}

func TestRequestsAreCheckedAgainstTheSpec(t *testing.T) {
	s := load(t)
	const ok = "amount=3000&currency=usd&confirm=true&payment_method=pm_card_visa&automatic_payment_methods[enabled]=true&automatic_payment_methods[allow_redirects]=never&metadata[payment_id]=pay_1"
	if err := s.ValidateRequest("POST", "/v1/payment_intents", nil, form(ok)); err != nil {
		t.Fatalf("the client's charge: %v", err)
	}
	for name, body := range map[string]string{
		"unknown parameter":   ok + "&not_a_param=1",
		"amount not integer":  strings.Replace(ok, "amount=3000", "amount=30.5", 1),
		"confirm not boolean": strings.Replace(ok, "confirm=true", "confirm=yes", 1),
		"bad enum":            strings.Replace(ok, "allow_redirects]=never", "allow_redirects]=sometimes", 1),
		"missing currency":    strings.Replace(ok, "currency=usd&", "", 1),
	} {
		if err := s.ValidateRequest("POST", "/v1/payment_intents", nil, form(body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := s.ValidateRequest("GET", "/v1/payment_intents/search", form("query=metadata['payment_id']:'p'&limit=10&page=abc"), nil); err != nil {
		t.Errorf("search: %v", err)
	}
	if err := s.ValidateRequest("GET", "/v1/payment_intents/search", form("limit=10"), nil); err == nil {
		t.Error("search without query: accepted")
	}
	if err := s.ValidateRequest("GET", "/v1/payment_intents/pi_123", nil, nil); err != nil {
		t.Errorf("retrieve: %v", err)
	}
	// What the spec cannot say: these are the value rules' business.
	for _, body := range []string{
		strings.Replace(ok, "amount=3000", "amount=1", 1),
		strings.Replace(ok, "amount=3000", "amount=1000000000000", 1),
		strings.Replace(ok, "currency=usd", "currency=xyz", 1),
	} {
		if err := s.ValidateRequest("POST", "/v1/payment_intents", nil, form(body)); err != nil {
			t.Errorf("the spec refused %q, which it was thought not to check: %v", body, err)
		}
	}
}

func TestResponsesAreCheckedAgainstTheSpec(t *testing.T) {
	s := load(t)
	if err := s.ValidateResponse("GET", "/v1/payment_intents/pi_1", 404,
		[]byte(`{"error":{"type":"invalid_request_error","message":"No such payment_intent"}}`)); err != nil {
		t.Errorf("error body: %v", err)
	}
	if err := s.ValidateResponse("GET", "/v1/payment_intents/pi_1", 404, []byte(`{"error":{"type":"not_a_type"}}`)); err == nil {
		t.Error("an error body with an unknown type was accepted")
	}
	if err := s.ValidateResponse("GET", "/v1/payment_intents/pi_1", 200, []byte(`{"id":"pi_1","object":"payment_intent"}`)); err == nil {
		t.Error("a PaymentIntent without its required fields was accepted")
	}
}
