package psp

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/oncepay/oncepay/internal/psp/stripespec"
	"github.com/oncepay/oncepay/internal/psp/stripespec/oas"
)

// The operations the client uses, and the objects its webhooks carry.
var (
	specPaths      = []string{"/v1/payment_intents", "/v1/payment_intents/search", "/v1/payment_intents/{intent}", "/v1/refunds", "/v1/refunds/{refund}"}
	specComponents = []string{"event", "charge", "refund", "payment_intent", "error"}
)

var (
	specOnce sync.Once
	specDoc  *oas.Spec
	specErr  error
)

// loadSpec reads Stripe's OpenAPI spec (stripe-mock v0.203.0's, from the
// module cache) once per test binary; outside CI a missing spec skips, in
// CI it fails.
func loadSpec(t *testing.T) *oas.Spec {
	t.Helper()
	specOnce.Do(func() {
		var path string
		if path, specErr = oas.SpecPath(); specErr == nil {
			specDoc, specErr = oas.Load(path, specPaths, specComponents)
		}
	})
	if specErr != nil {
		if os.Getenv("CI") == "" {
			t.Skip(specErr)
		}
		t.Fatal(specErr)
	}
	return specDoc
}

// specCheck is an http.RoundTripper that checks every request the client
// sends against Stripe's OpenAPI spec and Stripe's documented value limits
// (stripespec), and every answer against the spec, and records what does
// not conform.
type specCheck struct {
	spec *oas.Spec
	mu   sync.Mutex
	seen []string // "METHOD /path status" of every exchange
	bad  []string
}

func newSpecCheck(t *testing.T) *specCheck {
	return &specCheck{spec: loadSpec(t)}
}

func (c *specCheck) client() *http.Client { return &http.Client{Transport: c} }

func (c *specCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	form, _ := url.ParseQuery(string(body))
	query := req.URL.Query()
	where := req.Method + " " + req.URL.Path
	if err := c.spec.ValidateRequest(req.Method, req.URL.Path, query, form); err != nil {
		c.flag(where, "request against the spec: %v", err)
	}
	values := form
	if req.Method == http.MethodGet {
		values = query
	}
	if v := stripespec.Check(req.Method, req.URL.Path, values, req.Header.Get("Idempotency-Key")); v != nil {
		c.flag(where, "request against Stripe's documented limits: %v", v)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	rbody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(rbody))
	if err := c.spec.ValidateResponse(req.Method, req.URL.Path, resp.StatusCode, rbody); err != nil {
		c.flag(where, "answer %d against the spec: %v", resp.StatusCode, err)
	}
	c.mu.Lock()
	c.seen = append(c.seen, fmt.Sprintf("%s %d", where, resp.StatusCode))
	c.mu.Unlock()
	return resp, nil
}

func (c *specCheck) flag(where, format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bad = append(c.bad, where+": "+fmt.Sprintf(format, args...))
}

// report fails the test for every exchange that did not conform, and if
// fewer than min exchanges were checked (the check was not in the path).
func (c *specCheck) report(t *testing.T, min int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.bad {
		t.Error(b)
	}
	if len(c.seen) < min {
		t.Errorf("only %d exchanges went through the spec check (%s), want at least %d", len(c.seen), strings.Join(c.seen, "; "), min)
	}
}
