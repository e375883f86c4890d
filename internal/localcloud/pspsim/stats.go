package pspsim

// Stats counts what the simulator's Stripe behaviours did, as opposed to
// the fault rules armed: a chaos runner reports a behaviour only when it
// fired (a search lag that hid nothing, or a card nobody confirmed, did
// not). Counts only grow; Reset leaves them.
type Stats struct {
	// SearchHidden counts PaymentIntents a search matched but left out
	// because they were younger than the search lag.
	SearchHidden int `json:"search_hidden"`
	// RequiresAction counts confirms with a 3-D Secure test card
	// (pm_card_threeDSecure2Required, pm_card_authenticationRequired, ...):
	// declined authentication_required with error_on_requires_action,
	// parked in requires_action without it.
	RequiresAction int `json:"requires_action"`
	// UnknownPaymentMethod counts confirms refused 400 resource_missing: no
	// such PaymentMethod.
	UnknownPaymentMethod int `json:"unknown_payment_method"`
	// PaymentMethodReused counts confirms refused 400
	// payment_method_unexpected_state: a single-use PaymentMethod that had
	// already paid another PaymentIntent.
	PaymentMethodReused int `json:"payment_method_reused"`
}

// Stats returns the counts so far (GET /_sim/stats).
func (s *Sim) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}
