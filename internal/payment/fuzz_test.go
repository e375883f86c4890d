package payment

import (
	"encoding/json"
	"errors"
	"regexp"
	"testing"
)

var currencyOracle = regexp.MustCompile(`^[A-Z]{3}$`)

// FuzzParse: Parse never panics, every failure is a *FieldError, and every
// success is valid JSON whose canonical re-encoding parses to the same
// Request and fingerprint.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		seedBody,
		`{"payment_method":"pm_1","currency":"usd","amount":3000,"order_id":"42","merchant_id":"m1","client_ts":"2025-01-01T10:00:00Z"}`,
		`{"merchant_id":"m1","order_id":"42","amount":30.5,"currency":"USD","payment_method":"pm_1"}`,
		`{"merchant_id":"m1","order_id":"42","amount":3e3,"currency":"USD","payment_method":"pm_1"}`,
		`{"merchant_id":"m1","order_id":"42","amount":"3000","currency":"USD","payment_method":"pm_1"}`,
		`{"merchant_id":"m1","merchant_id":"m2","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_1"}`,
		`{"merchant_id":"m1","order_id":"42","amount":3000,"Amount":3500,"currency":"USD","payment_method":"pm_1"}`,
		`{"merchant_id":"m\u0031","order_id":"4\"2","amount":1000000000000,"currency":"eur","payment_method":"<&>"}`,
		`{"a":{"b":[1,2,{"c":null}]},"merchant_id":"m1"}`,
		`[]`, `{}`, `{"x":1}{}`, "{\"x\":\"\xff\"}", ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Parse(body)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Reason == "" {
				t.Fatalf("error %v is not a *FieldError with a reason", err)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		if r.Amount < 1 || r.Amount > MaxAmount {
			t.Fatalf("accepted amount %d", r.Amount)
		}
		for _, id := range []string{r.MerchantID, r.OrderID, r.PaymentMethod} {
			if checkPrintable(id, MaxIDLen) != "" {
				t.Fatalf("accepted id %q", id)
			}
		}
		if !currencyOracle.MatchString(r.Currency) {
			t.Fatalf("accepted currency %q", r.Currency)
		}
		canon, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Parse(canon)
		if err != nil {
			t.Fatalf("canonical form %s of %q does not parse: %v", canon, body, err)
		}
		if again != r || again.Fingerprint() != r.Fingerprint() {
			t.Fatalf("%q -> %+v, canonical %s -> %+v", body, r, canon, again)
		}
	})
}

// keyOracle is the key rule written a second way: printable ASCII, 1..255,
// first and last character not a space.
var keyOracle = regexp.MustCompile(`^[\x21-\x7e](?:[\x20-\x7e]{0,253}[\x21-\x7e])?$`)

// FuzzValidateKey: ValidateKey never panics, agrees with keyOracle, and
// every rejection names the Idempotency-Key field.
func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"K1", "0192f0c4-5b7e-7c1a-9d3e-2f4b8a6c1e07", "", " ", "a b", " a", "a ", "\x7f", "é", "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := ValidateKey(key)
		if want := keyOracle.MatchString(key); (err == nil) != want {
			t.Fatalf("ValidateKey(%q) = %v, oracle says valid=%v", key, err, want)
		}
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != FieldKey {
				t.Fatalf("ValidateKey(%q) = %v, want a FieldError on %s", key, err, FieldKey)
			}
		}
	})
}
