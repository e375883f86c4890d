package pspsim

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// behaviour is what a test payment method does when confirmed, after
// Stripe's test PaymentMethods (docs.stripe.com/testing).
type behaviour int

const (
	succeeds     behaviour = iota // charged at once
	declines                      // 402 card_error; the PaymentIntent wants another method
	authenticate                  // 3-D Secure: requires_action, or with error_on_requires_action a decline
	processes                     // accepted, not final: processing (a bank debit)
)

// method is one test payment method; code, declineCode and message are the
// card_error it fails with (declines only).
type method struct {
	does                       behaviour
	code, declineCode, message string
}

// methods are the payment methods the simulator knows. As at Stripe, any
// other pm_ id is refused with 400 resource_missing: nothing is charged.
var methods = map[string]method{
	"pm_card_visa":                            {does: succeeds},
	"pm_card_visa_debit":                      {does: succeeds},
	"pm_card_mastercard":                      {does: succeeds},
	"pm_card_amex":                            {does: succeeds},
	"pm_card_discover":                        {does: succeeds},
	"pm_card_us":                              {does: succeeds},
	"pm_card_chargeDeclined":                  {declines, "card_declined", "generic_decline", "Your card was declined."},
	"pm_card_visa_chargeDeclined":             {declines, "card_declined", "generic_decline", "Your card was declined."},
	"pm_card_chargeDeclinedInsufficientFunds": {declines, "card_declined", "insufficient_funds", "Your card has insufficient funds."},
	"pm_card_chargeDeclinedExpiredCard":       {declines, "expired_card", "expired_card", "Your card has expired."},
	"pm_card_chargeDeclinedFraudulent":        {declines, "card_declined", "fraudulent", "Your card was declined."},
	"pm_card_chargeDeclinedIncorrectCvc":      {declines, "incorrect_cvc", "incorrect_cvc", "Your card's security code is incorrect."},
	"pm_card_chargeDeclinedProcessingError":   {declines, "processing_error", "processing_error", "An error occurred while processing your card. Try again in a little bit."},
	// 3-D Secure: the issuer asks the card holder to authenticate.
	"pm_card_authenticationRequired":        {does: authenticate},
	"pm_card_authenticationRequiredOnSetup": {does: authenticate},
	"pm_card_threeDSecure2Required":         {does: authenticate},
	// An ACH debit: Stripe answers processing and settles days later.
	"pm_usBankAccount_success": {does: processes},
}

// bankDebitSettles is how long a processing bank debit takes to succeed,
// by the simulator's clock (ACH: up to four business days).
const bankDebitSettles = 4 * 24 * time.Hour

// authRequired is Stripe's answer to a confirm with error_on_requires_action
// when the card needs authentication: a decline, nothing charged.
var authRequired = method{declines, "authentication_required", "authentication_required",
	"Your card was declined. This transaction requires authentication."}

var piParams = params{
	names: []string{"amount", "currency", "confirm", "payment_method", "description", "return_url", "off_session",
		"error_on_requires_action", "capture_method"},
	prefixes: []string{"metadata[", "payment_method_types[", "automatic_payment_methods[", "expand["},
}

// createPaymentIntent is POST /v1/payment_intents with confirm=true.
func (s *Sim) createPaymentIntent(form url.Values, key string) (reply, bool) {
	if rep, bad := piParams.check(form); bad {
		return rep, false
	}
	amount, rep, bad := positiveInt(form, "amount", true)
	if bad {
		return rep, false
	}
	currency := strings.ToLower(form.Get("currency"))
	if currency == "" {
		return invalid("currency", "parameter_missing", "Missing required param: currency."), false
	}
	if !isCurrency(currency) {
		return invalid("currency", "parameter_invalid_string", fmt.Sprintf("Invalid currency: %s.", currency)), false
	}
	if form.Get("confirm") != "true" {
		return invalid("confirm", "parameter_invalid", "pspsim supports only confirm=true."), false
	}
	errorOnAction, rep, bad := boolean(form, "error_on_requires_action")
	if bad {
		return rep, false
	}
	capture := form.Get("capture_method")
	switch capture {
	case "":
		capture = "automatic"
	case "automatic", "automatic_async", "manual":
	default:
		return invalid("capture_method", "parameter_invalid_string", fmt.Sprintf("Invalid capture_method: %s.", capture)), false
	}
	pm := form.Get("payment_method")
	if pm == "" {
		return invalid("payment_method", "parameter_missing",
			"You cannot confirm this PaymentIntent because it's missing a payment method."), false
	}
	m, known := methods[pm]
	if !known && s.pmCreated[pm] {
		m, known = method{does: succeeds}, true
	}
	if !known {
		s.stats.UnknownPaymentMethod++
		// Stripe refuses an id it holds no PaymentMethod for before any
		// attempt: a validation error, so nothing is saved under the key.
		return invalid("payment_method", "resource_missing", fmt.Sprintf("No such PaymentMethod: '%s'", pm)), false
	}
	md, rep, bad := metadata(form)
	if bad {
		return rep, false
	}

	now := s.nowLocked()
	pi := &paymentIntent{
		ID:                 s.newIDLocked("pi"),
		Object:             "payment_intent",
		Amount:             amount,
		CaptureMethod:      capture,
		ConfirmationMethod: "automatic",
		Created:            now.Unix(),
		Currency:           currency,
		Metadata:           md,
		PaymentMethod:      pm,
		PaymentMethodTypes: []string{"card"},
		createdAt:          now,
		key:                key,
	}
	if m.does == processes {
		pi.PaymentMethodTypes = []string{"us_bank_account"}
	}
	pi.ClientSecret = pi.ID + "_secret_pspsim"
	chargeID := s.newIDLocked("ch")
	pi.LatestCharge = &chargeID
	s.intents[pi.ID] = pi
	s.order = append(s.order, pi)
	s.touchIntent(pi.ID)
	log := s.log.With("payment_id", md["payment_id"], "payment_intent", pi.ID, "charge", chargeID, "idempotency_key", key)

	if m.does == authenticate {
		s.stats.RequiresAction++
	}
	if m.does == authenticate && errorOnAction {
		m = authRequired
	}
	switch m.does {
	case declines:
		pi.Status = "requires_payment_method"
		e := apiError{Type: typeCard, Code: m.code, DeclineCode: m.declineCode, Message: m.message, Charge: chargeID}
		pi.LastPaymentError = &e
		withPI := e
		withPI.PaymentIntent = pi
		rep = errorReply(http.StatusPaymentRequired, withPI) // marshalled now: a snapshot
		s.emitLocked("payment_intent.payment_failed", pi, key, "/v1/payment_intents")
		log.Info("payment declined", "decline_code", m.declineCode)
		return rep, true
	case authenticate:
		// Parked until the card holder authenticates, which in a
		// server-side flow nobody does: no attempt is made, no charge.
		pi.Status = "requires_action"
		pi.LatestCharge = nil
		pi.NextAction = &nextAction{Type: "use_stripe_sdk"}
		rep = jsonReply(http.StatusOK, pi)
		s.emitLocked("payment_intent.requires_action", pi, key, "/v1/payment_intents")
		log.Info("payment requires action", "status", pi.Status)
		return rep, true
	case processes:
		pi.Status = "processing"
		rep = jsonReply(http.StatusOK, pi)
		s.emitLocked("payment_intent.processing", pi, key, "/v1/payment_intents")
		log.Info("payment processing", "status", pi.Status)
		return rep, true
	}

	if capture == "manual" {
		// Authorized, not captured: the money is held, not taken, so it
		// is not a charge in Charges().
		pi.Status = "requires_capture"
		pi.AmountCapturable = amount
		rep = jsonReply(http.StatusOK, pi)
		s.emitLocked("payment_intent.amount_capturable_updated", pi, key, "/v1/payment_intents")
		log.Info("payment authorized, awaiting capture", "amount", amount, "currency", currency)
		return rep, true
	}
	pi.Status = "succeeded"
	pi.AmountReceived = amount
	s.charges = append(s.charges, &Charge{
		ID:             chargeID,
		PaymentIntent:  pi.ID,
		IdempotencyKey: key,
		Amount:         amount,
		Currency:       currency,
		Metadata:       maps.Clone(md),
		Created:        now.Unix(),
	})
	s.touchCharge(chargeID)
	rep = jsonReply(http.StatusOK, pi)
	s.emitLocked("payment_intent.succeeded", pi, key, "/v1/payment_intents")
	log.Info("charge made", "amount", amount, "currency", currency)
	return rep, true
}

// settleLocked finishes a processing PaymentIntent whose time has come, as
// Stripe does by itself: succeeded, the charge made, the webhook sent. It
// runs when the PaymentIntent is read (the simulator has no timers on its
// clock). A replay of the confirm still answers the saved "processing".
func (s *Sim) settleLocked(pi *paymentIntent) {
	if pi.Status != "processing" || s.nowLocked().Before(pi.createdAt.Add(bankDebitSettles)) {
		return
	}
	pi.Status = "succeeded"
	pi.AmountReceived = pi.Amount
	s.charges = append(s.charges, &Charge{
		ID:             *pi.LatestCharge,
		PaymentIntent:  pi.ID,
		IdempotencyKey: pi.key,
		Amount:         pi.Amount,
		Currency:       pi.Currency,
		Metadata:       maps.Clone(pi.Metadata),
		Created:        s.nowLocked().Unix(),
	})
	s.touchIntent(pi.ID)
	s.touchCharge(*pi.LatestCharge)
	s.emitLocked("payment_intent.succeeded", pi, pi.key, "/v1/payment_intents")
	s.log.Info("bank debit settled", "payment_id", pi.Metadata["payment_id"], "payment_intent", pi.ID, "charge", *pi.LatestCharge)
}

// getPaymentIntent is GET /v1/payment_intents/{id}.
func (s *Sim) getPaymentIntent(form url.Values, _ string) (reply, bool) {
	id := form.Get("id")
	pi, ok := s.intents[id]
	if !ok {
		return errorReply(http.StatusNotFound, apiError{
			Type: typeInvalidRequest, Code: "resource_missing", Param: "id",
			Message: fmt.Sprintf("No such payment_intent: '%s'", id),
		}), false
	}
	s.settleLocked(pi)
	return jsonReply(http.StatusOK, pi), true
}

var (
	searchParams = params{names: []string{"query", "limit", "page"}, prefixes: []string{"expand["}}
	// metadata['key']:'value', either quote style, as in Stripe's search
	// query language.
	metadataClause = regexp.MustCompile(`^metadata\[(['"])([^'"]+)(['"])\]:(['"])([^'"]*)(['"])$`)
)

// searchPaymentIntents is GET /v1/payment_intents/search, for the one kind
// of query oncepay sends: metadata clauses joined by AND. Newest first;
// PaymentIntents younger than the search lag are not visible yet.
func (s *Sim) searchPaymentIntents(form url.Values, _ string) (reply, bool) {
	if rep, bad := searchParams.check(form); bad {
		return rep, false
	}
	query := strings.TrimSpace(form.Get("query"))
	if query == "" {
		return invalid("query", "parameter_missing", "Missing required param: query."), false
	}
	want := map[string]string{}
	for _, clause := range strings.Split(query, " AND ") {
		m := metadataClause.FindStringSubmatch(strings.TrimSpace(clause))
		if m == nil || m[1] != m[3] || m[4] != m[6] {
			return invalid("query", "", fmt.Sprintf(
				"pspsim supports only metadata['key']:'value' clauses joined by AND, got %q.", clause)), false
		}
		want[m[2]] = m[5]
	}
	limit := int64(10)
	if form.Has("limit") {
		l, rep, bad := positiveInt(form, "limit", false)
		if bad || l > 100 {
			if !bad {
				rep = invalid("limit", "parameter_invalid_integer", "limit must be between 1 and 100.")
			}
			return rep, false
		}
		limit = l
	}
	offset := 0
	if page := form.Get("page"); page != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(page, "page_"))
		if err != nil || n < 0 || !strings.HasPrefix(page, "page_") {
			return invalid("page", "", "Invalid page token."), false
		}
		offset = n
	}

	visibleBefore := s.nowLocked().Add(-s.cfg.SearchLag)
	var hits []*paymentIntent
	for _, pi := range slices.Backward(s.order) {
		if !matchesAll(pi.Metadata, want) {
			continue
		}
		if s.cfg.SearchLag > 0 && pi.createdAt.After(visibleBefore) {
			s.stats.SearchHidden++
			continue
		}
		s.settleLocked(pi)
		hits = append(hits, pi)
	}
	page := []*paymentIntent{}
	if offset < len(hits) {
		page = hits[offset:min(len(hits), offset+int(limit))]
	}
	var next *string
	if end := offset + len(page); end < len(hits) {
		token := fmt.Sprintf("page_%d", end)
		next = &token
	}
	return jsonReply(http.StatusOK, map[string]any{
		"object":    "search_result",
		"data":      page,
		"has_more":  next != nil,
		"next_page": next,
		"url":       "/v1/payment_intents/search",
	}), true
}

func matchesAll(md, want map[string]string) bool {
	for k, v := range want {
		if got, ok := md[k]; !ok || got != v {
			return false
		}
	}
	return true
}
