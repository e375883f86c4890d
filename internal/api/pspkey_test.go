package api_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/psp"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

// TestAnUnreadablePSPKeyChargesNothingAndNeverFailsThePayment: while the
// PSP's API key cannot be read (Secrets Manager down past its retries, no
// value cached), the api's PSP call is not sent (psp.ErrNotSent). That is
// no refusal: the payment is left UNKNOWN with a 202, never FAILED, and
// nothing is charged; once the key reads again, the resolver's replay of
// the same key charges it once and the repeat answers 201.
func TestAnUnreadablePSPKeyChargesNothingAndNeverFailsThePayment(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{Timing: testTiming()})
	var readable atomic.Bool
	c, err := psp.New(psp.Config{BaseURL: w.SimURL, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Key: func(context.Context) (string, error) {
			if !readable.Load() {
				return "", errors.New("secrets: get psp: secrets manager answered 503 InternalServiceError")
			}
			return "sk_test_x", nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	w.PSP = c
	w.Rebuild()
	pid := ids.PaymentID(ids.Scope("u1", "K1"))

	first := w.Pay("u1", "K1", body3000)
	if first.Status != http.StatusAccepted {
		t.Fatalf("with no key: %d %s, want 202 (unknown, left to the resolver)", first.Status, first.Body)
	}
	if p := w.Row("u1", "K1"); p.State != ledger.Unknown {
		t.Fatalf("row %s, want UNKNOWN (never FAILED: nothing was refused)", p.State)
	}
	if n := len(w.Sim.Charges()); n != 0 {
		t.Fatalf("%d charges with no key, want 0", n)
	}
	if got := w.Metric(psp.MetricKeyUnreadable); got != 1 {
		t.Fatalf("%s = %v, want 1 (the stack alarms on it)", psp.MetricKeyUnreadable, got)
	}

	readable.Store(true)
	w.Clock.Advance(10 * time.Second)
	r := w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{PSP: c})
	if _, err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := w.Charges(ids.ChargeKey(pid)); n != 1 || len(w.Sim.Charges()) != 1 {
		t.Fatalf("charges under %s = %d (all %d), want 1", ids.ChargeKey(pid), n, len(w.Sim.Charges()))
	}
	again := w.Pay("u1", "K1", body3000)
	if again.Status != http.StatusCreated {
		t.Fatalf("the repeat after the resolver: %d %s, want 201", again.Status, again.Body)
	}
	if p := w.Row("u1", "K1"); p.State != ledger.Succeeded {
		t.Errorf("row %s after the resolver, want SUCCEEDED", p.State)
	}
}
