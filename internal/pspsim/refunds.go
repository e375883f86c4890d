package pspsim

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
)

var refundParams = params{
	names:    []string{"payment_intent", "charge", "amount", "reason"},
	prefixes: []string{"metadata[", "expand["},
}

// createRefund is POST /v1/refunds, by payment_intent or charge. Parameter
// errors, including an unknown PaymentIntent, are validation (nothing
// saved); a refund the endpoint refuses (nothing left to refund, too large)
// ran, and that answer is saved under the key.
func (s *Sim) createRefund(form url.Values, key string) (reply, bool) {
	if rep, bad := refundParams.check(form); bad {
		return rep, false
	}
	piID, chID := form.Get("payment_intent"), form.Get("charge")
	if (piID == "") == (chID == "") {
		return invalid("payment_intent", "parameter_missing",
			"Exactly one of the following params should be provided for this request: payment_intent or charge."), false
	}
	var amount int64
	if form.Has("amount") {
		a, rep, bad := positiveInt(form, "amount", false)
		if bad {
			return rep, false
		}
		amount = a
	}
	var reason *string
	if r := form.Get("reason"); r != "" {
		if r != "duplicate" && r != "fraudulent" && r != "requested_by_customer" {
			return invalid("reason", "parameter_invalid_string", fmt.Sprintf("Invalid reason: %s.", r)), false
		}
		reason = &r
	}
	md, rep, bad := metadata(form)
	if bad {
		return rep, false
	}
	charge := s.findCharge(piID, chID)
	if charge == nil && chID != "" {
		return invalid("charge", "resource_missing", fmt.Sprintf("No such charge: '%s'", chID)), false
	}
	if charge == nil {
		if _, ok := s.intents[piID]; !ok {
			return invalid("payment_intent", "resource_missing", fmt.Sprintf("No such payment_intent: '%s'", piID)), false
		}
		return invalid("payment_intent", "charge_not_refundable",
			"This PaymentIntent does not have a successful charge to refund."), true
	}

	left := charge.Amount - charge.AmountRefunded
	switch {
	case left == 0:
		return invalid("charge", "charge_already_refunded",
			fmt.Sprintf("Charge %s has already been refunded.", charge.ID)), true
	case amount == 0:
		amount = left
	case amount > left:
		return invalid("amount", "amount_too_large", fmt.Sprintf(
			"Refund amount (%d) is greater than unrefunded amount on charge (%d)", amount, left)), true
	}
	now := s.nowLocked()
	rf := &refundObject{
		ID:            s.newIDLocked("re"),
		Object:        "refund",
		Amount:        amount,
		Charge:        charge.ID,
		Created:       now.Unix(),
		Currency:      charge.Currency,
		Metadata:      md,
		PaymentIntent: charge.PaymentIntent,
		Reason:        reason,
		Status:        "succeeded",
	}
	charge.AmountRefunded += amount
	s.refunds = append(s.refunds, &Refund{
		ID:             rf.ID,
		PaymentIntent:  rf.PaymentIntent,
		Charge:         rf.Charge,
		IdempotencyKey: key,
		Amount:         amount,
		Currency:       rf.Currency,
		Metadata:       maps.Clone(md),
		Created:        rf.Created,
	})
	s.log.Info("refund made", "payment_id", charge.Metadata["payment_id"], "payment_intent", rf.PaymentIntent,
		"charge", rf.Charge, "refund", rf.ID, "amount", amount, "idempotency_key", key)
	return jsonReply(http.StatusOK, rf), true
}

// findCharge returns the successful charge of a PaymentIntent, or the
// charge with the given id.
func (s *Sim) findCharge(piID, chID string) *Charge {
	for _, c := range s.charges {
		if (piID != "" && c.PaymentIntent == piID) || (chID != "" && c.ID == chID) {
			return c
		}
	}
	return nil
}
