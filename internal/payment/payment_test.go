package payment

import (
	"errors"
	"strings"
	"testing"
)

const seedBody = `{"merchant_id": "m1", "order_id": "42", "amount": 3000, "currency": "USD", "payment_method": "pm_1"}`

var seedRequest = Request{MerchantID: "m1", OrderID: "42", Amount: 3000, Currency: "USD", PaymentMethod: "pm_1"}

func mustParse(t *testing.T, body string) Request {
	t.Helper()
	r, err := Parse([]byte(body))
	if err != nil {
		t.Fatalf("Parse(%s): %v", body, err)
	}
	return r
}

func TestParseSeedBody(t *testing.T) {
	if got := mustParse(t, seedBody); got != seedRequest {
		t.Fatalf("got %+v, want %+v", got, seedRequest)
	}
}

// Side trace 3d: reordered members, other whitespace and a client timestamp
// are the same request.
func TestSameMeaningSameFingerprint(t *testing.T) {
	want := seedRequest.Fingerprint()
	for _, body := range []string{
		seedBody,
		`{"payment_method":"pm_1","currency":"USD","amount":3000,"order_id":"42","merchant_id":"m1"}`,
		"{\n\t\"client_ts\": \"2025-01-01T10:00:00Z\",\r\n \"currency\" : \"USD\", \"amount\":3000,\n\"order_id\":\"42\",\"merchant_id\":\"m1\",\"payment_method\":\"pm_1\"\n}\n",
		`{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"usd","payment_method":"pm_1"}`,
		`{"merchant_id":"m1","order_id":"4\u0032","amount":3000,"currency":"USD","payment_method":"pm_1","meta":{"a":[1,2.5,null,true]}}`,
		`{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_1","client_ts":1736503200123}`,
	} {
		if got := mustParse(t, body).Fingerprint(); got != want {
			t.Errorf("%s\n  fingerprint %s, want %s", body, got, want)
		}
	}
}

// Side trace 3d, the other direction: 3,500 under K1 is a different request.
func TestDifferentMeaningDifferentFingerprint(t *testing.T) {
	h1 := mustParse(t, seedBody).Fingerprint()
	h2 := mustParse(t, strings.Replace(seedBody, "3000", "3500", 1)).Fingerprint()
	if h1 == h2 {
		t.Fatal("3000 and 3500 have the same fingerprint")
	}

	variants := map[string]Request{}
	for name, mutate := range map[string]func(*Request){
		"merchant_id":    func(r *Request) { r.MerchantID = "m2" },
		"order_id":       func(r *Request) { r.OrderID = "43" },
		"amount":         func(r *Request) { r.Amount = 3001 },
		"currency":       func(r *Request) { r.Currency = "EUR" },
		"payment_method": func(r *Request) { r.PaymentMethod = "pm_2" },
	} {
		r := seedRequest
		mutate(&r)
		variants[name] = r
	}
	seen := map[string]string{seedRequest.Fingerprint(): "original"}
	for name, r := range variants {
		fp := r.Fingerprint()
		if prev, dup := seen[fp]; dup {
			t.Errorf("changing %s gives the fingerprint of %s", name, prev)
		}
		seen[fp] = name
	}
}

// Field boundaries can't shift: moving bytes from one field to its
// neighbour must change the fingerprint.
func TestFingerprintBoundaries(t *testing.T) {
	pairs := [][2]Request{
		{{MerchantID: "ab", OrderID: "c", Amount: 1, Currency: "USD", PaymentMethod: "p"},
			{MerchantID: "a", OrderID: "bc", Amount: 1, Currency: "USD", PaymentMethod: "p"}},
		{{MerchantID: "m", OrderID: "o1", Amount: 23, Currency: "USD", PaymentMethod: "p"},
			{MerchantID: "m", OrderID: "o", Amount: 123, Currency: "USD", PaymentMethod: "p"}},
		{{MerchantID: "m", OrderID: "o", Amount: 1, Currency: "USD", PaymentMethod: "p"},
			{MerchantID: "m", OrderID: "o", Amount: 1, Currency: "US", PaymentMethod: "Dp"}},
		{{MerchantID: "1:a,", OrderID: "b", Amount: 1, Currency: "USD", PaymentMethod: "p"},
			{MerchantID: "", OrderID: "1:a,1:b,", Amount: 1, Currency: "USD", PaymentMethod: "p"}},
	}
	for _, p := range pairs {
		if p[0].Fingerprint() == p[1].Fingerprint() {
			t.Errorf("%+v and %+v share a fingerprint", p[0], p[1])
		}
	}
}

func TestFingerprintShape(t *testing.T) {
	fp := seedRequest.Fingerprint()
	if !strings.HasPrefix(fp, "v1:") || len(fp) != 3+64 || strings.Trim(fp[3:], "0123456789abcdef") != "" {
		t.Fatalf("Fingerprint() = %q, want v1: and 64 lower-case hex digits", fp)
	}
	// Pin the canonical form: a silent change would turn every stored key
	// into a 422. The value is sha256 of the documented encoding, computed
	// outside Go:
	//   printf 'oncepay/payment/v1\n2:m1,2:42,4:3000,3:USD,4:pm_1,' | sha256sum
	// A deliberate change adds a version beside v1 (see FingerprintVersion):
	// stored v1 values are still checked in v1, so this one never changes.
	const pinned = "v1:88b4ca5f687caebc79be483b5962fb1efa7e681e973035987aa6c0ad3939a4d1"
	if fp != pinned {
		t.Fatalf("canonical form changed: %s, pinned %s", fp, pinned)
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	ok := map[string]string{
		"merchant_id": `"m1"`, "order_id": `"42"`, "amount": `3000`,
		"currency": `"USD"`, "payment_method": `"pm_1"`,
	}
	// with builds a body from ok with one member replaced (or removed when
	// v is ""), in canonical order.
	with := func(field, v string) string {
		var b strings.Builder
		b.WriteString("{")
		first := true
		for _, k := range []string{"merchant_id", "order_id", "amount", "currency", "payment_method"} {
			val := ok[k]
			if k == field {
				if v == "" {
					continue
				}
				val = v
			}
			if !first {
				b.WriteString(",")
			}
			first = false
			b.WriteString(`"` + k + `":` + val)
		}
		b.WriteString("}")
		return b.String()
	}
	long := strings.Repeat("x", MaxIDLen+1)
	cases := []struct {
		name, body, field string
	}{
		{"empty body", ``, FieldBody},
		{"whitespace only", "  \n", FieldBody},
		{"array", `[1,2]`, FieldBody},
		{"string", `"hello"`, FieldBody},
		{"null", `null`, FieldBody},
		{"trailing garbage", seedBody + `x`, FieldBody},
		{"two objects", seedBody + ` {}`, FieldBody},
		{"trailing comma", strings.TrimSuffix(seedBody, "}") + `,}`, FieldBody},
		{"unterminated", strings.TrimSuffix(seedBody, "}"), FieldBody},
		{"invalid utf-8", `{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_1","note":"` + "\xff" + `"}`, FieldBody},
		{"bad ignored member", strings.TrimSuffix(seedBody, "}") + `,"x":[1,}`, FieldBody},
		{"duplicate ignored member", strings.TrimSuffix(seedBody, "}") + `,"x":1,"x":1}`, FieldBody},
		{"too large", strings.TrimSuffix(seedBody, "}") + `,"pad":"` + strings.Repeat("a", MaxBodyBytes) + `"}`, FieldBody},

		{"merchant missing", with("merchant_id", ""), FieldMerchantID},
		{"merchant empty", with("merchant_id", `""`), FieldMerchantID},
		{"merchant number", with("merchant_id", `7`), FieldMerchantID},
		{"merchant null", with("merchant_id", `null`), FieldMerchantID},
		{"merchant control char", with("merchant_id", `"m\n1"`), FieldMerchantID},
		{"merchant non-ascii", with("merchant_id", `"mé"`), FieldMerchantID},
		{"merchant too long", with("merchant_id", `"`+long+`"`), FieldMerchantID},
		{"merchant leading space", with("merchant_id", `" m1"`), FieldMerchantID},
		{"merchant duplicate", strings.TrimSuffix(seedBody, "}") + `,"merchant_id":"m2"}`, FieldMerchantID},
		{"merchant escaped duplicate", strings.TrimSuffix(seedBody, "}") + `,"\u006derchant_id":"m2"}`, FieldMerchantID},
		{"merchant case variant", strings.TrimSuffix(seedBody, "}") + `,"Merchant_ID":"m2"}`, FieldMerchantID},

		{"order missing", with("order_id", ""), FieldOrderID},
		{"order object", with("order_id", `{"id":"42"}`), FieldOrderID},
		{"order too long", with("order_id", `"`+long+`"`), FieldOrderID},
		{"order trailing space", with("order_id", `"42 "`), FieldOrderID},
		{"order DEL", with("order_id", `"4\u007f"`), FieldOrderID},

		{"amount missing", with("amount", ""), FieldAmount},
		{"amount zero", with("amount", `0`), FieldAmount},
		{"amount negative", with("amount", `-3000`), FieldAmount},
		{"amount negative zero", with("amount", `-0`), FieldAmount},
		{"amount fraction", with("amount", `30.5`), FieldAmount},
		{"amount integral fraction", with("amount", `3000.0`), FieldAmount},
		{"amount exponent", with("amount", `3e3`), FieldAmount},
		{"amount exponent upper", with("amount", `3E3`), FieldAmount},
		{"amount string", with("amount", `"3000"`), FieldAmount},
		{"amount null", with("amount", `null`), FieldAmount},
		{"amount bool", with("amount", `true`), FieldAmount},
		{"amount over cap", with("amount", `1000000000001`), FieldAmount},
		{"amount over int64", with("amount", `99999999999999999999999`), FieldAmount},
		{"amount duplicate", strings.TrimSuffix(seedBody, "}") + `,"amount":3500}`, FieldAmount},
		{"amount case variant", strings.TrimSuffix(seedBody, "}") + `,"AMOUNT":3500}`, FieldAmount},

		{"currency missing", with("currency", ""), FieldCurrency},
		{"currency short", with("currency", `"US"`), FieldCurrency},
		{"currency long", with("currency", `"USDX"`), FieldCurrency},
		{"currency digits", with("currency", `"U5D"`), FieldCurrency},
		{"currency non-ascii", with("currency", `"ÜSD"`), FieldCurrency},
		{"currency number", with("currency", `840`), FieldCurrency},

		{"method missing", with("payment_method", ""), FieldPaymentMethod},
		{"method empty", with("payment_method", `""`), FieldPaymentMethod},
		{"method array", with("payment_method", `["pm_1"]`), FieldPaymentMethod},
		{"method tab", with("payment_method", `"pm\t1"`), FieldPaymentMethod},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.body))
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Parse(%.80q) = %v, want a *FieldError", c.body, err)
			}
			if fe.Field != c.field {
				t.Fatalf("Parse(%.80q): field %q (%s), want %q", c.body, fe.Field, fe.Reason, c.field)
			}
			if fe.Reason == "" {
				t.Fatal("empty reason")
			}
		})
	}
}

func TestParseAcceptsTheEdges(t *testing.T) {
	max := strings.Repeat("~", MaxIDLen)
	body := `{"merchant_id":"` + max + `","order_id":"a b","amount":1000000000000,"currency":"eUr","payment_method":"!"}`
	r := mustParse(t, body)
	want := Request{MerchantID: max, OrderID: "a b", Amount: MaxAmount, Currency: "EUR", PaymentMethod: "!"}
	if r != want {
		t.Fatalf("got %+v, want %+v", r, want)
	}
	if r := mustParse(t, strings.Replace(seedBody, "3000", "1", 1)); r.Amount != 1 {
		t.Fatalf("amount 1: got %d", r.Amount)
	}
	// A body of exactly MaxBodyBytes is read.
	pad := MaxBodyBytes - len(seedBody) - len(`,"p":""`)
	exact := strings.TrimSuffix(seedBody, "}") + `,"p":"` + strings.Repeat("a", pad) + `"}`
	if len(exact) != MaxBodyBytes {
		t.Fatalf("test body is %d bytes", len(exact))
	}
	mustParse(t, exact)
}

func TestTooLargeIsDistinguishable(t *testing.T) {
	_, err := Parse(make([]byte, MaxBodyBytes+1))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	_, err = Parse([]byte(`[]`))
	if errors.Is(err, ErrTooLarge) {
		t.Fatal("a small bad body reported as too large")
	}
}

// Reasons never quote the caller's input (it may carry personal data).
func TestReasonsDoNotEchoInput(t *testing.T) {
	secret := "jane.doe@example.com"
	for _, body := range []string{
		`{"` + secret + `":1,"` + secret + `":2}`,
		`{"merchant_id":"` + secret + "\n" + `"}`,
		`"` + secret + `"`,
		`{"a":` + secret + `}`,
	} {
		_, err := Parse([]byte(body))
		if err == nil || strings.Contains(err.Error(), "jane") {
			t.Errorf("Parse(%q) = %v", body, err)
		}
	}
}
