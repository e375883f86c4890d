package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/albauth"
	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/problem"
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

// Behind the ALB the caller is authenticated by the load balancer's
// session cookie, which a browser attaches to a cross-site form post too.
// So a state-changing request through the ALB must be one no page can send
// without a CORS preflight: JSON, declared as such. A form-style resolve
// (application/x-www-form-urlencoded, multipart/form-data, text/plain or no
// type, no custom header) is 400 problem+json naming Content-Type and
// writes nothing: the victim's unsent key is not voided. The same resolve
// as the client sends it (application/json) voids it; over the HTTP API,
// whose bearer token no browser attaches by itself, nothing changes.
func TestAFormStyleRequestThroughTheALBIsRefusedAndWritesNothing(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	ctx := context.Background()
	now := w.Clock.Now()
	for _, c := range []struct{ path, ctype, body string }{
		{"/payments/K1/resolve", "application/x-www-form-urlencoded", "a=b"},
		{"/payments/K1/resolve", "multipart/form-data; boundary=x", "--x--"},
		{"/payments/K1/resolve", "text/plain", ""},
		{"/payments/K1/resolve", "", ""},
		{"/payments/K1/refund", "application/x-www-form-urlencoded", "a=b"},
		{"/payments", "text/plain", body3000},
	} {
		e := apitest.ALBEvent(http.MethodPost, c.path, "u1", nil, c.body, now)
		delete(e.Headers, "content-type")
		if c.ctype != "" {
			e.Headers["content-type"] = c.ctype
		}
		r, err := w.API.HandleALB(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		var p problem.Problem
		if r.StatusCode != http.StatusBadRequest || r.Headers["Content-Type"] != problem.ContentType ||
			json.Unmarshal([]byte(r.Body), &p) != nil || p.Extensions["field"] != "Content-Type" {
			t.Errorf("%s as %q: %d %s, want 400 problem+json naming Content-Type", c.path, c.ctype, r.StatusCode, r.Body)
		}
	}
	if n := w.Count(`SELECT count(*) FROM payments`); n != 0 {
		t.Fatalf("%d payment rows: a form post voided or made a payment", n)
	}
	if _, found := w.Record("u1", "K1"); found {
		t.Fatal("a form post wrote the key record")
	}
	if n := len(w.Sim.Charges()); n != 0 {
		t.Fatalf("%d charges", n)
	}
	// As the client sends it, the resolve voids the absent key.
	r, err := w.API.HandleALB(ctx, apitest.ALBEvent(http.MethodPost, "/payments/K1/resolve", "u1", map[string]string{"Content-Type": "application/json; charset=utf-8"}, "", now))
	if err != nil || r.StatusCode != http.StatusOK || w.Row("u1", "K1").State != ledger.Void {
		t.Fatalf("the JSON resolve: %+v %v", r, err)
	}
	// The HTTP API (a bearer token) takes a resolve with no body and no type.
	e, err := apitest.HTTPAPIEvent(http.MethodPost, "/payments/K2/resolve", "u1", nil, "", now)
	if err != nil {
		t.Fatal(err)
	}
	delete(e.Headers, "content-type")
	if r, err := w.API.HandleAPIGatewayV2(ctx, e); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("the HTTP API resolve: %+v %v", r, err)
	}
}
