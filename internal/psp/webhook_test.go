package psp_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
	pi := `{"id":"pi_1","object":"payment_intent","status":"succeeded","amount":3000,"currency":"usd","latest_charge":"ch_1","metadata":{"payment_id":"pay_7","merchant_id":"m1"}}`
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
			want: psp.Event{ID: "evt_1", Type: "payment_intent.succeeded", PaymentIntentID: "pi_1", PaymentID: "pay_7", ChargeID: "ch_1", Amount: 3000, Currency: "usd"}},
		{name: "older api version is accepted", payload: event("2020-08-27", pi), header: func(p []byte) string { return sign(p, secret, now) },
			want: psp.Event{ID: "evt_1", Type: "payment_intent.succeeded", PaymentIntentID: "pi_1", PaymentID: "pay_7", ChargeID: "ch_1", Amount: 3000, Currency: "usd"}},
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
			want: psp.Event{ID: "evt_1", Type: "payment_intent.succeeded", PaymentIntentID: "pi_1", PaymentID: "pay_7", ChargeID: "ch_1", Amount: 3000, Currency: "usd"}},
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

// FuzzParseWebhook holds, for whatever bytes arrive at the endpoint:
//   - an error always wraps ErrInvalidWebhook, and a bad signature is always
//     an error;
//   - a success agrees with an independent decode of the same bytes with
//     encoding/json: the event's id and type, the object's metadata
//     payment_id, and the object's id as the PaymentIntent (payment_intent
//     objects) or the charge (charge objects);
//   - the signature covers every byte: the same payload with one byte
//     changed is refused under the original's signature.
func FuzzParseWebhook(f *testing.F) {
	now := time.Now()
	f.Add(event("2025-08-27.basil", `{"id":"pi_1","object":"payment_intent","latest_charge":"ch_1"}`), true, uint(3))
	f.Add([]byte(`{"id":"evt_1","type":"x","data":{"object":{"latest_charge":{"id":1}}}}`), true, uint(0))
	f.Add([]byte(`{}`), false, uint(1))
	f.Fuzz(func(t *testing.T, payload []byte, signed bool, flip uint) {
		header := "t=1,v1=00"
		if signed {
			header = sign(payload, secret, now)
		}
		got, err := psp.ParseWebhook(payload, header, secret, time.Hour)
		if err != nil {
			if !errors.Is(err, psp.ErrInvalidWebhook) {
				t.Fatalf("error not wrapping ErrInvalidWebhook: %v", err)
			}
			return
		}
		if !signed {
			t.Fatalf("accepted a payload under a forged signature: %+v", got)
		}
		var ind struct {
			ID   string `json:"id"`
			Type string `json:"type"`
			Data struct {
				Object struct {
					ID       string            `json:"id"`
					Object   string            `json:"object"`
					Metadata map[string]string `json:"metadata"`
				} `json:"object"`
			} `json:"data"`
		}
		if err := json.Unmarshal(payload, &ind); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", payload, err)
		}
		o := ind.Data.Object
		if got.ID != ind.ID || got.Type != ind.Type || got.PaymentID != o.Metadata[psp.MetaPaymentID] {
			t.Fatalf("parsed %+v, independent decode %+v", got, ind)
		}
		if o.Object == "payment_intent" && got.PaymentIntentID != o.ID || o.Object == "charge" && got.ChargeID != o.ID {
			t.Fatalf("parsed %+v for a %s object %q", got, o.Object, o.ID)
		}
		changed := append([]byte(nil), payload...)
		changed[flip%uint(len(changed))] ^= 0x01
		if _, err := psp.ParseWebhook(changed, header, secret, time.Hour); !errors.Is(err, psp.ErrInvalidWebhook) {
			t.Fatalf("a changed byte passed the original's signature: %v", err)
		}
	})
}

// FuzzParseWebhookEvent holds the other direction on well-formed events:
// any signed event with an id, a type and a data.object, built from fuzzed
// strings by encoding/json, parses, to exactly those ids.
func FuzzParseWebhookEvent(f *testing.F) {
	now := time.Now()
	f.Add("evt_1", "payment_intent.succeeded", "payment_intent", "pi_1", "pay_x")
	f.Add("evt_2", "charge.refunded", "charge", "ch_1", "")
	f.Add("e", "t", "refund", "re_1", "\u2028")
	f.Fuzz(func(t *testing.T, id, typ, object, objID, paymentID string) {
		if id == "" || typ == "" {
			return
		}
		obj := map[string]any{"id": objID, "object": object}
		if paymentID != "" {
			obj["metadata"] = map[string]string{psp.MetaPaymentID: paymentID}
		}
		payload, err := json.Marshal(map[string]any{
			"id": id, "object": "event", "type": typ, "api_version": "2025-08-27.basil",
			"data": map[string]any{"object": obj},
		})
		if err != nil {
			t.Skip("not representable in JSON")
		}
		got, err := psp.ParseWebhook(payload, sign(payload, secret, now), secret, time.Hour)
		if err != nil {
			t.Fatalf("well-formed event %s refused: %v", payload, err)
		}
		// encoding/json writes invalid UTF-8 as U+FFFD: compare what a
		// reader of the payload sees.
		var want struct {
			ID, Type string
			Data     struct {
				Object struct {
					ID       string            `json:"id"`
					Metadata map[string]string `json:"metadata"`
				} `json:"object"`
			} `json:"data"`
		}
		if err := json.Unmarshal(payload, &want); err != nil {
			t.Fatal(err)
		}
		if got.ID != want.ID || got.Type != want.Type || got.PaymentID != want.Data.Object.Metadata[psp.MetaPaymentID] {
			t.Fatalf("parsed %+v from %s", got, payload)
		}
		if object == "payment_intent" && got.PaymentIntentID != want.Data.Object.ID || object == "charge" && got.ChargeID != want.Data.Object.ID {
			t.Fatalf("parsed %+v from %s", got, payload)
		}
	})
}
