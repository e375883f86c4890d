package chaos

import (
	"net/http"
	"testing"

	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
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

// A payment or refund left open after quiescence (a 3-D Secure
// PaymentIntent parked in requires_action, no charge, no notification) is
// a violation unless the PSP saved a plain 5xx under its key during the
// schedule: the one open case nothing can settle inside the key window.
func TestAnOpenRowAfterQuiescenceWithoutASaved5xxIsFlagged(t *testing.T) {
	pid := "pay_1"
	for _, c := range []struct{ state, key, what string }{
		{"UNKNOWN", ids.ChargeKey(pid), ""}, {"PENDING", ids.ChargeKey(pid), ""},
		{"UNKNOWN", ids.RefundKey(pid), "refund "}, {"PENDING", ids.RefundKey(pid), "refund "},
	} {
		s := &schedule{}
		s.noteFiredByKey(nil)
		s.checkOpen(pid, c.state, c.key, c.what)
		if len(s.viol) != 1 {
			t.Errorf("%s%s open with nothing saved at the PSP: violations %v", c.what, c.state, s.viol)
		}
		// Armed but never fired excuses nothing.
		s = &schedule{}
		s.armOn(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: c.key}, Kind: pspsim.FaultError5xx})
		s.noteFiredByKey([]pspsim.Fault{{Match: pspsim.Match{IdempotencyKey: c.key}, Kind: pspsim.FaultError5xx, Times: 1}})
		s.checkOpen(pid, c.state, c.key, c.what)
		if len(s.viol) != 1 {
			t.Errorf("%s%s open with a 5xx armed that never fired: violations %v", c.what, c.state, s.viol)
		}
		// Fired: the saved 500 keeps it open, legitimately.
		s = &schedule{}
		s.armOn(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: c.key}, Kind: pspsim.FaultError5xx})
		s.noteFiredByKey(nil)
		s.checkOpen(pid, c.state, c.key, c.what)
		if len(s.viol) != 0 {
			t.Errorf("%s%s open behind a saved 5xx flagged: %v", c.what, c.state, s.viol)
		}
	}
}

// A refund FAILED after its REFUNDED event is the failed-later history
// only when the PSP was made to fail it later (refund_fail_later armed on
// its key and fired); from the system's own outbox alone it is a
// violation: the buyer was told REFUNDED for money that never moved.
func TestARefundFailedLaterWithoutThePSPFailingItIsFlagged(t *testing.T) {
	pid := "pay_1"
	s := &schedule{}
	s.noteFiredByKey(nil)
	if later, why := refundFailedLater(s, pid, "FAILED", true); later || why == "" {
		t.Errorf("no refund_fail_later fired: failedLater %v, violation %q", later, why)
	}
	s = &schedule{}
	s.armOn(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.RefundKey(pid)}, Kind: pspsim.FaultRefundFailLater})
	s.noteFiredByKey(nil)
	if later, why := refundFailedLater(s, pid, "FAILED", true); !later || why != "" {
		t.Errorf("refund_fail_later fired: failedLater %v, violation %q", later, why)
	}
	if later, why := refundFailedLater(s, pid, "FAILED", false); later || why != "" {
		t.Errorf("a refund refused before any money moved: failedLater %v, violation %q", later, why)
	}
}

// A refund fault is coverage only once its settlement happened at the
// PSP: a refund_fail_later whose refund is still succeeded, or a
// refund_pending still pending, reached nothing the checker judged.
func TestARefundFaultCountsOnlyOnceItsSettlementHappened(t *testing.T) {
	pid := "pay_1"
	for _, c := range []struct {
		kind          pspsim.FaultKind
		open, settled string
	}{
		{pspsim.FaultRefundPending, "pending", "succeeded"},
		{pspsim.FaultRefundFail, "pending", "failed"},
		{pspsim.FaultRefundFailLater, "succeeded", "failed"},
	} {
		s := &schedule{covered: map[string]int{}}
		s.armOn(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.RefundKey(pid)}, Kind: c.kind})
		s.noteFiredByKey(nil)
		s.coverRefundSettled(pid, c.open)
		if n := s.covered[pspPoint[c.kind]]; n != 0 {
			t.Errorf("%s counted %d times while the refund is %s", c.kind, n, c.open)
		}
		s.coverRefundSettled(pid, c.settled)
		if n := s.covered[pspPoint[c.kind]]; n != 1 {
			t.Errorf("%s counted %d times once the refund is %s", c.kind, n, c.settled)
		}
	}
}
