// Package ids derives every ID of the chain from the one before it
// (docs/mechanism.md#design-1): the client's key names the scope, the
// scope names the payment, the payment names the PSP keys, the
// events and the replace id. Nothing here is random, so a resolver, a
// takeover or another Region re-creates the same IDs the first attempt used.
package ids

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"
)

// Endpoint names the operation a key is scoped to.
const Endpoint = "payments"

// Scope is the key record's partition key: endpoint, authenticated caller and
// the client's Idempotency-Key. The caller is escaped so that no choice of
// caller and key can collide with another ('#' only ever separates).
func Scope(caller, key string) string {
	return Endpoint + "#" + escape(caller) + "#" + key
}

func escape(s string) string {
	if !strings.ContainsAny(s, "#%") {
		return s
	}
	return strings.NewReplacer("%", "%25", "#", "%23").Replace(s)
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// PaymentID derives the payment's id from its scope: "pay_" and 26 base32
// characters (130 bits) of SHA-256, opaque, so no caller data shows in it.
func PaymentID(scope string) string {
	sum := sha256.Sum256([]byte(scope))
	return "pay_" + strings.ToLower(b32.EncodeToString(sum[:])[:26])
}

// ChargeKey is the PSP Idempotency-Key of the payment's charge.
func ChargeKey(paymentID string) string { return paymentID + ":charge" }

// RefundKey is the PSP key of the compensation that undoes the charge.
func RefundKey(paymentID string) string { return paymentID + ":cancel:refund" }

// ReversalKey is the PSP key of the refund a reconciliation sends of one
// charge the ledger does not hold as the payment's: the PaymentIntent names
// it, so every run re-creates the same key for the same charge, and two
// charges of one payment get two keys (one key with two parameter sets
// would be refused as a reuse).
func ReversalKey(paymentID, paymentIntent string) string {
	return paymentID + ":reconcile:refund:" + paymentIntent
}

// EventID names the event published when the payment reaches state.
func EventID(paymentID, state string) string { return paymentID + ":" + state }

// PaymentOfEvent returns the payment id an event id was derived from.
func PaymentOfEvent(eventID string) string {
	pid, _, _ := strings.Cut(eventID, ":")
	return pid
}

// ReplaceID is the id a push carries so that a second copy replaces the
// first on the device instead of stacking: the thing announced, the payment.
func ReplaceID(paymentID string) string { return paymentID }
