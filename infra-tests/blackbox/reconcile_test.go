package blackbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/payment"
	pspclient "github.com/oncepay/oncepay/internal/psp"
)

// reconcileReport is the part of the reconcile function's answer the
// case reads (internal/reconcile.Response).
type reconcileReport struct {
	Reports []struct {
		RunID  int64          `json:"run_id"`
		Counts map[string]int `json:"counts"`
	} `json:"reports"`
}

// reconcile invokes the running stack's reconcile function over [from, to)
// through the local cloud's admin API, as make reconcile does.
func (s *surface) reconcile(ctx context.Context, from, to time.Time) (reconcileReport, error) {
	var out reconcileReport
	payload := map[string]any{"from": from.UTC().Format(time.RFC3339), "to": to.UTC().Format(time.RFC3339)}
	if _, err := post(ctx, s.httpc, s.adminURL+"/_local/invoke", map[string]any{"function": "reconcile", "payload": payload}, &out); err != nil {
		return out, fmt.Errorf("invoke reconcile: %w", err)
	}
	if len(out.Reports) != 1 {
		return out, fmt.Errorf("reconcile answered %d reports, want 1", len(out.Reports))
	}
	return out, nil
}

// resolve is POST /payments/{key}/resolve as caller: its status.
func (s *surface) resolve(ctx context.Context, caller, key string) (int, error) {
	tok, err := s.tokens.of(caller)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.apiURL+"payments/"+key+"/resolve", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := s.httpc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("resolve %s: %w", key, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// TestReconciliationAdoptsALostChargeAndReversesAVoidedOne plays the last
// word on the live stack, black-box: a charge at the PSP whose ledger row
// and events are missing (what a failover loses inside the replication
// lag: the charge made as the api would, with the payment's metadata, and
// no row), and a payment voided by a resolve call ("never ran") whose
// charge the PSP holds all the same (a zombie's). After the reconcile
// function runs over the span: the first is SUCCEEDED, credited once and
// pushed once; the second is refunded once, under its derived key, and the
// buyer told; a second run moves nothing. Not parallel: the run judges
// every payment in its span, and the suite's parallel cases must not be
// settled by it instead of by the part each of them tests.
func TestReconciliationAdoptsALostChargeAndReversesAVoidedOne(t *testing.T) {
	s := live(t)
	s.needAdmin(t)
	sim := s.needSim(t)
	ctx := context.Background()
	a := newActors("recon")
	body := a.body("42", 3000, "pm_card_visa")
	client, err := pspclient.New(pspclient.Config{APIKey: boot.LocalPSPKey, BaseURL: s.pspURL, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := payment.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	charge := func(key, pid string) {
		t.Helper()
		res, err := client.Charge(ctx, pspclient.ChargeRequest{
			IdempotencyKey: ids.ChargeKey(pid), PaymentID: pid, MerchantID: a.merchant, CallerID: a.caller,
			ClientKey: key, Fingerprint: req.Fingerprint(), Amount: body.Amount, Currency: body.Currency, PaymentMethod: body.PaymentMethod,
		})
		if err != nil || res.Outcome != pspclient.Succeeded {
			t.Fatalf("charge %s at the PSP: %+v %v", pid, res, err)
		}
	}
	from := time.Now().UTC().Truncate(time.Second)

	lost := a.paymentID("K1")
	charge("K1", lost)
	void := a.paymentID("K2")
	if st, err := s.resolve(ctx, a.caller, "K2"); err != nil || st != http.StatusOK {
		t.Fatalf("resolve K2 = %d %v, want 200 VOID", st, err)
	}
	charge("K2", void)
	to := time.Now().UTC().Truncate(time.Second).Add(2 * time.Second)
	time.Sleep(time.Until(to))

	first, err := s.reconcile(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first run: %+v", first.Reports[0])
	if c := first.Reports[0].Counts; c["adopted"] < 1 || c["reversed"] < 1 {
		t.Fatalf("first run counts %v, want the lost charge adopted and the voided one reversed", c)
	}

	// The lost charge: SUCCEEDED with that charge, credited once, pushed once.
	r, _, err := s.awaitSettled(ctx, lost, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s.expectOnce(ctx, t, a, lost, r, want{state: "SUCCEEDED", amount: body.Amount})

	// The voided one: VOID still, refunded once under its derived key, the
	// buyer told (REVERSED, the payment's replace id), nothing credited.
	charges, err := sim.charges(ctx, void)
	if err != nil || len(charges[void]) != 1 {
		t.Fatalf("charges of %s: %+v %v", void, charges[void], err)
	}
	var refunds []struct {
		IdempotencyKey string `json:"idempotency_key"`
		PaymentIntent  string `json:"payment_intent"`
		Charge         string `json:"charge"`
	}
	if _, err := get(ctx, s.httpc, s.pspURL+"/_sim/refunds", &refunds); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, rf := range refunds {
		if rf.Charge == charges[void][0].ID {
			n++
			if rf.IdempotencyKey != ids.ReversalKey(void, rf.PaymentIntent) {
				t.Errorf("the voided charge's refund carries key %q, want %q", rf.IdempotencyKey, ids.ReversalKey(void, rf.PaymentIntent))
			}
		}
	}
	if n != 1 {
		t.Errorf("the voided charge was refunded %d times, want once", n)
	}
	vr, err := s.inspect.read(ctx, void)
	if err != nil {
		t.Fatal(err)
	}
	if vr.Payment.State != "VOID" || len(vr.Credits) != 0 {
		t.Errorf("%s after the reversal: %s with %d credits, want VOID with none", void, vr.Payment.State, len(vr.Credits))
	}
	pushes, err := s.pushes.await(ctx, void, 1, 30*time.Second)
	if err != nil {
		t.Fatalf("%s: the buyer was not told: %v", void, err)
	}
	if p := pushes[0]; p.State != "REVERSED" || p.ReplaceID != void {
		t.Errorf("%s: push %+v, want REVERSED with the payment's replace id", void, p.Data)
	}
	s.pushes.settled(void, len(s.pushes.of(void)))

	// A second run over the span moves nothing.
	again, err := s.reconcile(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second run: %+v", again.Reports[0])
	if c := again.Reports[0].Counts; c["adopted"] != 0 || c["reversed"] != 0 || c["settled"] != 0 || c["agree"] < 2 {
		t.Errorf("second run counts %v, want nothing moved", c)
	}
	if _, err := get(ctx, s.httpc, s.pspURL+"/_sim/refunds", &refunds); err != nil {
		t.Fatal(err)
	}
	m := 0
	for _, rf := range refunds {
		if rf.Charge == charges[void][0].ID {
			m++
		}
	}
	r2, err := s.inspect.read(ctx, lost)
	if err != nil {
		t.Fatal(err)
	}
	if m != 1 || len(r2.Credits) != 1 {
		t.Errorf("after the second run: %d refunds of the voided charge, %d credits of the lost one; want 1 and 1", m, len(r2.Credits))
	}
}
