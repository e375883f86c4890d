package reconcile

import (
	"fmt"
	"slices"
	"strings"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/psp"
)

// Outcome names what a run concluded about one payment. A payment gets one
// outcome; the report row counts them.
type Outcome string

// The outcomes. Those a human must see (NeedsHuman) are also findings.
const (
	Agree         Outcome = "agree"          // the PSP and the ledger say the same
	Open          Outcome = "open"           // the PSP's answer is not final yet, or the row is the resolver's still
	Settled       Outcome = "settled"        // an open row made final from the PSP's record
	Adopted       Outcome = "adopted"        // a charge with no row: the row written SUCCEEDED
	Reversed      Outcome = "reversed"       // a charge the ledger does not hold as the payment's: refunded
	ReversalOpen  Outcome = "reversal_open"  // its refund's outcome is still open: the next run drives it
	RefundSettled Outcome = "refund_settled" // an open refund made final from the PSP's record
	RefundReopen  Outcome = "refund_failed"  // a refund the PSP failed after it succeeded: reopened, the merchant credited back
	NeedsHuman    Outcome = "needs_human"    // a difference no rule may settle: a finding and an alarm
	Foreign       Outcome = "foreign"        // a PSP object without our reference: not ours
)

// The kinds of finding (NeedsHuman).
const (
	FindLedgerWithoutCharge = "ledger_without_charge" // SUCCEEDED, and the PSP holds no succeeded charge of it
	FindAmountMismatch      = "amount_mismatch"       // the charge's amount or currency is not the row's
	FindUnadoptable         = "unadoptable"           // a charge with no row whose record lacks what a row needs
	FindReversalRefused     = "reversal_refused"      // the PSP refused a reversal's refund
	FindRefundUnknown       = "refund_unknown"        // a succeeded refund of ours the ledger holds no refund of
	FindRefundMismatch      = "refund_mismatch"       // the PSP's refund and the ledger's disagree in a way no move allows
	FindPendingCharge       = "pending_charge"        // a charge still pending at the PSP that the ledger does not hold as its payment's
)

// facts is everything a run knows of one payment.
type facts struct {
	id        string
	row       *ledger.Payment // nil: no row
	intents   []psp.Listed    // the PSP's PaymentIntents carrying the id, oldest first
	refunds   []psp.ListedRefund
	refund    *ledger.Refund // the ledger's refund of it, if any
	reversals []ledger.Reversal
	// due: the row's deadline has passed long enough ago that its owner
	// and the resolver had their turn (an open row younger than that is
	// theirs still).
	due bool
}

// plan is what judge decides for one payment: the moves to make, in
// order, and the outcome if they all succeed.
type plan struct {
	outcome  Outcome
	settle   *ledger.Outcome // settle the open row
	adopt    *ledger.Payment // write the lost row
	reverse  []reverse       // charges to refund
	refund   *ledger.RefundOutcome
	findings []finding
}

type reverse struct {
	intent psp.Listed
	reason ledger.ReversalReason
}

type finding struct{ kind, detail string }

func (p *plan) human(kind, format string, args ...any) {
	p.findings = append(p.findings, finding{kind, fmt.Sprintf(format, args...)})
}

// chargeOf is the id the ledger stores for a succeeded PaymentIntent (as the
// api and the resolver write psp_charge).
func chargeOf(l psp.Listed) string {
	if l.ChargeID != "" {
		return l.ChargeID
	}
	return l.PaymentIntentID
}

// judge decides, for one payment, what the PSP's records and the ledger's
// say together. It is pure: every move it plans is an allowed state move
// of the ledger, or a refund under a derived key, and a re-run over the
// same records after the moves plans none.
func judge(f facts) plan {
	var p plan
	var succeeded, pending, declined []psp.Listed
	for _, l := range f.intents {
		switch l.Outcome {
		case psp.Succeeded:
			succeeded = append(succeeded, l)
		case psp.Declined:
			declined = append(declined, l)
		default:
			pending = append(pending, l)
		}
	}
	reversed := func(pi string) bool {
		return slices.ContainsFunc(f.reversals, func(r ledger.Reversal) bool { return r.PSPPaymentIntent == pi })
	}
	reverseAll := func(ls []psp.Listed, why ledger.ReversalReason) {
		for _, l := range ls {
			if !reversed(l.PaymentIntentID) {
				p.reverse = append(p.reverse, reverse{l, why})
			}
		}
	}

	switch {
	case f.row == nil && len(succeeded) > 0:
		l := succeeded[0]
		m := l.Metadata
		row := ledger.Payment{
			ID: f.id, CallerID: m[psp.MetaCallerID], ClientKey: m[psp.MetaClientKey], Fingerprint: m[psp.MetaFingerprint],
			MerchantID: m[psp.MetaMerchantID], Amount: l.Amount, Currency: strings.ToUpper(l.Currency),
			PaymentMethod: l.PaymentMethod, PSPCharge: chargeOf(l), State: ledger.Succeeded, CreatedAt: l.Created,
		}
		if row.CallerID == "" || row.ClientKey == "" || row.Fingerprint == "" || row.MerchantID == "" {
			p.human(FindUnadoptable, "charge %s (%s) of %d %s has no ledger row and its metadata lacks the caller, key, fingerprint or merchant",
				chargeOf(l), l.PaymentIntentID, l.Amount, l.Currency)
			break
		}
		p.adopt = &row
		reverseAll(succeeded[1:], ledger.ReversalExtraCharge)
	case f.row == nil:
		// Declined or pending attempts only, and no row (the api writes
		// its row before any call, so this is a lost row): nothing is
		// taken yet, but a pending charge may still be; the daily runs
		// reach back two days only, so a human watches it.
		pendingCharges(&p, pending, "no ledger row")
	case f.row.State == ledger.Pending || f.row.State == ledger.Unknown:
		switch {
		case len(succeeded) > 0:
			l := succeeded[0]
			if l.Amount != f.row.Amount || !strings.EqualFold(l.Currency, f.row.Currency) {
				p.human(FindAmountMismatch, "charge %s is %d %s, the open row %d %s", chargeOf(l), l.Amount, l.Currency, f.row.Amount, f.row.Currency)
				break
			}
			p.settle = &ledger.Outcome{State: ledger.Succeeded, PSPCharge: chargeOf(l)}
			reverseAll(succeeded[1:], ledger.ReversalExtraCharge)
		case len(pending) == 0 && len(declined) > 0 && f.due:
			// Every attempt under the derived key was declined for good, and
			// the list has no lag: the row can be made FAILED.
			l := declined[len(declined)-1]
			p.settle = &ledger.Outcome{State: ledger.Failed, PSPCharge: l.PaymentIntentID, DeclineCode: l.DeclineCode}
		default:
			// Pending at the PSP, or nothing there yet: the resolver's, which
			// replays the key or looks the payment up.
			p.outcome = Open
		}
	case f.row.State == ledger.Succeeded:
		i := slices.IndexFunc(succeeded, func(l psp.Listed) bool {
			return chargeOf(l) == f.row.PSPCharge || l.PaymentIntentID == f.row.PSPCharge
		})
		if i < 0 {
			p.human(FindLedgerWithoutCharge, "the row is SUCCEEDED with charge %q; the PSP holds %d succeeded charge(s) of it",
				f.row.PSPCharge, len(succeeded))
			break
		}
		if l := succeeded[i]; l.Amount != f.row.Amount || !strings.EqualFold(l.Currency, f.row.Currency) {
			p.human(FindAmountMismatch, "charge %s is %d %s, the row %d %s", chargeOf(l), l.Amount, l.Currency, f.row.Amount, f.row.Currency)
		}
		reverseAll(slices.Delete(slices.Clone(succeeded), i, i+1), ledger.ReversalExtraCharge)
	case f.row.State == ledger.Failed || f.row.State == ledger.Void:
		why := ledger.ReversalLedgerFailed
		if f.row.State == ledger.Void {
			why = ledger.ReversalLedgerVoid
		}
		reverseAll(succeeded, why)
		pendingCharges(&p, pending, "the row is "+string(f.row.State))
	}

	judgeRefund(f, &p)

	switch {
	case len(p.findings) > 0:
		p.outcome = NeedsHuman
	case p.adopt != nil:
		p.outcome = Adopted
	case len(p.reverse) > 0:
		p.outcome = Reversed
	case p.settle != nil:
		p.outcome = Settled
	case p.refund != nil && p.refund.State == ledger.RefundFailed && f.refund != nil && f.refund.State == ledger.RefundSucceeded:
		p.outcome = RefundReopen
	case p.refund != nil:
		p.outcome = RefundSettled
	case p.outcome == "":
		p.outcome = Agree
	}
	return p
}

// pendingCharges records a finding for charges still pending at the PSP
// that the ledger does not hold as its payment's: money that may yet be
// taken (a bank debit settles days later), which no later daily run
// would see again.
func pendingCharges(p *plan, pending []psp.Listed, why string) {
	for _, l := range pending {
		p.human(FindPendingCharge, "PaymentIntent %s of %d %s is still pending at the PSP; %s", l.PaymentIntentID, l.Amount, l.Currency, why)
	}
}

// judgeRefund joins the PSP's refunds of the payment to the ledger's refund
// and its reversals.
func judgeRefund(f facts, p *plan) {
	var ours []psp.ListedRefund // refunds of the ledger's refund
	for _, r := range f.refunds {
		if slices.ContainsFunc(f.reversals, func(v ledger.Reversal) bool {
			return v.PSPPaymentIntent == r.PaymentIntentID || (v.PSPRefund != "" && v.PSPRefund == r.RefundID)
		}) {
			continue // a reversal's: driven by the run's reversal pass
		}
		if f.refund != nil && (r.RefundID == f.refund.PSPRefund || (f.refund.PSPCharge != "" && r.ChargeID == f.refund.PSPCharge) ||
			(f.refund.PSPPaymentIntent != "" && r.PaymentIntentID == f.refund.PSPPaymentIntent)) {
			ours = append(ours, r)
			continue
		}
		if r.Outcome == psp.Succeeded {
			p.human(FindRefundUnknown, "refund %s of %d %s succeeded at the PSP; the ledger holds no refund of that charge", r.RefundID, r.Amount, r.Currency)
		}
	}
	if f.refund == nil || len(ours) == 0 {
		return
	}
	best := ours[0]
	for _, r := range ours[1:] {
		if refundRank(r.Outcome) > refundRank(best.Outcome) {
			best = r
		}
	}
	switch st := f.refund.State; {
	case (st == ledger.RefundPending || st == ledger.RefundUnknown) && best.Outcome == psp.Succeeded:
		p.refund = &ledger.RefundOutcome{State: ledger.RefundSucceeded, PSPRefund: best.RefundID, PSPPaymentIntent: best.PaymentIntentID}
	case (st == ledger.RefundPending || st == ledger.RefundUnknown) && best.Outcome == psp.Declined:
		p.refund = &ledger.RefundOutcome{State: ledger.RefundFailed, PSPRefund: best.RefundID, FailureReason: "psp_failed"}
	case st == ledger.RefundSucceeded:
		// The refund the ledger holds, failed since (Stripe's refund.failed
		// after succeeded, a webhook that never came).
		for _, r := range ours {
			if r.RefundID == f.refund.PSPRefund && r.Outcome == psp.Declined {
				p.refund = &ledger.RefundOutcome{State: ledger.RefundFailed, PSPRefund: r.RefundID, FailureReason: "psp_failed_later"}
			}
		}
	case st == ledger.RefundFailed && best.Outcome == psp.Succeeded:
		p.human(FindRefundMismatch, "the ledger's refund is FAILED; the PSP's refund %s succeeded", best.RefundID)
	}
}

// refundRank orders a charge's refunds: money returned beats money on its
// way beats a refusal.
func refundRank(o psp.Outcome) int {
	switch o {
	case psp.Succeeded:
		return 3
	case psp.Pending:
		return 2
	case psp.Declined:
		return 1
	}
	return 0
}
