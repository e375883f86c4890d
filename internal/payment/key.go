package payment

import (
	"fmt"
	"strings"

	"github.com/dunglas/httpsfv"
)

// FieldKey is the Field of a FieldError about the Idempotency-Key header.
const FieldKey = "Idempotency-Key"

// MaxKeyLen is the longest Idempotency-Key accepted (docs/mechanism.md#design-2).
const MaxKeyLen = 255

// KeyAlphabet lists every byte an Idempotency-Key may hold: RFC 3986's
// unreserved characters (§2.3). Every front door carries them unchanged in
// a path segment (API Gateway decodes the path, the ALB does not, and
// neither has anything to decode here), so a key's header form and its path
// form (/payments/{key}/resolve) are the same string and name the same
// scope. UUIDs, ULIDs, hex, base64url and Stripe-style keys fit. The double
// quote is not in it: the IETF draft's structured-field form `"K1"` can
// later be read as the bare key K1 without meeting a key that holds quotes.
const KeyAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"

// reasonKeyAlphabet is the fixed rejection text: it never echoes the key.
const reasonKeyAlphabet = "must be 1-255 of the characters A-Z a-z 0-9 - . _ ~"

// ValidateKey checks an Idempotency-Key header value: 1..MaxKeyLen bytes,
// each in KeyAlphabet, and not "." or ".." (a path segment of only dots is
// removed by RFC 3986 §5.2.4 normalisation in clients and proxies, so
// /payments/../resolve would not reach the key's resolve call). Anything
// else is a *FieldError with Field FieldKey. Beyond that the key is opaque:
// compared byte for byte, never normalised (case matters).
//
// A client that percent-encodes some of a key's characters in the path
// still names the same key: every front door decodes the path exactly once
// before it is read (HandleALB does it for the load balancer).
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fieldErr(FieldKey, "required")
	case len(key) > MaxKeyLen:
		return fieldErr(FieldKey, fmt.Sprintf("longer than %d characters", MaxKeyLen))
	case key == "." || key == "..":
		return fieldErr(FieldKey, "must not be \".\" or \"..\" (a path cannot carry them)")
	}
	for i := 0; i < len(key); i++ {
		if !inKeyAlphabet(key[i]) {
			return fieldErr(FieldKey, reasonKeyAlphabet)
		}
	}
	return nil
}

// inKeyAlphabet is KeyAlphabet as a test of one byte (a test holds them equal).
func inKeyAlphabet(c byte) bool {
	switch {
	case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		return true
	}
	return c == '-' || c == '.' || c == '_' || c == '~'
}

// KeyFromHeader returns the key an Idempotency-Key header value carries, in
// either of its two forms: the IETF draft's (draft-ietf-httpapi-idempotency-
// key-header: an RFC 8941 structured-field String, quoted on the wire,
// `"K1"`) or the bare form Stripe's clients send (`K1`). Both name the same
// key, so a client that switches forms keeps its scope. A value that starts
// with a quote is the structured form and must parse as one String with no
// parameters (the draft defines none, and one this server ignored could
// change a key's meaning); the key inside must pass ValidateKey either way.
func KeyFromHeader(v string) (string, error) {
	// No whitespace around either form: HTTP parsers strip it, so a value
	// that keeps it came through something else, and the bare form has
	// always refused it (the structured parser alone would drop it).
	if strings.TrimLeft(v, " \t") != v || strings.TrimRight(v, " \t") != v {
		return "", fieldErr(FieldKey, reasonKeyAlphabet)
	}
	if !strings.HasPrefix(v, `"`) {
		return v, ValidateKey(v)
	}
	// httpsfv is RFC 8941's parser (the one the httpwg test suite runs
	// against); a bare key is not parsed by it, since a bare `123` or
	// `a:b` would read as an Integer or fail as a Token.
	item, err := httpsfv.UnmarshalItem([]string{v})
	if err != nil {
		// Fixed text: the parser's message names positions of the value.
		return "", fieldErr(FieldKey, "starts with a quote but is not a structured-field String (RFC 8941)")
	}
	s, ok := item.Value.(string)
	switch {
	case !ok:
		return "", fieldErr(FieldKey, "starts with a quote but is not a structured-field String (RFC 8941)")
	case item.Params != nil && len(item.Params.Names()) > 0:
		return "", fieldErr(FieldKey, "a structured-field key must have no parameters")
	}
	return s, ValidateKey(s)
}
