package pspsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Payment methods are single-use unless attached to a Customer, as in
// Stripe: a PaymentMethod that paid a PaymentIntent without a Customer
// "may not be used again", and a second PaymentIntent confirmed with it
// gets 400. Stripe's test tokens (pm_card_visa, pm_card_chargeDeclined,
// every pm_card_...) are not PaymentMethods but recipes: each use makes a
// fresh PaymentMethod, so they can be reused, and so can any payment
// method attached with AttachPaymentMethod (POST /_sim/payment_methods/attach).

// reusableToken reports Stripe's test tokens, which mint a new
// PaymentMethod on every use.
func reusableToken(pm string) bool { return strings.HasPrefix(pm, "pm_card_") }

// checkPaymentMethodLocked refuses a PaymentIntent confirmed with a
// single-use payment method another PaymentIntent has already used. Like a
// parameter error, the refusal is not saved under the key. Only the create
// (a POST) confirms: the list shares its path and takes no payment method.
func (s *Sim) checkPaymentMethodLocked(method, path string, form url.Values) (reply, bool) {
	if method != http.MethodPost || path != "/v1/payment_intents" {
		return reply{}, false
	}
	pm := form.Get("payment_method")
	if pm == "" || reusableToken(pm) || s.pmAttached[pm] {
		return reply{}, false
	}
	if by, used := s.pmUsed[pm]; used {
		s.stats.PaymentMethodReused++
		s.log.Info("payment method refused: single-use and already used", "payment_method", pm, "used_by", by)
		return invalid("payment_method", "payment_method_unexpected_state", fmt.Sprintf(
			"The provided PaymentMethod was previously used with a PaymentIntent without Customer attachment, "+
				"shared with a connected account without Customer attachment, or was detached from a Customer. "+
				"It may not be used again. To use a PaymentMethod multiple times, you must attach it to a Customer first. (%s)", pm)), true
	}
	return reply{}, false
}

// notePaymentMethodLocked records that a PaymentIntent which took money
// used its payment method.
func (s *Sim) notePaymentMethodLocked(method, path string, form url.Values, rep reply) {
	pm := form.Get("payment_method")
	if method != http.MethodPost || path != "/v1/payment_intents" || pm == "" || reusableToken(pm) {
		return
	}
	var pi struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if json.Unmarshal(rep.body, &pi) == nil && pi.Status == "succeeded" {
		s.pmUsed[pm] = pi.ID
		s.touchPM(pm)
	}
}

// AttachPaymentMethod makes pm reusable, as attaching it to a Customer does
// in Stripe.
func (s *Sim) AttachPaymentMethod(pm string) error {
	if !strings.HasPrefix(pm, "pm_") {
		return fmt.Errorf("pspsim: %q is not a payment method id (pm_...)", pm)
	}
	s.mu.Lock()
	s.pmAttached[pm] = true
	s.touchPM(pm)
	s.mu.Unlock()
	return s.sync()
}

// AddPaymentMethod makes pm a PaymentMethod the simulator holds, as
// POST /v1/payment_methods creates one at Stripe: a card that pays, known
// (so not refused as resource_missing) and single-use until attached.
func (s *Sim) AddPaymentMethod(pm string) error {
	if !strings.HasPrefix(pm, "pm_") || reusableToken(pm) {
		return fmt.Errorf("pspsim: %q is not a created payment method id (pm_..., not a pm_card_ token)", pm)
	}
	s.mu.Lock()
	s.pmCreated[pm] = true
	s.touchPM(pm)
	s.mu.Unlock()
	return s.sync()
}
