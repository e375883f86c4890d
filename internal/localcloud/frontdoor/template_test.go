package frontdoor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/internal/localcloud/frontdoor"
	"github.com/oncepay/oncepay/internal/localcloud/invoke"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
	"github.com/oncepay/oncepay/internal/webhook"
)

// lambdaHandler adapts a handler's Lambda entry point to invoke.Func as the
// Lambda runtime would run it: the payload in, the answer marshalled out.
func lambdaHandler(h func(context.Context, json.RawMessage) (any, error)) func(context.Context, []byte) ([]byte, error) {
	return func(ctx context.Context, payload []byte) ([]byte, error) {
		out, err := h(ctx, payload)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	}
}

// The synthesized template's routes, served with the real api and webhook
// handlers in process over real parts (DynamoDB Local, PostgreSQL, the PSP
// simulator): a tap through POST /payments is charged once and its repeat
// replayed, the resolve route answers from the same payment, a caller
// without a token changes nothing, and the webhook route reaches the
// webhook function with no token, where a forged signature is refused and a
// genuine duplicate event is acknowledged without a second move.
func TestTheRealTemplatesRoutesServeTheRealHandlers(t *testing.T) {
	tmpl := testenv.TemplatePath(t)
	w := apitest.New(t, config.Timing{})
	const whsec = "whsec_frontdoor_template_test"
	wh, err := webhook.New(webhook.Config{Secret: whsec}, webhook.Deps{Ledger: w.Ledger, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	routes, err := frontdoor.LoadRoutes(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	fnOf := map[string]string{}
	for _, r := range routes {
		fnOf[r.Key] = r.Function
	}
	apiID, webhookID := fnOf["POST /payments"], fnOf["POST /webhooks/psp"]
	if apiID == "" || webhookID == "" || fnOf["POST /payments/{key}/resolve"] != apiID || fnOf["POST /payments/{key}/refund"] != apiID {
		t.Fatalf("the template's routes: %v", fnOf)
	}
	inv := invoke.Func{apiID: lambdaHandler(w.Handler.Invoke), webhookID: lambdaHandler(wh.Invoke)}
	g, err := frontdoor.FromTemplate(tmpl, inv, secret, frontdoor.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	defer srv.Close()

	key := "K-" + strings.ReplaceAll(t.Name(), "/", "-") + fmt.Sprint(time.Now().UnixNano())
	body := []byte(`{"merchant_id":"m1","order_id":"o-1","amount":1200,"currency":"EUR","payment_method":"pm_card_visa"}`)
	pay := func(auth string) answer {
		hdr := map[string]string{"Content-Type": "application/json", "Idempotency-Key": key}
		if auth != "" {
			hdr["Authorization"] = auth
		}
		return send(t, srv, "POST", "/payments", body, hdr)
	}
	if a := pay(""); a.status != 401 || a.body != `{"message":"Unauthorized"}` {
		t.Fatalf("no token: %d %s", a.status, a.body)
	}
	if n := len(w.Charges()); n != 0 {
		t.Fatalf("%d charges before any authenticated tap", n)
	}
	bearer := "Bearer " + token(t, "u1")
	first := pay(bearer)
	if first.status != 201 || !strings.Contains(first.body, `"SUCCEEDED"`) {
		t.Fatalf("tap: %d %s", first.status, first.body)
	}
	again := pay(bearer)
	if again.status != 201 || again.header.Get("Idempotent-Replayed") != "true" || again.body != first.body {
		t.Fatalf("repeat: %d %v %s", again.status, again.header, again.body)
	}
	charges := w.Charges()
	if len(charges) != 1 || charges[0].Amount != 1200 || charges[0].Currency != "eur" {
		t.Fatalf("charges %+v, want one of 1200 eur", charges)
	}
	if n := w.Scalar(t, `SELECT count(*) FROM payments WHERE caller_id = 'u1' AND client_key = $1 AND state = 'SUCCEEDED' AND amount = 1200`, key); n != 1 {
		t.Fatalf("%d SUCCEEDED ledger rows for the key", n)
	}
	res := send(t, srv, "POST", "/payments/"+key+"/resolve", nil, map[string]string{"Authorization": bearer})
	if res.status != 201 || !strings.Contains(res.body, `"SUCCEEDED"`) || !strings.Contains(res.body, charges[0].ID) {
		t.Fatalf("resolve: %d %s", res.status, res.body)
	}

	// The webhook route: no token needed, the signature is the guard.
	piJSON := paymentIntent(t, w.Sim, charges[0].PaymentIntent)
	event := []byte(fmt.Sprintf(`{"id":"evt_frontdoor_%d","object":"event","api_version":"2025-08-27.basil","created":%d,`+
		`"data":{"object":%s},"livemode":false,"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},"type":"payment_intent.succeeded"}`,
		time.Now().UnixNano(), time.Now().Unix(), piJSON))
	forged := send(t, srv, "POST", "/webhooks/psp", event, map[string]string{
		"Content-Type": "application/json; charset=utf-8", "Stripe-Signature": pspsim.Sign(event, "whsec_not_ours", time.Now()),
	})
	if forged.status != 400 || forged.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("forged webhook: %d %s", forged.status, forged.body)
	}
	genuine := send(t, srv, "POST", "/webhooks/psp", event, map[string]string{
		"Content-Type": "application/json; charset=utf-8", "Stripe-Signature": pspsim.Sign(event, whsec, time.Now()),
	})
	if genuine.status != 200 || !strings.Contains(genuine.body, `"received":true`) {
		t.Fatalf("genuine webhook: %d %s", genuine.status, genuine.body)
	}
	if n := len(w.Charges()); n != 1 {
		t.Fatalf("%d charges after the webhooks", n)
	}
	if n := w.Scalar(t, `SELECT count(*) FROM payments WHERE caller_id = 'u1' AND client_key = $1 AND state = 'SUCCEEDED'`, key); n != 1 {
		t.Fatalf("the webhook moved the payment: %d SUCCEEDED rows", n)
	}
}

// paymentIntent reads a PaymentIntent from the simulator as stripe-go would.
func paymentIntent(t *testing.T, sim *pspsim.Sim, id string) string {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/v1/payment_intents/"+id, nil)
	req.Header.Set("Authorization", "Bearer sk_test_frontdoor")
	rec := httptest.NewRecorder()
	sim.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("GET %s: %d %s", id, rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// The fixture the other tests use is the real template's HTTP API: the same
// routes, functions, authorizers, timeouts and throttling.
func TestTheFixtureHasTheRealTemplatesRoutes(t *testing.T) {
	real, err := frontdoor.LoadRoutes(testenv.TemplatePath(t))
	if err != nil {
		t.Fatal(err)
	}
	fix, err := frontdoor.LoadRoutes(fixture)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(real)
	b, _ := json.Marshal(fix)
	if string(a) != string(b) {
		t.Fatalf("testdata/httpapi.template.json has drifted from the template:\n real    %s\n fixture %s", a, b)
	}
}
