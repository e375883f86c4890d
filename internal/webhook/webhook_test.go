package webhook_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
	"github.com/oncepay/oncepay/internal/webhook"
)

var ctx = context.Background()

// lostReply makes a payment whose PSP reply is lost (the charge is made), so
// it is UNKNOWN behind a pointer, with extra faults on the same key.
func lostReply(t *testing.T, w *worldtest.World, key, body string, extra ...pspsim.FaultKind) string {
	t.Helper()
	pid := ids.PaymentID(ids.Scope("u1", key))
	match := pspsim.Match{IdempotencyKey: ids.ChargeKey(pid)}
	if err := w.Sim.AddFault(pspsim.Fault{Match: match, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
		t.Fatal(err)
	}
	for _, k := range extra {
		if err := w.Sim.AddFault(pspsim.Fault{Match: match, Kind: k}); err != nil {
			t.Fatal(err)
		}
	}
	if r := w.Pay("u1", key, body); r.Status != http.StatusAccepted {
		t.Fatalf("first call = %d %s", r.Status, r.Body)
	}
	if p := w.Row("u1", key); p.State != ledger.Unknown {
		t.Fatalf("row = %s, want UNKNOWN", p.State)
	}
	return pid
}

func flush(t *testing.T, w *worldtest.World, want int) {
	t.Helper()
	n, err := w.Sim.FlushWebhooks(ctx)
	if err != nil || n != want {
		t.Fatalf("webhooks delivered %d (%v), want %d", n, err, want)
	}
}

// The webhook first (docs/mechanism.md#seed-part-5): it makes the move
// (UNKNOWN -> SUCCEEDED with the charge, the journal and the outbox intent);
// a second delivery of the same event is dropped by the inbox; the resolver
// then finds nothing to do; the stored answer is still the pointer, and it
// renders SUCCEEDED without being rewritten. The same end state as the
// resolver's path.
func TestBeat5_WebhookFirstThenTheResolverFindsNothing(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	pid := lostReply(t, w, "K1", worldtest.Body3000, pspsim.FaultWebhookDuplicate)
	recBefore, _ := w.Record("u1", "K1")

	flush(t, w, 2) // the event, twice, with one event id
	ch := w.Sim.Charges()
	p := w.Row("u1", "K1")
	if len(ch) != 1 || p.State != ledger.Succeeded || p.PSPCharge != ch[0].ID {
		t.Fatalf("row %s charge %q; charges %+v", p.State, p.PSPCharge, ch)
	}
	if n := w.Count(`SELECT count(*) FROM webhook_inbox WHERE payment_id = $1`, pid); n != 1 {
		t.Fatalf("inbox rows = %d, want 1", n)
	}
	if got := w.Metric("WebhookDuplicate"); got != 1 {
		t.Fatalf("WebhookDuplicate = %v, want 1", got)
	}
	if n := w.Count(`SELECT count(*) FROM outbox_intents WHERE event_id = $1`, ids.EventID(pid, "SUCCEEDED")); n != 1 {
		t.Fatalf("outbox intents = %d", n)
	}
	if n := w.Count(`SELECT count(*) FROM journal_entries WHERE payment_id = $1`, pid); n != 2 {
		t.Fatalf("journal entries = %d", n)
	}

	rep, err := w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{}).Run(ctx)
	if err != nil || rep.Claimed != 0 || rep.PSPCalls != 0 {
		t.Fatalf("resolver after the webhook = %+v, %v: want nothing to do", rep, err)
	}
	rec, _ := w.Record("u1", "K1")
	if !rec.Pointer || rec.Answer != nil || !rec.ExpiresAt.Equal(recBefore.ExpiresAt) {
		t.Fatalf("record = %+v: the pointer was rewritten", rec)
	}
	repeat := w.Pay("u1", "K1", worldtest.Body3000)
	if want := api.Render(p); repeat.Status != http.StatusCreated || string(repeat.Body) != string(want.Body) {
		t.Fatalf("repeat = %d %s, want %s", repeat.Status, repeat.Body, want.Body)
	}
	if n := len(w.Sim.Charges()); n != 1 {
		t.Fatalf("charges = %d", n)
	}
}

// The other order: the resolver settles first; the late webhook is
// recorded in the inbox, acknowledged, and changes nothing.
func TestALateWebhookAfterTheResolverChangesNothing(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	pid := lostReply(t, w, "K1", worldtest.Body3000)
	rep, err := w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{}).Run(ctx)
	if err != nil || rep.Succeeded != 1 {
		t.Fatalf("resolver = %+v, %v", rep, err)
	}
	before := w.Row("u1", "K1")
	flush(t, w, 1)
	after := w.Row("u1", "K1")
	if after != before {
		t.Fatalf("the late webhook changed the row: %+v -> %+v", before, after)
	}
	if n := w.Count(`SELECT count(*) FROM webhook_inbox`); n != 1 {
		t.Fatalf("inbox rows = %d", n)
	}
	if n := w.Count(`SELECT count(*) FROM outbox_intents WHERE payment_id = $1`, pid); n != 1 {
		t.Fatalf("outbox intents = %d", n)
	}
	if got := w.Metric("WebhookLate"); got != 1 {
		t.Fatalf("WebhookLate = %v", got)
	}
}

// payment_intent.payment_failed moves an open payment to FAILED with the
// decline code, and no journal entries.
func TestAPaymentFailedWebhookSettlesFailed(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	declined := strings.Replace(worldtest.Body3000, "pm_card_visa", "pm_card_chargeDeclined", 1)
	pid := lostReply(t, w, "K1", declined)
	flush(t, w, 1)
	p := w.Row("u1", "K1")
	if p.State != ledger.Failed || p.DeclineCode != "generic_decline" || !strings.HasPrefix(p.PSPCharge, "pi_") {
		t.Fatalf("row = %+v", p)
	}
	if n := w.Count(`SELECT count(*) FROM journal_entries WHERE payment_id = $1`, pid); n != 0 {
		t.Fatalf("a decline was journaled")
	}
	if r := w.Pay("u1", "K1", declined); r.Status != http.StatusPaymentRequired {
		t.Fatalf("repeat = %d", r.Status)
	}
}

// A forged signature, a stale timestamp, a missing header and a malformed
// body: 400 problem+json, and nothing changes — no inbox row, no move, no
// outbox intent. Sent over HTTP to the handler's Lambda entry point.
func TestForgedStaleOrMalformedWebhooksAre400AndChangeNothing(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	pid := lostReply(t, w, "K1", worldtest.Body3000)
	event := []byte(`{"id":"evt_forged","object":"event","api_version":"2025-08-27.basil","created":1,` +
		`"type":"payment_intent.succeeded","data":{"object":{"id":"pi_x","object":"payment_intent","status":"succeeded",` +
		`"amount":3000,"currency":"usd","latest_charge":"ch_x","metadata":{"payment_id":"` + pid + `"}}}}`)
	now := time.Now()
	for _, tc := range []struct {
		name   string
		body   []byte
		header string
	}{
		{"forged signature", event, pspsim.Sign(event, "whsec_attacker", now)},
		{"stale timestamp", event, pspsim.Sign(event, w.WebhookSecret, now.Add(-10*time.Minute))},
		{"no signature", event, ""},
		{"malformed body, validly signed", []byte(`{"id":"evt_1","type":`), pspsim.Sign([]byte(`{"id":"evt_1","type":`), w.WebhookSecret, now)},
		{"not an event, validly signed", []byte(`{"hello":"world"}`), pspsim.Sign([]byte(`{"hello":"world"}`), w.WebhookSecret, now)},
		{"tampered body", bytes.Replace(event, []byte("ch_x"), []byte("ch_y"), 1), pspsim.Sign(event, w.WebhookSecret, now)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, ctype, body := post(t, w.WebhookURL, tc.body, tc.header)
			if status != http.StatusBadRequest || ctype != "application/problem+json" {
				t.Fatalf("answer %d %s %s, want 400 problem+json", status, ctype, body)
			}
		})
	}
	if n := w.Count(`SELECT count(*) FROM webhook_inbox`); n != 0 {
		t.Fatalf("inbox rows = %d", n)
	}
	if p := w.Row("u1", "K1"); p.State != ledger.Unknown {
		t.Fatalf("row = %s", p.State)
	}
	if n := w.Count(`SELECT count(*) FROM outbox_intents`); n != 0 {
		t.Fatalf("outbox intents = %d", n)
	}
	if got := w.Metric("WebhookRejected"); got != 6 {
		t.Fatalf("WebhookRejected = %v", got)
	}
	// The genuine event, signed with the real secret, still applies.
	status, _, body := post(t, w.WebhookURL, event, pspsim.Sign(event, w.WebhookSecret, now))
	if status != http.StatusOK || w.Row("u1", "K1").State != ledger.Succeeded {
		t.Fatalf("genuine event = %d %s", status, body)
	}
}

func post(t *testing.T, url string, body []byte, sig string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if sig != "" {
		req.Header.Set("Stripe-Signature", sig)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// The function takes both front doors' event shapes (HTTP API and ALB),
// and answers other routes and methods with problems.
func TestInvokeAcceptsHTTPAPIAndALBEvents(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	lostReply(t, w, "K1", worldtest.Body3000)
	payload := []byte(`{"id":"evt_shape","object":"event","type":"customer.created","data":{"object":{"id":"cus_1","object":"customer"}}}`)
	sig := pspsim.Sign(payload, w.WebhookSecret, time.Now())

	v2, _ := json.Marshal(events.APIGatewayV2HTTPRequest{
		RawPath: webhook.Path, Headers: map[string]string{"stripe-signature": sig},
		Body: string(payload), RequestContext: events.APIGatewayV2HTTPRequestContext{HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST"}},
	})
	out, err := w.Webhook.Invoke(ctx, v2)
	if r, ok := out.(events.APIGatewayV2HTTPResponse); err != nil || !ok || r.StatusCode != http.StatusOK {
		t.Fatalf("HTTP API event: %+v %v", out, err)
	}
	alb, _ := json.Marshal(events.ALBTargetGroupRequest{
		HTTPMethod: "POST", Path: webhook.Path, Headers: map[string]string{"stripe-signature": sig},
		Body: base64.StdEncoding.EncodeToString(payload), IsBase64Encoded: true,
		RequestContext: events.ALBTargetGroupRequestContext{ELB: events.ELBContext{TargetGroupArn: "arn:tg"}},
	})
	out, err = w.Webhook.Invoke(ctx, alb)
	r, ok := out.(events.ALBTargetGroupResponse)
	if err != nil || !ok || r.StatusCode != http.StatusOK || !strings.Contains(r.Body, `"duplicate":true`) {
		t.Fatalf("ALB event (a repeat of the same event id): %+v %v", out, err)
	}
	if n := w.Count(`SELECT count(*) FROM webhook_inbox WHERE psp_event_id = 'evt_shape' AND payment_id IS NULL`); n != 1 {
		t.Fatalf("inbox rows = %d", n)
	}
	for _, tc := range []struct {
		method, path string
		status       int
	}{{"GET", webhook.Path, http.StatusMethodNotAllowed}, {"POST", "/webhooks/other", http.StatusNotFound}} {
		if r := w.Webhook.Serve(ctx, tc.method, tc.path, http.Header{}, payload); r.Status != tc.status {
			t.Errorf("%s %s = %d", tc.method, tc.path, r.Status)
		}
	}
	if p := w.Row("u1", "K1"); p.State != ledger.Unknown {
		t.Fatalf("an event of another type moved the payment: %s", p.State)
	}
}

// A validly signed event whose PaymentIntent carries our payment id but not
// the payment's terms (another amount, another currency, none at all: a
// PaymentIntent our charge never made, such as one another integration of
// the same PSP account tagged with a payment_id of its own) settles
// nothing: the row stays open, no journal, no outbox intent. The event is
// acknowledged (200, so the PSP stops delivering it; a redelivery could
// not match better) and recorded (a redelivery is a duplicate), and the
// refusal is an error line with the ids and a metric of its own. The
// genuine event then settles the payment as ever.
func TestAWebhookWhoseAmountOrCurrencyDiffersFromTheRowSettlesNothing(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	pid := lostReply(t, w, "K1", worldtest.Body3000) // 3000 USD, UNKNOWN
	forged := func(id, typ, terms string) []byte {
		return []byte(`{"id":"` + id + `","object":"event","api_version":"2025-08-27.basil","created":1,"type":"` + typ + `",` +
			`"data":{"object":{"id":"pi_other","object":"payment_intent","status":"succeeded",` + terms +
			`"latest_charge":"ch_other","metadata":{"payment_id":"` + pid + `"}}}}`)
	}
	cases := []struct{ id, typ, terms string }{
		{"evt_amount", "payment_intent.succeeded", `"amount":50,"currency":"usd",`},
		{"evt_currency", "payment_intent.succeeded", `"amount":3000,"currency":"eur",`},
		{"evt_none", "payment_intent.succeeded", ``},
		{"evt_failed", "payment_intent.payment_failed", `"amount":3000,"currency":"jpy",`},
	}
	now := time.Now()
	for _, c := range cases {
		ev := forged(c.id, c.typ, c.terms)
		status, ctype, body := post(t, w.WebhookURL, ev, pspsim.Sign(ev, w.WebhookSecret, now))
		if status != http.StatusOK || ctype != "application/json" || !strings.Contains(body, `"received":true`) {
			t.Errorf("%s: %d %s %s, want 200, acknowledged", c.id, status, ctype, body)
		}
		if p := w.Row("u1", "K1"); p.State != ledger.Unknown {
			t.Fatalf("%s settled the payment: %+v", c.id, p)
		}
	}
	if n := w.Count(`SELECT count(*) FROM outbox_intents WHERE payment_id = $1`, pid); n != 0 {
		t.Errorf("outbox intents = %d", n)
	}
	if n := w.Count(`SELECT count(*) FROM journal_entries WHERE payment_id = $1`, pid); n != 0 {
		t.Errorf("journal entries = %d", n)
	}
	if n := w.Count(`SELECT count(*) FROM webhook_inbox WHERE payment_id = $1`, pid); n != len(cases) {
		t.Errorf("inbox rows = %d, want every refused event recorded", n)
	}
	if got := w.Metric(webhook.MetricMismatch); got != float64(len(cases)) {
		t.Errorf("%s = %v, want %d", webhook.MetricMismatch, got, len(cases))
	}
	if !alertLogged(w, webhook.MetricMismatch, pid) || !bytes.Contains(w.Logs.Bytes(), []byte(`"psp_event_id":"evt_amount"`)) {
		t.Errorf("no error line carries the alert with the payment's and the event's ids")
	}
	// A redelivery is a duplicate; the genuine event settles.
	ev := forged("evt_amount", "payment_intent.succeeded", `"amount":50,"currency":"usd",`)
	if status, _, body := post(t, w.WebhookURL, ev, pspsim.Sign(ev, w.WebhookSecret, now)); status != http.StatusOK || !strings.Contains(body, `"duplicate":true`) {
		t.Errorf("the redelivery: %d %s", status, body)
	}
	flush(t, w, 1)
	if p := w.Row("u1", "K1"); p.State != ledger.Succeeded || p.PSPCharge != w.Sim.Charges()[0].ID {
		t.Fatalf("the genuine event: %+v", p)
	}
}

// Once the row names the PSP's object (a decline names its PaymentIntent),
// an event about another PaymentIntent carrying the same payment id is
// refused as not this payment's, whatever its amount: it is counted as a
// mismatch, not taken for the PSP charging a payment the ledger closed.
func TestAWebhookAboutAnotherPaymentIntentThanTheRowNamesIsAMismatch(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	declined := strings.Replace(worldtest.Body3000, "pm_card_visa", "pm_card_chargeDeclined", 1)
	pid := lostReply(t, w, "K1", declined)
	flush(t, w, 1)
	before := w.Row("u1", "K1")
	if before.State != ledger.Failed || !strings.HasPrefix(before.PSPCharge, "pi_") {
		t.Fatalf("row = %+v", before)
	}
	ev := []byte(`{"id":"evt_other_pi","object":"event","api_version":"2025-08-27.basil","created":1,"type":"payment_intent.succeeded",` +
		`"data":{"object":{"id":"pi_other","object":"payment_intent","status":"succeeded","amount":3000,"currency":"usd",` +
		`"latest_charge":"ch_other","metadata":{"payment_id":"` + pid + `"}}}}`)
	if status, _, body := post(t, w.WebhookURL, ev, pspsim.Sign(ev, w.WebhookSecret, time.Now())); status != http.StatusOK {
		t.Fatalf("answer %d %s, want 200", status, body)
	}
	if after := w.Row("u1", "K1"); after != before {
		t.Fatalf("row %+v -> %+v", before, after)
	}
	if got := w.Metric(webhook.MetricMismatch); got != 1 {
		t.Errorf("%s = %v, want 1", webhook.MetricMismatch, got)
	}
	if got := w.Metric(webhook.MetricSucceededOnFailed); got != 0 {
		t.Errorf("%s = %v: another PaymentIntent was taken for this payment's", webhook.MetricSucceededOnFailed, got)
	}
}
