package payment

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

func TestValidateKey(t *testing.T) {
	for _, k := range []string{
		"K1",
		"0192f0c4-5b7e-7c1a-9d3e-2f4b8a6c1e07", // UUID
		"01ARZ3NDEKTSV4RRFFQ69G5FAV",           // ULID
		"idem_1Nv0FGQ9RKHgCVdK",                // Stripe-style
		"q5kX-_w9Zg~.",                         // base64url and the rest of the alphabet
		"...",                                  // not a dot segment
		".K1",
		KeyAlphabet,
		strings.Repeat("~", MaxKeyLen),
	} {
		if err := ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v", k, err)
		}
	}
	for _, k := range []string{
		"",
		".",  // dot segments: clients and proxies remove them from a path
		"..", //
		" ",
		" K1",
		"K1 ",
		"a b",
		"a/b",
		"a?b",
		"a#b",
		"a%20b",
		"a+b",
		"!",
		`"K1"`, // the structured-field form is not a bare key
		`K"1`,
		"K\t1",
		"K\n1",
		"K\x001",
		"K\x7f1",
		"Ké",
		strings.Repeat("a", MaxKeyLen+1),
	} {
		err := ValidateKey(k)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != FieldKey || fe.Reason == "" {
			t.Errorf("ValidateKey(%q) = %v, want a FieldError on %s", k, err, FieldKey)
		}
		if err != nil && k != "" && strings.Contains(fe.Reason, k) && len(k) > 2 {
			t.Errorf("ValidateKey(%q) echoes the key: %q", k, fe.Reason)
		}
	}
}

// KeyAlphabet is exactly the bytes ValidateKey accepts, each once, and each
// one a path segment carries unchanged: escaping leaves it alone, and its
// percent-encoded spelling decodes back to it.
func TestKeyAlphabetIsExactlyWhatValidateKeyAccepts(t *testing.T) {
	seen := map[byte]bool{}
	for i := 0; i < len(KeyAlphabet); i++ {
		c := KeyAlphabet[i]
		if seen[c] {
			t.Errorf("KeyAlphabet lists %q twice", c)
		}
		seen[c] = true
		s := string(c)
		if url.PathEscape(s) != s {
			t.Errorf("%q is escaped in a path (%q): the path form would differ from the header form", c, url.PathEscape(s))
		}
		if d, err := url.PathUnescape(fmt.Sprintf("%%%02X", c)); err != nil || d != s {
			t.Errorf("%%%02X decodes to %q, %v", c, d, err)
		}
	}
	for b := 0; b < 256; b++ {
		c := byte(b)
		if got := ValidateKey("K"+string(c)+"1") == nil; got != seen[c] {
			t.Errorf("byte %#x: ValidateKey accepts=%v, KeyAlphabet lists=%v", c, got, seen[c])
		}
	}
}
