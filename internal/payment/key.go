package payment

// FieldKey is the Field of a FieldError about the Idempotency-Key header.
const FieldKey = "Idempotency-Key"

// MaxKeyLen is the longest Idempotency-Key accepted (DESIGN §2).
const MaxKeyLen = 255

// ValidateKey checks an Idempotency-Key header value: 1..MaxKeyLen printable
// ASCII characters (0x20-0x7E, as DESIGN §2 says "printable ASCII"), without
// a leading or trailing space. HTTP strips whitespace around a field value
// (RFC 9110 §5.5), so a key that began or ended with a space could reach us
// trimmed on one attempt and not on another: two scopes for one intent.
// Anything else is a *FieldError with Field FieldKey. The key is opaque
// beyond that: it is compared byte for byte, never normalised.
func ValidateKey(key string) error {
	if reason := checkPrintable(key, MaxKeyLen); reason != "" {
		return fieldErr(FieldKey, reason)
	}
	return nil
}
