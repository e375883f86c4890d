package psp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/form"
)

// Metadata keys written on every PaymentIntent. They carry our ids only,
// never personal data (they show up in the PSP's dashboard and exports).
//
// The caller, its key and the request's fingerprint let a reconciliation
// adopt a charge whose ledger row was lost (a failover inside the
// replication lag): the row is rebuilt from the PSP's record alone, with
// the same durable guard (caller, key) and fingerprint the api wrote, so
// the buyer's retry is answered from it. The caller is the identity
// provider's opaque subject and the key the client's random one; neither
// is personal data.
const (
	maxMetadataValue = 500

	MetaPaymentID   = "payment_id"
	MetaMerchantID  = "merchant_id"
	MetaCallerID    = "caller_id"
	MetaClientKey   = "client_key"
	MetaFingerprint = "fingerprint"
)

// ChargeRequest is one charge attempt.
type ChargeRequest struct {
	// IdempotencyKey is the derived PSP key (payment_id + ":charge"). Every
	// retry of this charge must send the same key and the same fields.
	IdempotencyKey string
	// PaymentID is our reference, written to metadata so Lookup can find
	// the PaymentIntent after the PSP has forgotten the key.
	PaymentID string
	// MerchantID, CallerID, ClientKey and Fingerprint are written to
	// metadata for reconciliation (see MetaCallerID); each may be empty.
	MerchantID  string
	CallerID    string
	ClientKey   string
	Fingerprint string
	// Amount is in minor units (> 0).
	Amount int64
	// Currency is an ISO 4217 code; it is sent in lower case.
	Currency string
	// PaymentMethod is the PSP's payment method id (pm_...).
	PaymentMethod string
}

func (r ChargeRequest) check() error {
	switch {
	case r.IdempotencyKey == "":
		// stripe-go would invent a random key, which makes the charge
		// impossible to replay: refuse instead.
		return fmt.Errorf("%w: empty idempotency key", ErrInvalidRequest)
	case len(r.IdempotencyKey) > 255:
		return fmt.Errorf("%w: idempotency key longer than 255 characters", ErrInvalidRequest)
	case r.PaymentID == "":
		return fmt.Errorf("%w: empty payment id", ErrInvalidRequest)
	case r.Amount <= 0:
		return fmt.Errorf("%w: amount %d is not positive", ErrInvalidRequest, r.Amount)
	case len(r.Currency) != 3:
		return fmt.Errorf("%w: currency %q is not an ISO 4217 code", ErrInvalidRequest, r.Currency)
	case r.PaymentMethod == "":
		return fmt.Errorf("%w: empty payment method", ErrInvalidRequest)
	}
	return nil
}

// Charge creates and confirms a PaymentIntent in one call under the
// request's Idempotency-Key. It blocks until the PSP answers or ctx ends.
//
// A nil error comes with Succeeded, Declined, Pending or Unknown; Unknown
// (timeout, lost reply, 5xx, 429, 409) must be resolved, never treated as a
// failure. A card that needs 3-D Secure is Declined (authentication_required:
// the charge is confirmed with error_on_requires_action); a bank debit
// still processing is Pending. A non-nil error (ErrInvalidRequest, ErrKeyReuse) means the PSP
// definitely did not charge; ErrNotSent means it was not asked (its API key
// could not be read), which the caller must not read as a refusal.
func (c *Client) Charge(ctx context.Context, req ChargeRequest) (Result, error) {
	if err := req.check(); err != nil {
		return Result{}, err
	}
	params := &stripe.PaymentIntentCreateParams{
		Amount:        stripe.Int64(req.Amount),
		Currency:      stripe.String(strings.ToLower(req.Currency)),
		PaymentMethod: stripe.String(req.PaymentMethod),
		Confirm:       stripe.Bool(true),
		// Confirmed server-side with nobody to redirect: allow only payment
		// methods that never need a redirect, so Stripe does not ask for a
		// return_url.
		AutomaticPaymentMethods: &stripe.PaymentIntentCreateAutomaticPaymentMethodsParams{
			Enabled:        stripe.Bool(true),
			AllowRedirects: stripe.String("never"),
		},
		// Nobody is there to authenticate a card (3-D Secure): without
		// this Stripe would park such a payment in requires_action for
		// good. With it Stripe declines it at once, a 402 card_error
		// authentication_required, which is a definite "not charged".
		ErrorOnRequiresAction: stripe.Bool(true),
		Metadata:              map[string]string{MetaPaymentID: req.PaymentID},
	}
	for k, v := range map[string]string{MetaMerchantID: req.MerchantID, MetaCallerID: req.CallerID,
		MetaClientKey: req.ClientKey, MetaFingerprint: req.Fingerprint} {
		// Stripe refuses a metadata value over 500 characters: one that
		// long is left out (that charge is then not adoptable by a
		// reconciliation, which says so) rather than refused as a charge.
		if v != "" && len(v) <= maxMetadataValue {
			params.Metadata[k] = v
		}
	}
	params.SetIdempotencyKey(req.IdempotencyKey)

	key, kerr := c.apiKey(ctx)
	if kerr != nil {
		return Result{}, fmt.Errorf("charge payment %s: %w", req.PaymentID, kerr)
	}
	start := time.Now()
	params.Context = ctx
	pi := &stripe.PaymentIntent{}
	err := c.send(ctx, key, func(k string) error { return c.api.Call(http.MethodPost, "/v1/payment_intents", k, params, pi) })
	res, err := c.settle(err, func() Result { return fromPaymentIntent(pi) })
	c.logCall(ctx, "charge", req.PaymentID, start, res, err)
	if err != nil {
		return res, fmt.Errorf("charge payment %s: %w", req.PaymentID, err)
	}
	return res, nil
}

// Retrieve reads a PaymentIntent's current state by the PSP's id. GETs are
// idempotent by definition and have no key window, so this works at any
// time, for example to follow a Pending payment.
func (c *Client) Retrieve(ctx context.Context, paymentIntentID string) (Result, error) {
	if paymentIntentID == "" {
		return Result{}, fmt.Errorf("%w: empty payment intent id", ErrInvalidRequest)
	}
	key, kerr := c.apiKey(ctx)
	if kerr != nil {
		return Result{}, fmt.Errorf("retrieve payment intent %s: %w", paymentIntentID, kerr)
	}
	start := time.Now()
	pi := &stripe.PaymentIntent{}
	err := c.send(ctx, key, func(k string) error {
		return c.api.Call(http.MethodGet, stripe.FormatURLPath("/v1/payment_intents/%s", paymentIntentID), k,
			&stripe.PaymentIntentRetrieveParams{Params: stripe.Params{Context: ctx}}, pi)
	})
	res, err := c.settle(err, func() Result { return fromPaymentIntent(pi) })
	paymentID := ""
	if err == nil {
		paymentID = pi.Metadata[MetaPaymentID]
	}
	c.logCall(ctx, "retrieve", paymentID, start, res, err)
	if err != nil {
		return res, fmt.Errorf("retrieve payment intent %s: %w", paymentIntentID, err)
	}
	return res, nil
}

// Lookup finds the PaymentIntent(s) carrying our reference in metadata, for
// use after the PSP's key window, when replaying the key would charge anew
// (docs/mechanism.md#seed-part-1). It uses Stripe's Search API, which is
// eventually consistent (new data is searchable in under a minute, up to an
// hour during outages): NotFound is proof only for a payment sent well
// before; inside the key window, replay the key instead.
//
// Several matches mean several attempts: any succeeded one wins, then any
// pending one; otherwise the payment was declined. Two succeeded
// PaymentIntents for one payment are a double charge and are logged as an
// error.
func (c *Client) Lookup(ctx context.Context, paymentID string) (Result, error) {
	if paymentID == "" || strings.ContainsAny(paymentID, `'"\`) {
		return Result{}, fmt.Errorf("%w: payment id %q cannot be searched for", ErrInvalidRequest, paymentID)
	}
	params := &stripe.PaymentIntentSearchParams{
		SearchParams: stripe.SearchParams{
			Context: ctx,
			Query:   fmt.Sprintf("metadata['%s']:'%s'", MetaPaymentID, paymentID),
			Limit:   stripe.Int64(10),
		},
	}
	key, kerr := c.apiKey(ctx)
	if kerr != nil {
		return Result{}, fmt.Errorf("lookup payment %s: %w", paymentID, kerr)
	}
	start := time.Now()
	// Every page, read as stripe-go's search iterator reads them (a raw call
	// with the form-encoded query: Backend.Call cannot take search params),
	// and an error on a later page fails the whole lookup.
	query := &form.Values{}
	form.AppendTo(query, params)
	var found []*stripe.PaymentIntent
	status := 0
	var err error
	for {
		page := &stripe.PaymentIntentSearchResult{}
		if err = c.send(ctx, key, func(k string) error {
			return c.api.CallRaw(http.MethodGet, "/v1/payment_intents/search", k, []byte(query.Encode()), params.GetParams(), page)
		}); err != nil {
			break
		}
		if page.LastResponse != nil {
			status = page.LastResponse.StatusCode
		}
		found = append(found, page.Data...)
		if !page.HasMore || page.NextPage == nil {
			break
		}
		query.Set(stripe.Page, *page.NextPage)
	}
	res, err := c.settle(err, func() Result { return c.pick(ctx, paymentID, found, status) })
	c.logCall(ctx, "lookup", paymentID, start, res, err)
	if err != nil {
		return res, fmt.Errorf("look up payment %s: %w", paymentID, err)
	}
	return res, nil
}

// pick chooses the PaymentIntent that decides a payment's outcome; status
// is the search call's HTTP status.
func (c *Client) pick(ctx context.Context, paymentID string, found []*stripe.PaymentIntent, status int) Result {
	if len(found) == 0 {
		return Result{Outcome: NotFound}
	}
	var best *Result
	var succeeded []string
	for _, pi := range found {
		r := fromPaymentIntent(pi)
		r.Replayed = false // a search result is never a replay
		r.HTTPStatus = status
		if r.Outcome == Succeeded {
			succeeded = append(succeeded, r.PaymentIntentID)
		}
		if best == nil || rank(r.Outcome) > rank(best.Outcome) {
			best = &r
		}
	}
	if len(succeeded) > 1 {
		c.log.ErrorContext(ctx, "more than one succeeded PaymentIntent for one payment",
			"payment_id", paymentID, "payment_intents", succeeded)
	}
	return *best
}

// rank orders outcomes for pick: money taken beats money pending beats a
// decline.
func rank(o Outcome) int {
	switch o {
	case Succeeded:
		return 3
	case Pending:
		return 2
	case Declined:
		return 1
	default:
		return 0
	}
}

// RefundRequest is one refund attempt.
type RefundRequest struct {
	// IdempotencyKey is the derived refund key (payment_id +
	// ":cancel:refund"); every retry sends the same key and fields.
	IdempotencyKey string
	// PaymentIntentID is the PaymentIntent to refund; ChargeID, the charge
	// to refund instead (Stripe takes either, exactly one). Refunding by
	// the charge the ledger already holds needs no search, whose index
	// lags behind writes.
	PaymentIntentID string
	ChargeID        string
	// Amount in minor units; 0 refunds what is left.
	Amount int64
	// PaymentID is optional: our reference, written to the refund's
	// metadata and to the logs.
	PaymentID string
}

// Refund creates a refund under the request's Idempotency-Key, classified
// like Charge: an Unknown refund is retried with the same key, never
// abandoned (docs/mechanism.md#refunds).
func (c *Client) Refund(ctx context.Context, req RefundRequest) (Result, error) {
	switch {
	case req.IdempotencyKey == "":
		return Result{}, fmt.Errorf("%w: empty idempotency key", ErrInvalidRequest)
	case (req.PaymentIntentID == "") == (req.ChargeID == ""):
		return Result{}, fmt.Errorf("%w: exactly one of payment intent id and charge id is needed", ErrInvalidRequest)
	case req.Amount < 0:
		return Result{}, fmt.Errorf("%w: amount %d is negative", ErrInvalidRequest, req.Amount)
	}
	params := &stripe.RefundCreateParams{}
	target := req.PaymentIntentID
	if req.ChargeID != "" {
		params.Charge = stripe.String(req.ChargeID)
		target = req.ChargeID
	} else {
		params.PaymentIntent = stripe.String(req.PaymentIntentID)
	}
	if req.Amount > 0 {
		params.Amount = stripe.Int64(req.Amount)
	}
	if req.PaymentID != "" {
		params.Metadata = map[string]string{MetaPaymentID: req.PaymentID}
	}
	params.SetIdempotencyKey(req.IdempotencyKey)

	key, kerr := c.apiKey(ctx)
	if kerr != nil {
		return Result{}, fmt.Errorf("refund %s: %w", target, kerr)
	}
	start := time.Now()
	params.Context = ctx
	rf := &stripe.Refund{}
	err := c.send(ctx, key, func(k string) error { return c.api.Call(http.MethodPost, "/v1/refunds", k, params, rf) })
	res, err := c.settle(err, func() Result { return fromRefund(rf) })
	c.logCall(ctx, "refund", req.PaymentID, start, res, err)
	if err != nil {
		return res, fmt.Errorf("refund %s: %w", target, err)
	}
	return res, nil
}

// RetrieveRefund reads a refund's current state by the PSP's id: how a
// pending refund is followed to its end, and how a refund that succeeded
// and failed later (Stripe's refund.failed) is seen. A GET has no key
// window, unlike replaying the refund's key, which keeps answering the
// saved first answer.
func (c *Client) RetrieveRefund(ctx context.Context, refundID string) (Result, error) {
	if refundID == "" {
		return Result{}, fmt.Errorf("%w: empty refund id", ErrInvalidRequest)
	}
	key, kerr := c.apiKey(ctx)
	if kerr != nil {
		return Result{}, fmt.Errorf("retrieve refund %s: %w", refundID, kerr)
	}
	start := time.Now()
	rf := &stripe.Refund{}
	err := c.send(ctx, key, func(k string) error {
		return c.api.Call(http.MethodGet, stripe.FormatURLPath("/v1/refunds/%s", refundID), k,
			&stripe.RefundRetrieveParams{Params: stripe.Params{Context: ctx}}, rf)
	})
	res, err := c.settle(err, func() Result { return fromRefund(rf) })
	paymentID := ""
	if err == nil {
		paymentID = rf.Metadata[MetaPaymentID]
	}
	c.logCall(ctx, "retrieve_refund", paymentID, start, res, err)
	if err != nil {
		return res, fmt.Errorf("retrieve refund %s: %w", refundID, err)
	}
	return res, nil
}

// FindRefund looks up, by what the caller knows (the charge or the
// PaymentIntent the refund was sent against; exactly one), the refunds the
// PSP holds for it, and returns the one that decides our refund: how a
// refund whose key answers a saved 5xx is settled (Stripe saves a result
// once execution has begun, so that 500 says nothing about whether the
// refund ran, and every replay of the key repeats it for 24 h). It uses
// GET /v1/refunds?charge= (or ?payment_intent=), a list, which unlike the
// Search API is not served from a lagging index.
//
// Only refunds whose metadata carries paymentID count (every refund this
// system sends does); when paymentID is empty, every refund of the charge
// counts. Several match: succeeded beats pending beats failed; none:
// NotFound, and only then does replaying the key mean anything.
func (c *Client) FindRefund(ctx context.Context, paymentIntentID, chargeID, paymentID string) (Result, error) {
	if (paymentIntentID == "") == (chargeID == "") {
		return Result{}, fmt.Errorf("%w: exactly one of payment intent id and charge id is needed", ErrInvalidRequest)
	}
	params := &stripe.RefundListParams{}
	params.Context = ctx
	params.Limit = stripe.Int64(100)
	target := chargeID
	if chargeID != "" {
		params.Charge = stripe.String(chargeID)
	} else {
		params.PaymentIntent = stripe.String(paymentIntentID)
		target = paymentIntentID
	}
	key, kerr := c.apiKey(ctx)
	if kerr != nil {
		return Result{}, fmt.Errorf("find refunds of %s: %w", target, kerr)
	}
	start := time.Now()
	var found []*stripe.Refund
	status := 0
	var err error
	// Every page (a charge has few refunds; the loop is for correctness),
	// by a raw call with the form-encoded query, as stripe-go's list
	// iterator sends it (Backend.Call cannot take list params).
	for {
		page := &stripe.RefundList{}
		query := &form.Values{}
		form.AppendTo(query, params)
		if err = c.send(ctx, key, func(k string) error {
			return c.api.CallRaw(http.MethodGet, "/v1/refunds", k, []byte(query.Encode()), params.GetParams(), page)
		}); err != nil {
			break
		}
		if page.LastResponse != nil {
			status = page.LastResponse.StatusCode
		}
		found = append(found, page.Data...)
		if !page.HasMore || len(page.Data) == 0 {
			break
		}
		params.StartingAfter = stripe.String(page.Data[len(page.Data)-1].ID)
	}
	res, err := c.settle(err, func() Result { return pickRefund(found, paymentID, status) })
	c.logCall(ctx, "find_refund", paymentID, start, res, err)
	if err != nil {
		return res, fmt.Errorf("find refunds of %s: %w", target, err)
	}
	return res, nil
}

// pickRefund chooses, among a charge's refunds, the one that decides the
// refund of paymentID; status is the list call's HTTP status.
func pickRefund(found []*stripe.Refund, paymentID string, status int) Result {
	var best *Result
	for _, rf := range found {
		if paymentID != "" && rf.Metadata[MetaPaymentID] != paymentID {
			continue
		}
		r := fromRefund(rf)
		r.Replayed = false // a list is never a replay
		r.HTTPStatus = status
		if best == nil || rank(r.Outcome) > rank(best.Outcome) {
			best = &r
		}
	}
	if best == nil {
		return Result{Outcome: NotFound, HTTPStatus: status}
	}
	return *best
}

// settle classifies a call's error, or the returned object when there is
// none.
func (c *Client) settle(err error, ok func() Result) (Result, error) {
	if err != nil {
		return classifyError(err)
	}
	return ok(), nil
}

// logCall writes one line per PSP call: ids and the outcome, no personal
// data. Unknown outcomes are warnings: someone has to resolve them.
func (c *Client) logCall(ctx context.Context, op, paymentID string, start time.Time, res Result, err error) {
	attrs := []any{
		"op", op,
		"payment_id", paymentID,
		"outcome", res.Outcome.String(),
		"http_status", res.HTTPStatus,
		"replayed", res.Replayed,
		"duration_ms", time.Since(start).Milliseconds(),
	}
	if res.PaymentIntentID != "" {
		attrs = append(attrs, "payment_intent", res.PaymentIntentID)
	}
	if res.ChargeID != "" {
		attrs = append(attrs, "charge", res.ChargeID)
	}
	if res.RefundID != "" {
		attrs = append(attrs, "refund", res.RefundID)
	}
	if res.DeclineCode != "" {
		attrs = append(attrs, "decline_code", res.DeclineCode)
	}
	switch {
	case err != nil:
		c.log.Log(ctx, slog.LevelError, "psp call refused", append(attrs, "error", err.Error())...)
	case res.Outcome == Unknown:
		cause := ""
		if res.Cause != nil {
			cause = res.Cause.Error()
		}
		c.log.Log(ctx, slog.LevelWarn, "psp call outcome unknown", append(attrs, "cause", cause)...)
	default:
		c.log.Log(ctx, slog.LevelInfo, "psp call", attrs...)
	}
}

// apiKey is the key for one call. When it cannot be read the call is not
// sent, and the error says so (ErrNotSent), never that the PSP refused.
func (c *Client) apiKey(ctx context.Context) (string, error) {
	k, err := c.key(ctx)
	if err == nil && k == "" {
		err = errors.New("empty")
	}
	if err != nil {
		return "", fmt.Errorf("%w: the API key: %w", ErrNotSent, err)
	}
	return k, nil
}

// send makes call with key. A 401 may mean the key was rolled after it was
// read (it is cached for minutes): then the key is read afresh and, if it
// changed, the call is made once more. A 401 ran nothing at the PSP, so
// sending the same Idempotency-Key again is the same request, not a second
// one; a 401 to the fresh key, or to an unchanged one, stands.
func (c *Client) send(ctx context.Context, key string, call func(key string) error) error {
	err := call(key)
	var se *stripe.Error
	if c.refresh == nil || !errors.As(err, &se) || se.HTTPStatusCode != http.StatusUnauthorized {
		return err
	}
	fresh, ferr := c.refresh(ctx)
	if ferr != nil || fresh == "" || fresh == key {
		return err
	}
	c.log.Warn("the PSP refused the API key held; calling again with the key just read (it was rolled)")
	return call(fresh)
}
