package payment

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// FingerprintVersion prefixes every fingerprint. A change to the canonical
// form gets a new version, so an old stored fingerprint can never be mistaken
// for a match (or a mismatch) under the new rules.
const FingerprintVersion = "v1"

// Fingerprint is the hash of the request's meaning: "v1:" and the hex
// SHA-256 of the five meaning fields in a fixed order (merchant_id, order_id,
// amount, currency, payment_method), each length-prefixed so that no shift of
// bytes between neighbouring fields ("ab"+"c" vs "a"+"bc") gives the same
// input. It depends only on the Request, never on the body's bytes: member
// order, whitespace and ignored members do not change it.
//
// It is meant for a Request returned by Parse, whose currency is already
// upper-cased.
func (r Request) Fingerprint() string {
	buf := make([]byte, 0, 64+len(r.MerchantID)+len(r.OrderID)+len(r.PaymentMethod))
	buf = append(buf, "oncepay/payment/"+FingerprintVersion+"\n"...)
	var amount [20]byte
	for _, f := range [...][]byte{
		[]byte(r.MerchantID),
		[]byte(r.OrderID),
		strconv.AppendInt(amount[:0], r.Amount, 10),
		[]byte(r.Currency),
		[]byte(r.PaymentMethod),
	} {
		// netstring-style: decimal length, ':', the bytes. The reader of
		// such a stream always knows where a field ends.
		buf = strconv.AppendInt(buf, int64(len(f)), 10)
		buf = append(buf, ':')
		buf = append(buf, f...)
		buf = append(buf, ',')
	}
	sum := sha256.Sum256(buf)
	return FingerprintVersion + ":" + hex.EncodeToString(sum[:])
}
