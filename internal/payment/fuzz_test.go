package payment

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
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

// keyOracle is the key rule written a second way: 1..255 of RFC 3986's
// unreserved characters, and not a dot segment ("." or "..").
var keyOracle = regexp.MustCompile(`^[A-Za-z0-9._~-]{1,255}$`)

func keyOracleValid(key string) bool {
	return keyOracle.MatchString(key) && key != "." && key != ".."
}

// FuzzValidateKey: ValidateKey never panics, agrees with keyOracle, every
// rejection names the Idempotency-Key field, and every accepted key is its
// own path segment: escaping it for a path changes nothing, decoding it
// changes nothing, and percent-encoded spellings of it (all bytes, every
// other byte, a pattern drawn from its length) decode back to it. internal/api's FuzzKeyPath carries the property
// through Location and both front doors.
func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"K1", "0192f0c4-5b7e-7c1a-9d3e-2f4b8a6c1e07", "", " ", "a b", " a", "a ", "\x7f", "é", "a\x00b",
		".", "..", "...", "a/b", "a?b", "a%41", `"K1"`, KeyAlphabet} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := ValidateKey(key)
		if want := keyOracleValid(key); (err == nil) != want {
			t.Fatalf("ValidateKey(%q) = %v, oracle says valid=%v", key, err, want)
		}
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != FieldKey {
				t.Fatalf("ValidateKey(%q) = %v, want a FieldError on %s", key, err, FieldKey)
			}
			return
		}
		if e := url.PathEscape(key); e != key {
			t.Fatalf("accepted key %q escapes to %q in a path", key, e)
		}
		if d, err := url.PathUnescape(key); err != nil || d != key {
			t.Fatalf("accepted key %q decodes to %q, %v", key, d, err)
		}
		for _, mask := range []uint64{^uint64(0), 0x5555555555555555, uint64(len(key)) * 0x9e3779b97f4a7c15} {
			spelled := percentSpelling(key, mask)
			if d, err := url.PathUnescape(spelled); err != nil || d != key {
				t.Fatalf("accepted key %q spelled %q decodes to %q, %v", key, spelled, d, err)
			}
		}
	})
}

// percentSpelling percent-encodes the bytes of s whose index bit is set in
// mask (cycling over 64 bits): one of the spellings a client may send for
// the same path segment.
func percentSpelling(s string, mask uint64) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if mask&(1<<(uint(i)%64)) != 0 {
			fmt.Fprintf(&b, "%%%02X", s[i])
		} else {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}
