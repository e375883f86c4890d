package psp

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"
)

// TestContractStripeMock runs the client's calls against stripe-mock,
// Stripe's own mock, which validates every request against Stripe's OpenAPI
// spec: a parameter our client sends that Stripe would refuse fails here.
// stripe-mock checks types, not values (it accepted amount 1 and 10^12,
// currency xyz, 51 metadata keys, a 300-character key, a malformed query),
// so every request also goes through the spec check and Stripe's
// documented value limits (package stripespec) on the way out, and every
// answer through the spec. stripe-mock is stateless, so only the shape of
// requests and answers is tested, not the semantics (the simulator's tests
// do that).
func TestContractStripeMock(t *testing.T) {
	baseURL := startStripeMock(t)
	check := newSpecCheck(t)
	c, err := New(Config{APIKey: "sk_test_contract", BaseURL: baseURL, HTTPClient: check.client(),
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer check.report(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	charged, err := c.Charge(ctx, ChargeRequest{
		IdempotencyKey: "pay_contract:charge",
		PaymentID:      "pay_contract",
		MerchantID:     "m1",
		Amount:         3000,
		Currency:       "USD",
		PaymentMethod:  "pm_card_visa",
	})
	if err != nil {
		t.Fatalf("Charge: stripe-mock refused the request: %v", err)
	}
	if charged.Outcome == Unknown || charged.HTTPStatus != http.StatusOK || charged.PaymentIntentID == "" {
		t.Fatalf("Charge: %+v, want a decoded PaymentIntent", charged)
	}

	found, err := c.Lookup(ctx, "pay_contract")
	if err != nil {
		t.Fatalf("Lookup: stripe-mock refused the request: %v", err)
	}
	if found.Outcome == Unknown || found.HTTPStatus != http.StatusOK {
		t.Fatalf("Lookup: %+v, want a decoded search result", found)
	}

	got, err := c.Retrieve(ctx, charged.PaymentIntentID)
	if err != nil || got.PaymentIntentID == "" {
		t.Fatalf("Retrieve: %+v, %v", got, err)
	}

	refunded, err := c.Refund(ctx, RefundRequest{
		IdempotencyKey:  "pay_contract:cancel:refund",
		PaymentIntentID: charged.PaymentIntentID,
		Amount:          1000,
		PaymentID:       "pay_contract",
	})
	if err != nil {
		t.Fatalf("Refund: stripe-mock refused the request: %v", err)
	}
	if refunded.Outcome == Unknown || refunded.RefundID == "" {
		t.Fatalf("Refund: %+v, want a decoded Refund", refunded)
	}

	// The look-up of a refund behind a saved 5xx: a list by charge= or
	// payment_intent= (stripe-mock's metadata is its own, so what matters
	// is that the request and the list answer have Stripe's shape).
	listed, err := c.FindRefund(ctx, charged.PaymentIntentID, "", "")
	if err != nil || listed.HTTPStatus != http.StatusOK || listed.Outcome == Unknown {
		t.Fatalf("FindRefund: %+v, %v; want a decoded list", listed, err)
	}

	// The check can fail: a parameter Stripe does not know is refused, and
	// that refusal is classified as a definite invalid request. (Sent by a
	// client of its own: the spec check would rightly flag it.)
	raw, err := New(Config{APIKey: "sk_test_contract", BaseURL: baseURL, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	params := &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(3000), Currency: stripe.String("usd")}
	params.AddExtra("not_a_stripe_parameter", "1")
	params.SetIdempotencyKey("pay_contract:bogus")
	params.Context = ctx
	key, _ := raw.key(ctx)
	err = raw.api.Call(http.MethodPost, "/v1/payment_intents", key, params, &stripe.PaymentIntent{})
	if _, cerr := classifyError(err); !errors.Is(cerr, ErrInvalidRequest) {
		t.Fatalf("unknown parameter: classified %v, want ErrInvalidRequest (is stripe-mock validating?)", cerr)
	}
}

// startStripeMock starts the pinned stripe-mock from <repo>/.local/bin on a
// free loopback port and returns its base URL. Outside CI a missing binary
// skips the test; in CI it fails it.
func startStripeMock(t *testing.T) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("find the repository root: %v", err)
	}
	bin := filepath.Join(root, ".local", "bin", "stripe-mock")
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("stripe-mock not installed at %s (make setup installs it)", bin)
		}
		t.Fatalf("stripe-mock missing at %s in CI: %v", bin, err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	// -http-addr rather than -http-port: the same flag with the host pinned,
	// so the mock listens on loopback only.
	cmd := exec.Command(bin, "-http-addr", addr)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("start stripe-mock: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	base := "http://" + addr
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(base + "/v1/payment_intents/pi_ready")
		if err == nil {
			resp.Body.Close()
			return base
		}
		if time.Now().After(deadline) {
			t.Fatalf("stripe-mock did not start on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// repoRoot walks up from the test's directory to the one holding go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the test directory")
		}
		dir = parent
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
