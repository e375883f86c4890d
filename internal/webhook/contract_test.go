package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/testkit/specwire"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
	"github.com/oncepay/oncepay/internal/webhook"
)

// Every answer of POST /webhooks/psp (docs/mechanism.md#design-2: applied, a
// repeat acknowledged, an object not the payment's acknowledged, a forged
// or stale signature, too large, the secret or the ledger out of reach), produced by the real handler over real parts and
// validated against the OpenAPI document like the api's answer table.
func TestTheWebhookAnswersMatchTheSpec(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	pid := lostReply(t, w, "K1", worldtest.Body3000)
	event := []byte(`{"id":"evt_contract","object":"event","api_version":"2025-08-27.basil","created":1,` +
		`"type":"payment_intent.succeeded","data":{"object":{"id":"pi_c","object":"payment_intent","status":"succeeded",` +
		`"amount":3000,"currency":"usd","latest_charge":"ch_c","metadata":{"payment_id":"` + pid + `"}}}}`)
	now := time.Now()
	deliver := func(t *testing.T, row string, h *webhook.Handler, body []byte, sig string, status int) webhook.Response {
		t.Helper()
		hdr := http.Header{"Content-Type": {"application/json; charset=utf-8"}}
		if sig != "" {
			hdr.Set("Stripe-Signature", sig)
		}
		r := h.Serve(ctx, http.MethodPost, webhook.Path, hdr, body)
		if r.Status != status {
			t.Errorf("%s: %d %s, want %d", row, r.Status, r.Body, status)
		}
		// A delivery the spec refuses on purpose has only its answer checked.
		refused := status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge
		errs, err := specwire.Errors(specwire.Exchange{
			Method: http.MethodPost, Path: webhook.Path, ReqHeaders: hdr, ReqBody: body,
			Status: r.Status, RespHeaders: r.Headers, RespBody: r.Body,
		}, !refused)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range errs {
			t.Errorf("%s: %d %s: %s", row, r.Status, r.Body, e)
		}
		return r
	}

	deliver(t, "forged signature", w.Webhook, event, pspsim.Sign(event, "whsec_attacker", now), http.StatusBadRequest)
	deliver(t, "stale signature", w.Webhook, event, pspsim.Sign(event, w.WebhookSecret, now.Add(-10*time.Minute)), http.StatusBadRequest)
	big := append(bytes.Repeat([]byte(" "), webhook.MaxBodyBytes), event...)
	deliver(t, "over the body limit", w.Webhook, big, pspsim.Sign(big, w.WebhookSecret, now), http.StatusRequestEntityTooLarge)

	noSecret, err := webhook.New(webhook.Config{SecretFrom: func(context.Context) (string, error) {
		return "", errors.New("secrets manager unreachable")
	}}, webhook.Deps{Ledger: w.Ledger, Publisher: w.Outbox, Clock: w.Clock, Log: w.Log})
	if err != nil {
		t.Fatal(err)
	}
	deliver(t, "the signing secret unreadable", noSecret, event, pspsim.Sign(event, w.WebhookSecret, now), http.StatusInternalServerError)

	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	noLedger, err := webhook.New(webhook.Config{Secret: w.WebhookSecret}, webhook.Deps{Ledger: ledger.New(pool), Publisher: w.Outbox, Clock: w.Clock, Log: w.Log})
	if err != nil {
		t.Fatal(err)
	}
	deliver(t, "the ledger unavailable", noLedger, event, pspsim.Sign(event, w.WebhookSecret, now), http.StatusServiceUnavailable)

	other := bytes.Replace(bytes.Replace(event, []byte(`"amount":3000`), []byte(`"amount":50`), 1), []byte("evt_contract"), []byte("evt_other_amount"), 1)
	deliver(t, "another amount: acknowledged, nothing moved", w.Webhook, other, pspsim.Sign(other, w.WebhookSecret, now), http.StatusOK)

	if p := w.Row("u1", "K1"); p.State != ledger.Unknown {
		t.Fatalf("row = %s after deliveries that must change nothing", p.State)
	}
	deliver(t, "applied", w.Webhook, event, pspsim.Sign(event, w.WebhookSecret, now), http.StatusOK)
	if p := w.Row("u1", "K1"); p.State != ledger.Succeeded {
		t.Fatalf("row = %s after the genuine event", p.State)
	}
	r := deliver(t, "a repeat", w.Webhook, event, pspsim.Sign(event, w.WebhookSecret, now), http.StatusOK)
	if !strings.Contains(string(r.Body), `"duplicate":true`) {
		t.Errorf("the repeat's answer %s does not say duplicate", r.Body)
	}
}
