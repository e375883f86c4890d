// Package payment holds what a payment request means: the fields parsed from
// the body of POST /payments, their fingerprint, and the rules for the
// Idempotency-Key header (docs/mechanism.md#seed-part-2,
// docs/mechanism.md#design-2).
//
// The parser is deliberately strict about anything that could make two
// readers disagree on the meaning (duplicate members, case-variant member
// names, non-integer amounts, invalid UTF-8, trailing data) and deliberately
// blind to everything else (unknown members, member order, whitespace), so a
// retry that re-serialises the same intent gets the same fingerprint and a
// different intent never does. The optional receipt_email is read by the
// same parser under the same rules: it decides where the payment's emails
// go, so no other reader of the body may pick another copy of it.
package payment

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/oncepay/oncepay/internal/psp/stripespec"
)

// Request is the meaning of a payment request: the only fields that decide
// whether two requests under one key are the same request.
//
// The JSON tags give its canonical encoding, which Parse accepts unchanged.
type Request struct {
	MerchantID    string `json:"merchant_id"`
	OrderID       string `json:"order_id"`
	Amount        int64  `json:"amount"` // minor units, MinAmount(currency)..MaxAmount
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
	// ReceiptEmail is where the payment's emails go ("" none): optional,
	// and part of the meaning when present.
	ReceiptEmail string `json:"receipt_email,omitempty"`
}

// Limits on the body and its fields. They bound the work and memory a caller
// can demand before anything is claimed.
const (
	// MaxBodyBytes is the largest body Parse reads. A payment is five short
	// fields; anything near this size is not a payment.
	MaxBodyBytes = 16 << 10
	// MaxAmount caps the amount in minor units at the PSP's own limit
	// (Stripe: eight digits, 99,999,999 in every currency): a larger one
	// would be refused by the PSP after the payment was stored, and become
	// a FAILED 502 instead of the caller's 400.
	MaxAmount int64 = stripespec.MaxAmount
	// MaxIDLen caps merchant_id, order_id and payment_method. For
	// merchant_id it is also SQS's limit on a message group id.
	MaxIDLen = 128
)

// Field names used in FieldError, the JSON member names of the body, plus
// FieldBody for errors about the body as a whole.
const (
	FieldBody          = "body"
	FieldMerchantID    = "merchant_id"
	FieldOrderID       = "order_id"
	FieldAmount        = "amount"
	FieldCurrency      = "currency"
	FieldPaymentMethod = "payment_method"
	// FieldReceiptEmail is where the payment's emails go
	// (Request.ReceiptEmail): optional, fingerprinted when present.
	FieldReceiptEmail = "receipt_email"
)

// The longest receipt address (RFC 5321's path limit), its local part and
// a domain label (RFC 1035).
const (
	MaxEmailLen = 254
	maxLocalLen = 64
	maxLabelLen = 63
)

// readReceiptEmail reads receipt_email, where the payment's emails go
// (docs/mechanism.md#design-10): a JSON string, as every meaning field (a
// body without an address leaves the member out). A repeat
// that names another address is another request (422), as at Stripe, so an
// address corrected on a retry is refused rather than silently ignored.
//
// The address is a bare one, at most MaxEmailLen characters, of RFC
// 5322's dot-atom form on both sides of one @ (local@domain.tld; no quoted
// local part, no display name, no comment, no IP literal), a local part of
// at most 64, the domain of DNS labels (1-63 letters, digits and inner
// hyphens): an address a mail provider could refuse for its form is a 400
// now, not a send retried for a day. Narrower than net/mail on purpose: every
// address it takes is one net/mail reads back unchanged
// (FuzzReceiptEmail), and net/mail would cost the api's bootstrap more than
// its size budget has left. The reason never echoes it.
func readReceiptEmail(dec *json.Decoder) (string, error) {
	s, err := readString(dec, FieldReceiptEmail)
	var fe *FieldError
	if errors.As(err, &fe) && fe.Field == FieldBody {
		return "", err // the JSON itself is broken
	}
	if err != nil || !bareAddress(s) {
		return "", fieldErr(FieldReceiptEmail, "must be a bare email address (local@domain.tld) in a JSON string")
	}
	return s, nil
}

func bareAddress(s string) bool {
	at := strings.IndexByte(s, '@')
	if at <= 0 || at > maxLocalLen || len(s) > MaxEmailLen || strings.IndexByte(s[at+1:], '.') <= 0 {
		return false
	}
	for i := 0; i < at; i++ { // dot-atom: atext runs joined by single dots
		c := s[i]
		switch {
		case c == '.':
			if i == 0 || i == at-1 || s[i-1] == '.' {
				return false
			}
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.IndexByte("!#$%&'*+-/=?^_`{|}~", c) >= 0:
		default:
			return false
		}
	}
	for _, label := range strings.Split(s[at+1:], ".") {
		if len(label) == 0 || len(label) > maxLabelLen || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// ErrTooLarge is wrapped by the FieldError Parse returns for a body over
// MaxBodyBytes, so the API can answer 413 rather than 400.
var ErrTooLarge = errors.New("payment: body too large")

// FieldError says which input was wrong and why, so the API can answer with
// an RFC 9457 problem naming the field. Reasons are fixed texts: they never
// echo the caller's input, which may hold personal data.
type FieldError struct {
	Field  string // a Field* constant, or FieldKey for the Idempotency-Key header
	Reason string
	err    error // optional sentinel, e.g. ErrTooLarge
}

// Error names the field and the reason, e.g. "amount: must be greater than zero".
func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap exposes the sentinel (ErrTooLarge) to errors.Is.
func (e *FieldError) Unwrap() error { return e.err }

func fieldErr(field, reason string) *FieldError {
	return &FieldError{Field: field, Reason: reason}
}

// known lists the meaning fields in canonical order: the five required ones,
// then the optional receipt_email.
var known = [...]string{FieldMerchantID, FieldOrderID, FieldAmount, FieldCurrency, FieldPaymentMethod, FieldReceiptEmail}

// required is how many of known every body must carry.
const required = 5

// Parse reads a POST /payments body: the five meaning fields and the
// optional receipt_email. It returns a *FieldError for every invalid input.
// Other members are ignored (a client timestamp must not change the
// fingerprint), but must still be valid JSON. The currency is upper-cased
// so "usd" and "USD" are one request.
func Parse(body []byte) (Request, error) {
	var r Request
	if len(body) > MaxBodyBytes {
		return r, &FieldError{Field: FieldBody, Reason: fmt.Sprintf("larger than %d bytes", MaxBodyBytes), err: ErrTooLarge}
	}
	// encoding/json would silently replace invalid UTF-8 with U+FFFD, so two
	// different byte strings could read the same; refuse them up front.
	if !utf8.Valid(body) {
		return r, fieldErr(FieldBody, "not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // keep the amount's literal, so 30.5 and 3e3 can be refused
	tok, err := dec.Token()
	if err != nil {
		return r, syntaxErr(err)
	}
	if tok != json.Delim('{') {
		return r, fieldErr(FieldBody, "must be a JSON object")
	}
	seen := make(map[string]bool, 8)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return r, syntaxErr(err)
		}
		name, ok := tok.(string)
		if !ok { // unreachable with a well-behaved decoder; refuse, don't panic
			return r, fieldErr(FieldBody, "malformed JSON object")
		}
		if seen[name] {
			if isKnown(name) {
				return r, fieldErr(name, "appears more than once")
			}
			// Unknown names are the client's text: don't echo them.
			return r, fieldErr(FieldBody, "a member appears more than once")
		}
		seen[name] = true
		switch name {
		case FieldMerchantID:
			r.MerchantID, err = readMerchantID(dec)
		case FieldOrderID:
			r.OrderID, err = readID(dec, name)
		case FieldPaymentMethod:
			r.PaymentMethod, err = readID(dec, name)
		case FieldAmount:
			r.Amount, err = readAmount(dec)
		case FieldCurrency:
			r.Currency, err = readCurrency(dec)
		case FieldReceiptEmail:
			r.ReceiptEmail, err = readReceiptEmail(dec)
		default:
			// "Amount" would be "amount" to a case-insensitive reader (Go's
			// own json.Unmarshal is one, the last copy winning), so two
			// readers could disagree: on the amount, or on where the
			// receipt goes.
			for _, k := range known {
				if strings.EqualFold(name, k) {
					return r, fieldErr(k, "member name must be spelled exactly "+strconv.Quote(k))
				}
			}
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return r, syntaxErr(err)
			}
		}
		if err != nil {
			return r, err
		}
	}
	if tok, err := dec.Token(); err != nil {
		return r, syntaxErr(err)
	} else if tok != json.Delim('}') {
		return r, fieldErr(FieldBody, "malformed JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return r, fieldErr(FieldBody, "unexpected data after the JSON object")
	}
	for _, k := range known[:required] {
		if !seen[k] {
			return r, fieldErr(k, "required")
		}
	}
	return r, checkPSPRules(r)
}

// MinAmount is the smallest amount the PSP charges in currency, in minor
// units: Stripe's documented minimum where its table lists the currency
// (50 for USD and EUR), else 1.
func MinAmount(currency string) int64 {
	if m, listed := stripespec.MinChargeAmount(currency); listed {
		return m
	}
	return 1
}

// checkPSPRules refuses, at the API, what the PSP would refuse after the
// payment was stored (a currency it does not support, an amount under its
// minimum charge): the caller hears 400 naming the field and nothing is
// written, instead of a stored FAILED answered 502.
func checkPSPRules(r Request) error {
	if !stripespec.SupportedCurrency(r.Currency) {
		return fieldErr(FieldCurrency, "is not a currency the payment provider supports")
	}
	if m := MinAmount(r.Currency); r.Amount < m {
		return fieldErr(FieldAmount, fmt.Sprintf("must be at least %d in %s (the payment provider's minimum charge)", m, r.Currency))
	}
	return nil
}

func isKnown(name string) bool {
	for _, k := range known {
		if k == name {
			return true
		}
	}
	return false
}

// syntaxErr turns a decoder error into a FieldError without the decoder's
// text, which can quote the input.
func syntaxErr(err error) *FieldError {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fieldErr(FieldBody, "incomplete JSON")
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fieldErr(FieldBody, fmt.Sprintf("malformed JSON near byte %d", se.Offset))
	}
	return fieldErr(FieldBody, "malformed JSON")
}

// readString reads the next value, which must be a JSON string.
func readString(dec *json.Decoder, field string) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", syntaxErr(err)
	}
	s, ok := tok.(string)
	if !ok {
		return "", fieldErr(field, "must be a string")
	}
	return s, nil
}

// readID reads merchant_id, order_id or payment_method: 1..MaxIDLen
// printable ASCII characters, no leading or trailing space. The id is kept as
// sent, never trimmed or folded: it is the merchant's, and "42" and "42 "
// would be two orders to a system that compares bytes.
func readID(dec *json.Decoder, field string) (string, error) {
	s, err := readString(dec, field)
	if err != nil {
		return "", err
	}
	if reason := checkPrintable(s, MaxIDLen); reason != "" {
		return "", fieldErr(field, reason)
	}
	return s, nil
}

// readMerchantID reads merchant_id: 1..MaxIDLen characters, each a letter, a
// digit or ASCII punctuation (0x21-0x7E: printable ASCII without space). That
// is exactly the alphabet SQS documents for a FIFO MessageGroupId, and the
// merchant id becomes the events queue's group id
// (docs/mechanism.md#design-5): a merchant id SQS would refuse would stall
// the relay and lose the events. Like every id it is kept as sent.
func readMerchantID(dec *json.Decoder) (string, error) {
	s, err := readString(dec, FieldMerchantID)
	if err != nil {
		return "", err
	}
	if reason := checkMerchantID(s); reason != "" {
		return "", fieldErr(FieldMerchantID, reason)
	}
	return s, nil
}

// checkMerchantID returns why s is not a valid merchant id, or "" if it is.
func checkMerchantID(s string) string {
	if reason := checkPrintable(s, MaxIDLen); reason != "" {
		return reason
	}
	if strings.IndexByte(s, ' ') >= 0 {
		return "must not contain a space (letters, digits and ASCII punctuation only)"
	}
	return ""
}

// checkPrintable returns why s is not 1..max printable ASCII characters
// (0x20-0x7E) without leading or trailing space, or "" if it is.
func checkPrintable(s string, max int) string {
	if s == "" {
		return "required"
	}
	if len(s) > max {
		return fmt.Sprintf("longer than %d characters", max)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return "must be printable ASCII"
		}
	}
	if s[0] == ' ' || s[len(s)-1] == ' ' {
		return "must not begin or end with a space"
	}
	return ""
}

// readAmount reads a JSON integer literal: no sign, fraction or exponent.
// 3e3 is a number but its meaning as minor units is a guess, and 30.5 minor
// units does not exist; a string "3000" is a type error.
func readAmount(dec *json.Decoder) (int64, error) {
	tok, err := dec.Token()
	if err != nil {
		return 0, syntaxErr(err)
	}
	num, ok := tok.(json.Number)
	if !ok {
		return 0, fieldErr(FieldAmount, "must be a JSON integer (minor units)")
	}
	lit := string(num)
	if strings.HasPrefix(lit, "-") {
		return 0, fieldErr(FieldAmount, "must be greater than zero")
	}
	for i := 0; i < len(lit); i++ {
		if lit[i] < '0' || lit[i] > '9' {
			return 0, fieldErr(FieldAmount, "must be a JSON integer (minor units), without fraction or exponent")
		}
	}
	n, err := strconv.ParseInt(lit, 10, 64)
	if err != nil || n > MaxAmount {
		return 0, fieldErr(FieldAmount, fmt.Sprintf("must be at most %d", MaxAmount))
	}
	if n == 0 {
		return 0, fieldErr(FieldAmount, "must be greater than zero")
	}
	return n, nil
}

// readCurrency reads an ISO 4217 alphabetic code: three ASCII letters,
// returned upper-case. Lower case is accepted because it is unambiguous and
// common (Stripe uses it); normalising keeps one canonical fingerprint. The
// code is not checked against the ISO list, which changes: the PSP refuses an
// unknown currency.
func readCurrency(dec *json.Decoder) (string, error) {
	s, err := readString(dec, FieldCurrency)
	if err != nil {
		return "", err
	}
	if len(s) != 3 {
		return "", fieldErr(FieldCurrency, "must be a three-letter ISO 4217 code")
	}
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'A' && c <= 'Z':
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		default:
			return "", fieldErr(FieldCurrency, "must be a three-letter ISO 4217 code")
		}
	}
	return string(b), nil
}
