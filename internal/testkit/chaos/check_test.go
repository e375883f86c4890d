package chaos

import (
	"net/http"
	"testing"

	"github.com/oncepay/oncepay/internal/problem"
)

// A final "not charged" answer — 402 FAILED, 502 psp-rejected FAILED (the
// client takes both as final and may pay again under a new key), 409
// key-voided — contradicts a ledger that holds the payment SUCCEEDED or
// REFUNDED, whatever kind of answer said it.
func TestANotChargedAnswerContradictsAChargedLedger(t *testing.T) {
	notCharged := []answer{
		{status: http.StatusPaymentRequired, state: "FAILED"},
		{status: http.StatusBadGateway, state: "FAILED", ptype: problem.TypePSPRejected},
		{status: http.StatusConflict, ptype: problem.TypeKeyVoided},
	}
	for _, kind := range []string{"pay", "zombie", "resolve", "record", "again"} {
		for _, final := range []string{"SUCCEEDED", "REFUNDED"} {
			for _, a := range notCharged {
				a.kind = kind
				if msg := contradicts(a, false, final, "ch_1", "", false); msg == "" {
					t.Errorf("%s answered %d %s %s, the ledger %s: not flagged", kind, a.status, a.state, a.ptype, final)
				}
			}
		}
	}
	// The true answer stays clean.
	a := answer{kind: "record", status: http.StatusBadGateway, state: "FAILED", ptype: problem.TypePSPRejected}
	if msg := contradicts(a, false, "FAILED", "", "", false); msg != "" {
		t.Errorf("502 psp-rejected FAILED against a FAILED ledger flagged: %s", msg)
	}
}

// A request that is not the payment (the key reused with another amount)
// answered as a final "not charged" payment is a payment answer too.
func TestAReusedKeyAnsweredPSPRejectedIsFlagged(t *testing.T) {
	a := answer{kind: "reuse", status: http.StatusBadGateway, state: "FAILED", ptype: problem.TypePSPRejected}
	if msg := contradicts(a, true, "SUCCEEDED", "ch_1", "", false); msg == "" {
		t.Error("a reused key answered 502 psp-rejected FAILED: not flagged")
	}
}
