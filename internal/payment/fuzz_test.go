package payment

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/oncepay/oncepay/internal/psp/stripespec"
)

// FuzzParse holds, for whatever body arrives:
//   - Parse succeeds exactly when contractDecode, an independent strict
//     decode of the body written from docs/mechanism.md#design-2 and the field rules in this
//     package's documentation, succeeds, and then every field is equal;
//   - every failure is a *FieldError with a reason, ErrTooLarge exactly for
//     a body over the limit;
//   - an accepted body's fingerprint is invariant under member order,
//     whitespace and the spelling of its strings (every member re-written
//     in reverse order, names \u-escaped, whitespace between all tokens),
//     and its canonical encoding parses to the same Request;
//   - a change to any one meaning field changes the fingerprint.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		seedBody,
		`{"payment_method":"pm_1","currency":"usd","amount":3000,"order_id":"42","merchant_id":"m1","client_ts":"2025-01-01T10:00:00Z"}`,
		`{"merchant_id":"m1","order_id":"42","amount":30.5,"currency":"USD","payment_method":"pm_1"}`,
		`{"merchant_id":"m1","order_id":"42","amount":3e3,"currency":"USD","payment_method":"pm_1"}`,
		`{"merchant_id":"m1","order_id":"42","amount":"3000","currency":"USD","payment_method":"pm_1"}`,
		`{"merchant_id":"m1","order_id":"42","amount":null,"currency":"USD","payment_method":"pm_1"}`,
		`{"merchant_id":"m1","merchant_id":"m2","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_1"}`,
		`{"merchant_id":"m1","order_id":"42","amount":3000,"Amount":3500,"currency":"USD","payment_method":"pm_1"}`,
		`{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_1","x":1,"x":2}`,
		`{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_1","x":{"y":1,"y":2}}`,
		`{"merchant_id":"m\u0031","order_id":"4\"2","amount":1000000000000,"currency":"eur","payment_method":"<&>"}`,
		`{"merchant_id":"m1","order_id":" 42","amount":99999999,"currency":"jpy","payment_method":"pm 1"}`,
		`{"merchant_id":"m1","order_id":"42","amount":49,"currency":"USD","payment_method":"pm_1"}`,
		`{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"XXX","payment_method":"pm_1"}`,
		`{"merchant_id":"m1","order_id":"42 ","amount":3000,"currency":"USD","payment_method":"pm_1"}`,
		`{"merchant_id":"m1","order_id":"42","amount":100000000,"currency":"USD","payment_method":"pm_1"}`,
		`{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"US1","payment_method":"pm_1"}`,
		`{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_1","CURRENCY":"EUR"}`,
		`{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_1","receipt_email":"a@x.example"}`,
		`{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_1","receipt_email":"a@x.example","RECEIPT_EMAIL":"b@y.example"}`,
		`{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_1","receipt_email":null}`,
		`{"merchant_id":"m1","order_id":"` + strings.Repeat("o", 128) + `","amount":3000,"currency":"USD","payment_method":"` + strings.Repeat("p", 129) + `"}`,
		`{"a":{"b":[1,2,{"c":null}]},"merchant_id":"m1"}`,
		`[]`, `{}`, `{"x":1}{}`, "{\"x\":\"\xff\"}", ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Parse(body)
		want, members, ok := contractDecode(body)
		if (err == nil) != ok {
			t.Fatalf("Parse(%q) = %+v, %v; the contract's decode says valid=%v (%+v)", body, r, err, ok, want)
		}
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Reason == "" {
				t.Fatalf("error %v is not a *FieldError with a reason", err)
			}
			if errors.Is(err, ErrTooLarge) != (len(body) > contractMaxBody) {
				t.Fatalf("%d-byte body: %v", len(body), err)
			}
			return
		}
		if r != want {
			t.Fatalf("Parse(%q) = %+v, the contract's decode %+v", body, r, want)
		}
		if respelled := respell(members); len(respelled) <= contractMaxBody {
			again, err := Parse(respelled)
			if err != nil || again != r || again.Fingerprint() != r.Fingerprint() {
				t.Fatalf("%q -> %+v, re-spelled %s -> %+v, %v", body, r, respelled, again, err)
			}
		}
		canon, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Parse(canon)
		if err != nil || again != r || again.Fingerprint() != r.Fingerprint() {
			t.Fatalf("%q -> %+v, canonical %s -> %+v, %v", body, r, canon, again, err)
		}
		for _, change := range []func(*Request){
			func(c *Request) { c.MerchantID += "x" }, func(c *Request) { c.OrderID += "x" },
			func(c *Request) { c.Amount++ }, func(c *Request) { c.Currency = "X" + c.Currency[1:] },
			func(c *Request) { c.PaymentMethod += "x" }, func(c *Request) { c.ReceiptEmail += "x" },
		} {
			other := r
			change(&other)
			if other != r && other.Fingerprint() == r.Fingerprint() {
				t.Fatalf("%+v and %+v share the fingerprint %s", r, other, r.Fingerprint())
			}
		}
	})
}

// FuzzParseFields holds FuzzParse's first property on bodies built from
// fuzzed field values, where byte-level mutation rarely reaches: the five
// members (strings encoded by encoding/json, the amount's literal as given)
// and one extra member of fuzzed name and string value, in a fuzzed order.
// Parse succeeds exactly when contractDecode does, with every field equal.
func FuzzParseFields(f *testing.F) {
	f.Add("m1", "42", "3000", "usd", "pm_card_visa", "client_ts", "2025-01-01T10:00:00Z", uint8(0))
	f.Add("m 1", "42 ", "3e3", "US1", " pm", "Order_id", "x", uint8(5))
	f.Add("m1", "42", "99999999", "JPY", "pm_1", "AMOUNT", "1", uint8(17))
	f.Add("m1", "", "049", "eur", "pm_1", "merchant_id", "m2", uint8(255))
	f.Add("m1", "42", "3000", "usd", "pm_1", "receipt_email", "buyer@example.com", uint8(3))
	f.Add("m1", "42", "3000", "usd", "pm_1", "RECEIPT_EMAIL", "buyer@example.com", uint8(9))
	f.Add("m1", "42", "3000", "usd", "pm_1", "receipt_email", "buyer@[127.0.0.1]", uint8(0))
	f.Fuzz(func(t *testing.T, merchant, order, amount, currency, method, extraName, extraValue string, order8 uint8) {
		str := func(s string) string {
			b, _ := json.Marshal(s)
			return string(b)
		}
		parts := []string{
			`"merchant_id":` + str(merchant), `"order_id":` + str(order), `"amount":` + amount,
			`"currency":` + str(currency), `"payment_method":` + str(method), str(extraName) + `:` + str(extraValue),
		}
		// A fuzzed rotation and swap: every member can come first, and any two can trade places.
		rot := int(order8) % len(parts)
		parts = append(parts[rot:], parts[:rot]...)
		i, j := int(order8>>3)%len(parts), int(order8>>5)%len(parts)
		parts[i], parts[j] = parts[j], parts[i]
		body := []byte("{" + strings.Join(parts, ",") + "}")
		r, err := Parse(body)
		want, _, ok := contractDecode(body)
		if (err == nil) != ok || ok && r != want {
			t.Fatalf("Parse(%s) = %+v, %v; the contract's decode says valid=%v, %+v", body, r, err, ok, want)
		}
	})
}

// The request contract written a second way, for FuzzParse:
// docs/mechanism.md#design-2 ("a JSON object with merchant_id, order_id,
// amount (integer minor units > 0), currency (ISO 4217), payment_method,
// optionally receipt_email (a bare address); other fields are ignored") and
// the field rules this package documents. It
// shares nothing with Parse but encoding/json's tokenizer and the PSP's
// published charge rules (stripespec), which are the PSP's, not this
// package's.
const (
	contractMaxBody   = 16 << 10   // bytes
	contractMaxAmount = 99_999_999 // minor units: the PSP's eight digits
)

var (
	// merchant_id: a FIFO message group id, 1..128 of 0x21-0x7E.
	contractMerchantID = regexp.MustCompile(`^[!-~]{1,128}$`)
	// order_id, payment_method: 1..128 printable ASCII, no space at either end.
	contractID = regexp.MustCompile(`^[!-~]$|^[!-~][ -~]{0,126}[!-~]$`)
	// amount: a JSON integer literal, no sign, fraction or exponent, not 0.
	contractAmount = regexp.MustCompile(`^[1-9][0-9]*$`)
	// currency: three ASCII letters, either case; it means the upper case.
	contractCurrency = regexp.MustCompile(`^[A-Za-z]{3}$`)
	// receipt_email: a dot-atom local part of at most 64, one @, a domain
	// of two or more DNS labels (1-63 letters, digits, inner hyphens); at
	// most 254 in all.
	contractEmail = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*" +
		`@[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$`)
)

// member is one top-level member of a body, as sent.
type member struct {
	name string
	raw  json.RawMessage
}

// contractDecode decodes body strictly by the contract: one JSON object in
// valid UTF-8 of at most contractMaxBody bytes; no top-level member twice
// (compared after unescaping, exactly: a map decode would keep the last one
// silently); no member whose name is a meaning field's or receipt_email's
// in another case (encoding/json.Unmarshal would read "Amount" as amount);
// each meaning field exactly once, of its JSON type (a string, or the
// amount's integer literal) and by its rule; receipt_email at most once,
// a string by its rule; anything else ignored if it is valid JSON;
// and what the PSP would refuse (currency, minimum and maximum charge)
// refused. It returns the meaning and the members in order.
func contractDecode(body []byte) (Request, []member, bool) {
	var r Request
	if len(body) > contractMaxBody || !utf8.Valid(body) || !json.Valid(body) {
		return r, nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return r, nil, false
	}
	var members []member
	byName := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		name, isName := tok.(string)
		var raw json.RawMessage
		if err != nil || !isName || dec.Decode(&raw) != nil {
			return r, nil, false
		}
		if _, twice := byName[name]; twice {
			return r, nil, false
		}
		for _, field := range []string{"merchant_id", "order_id", "amount", "currency", "payment_method", "receipt_email"} {
			if name != field && strings.EqualFold(name, field) {
				return r, nil, false
			}
		}
		byName[name] = raw
		members = append(members, member{name, raw})
	}
	str := func(name string, rule *regexp.Regexp) (string, bool) {
		raw := bytes.TrimSpace(byName[name])
		var s string
		if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil || !rule.MatchString(s) {
			return "", false
		}
		return s, true
	}
	var ok [4]bool
	r.MerchantID, ok[0] = str("merchant_id", contractMerchantID)
	r.OrderID, ok[1] = str("order_id", contractID)
	r.PaymentMethod, ok[2] = str("payment_method", contractID)
	r.Currency, ok[3] = str("currency", contractCurrency)
	if ok != [4]bool{true, true, true, true} {
		return r, nil, false
	}
	r.Currency = strings.ToUpper(r.Currency)
	if _, present := byName["receipt_email"]; present {
		email, ok := str("receipt_email", contractEmail)
		if !ok || len(email) > 254 || strings.IndexByte(email, '@') > 64 {
			return r, nil, false
		}
		r.ReceiptEmail = email
	}
	lit := string(bytes.TrimSpace(byName["amount"]))
	if !contractAmount.MatchString(lit) || len(lit) > len("99999999") {
		return r, nil, false
	}
	r.Amount, _ = strconv.ParseInt(lit, 10, 64)
	if r.Amount > contractMaxAmount || stripespec.CheckCharge(r.Amount, r.Currency) != nil {
		return r, nil, false
	}
	return r, members, true
}

// respell writes members back as one object in reverse order, every name
// \u-escaped rune by rune, with whitespace around every token.
func respell(members []member) []byte {
	var b bytes.Buffer
	b.WriteString(" {\n")
	for i := len(members) - 1; i >= 0; i-- {
		b.WriteString("\t\"")
		for _, c := range members[i].name {
			if r1, r2 := utf16.EncodeRune(c); r1 != utf8.RuneError {
				fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
			} else {
				fmt.Fprintf(&b, `\u%04X`, c)
			}
		}
		b.WriteString("\" :\r\n ")
		b.Write(members[i].raw)
		if i > 0 {
			b.WriteString(" ,")
		}
		b.WriteString("\n")
	}
	b.WriteString("} \n")
	return b.Bytes()
}

// The contract's limits are the package's: a change to either is a change
// to the contract, made knowingly in both places.
func TestTheContractDecodeHasThePackagesLimits(t *testing.T) {
	if contractMaxBody != MaxBodyBytes || contractMaxAmount != MaxAmount || MaxIDLen != 128 {
		t.Fatalf("contract limits %d bytes, %d minor units, 128 characters; the package's %d, %d, %d",
			contractMaxBody, contractMaxAmount, MaxBodyBytes, MaxAmount, MaxIDLen)
	}
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

// FuzzKeyFromHeader: a header value starting with a quote is read as an
// RFC 8941 String (httpsfv) and any other as the bare key; whatever is
// accepted is a valid key, the quoted spelling of every valid key reads
// back as that key (both forms, one scope), and a refusal is a FieldError
// on the header that never holds the value.
func FuzzKeyFromHeader(f *testing.F) {
	for _, s := range []string{"K1", `"K1"`, ` "K1" `, `"K1";a=1`, `"K1`, `"a b"`, `"a\"b"`, `"a\\b"`, `""`, `"K1", "K2"`, `"é"`, `"."`, "\"K1\"\t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := KeyFromHeader(v)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != FieldKey {
				t.Fatalf("KeyFromHeader(%q) = %v, want a FieldError on %s", v, err, FieldKey)
			}
			if inner := strings.Trim(v, " \t\""); len(inner) >= 8 && strings.Contains(fe.Error(), inner) {
				t.Fatalf("the refusal of %q echoes it: %v", v, err)
			}
			return
		}
		if ValidateKey(key) != nil {
			t.Fatalf("KeyFromHeader(%q) accepted the invalid key %q", v, key)
		}
		// A valid key has nothing to escape: its quoted form is "key".
		if back, err := KeyFromHeader(`"` + key + `"`); err != nil || back != key {
			t.Fatalf("the structured form of %q reads %q, %v", key, back, err)
		}
		if back, err := KeyFromHeader(key); err != nil || back != key {
			t.Fatalf("the bare form of %q reads %q, %v", key, back, err)
		}
	})
}

func TestKeyFromHeaderReadsBothFormsAsOneKey(t *testing.T) {
	for v, want := range map[string]string{"K1": "K1", `"K1"`: "K1", "\"0192f0c4-5b7e\"": "0192f0c4-5b7e"} {
		if got, err := KeyFromHeader(v); err != nil || got != want {
			t.Errorf("KeyFromHeader(%q) = %q, %v; want %q", v, got, err, want)
		}
	}
	for _, v := range []string{` "K1"`, `"K1" `, "\"K1\"\t", " K1", `"K1`, `"K1";a=1`, `"K1", "K2"`, `"a b"`, `"a\"b"`, `""`, `"."`, `"K1"x`, `"\u00e9"`} {
		if got, err := KeyFromHeader(v); err == nil {
			t.Errorf("KeyFromHeader(%q) = %q, want a 400", v, got)
		}
	}
}
