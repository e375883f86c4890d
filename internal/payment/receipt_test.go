package payment_test

import (
	"encoding/json"
	"errors"
	"net/mail"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/payment"
)

const base = `"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_1"`

// receipt_email is optional and part of the meaning when present: a
// request with one is fingerprinted in v2 (six fields), another address is
// another fingerprint, none is v1's five fields as ever; and a bad address
// is a 400 naming the field that never echoes it.
func TestTheReceiptEmailIsPartOfTheMeaningWhenPresent(t *testing.T) {
	withEmail := []byte(`{` + base + `,"receipt_email":"buyer@example.com"}`)
	r, err := payment.Parse(withEmail)
	if err != nil || r.ReceiptEmail != "buyer@example.com" {
		t.Fatalf("%q, %v", r.ReceiptEmail, err)
	}
	plain, err := payment.Parse([]byte(`{` + base + `}`))
	if err != nil || r.Fingerprint() == plain.Fingerprint() || !strings.HasPrefix(plain.Fingerprint(), "v1:") {
		t.Fatalf("the receipt address did not move the fingerprint, or the plain one left v1: %v", err)
	}
	other := r
	other.ReceiptEmail = "buyer2@example.com"
	if other.Fingerprint() == r.Fingerprint() || !r.Matches(r.Fingerprint()) || other.Matches(r.Fingerprint()) || plain.Matches(r.Fingerprint()) {
		t.Fatal("another address, or none, must be another request")
	}
	// A v1 fingerprint knows no address (builds before v2 ignored the
	// member): a repeat that carries one is checked without it.
	if !r.Matches(plain.Fingerprint()) {
		t.Fatal("a v1 record must match its repeat with an address in v1")
	}
	// v1 without the address is what it was before the field existed: the
	// pinned fingerprint of payment_test.go holds it. v2, computed outside
	// Go:
	//   printf 'oncepay/payment/v2\n2:m1,2:42,4:3000,3:USD,4:pm_1,17:buyer@example.com,' | sha256sum
	if got, pinned := r.Fingerprint(), "v2:1329eda54fc0f74d06f367ea0a2a74d60905ae27eabeb3671f77146b75dbb941"; got != pinned {
		t.Fatalf("v2: %s, pinned %s", got, pinned)
	}
	for name, email := range map[string]string{
		"display name":      `"Buyer <buyer@example.com>"`,
		"no domain dot":     `"buyer@localhost"`,
		"no at":             `"buyer.example.com"`,
		"two ats":           `"a@b@example.com"`,
		"not a string":      `42`,
		"empty":             `""`,
		"non-ascii":         `"büyer@example.com"`,
		"a comment":         `"buyer@example.com (me)"`,
		"a leading dot":     `".buyer@example.com"`,
		"two dots":          `"a..b@example.com"`,
		"a dot before @":    `"buyer.@example.com"`,
		"a dot after @":     `"buyer@.example.com"`,
		"a trailing dot":    `"buyer@example.com."`,
		"quoted local":      `"\"q\"@example.com"`,
		"ip literal":        `"buyer@[127.0.0.1]"`,
		"too long":          `"` + strings.Repeat("a", 60) + "@" + strings.Repeat("b", 200) + `.com"`,
		"underscore domain": `"buyer@ex_ample.com"`,
		"a label's hyphen":  `"buyer@-ex.com"`,
		"a label's end":     `"buyer@ex-.com"`,
		"a label over 63":   `"buyer@` + strings.Repeat("b", 64) + `.com"`,
		"a local over 64":   `"buyer` + strings.Repeat("a", 60) + `@example.com"`,
	} {
		_, err := payment.Parse([]byte(`{` + base + `,"receipt_email":` + email + `}`))
		var fe *payment.FieldError
		if !errors.As(err, &fe) || fe.Field != payment.FieldReceiptEmail || strings.Contains(fe.Reason, "buyer") {
			t.Errorf("%s: %v, want a receipt_email error that does not echo the address", name, err)
		}
	}
	if r, err := payment.Parse([]byte(`{` + base + `,"receipt_email":"a.b+c_d@x-y.example.co"}`)); err != nil || r.ReceiptEmail != "a.b+c_d@x-y.example.co" {
		t.Errorf("a dot-atom address: %q, %v", r.ReceiptEmail, err)
	}
}

// FuzzReceiptEmail: every address taken is a bare one net/mail reads back
// unchanged, at most MaxEmailLen long.
func FuzzReceiptEmail(f *testing.F) {
	for _, e := range []string{"buyer@example.com", "a.b+c@x.example", `"q"@example.com`, "a@b.c", ".a@b.c", "a@b..c"} {
		f.Add(e)
	}
	f.Fuzz(func(t *testing.T, address string) {
		body, _ := jsonString(address)
		r, err := payment.Parse([]byte(`{` + base + `,"receipt_email":` + body + `}`))
		email := r.ReceiptEmail
		if err != nil || email == "" {
			return
		}
		a, err := mail.ParseAddress(email)
		if err != nil || a.Name != "" || a.Address != email || len(email) > payment.MaxEmailLen {
			t.Fatalf("accepted address %q: %+v, %v", email, a, err)
		}
	})
}

func jsonString(s string) (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}

// Parse reads receipt_email itself, under the rules of the five meaning
// fields: the exact spelling only (a case-insensitive reader would take
// "RECEIPT_EMAIL", the last one winning), once only, a JSON string that
// is a bare address (null is refused, as for every meaning field). Every
// refusal names receipt_email and never echoes the address.
func TestParseReadsTheReceiptEmailStrictly(t *testing.T) {
	r, err := payment.Parse([]byte(`{` + base + `,"receipt_email":"buyer@example.com"}`))
	if err != nil || r.ReceiptEmail != "buyer@example.com" {
		t.Fatalf("Parse: %+v, %v; want the receipt address read", r, err)
	}
	if r, err := payment.Parse([]byte(`{` + base + `}`)); err != nil || r.ReceiptEmail != "" {
		t.Fatalf("no address: %+v, %v", r, err)
	}
	for name, tail := range map[string]string{
		"two spellings, the second wins elsewhere": `"receipt_email":"a@x.example","RECEIPT_EMAIL":"b@y.example"`,
		"the other spelling first":                 `"RECEIPT_EMAIL":"b@y.example","receipt_email":"a@x.example"`,
		"another spelling alone":                   `"Receipt_Email":"b@y.example"`,
		"two copies":                               `"receipt_email":"a@x.example","receipt_email":"b@y.example"`,
		"not a string":                             `"receipt_email":["b@y.example"]`,
		"an object":                                `"receipt_email":{"to":"b@y.example"}`,
		"not an address":                           `"receipt_email":"b at y.example"`,
		"null, then an address":                    `"receipt_email":null,"receipt_email":"b@y.example"`,
		"null":                                     `"receipt_email":null`,
	} {
		_, err := payment.Parse([]byte(`{` + base + `,` + tail + `}`))
		var fe *payment.FieldError
		if !errors.As(err, &fe) || fe.Field != payment.FieldReceiptEmail || strings.Contains(fe.Error(), "y.example") {
			t.Errorf("%s: %v, want a receipt_email error that does not echo the address", name, err)
		}
	}
}
