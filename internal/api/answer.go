package api

import (
	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ledger"
)

// Render is the answer the API gives about p as the row stands: 201
// SUCCEEDED, 402 FAILED (502 when the PSP refused the request itself), 202
// PROCESSING while PENDING or UNKNOWN, 409 for a voided key. A stored pointer is replayed as exactly this (plus
// Idempotent-Replayed), so whoever rewrites a pointer into a final answer
// (the resolver) must store these bytes: see FinalAnswer.
func Render(p ledger.Payment) Response { return render(p) }

// FinalAnswer is the stored form of p's final answer: what the key record
// holds once p is SUCCEEDED or FAILED, byte for byte what a pointer to p
// renders from then on. ok is false while p can still change (or is VOID,
// whose record is a VOID record, not an answer).
func FinalAnswer(p ledger.Payment) (a *idem.Answer, ok bool) {
	if p.State != ledger.Succeeded && p.State != ledger.Failed {
		return nil, false
	}
	return answerOf(render(p)), true
}
