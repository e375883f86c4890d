package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/albauth"
	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/testkit/albsign"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

// TestTheALBCallerIsTheSignedOneNotTheHeader (issue 17 item 4): behind the
// ALB the caller is the sub of the claims this stack's load balancer
// signed. A forged x-amzn-oidc-identity names no one (u1's signed claims
// with u2's identity header pay as u1); claims signed by another load
// balancer of the account, expired ones, or none are 401 and claim
// nothing; a function with no load balancer configured refuses every ALB
// event.
func TestTheALBCallerIsTheSignedOneNotTheHeader(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	ctx := context.Background()
	now := w.Clock.Now()
	send := func(h *api.Handler, oidc map[string]string, key string) (int, string) {
		hdr := map[string]string{"Idempotency-Key": key}
		for k, v := range oidc {
			hdr[k] = v
		}
		r, err := h.HandleALB(ctx, apitest.ALBEvent(http.MethodPost, "/payments", "u1", hdr, body3000, now))
		if err != nil {
			t.Fatal(err)
		}
		return r.StatusCode, r.Body
	}
	if st, body := send(w.API, map[string]string{"x-amzn-oidc-identity": "u2"}, "K1"); st != http.StatusCreated {
		t.Fatalf("u1's signed claims with a forged identity header: %d %s", st, body)
	}
	if p := w.Row("u1", "K1"); p.ID != ids.PaymentID(ids.Scope("u1", "K1")) {
		t.Fatalf("the payment is not u1's: %+v", p)
	}
	if n := w.Count(`SELECT count(*) FROM payments WHERE payment_id = $1`, ids.PaymentID(ids.Scope("u2", "K1"))); n != 0 {
		t.Fatal("the forged identity header made a payment of u2's")
	}
	other := albsign.New("arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/app/another/00000000000000aa")
	for name, data := range map[string]string{
		"another load balancer's claims": other.Sign("u2", now.Add(time.Hour)),
		"expired claims":                 albsign.Default.Sign("u2", now.Add(-albauth.Leeway)),
		"no claims":                      "",
	} {
		if st, body := send(w.API, map[string]string{"x-amzn-oidc-data": data, "x-amzn-oidc-identity": "u2"}, "K2"); st != http.StatusUnauthorized {
			t.Errorf("%s: %d %s, want 401", name, st, body)
		}
	}
	noALB := api.New(api.Deps{Claims: w.Claims, Ledger: w.Ledger, PSP: w.PSP, Clock: w.Clock, Timing: w.Timing})
	if st, body := send(noALB, nil, "K3"); st != http.StatusUnauthorized {
		t.Errorf("a function with no load balancer: %d %s, want 401", st, body)
	}
	if n := w.Count(`SELECT count(*) FROM payments`); n != 1 {
		t.Errorf("%d payments, want only u1's first", n)
	}
	if n := len(w.Sim.Charges()); n != 1 {
		t.Errorf("%d charges, want 1", n)
	}
}
