package psp

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"
)

// Metadata keys written on every PaymentIntent. They carry our ids only,
// never personal data (they show up in the PSP's dashboard and exports).
const (
	MetaPaymentID  = "payment_id"
	MetaMerchantID = "merchant_id"
)

// ChargeRequest is one charge attempt.
type ChargeRequest struct {
	// IdempotencyKey is the derived PSP key (payment_id + ":charge"). Every
	// retry of this charge must send the same key and the same fields.
	IdempotencyKey string
	// PaymentID is our reference, written to metadata so Lookup can find
	// the PaymentIntent after the PSP has forgotten the key.
	PaymentID string
	// MerchantID is written to metadata for reconciliation.
	MerchantID string
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
// definitely did not charge.
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
	if req.MerchantID != "" {
		params.Metadata[MetaMerchantID] = req.MerchantID
	}
	params.SetIdempotencyKey(req.IdempotencyKey)

	start := time.Now()
	pi, err := c.sc.V1PaymentIntents.Create(ctx, params)
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
	start := time.Now()
	pi, err := c.sc.V1PaymentIntents.Retrieve(ctx, paymentIntentID, nil)
	res, err := c.settle(err, func() Result { return fromPaymentIntent(pi) })
	paymentID := ""
	if err == nil && pi != nil {
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
// (seed Part 1, "After the window"). It uses Stripe's Search API, which is
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
			Query: fmt.Sprintf("metadata['%s']:'%s'", MetaPaymentID, paymentID),
			Limit: stripe.Int64(10),
		},
	}
	start := time.Now()
	var found []*stripe.PaymentIntent
	var err error
	for pi, e := range c.sc.V1PaymentIntents.Search(ctx, params) {
		if e != nil {
			err = e
			break
		}
		found = append(found, pi)
	}
	res, err := c.settle(err, func() Result { return c.pick(ctx, paymentID, found) })
	c.logCall(ctx, "lookup", paymentID, start, res, err)
	if err != nil {
		return res, fmt.Errorf("look up payment %s: %w", paymentID, err)
	}
	return res, nil
}

// pick chooses the PaymentIntent that decides a payment's outcome.
func (c *Client) pick(ctx context.Context, paymentID string, found []*stripe.PaymentIntent) Result {
	if len(found) == 0 {
		return Result{Outcome: NotFound}
	}
	var best *Result
	var succeeded []string
	for _, pi := range found {
		r := fromPaymentIntent(pi)
		r.Replayed = false // a search result is never a replay
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
	// PaymentIntentID is the PaymentIntent to refund.
	PaymentIntentID string
	// Amount in minor units; 0 refunds what is left.
	Amount int64
	// PaymentID is optional: our reference, written to the refund's
	// metadata and to the logs.
	PaymentID string
}

// Refund creates a refund under the request's Idempotency-Key, classified
// like Charge: an Unknown refund is retried with the same key, never
// abandoned (seed Part 4, "When a compensation times out").
func (c *Client) Refund(ctx context.Context, req RefundRequest) (Result, error) {
	switch {
	case req.IdempotencyKey == "":
		return Result{}, fmt.Errorf("%w: empty idempotency key", ErrInvalidRequest)
	case req.PaymentIntentID == "":
		return Result{}, fmt.Errorf("%w: empty payment intent id", ErrInvalidRequest)
	case req.Amount < 0:
		return Result{}, fmt.Errorf("%w: amount %d is negative", ErrInvalidRequest, req.Amount)
	}
	params := &stripe.RefundCreateParams{PaymentIntent: stripe.String(req.PaymentIntentID)}
	if req.Amount > 0 {
		params.Amount = stripe.Int64(req.Amount)
	}
	if req.PaymentID != "" {
		params.Metadata = map[string]string{MetaPaymentID: req.PaymentID}
	}
	params.SetIdempotencyKey(req.IdempotencyKey)

	start := time.Now()
	rf, err := c.sc.V1Refunds.Create(ctx, params)
	res, err := c.settle(err, func() Result { return fromRefund(rf) })
	c.logCall(ctx, "refund", req.PaymentID, start, res, err)
	if err != nil {
		return res, fmt.Errorf("refund payment intent %s: %w", req.PaymentIntentID, err)
	}
	return res, nil
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
