package relay

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// MaxMessageIDLen is SQS's limit on a FIFO MessageGroupId and
// MessageDeduplicationId.
const MaxMessageIDLen = 128

// ErrInvalidMessageID is wrapped by CheckMessageID's errors.
var ErrInvalidMessageID = errors.New("relay: not a valid SQS message group or deduplication id")

// CheckMessageID returns an error wrapping ErrInvalidMessageID when SQS
// would refuse s as a FIFO MessageGroupId or MessageDeduplicationId: SQS
// documents both as 1 to 128 characters, each alphanumeric (a-z, A-Z, 0-9)
// or punctuation (!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~), which together are
// exactly the printable ASCII characters other than space, 0x21 to 0x7E.
// moto does not check; the relay does, so a message the local cloud takes is
// one AWS takes too.
func CheckMessageID(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty", ErrInvalidMessageID)
	}
	if len(s) > MaxMessageIDLen {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidMessageID, len(s), MaxMessageIDLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			// The id is not echoed: a merchant id is the caller's text.
			return fmt.Errorf("%w: byte %d is 0x%02x, outside 0x21-0x7e", ErrInvalidMessageID, i, s[i])
		}
	}
	return nil
}

// derivedIDPrefix marks an id the relay derived because SQS would refuse
// the original.
const derivedIDPrefix = "sha256:"

// safeMessageID returns s when SQS accepts it, else a stand-in SQS accepts:
// "sha256:" and the hex SHA-256 of s (71 characters). The stand-in is a
// function of s alone, so every event of one merchant still lands in one
// message group (its order kept), and every copy of one event carries one
// deduplication id. Two originals share a stand-in only if SHA-256 collides;
// a real id spelled like a stand-in merely shares a group, which costs
// parallelism, never correctness (the worker reads the event, merchant
// included, from the body).
func safeMessageID(s string) (id string, derived bool) {
	if CheckMessageID(s) == nil {
		return s, false
	}
	sum := sha256.Sum256([]byte(s))
	return derivedIDPrefix + hex.EncodeToString(sum[:]), true
}
