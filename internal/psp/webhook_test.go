package psp_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/psp"
)

const secret = "whsec_unit"

// sign is Stripe's scheme, written out independently of stripe-go so the
// test checks the verifier against the specification, not against itself.
func sign(payload []byte, key string, t time.Time) string {
	mac := hmac.New(sha256.New, []byte(key))
	fmt.Fprintf(mac, "%d.", t.Unix())
	mac.Write(payload)
	return fmt.Sprintf("t=%d,v1=%s", t.Unix(), hex.EncodeToString(mac.Sum(nil)))
}

func event(apiVersion, object string) []byte {
	return []byte(`{"id":"evt_1","object":"event","api_version":"` + apiVersion + `","created":1,"type":"payment_intent.succeeded","data":{"object":` + object + `}}`)
}

func TestParseWebhook(t *testing.T) {
	pi := `{"id":"pi_1","object":"payment_intent","status":"succeeded","latest_charge":"ch_1","metadata":{"payment_id":"pay_7","merchant_id":"m1"}}`
	piExpanded := `{"id":"pi_1","object":"payment_intent","latest_charge":{"id":"ch_1","object":"charge"},"metadata":{"payment_id":"pay_7"}}`
	piFailed := `{"id":"pi_1","object":"payment_intent","latest_charge":"ch_0","last_payment_error":{"code":"card_declined","decline_code":"generic_decline"},"metadata":{"payment_id":"pay_7"}}`
	ch := `{"id":"ch_1","object":"charge","payment_intent":"pi_1","metadata":{"payment_id":"pay_7"}}`
	now := time.Now()
	cases := []struct {
		name    string
		payload []byte
		header  func(p []byte) string
		want    psp.Event
		wantErr bool
	}{
		{name: "valid", payload: event("2025-08-27.basil", pi), header: func(p []byte) string { return sign(p, secret, now) },
			want: psp.Event{ID: "evt_1", Type: "payment_intent.succeeded", PaymentIntentID: "pi_1", PaymentID: "pay_7", ChargeID: "ch_1"}},
		{name: "older api version is accepted", payload: event("2020-08-27", pi), header: func(p []byte) string { return sign(p, secret, now) },
			want: psp.Event{ID: "evt_1", Type: "payment_intent.succeeded", PaymentIntentID: "pi_1", PaymentID: "pay_7", ChargeID: "ch_1"}},
		{name: "expanded latest_charge", payload: event("2025-08-27.basil", piExpanded), header: func(p []byte) string { return sign(p, secret, now) },
			want: psp.Event{ID: "evt_1", Type: "payment_intent.succeeded", PaymentIntentID: "pi_1", PaymentID: "pay_7", ChargeID: "ch_1"}},
		{name: "decline code", payload: event("2025-08-27.basil", piFailed), header: func(p []byte) string { return sign(p, secret, now) },
			want: psp.Event{ID: "evt_1", Type: "payment_intent.succeeded", PaymentIntentID: "pi_1", PaymentID: "pay_7", ChargeID: "ch_0", DeclineCode: "generic_decline"}},
		{name: "charge object", payload: event("2025-08-27.basil", ch), header: func(p []byte) string { return sign(p, secret, now) },
			want: psp.Event{ID: "evt_1", Type: "payment_intent.succeeded", PaymentIntentID: "pi_1", PaymentID: "pay_7", ChargeID: "ch_1"}},
		{name: "two signatures, one valid (secret rotation)", payload: event("2025-08-27.basil", pi),
			header: func(p []byte) string {
				return sign(p, secret, now) + ",v1=" + hex.EncodeToString(make([]byte, 32))
			},
			want: psp.Event{ID: "evt_1", Type: "payment_intent.succeeded", PaymentIntentID: "pi_1", PaymentID: "pay_7", ChargeID: "ch_1"}},
		{name: "wrong secret", payload: event("2025-08-27.basil", pi), header: func(p []byte) string { return sign(p, "whsec_other", now) }, wantErr: true},
		{name: "tampered payload", payload: event("2025-08-27.basil", pi), header: func(p []byte) string { return sign(event("x.basil", pi), secret, now) }, wantErr: true},
		{name: "stale timestamp", payload: event("2025-08-27.basil", pi), header: func(p []byte) string { return sign(p, secret, now.Add(-10*time.Minute)) }, wantErr: true},
		{name: "no header", payload: event("2025-08-27.basil", pi), header: func([]byte) string { return "" }, wantErr: true},
		{name: "garbage header", payload: event("2025-08-27.basil", pi), header: func([]byte) string { return "t=abc,v1" }, wantErr: true},
		{name: "signed garbage", payload: []byte(`not json`), header: func(p []byte) string { return sign(p, secret, now) }, wantErr: true},
		{name: "signed event without data", payload: []byte(`{"id":"evt_1","type":"x"}`), header: func(p []byte) string { return sign(p, secret, now) }, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := psp.ParseWebhook(tc.payload, tc.header(tc.payload), secret, 5*time.Minute)
			if tc.wantErr {
				if !errors.Is(err, psp.ErrInvalidWebhook) {
					t.Fatalf("err = %v, want ErrInvalidWebhook", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseWebhook: %v", err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if _, err := psp.ParseWebhook(event("2025-08-27.basil", pi), sign(event("2025-08-27.basil", pi), "", now), "", 0); !errors.Is(err, psp.ErrInvalidWebhook) {
		t.Errorf("empty secret: err = %v, want ErrInvalidWebhook", err)
	}
}

// FuzzParseWebhook: whatever arrives at the webhook endpoint, the parser
// returns an event or ErrInvalidWebhook, and never panics.
func FuzzParseWebhook(f *testing.F) {
	now := time.Now()
	f.Add(event("2025-08-27.basil", `{"id":"pi_1","object":"payment_intent","latest_charge":"ch_1"}`), true)
	f.Add([]byte(`{"id":"evt_1","type":"x","data":{"object":{"latest_charge":{"id":1}}}}`), true)
	f.Add([]byte(`{}`), false)
	f.Fuzz(func(t *testing.T, payload []byte, signed bool) {
		header := "t=1,v1=00"
		if signed {
			header = sign(payload, secret, now)
		}
		if _, err := psp.ParseWebhook(payload, header, secret, time.Hour); err != nil && !errors.Is(err, psp.ErrInvalidWebhook) {
			t.Fatalf("error not wrapping ErrInvalidWebhook: %v", err)
		}
	})
}
