package pspsim

// Faults with a side effect: what Stripe does that a clean failure would hide.
const (
	// FaultError5xxAfterCharge runs the request (a PaymentIntent is created
	// and charged, a refund made) and then answers 500 api_error. Stripe
	// saves a result once execution has begun, so that 500 is saved under
	// the key and every replay of the key gets it back, while the charge
	// exists and a search by metadata finds it. Only a request that ran
	// (not one that failed validation) fires it.
	FaultError5xxAfterCharge FaultKind = "error_5xx_after_charge"
	// FaultRefundPending makes the refund a matching request creates
	// answer status pending; it settles as succeeded once delay_ms of
	// simulated time has passed (Advance, or the real clock), with
	// refund.updated and charge.refund.updated events.
	FaultRefundPending FaultKind = "refund_pending"
	// FaultRefundFail is refund_pending that settles as failed
	// (failure_reason lost_or_stolen_card): the money goes back to the
	// merchant, with refund.updated, refund.failed and
	// charge.refund.updated events.
	FaultRefundFail FaultKind = "refund_fail"
	// FaultRefundFailLater makes the refund answer succeeded and turn
	// failed delay_ms later, as Stripe's test card 4000000000005126 does
	// ("its status begins as succeeded ... later transitions to failed"):
	// a refund's succeeded is not final.
	FaultRefundFailLater FaultKind = "refund_fail_later"
)

// afterRun is the sort of fault that fires once the endpoint has run.
func (k FaultKind) afterRun() bool { return k == FaultError5xxAfterCharge }

// refund is the sort of fault that shapes a refund the endpoint makes.
func (k FaultKind) refund() bool {
	return k == FaultRefundPending || k == FaultRefundFail || k == FaultRefundFailLater
}

// knownEffect reports the kinds this file adds, for AddFault.
func (k FaultKind) knownEffect() bool { return k.afterRun() || k.refund() }

// takeAfterRunLocked fires an error_5xx_after_charge rule for a request
// that ran; a request that failed validation leaves the rule armed.
func (s *Sim) takeAfterRunLocked(ran bool, key, path string) (Fault, bool) {
	if !ran {
		return Fault{}, false
	}
	return s.takeFaultLocked(FaultKind.afterRun, key, path)
}
