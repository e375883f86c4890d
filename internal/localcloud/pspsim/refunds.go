package pspsim

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"time"
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
	st := &refundState{view: refundView{refundObject: *rf}, charge: charge, key: key}
	if f, ok := s.takeFaultLocked(FaultKind.refund, key, "/v1/refunds"); ok {
		if f.Kind != FaultRefundFailLater {
			st.view.Status = "pending"
		}
		st.settling = true
		st.settleAt = now.Add(f.delay())
		st.fails = f.Kind != FaultRefundPending
		s.log.Info("fault: refund settles later", "fault", f.Kind, "refund", rf.ID, "status", st.view.Status, "settles_after_ms", f.DelayMS)
	}
	s.refundsByID[rf.ID] = st
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
	s.touchCharge(charge.ID)
	s.touchRefund(rf.ID)
	s.log.Info("refund made", "payment_id", charge.Metadata["payment_id"], "payment_intent", rf.PaymentIntent,
		"charge", rf.Charge, "refund", rf.ID, "amount", amount, "idempotency_key", key)
	paymentID := charge.Metadata["payment_id"]
	s.emitObjectLocked("refund.created", st.view, paymentID, key, "/v1/refunds")
	s.emitObjectLocked("charge.refunded", s.chargeOfLocked(charge), paymentID, key, "/v1/refunds")
	return jsonReply(http.StatusOK, st.view), true
}

// refundState is a refund's life after its creation: Stripe's refunds can
// be pending and settle later as succeeded or failed.
type refundState struct {
	view     refundView
	charge   *Charge
	key      string
	settling bool      // its status changes at settleAt
	settleAt time.Time // simulator time
	fails    bool      // settles as failed
}

// refundView is the Refund object as the API renders it.
type refundView struct {
	refundObject
	FailureReason *string `json:"failure_reason,omitempty"` // present only on a failed refund, as in Stripe
}

// settleRefundsLocked settles the refunds whose time has come (pending
// ones, and succeeded ones set to fail later), in creation order:
// succeeded, or failed with the money back on the charge.
// Each settlement raises refund.updated and charge.refund.updated (and
// refund.failed for a failure), as Stripe does.
func (s *Sim) settleRefundsLocked(now time.Time) {
	for _, r := range s.refunds {
		st := s.refundsByID[r.ID]
		if st == nil || !st.settling || now.Before(st.settleAt) {
			continue
		}
		st.settling = false
		s.touchRefund(r.ID)
		s.touchCharge(st.charge.ID)
		paymentID := st.charge.Metadata["payment_id"]
		log := s.log.With("payment_id", paymentID, "refund", r.ID, "charge", st.charge.ID)
		if st.fails {
			reason := "lost_or_stolen_card"
			st.view.Status = "failed"
			st.view.FailureReason = &reason
			st.charge.AmountRefunded -= st.view.Amount
			log.Info("refund failed; the money is back with the merchant", "failure_reason", reason)
		} else {
			st.view.Status = "succeeded"
			log.Info("pending refund succeeded")
		}
		s.emitObjectLocked("refund.updated", st.view, paymentID, st.key, "/v1/refunds")
		if st.fails {
			s.emitObjectLocked("refund.failed", st.view, paymentID, st.key, "/v1/refunds")
		}
		s.emitObjectLocked("charge.refund.updated", st.view, paymentID, st.key, "/v1/refunds")
	}
}

// getRefund is GET /v1/refunds/{id}: a refund as it stands now.
func (s *Sim) getRefund(form url.Values, _ string) (reply, bool) {
	id := form.Get("id")
	st, ok := s.refundsByID[id]
	if !ok {
		return errorReply(http.StatusNotFound, apiError{
			Type: typeInvalidRequest, Code: "resource_missing", Param: "id",
			Message: fmt.Sprintf("No such refund: '%s'", id),
		}), false
	}
	return jsonReply(http.StatusOK, st.view), true
}

var listRefundParams = params{
	names:    []string{"charge", "payment_intent", "limit", "starting_after", "ending_before", "created"},
	prefixes: []string{"created[", "expand["},
}

// listRefunds is GET /v1/refunds: the refunds as they stand now, newest
// first, filtered by charge=, payment_intent= and created (lists.go) when
// given, Stripe's list shape ({"object":"list","data":[...],"has_more","url"}),
// limit 1-100 (default 10) and starting_after paging. Unlike search it has
// no lag: a refund is listed as soon as it is made.
func (s *Sim) listRefunds(form url.Values, _ string) (reply, bool) {
	if rep, bad := listRefundParams.check(form); bad {
		return rep, false
	}
	if form.Get("ending_before") != "" {
		return invalid("ending_before", "", "pspsim pages refund lists forward only (starting_after)."), false
	}
	limit, rep, bad := listLimit(form)
	if bad {
		return rep, false
	}
	span, rep, bad := created(form)
	if bad {
		return rep, false
	}
	chID, piID, after := form.Get("charge"), form.Get("payment_intent"), form.Get("starting_after")
	if after != "" {
		if _, ok := s.refundsByID[after]; !ok {
			return invalid("starting_after", "resource_missing", fmt.Sprintf("No such refund: '%s'", after)), false
		}
	}
	data := []refundView{}
	hasMore, skipping := false, after != ""
	for _, r := range slices.Backward(s.refunds) {
		if skipping {
			skipping = r.ID != after
			continue
		}
		if (chID != "" && r.Charge != chID) || (piID != "" && r.PaymentIntent != piID) || !span.holds(r.Created) {
			continue
		}
		st := s.refundsByID[r.ID]
		if st == nil {
			continue
		}
		if int64(len(data)) == limit {
			hasMore = true
			break
		}
		data = append(data, st.view)
	}
	return jsonReply(http.StatusOK, map[string]any{
		"object":   "list",
		"data":     data,
		"has_more": hasMore,
		"url":      "/v1/refunds",
	}), true
}

// RefundStatus is a refund's status now (pending, succeeded or failed).
func (s *Sim) RefundStatus(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleRefundsLocked(s.nowLocked())
	st, ok := s.refundsByID[id]
	if !ok {
		return "", false
	}
	return st.view.Status, true
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
