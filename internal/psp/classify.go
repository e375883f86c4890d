package psp

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/stripe/stripe-go/v82"
)

// classifyError turns a failed call into a Result or a definite error,
// following docs/mechanism.md#seed-part-1: only an answer that says "not
// done" is a failure; everything that leaves the charge's fate open is
// Unknown.
func classifyError(err error) (Result, error) {
	var se *stripe.Error
	if !errors.As(err, &se) {
		// No Stripe answer: a network error, a timeout or context deadline,
		// a dropped connection, or a body we could not decode (a proxy's
		// HTML 502). The request may have been processed.
		return Result{Outcome: Unknown, Cause: err}, nil
	}
	apiErr := &APIError{
		HTTPStatus:  se.HTTPStatusCode,
		Type:        string(se.Type),
		Code:        string(se.Code),
		DeclineCode: string(se.DeclineCode),
		Param:       se.Param,
		Message:     se.Msg,
		RequestID:   se.RequestID,
	}
	res := Result{HTTPStatus: se.HTTPStatusCode, Replayed: replayed(se.LastResponse)}
	switch status := se.HTTPStatusCode; {
	case status == http.StatusPaymentRequired:
		// 402: the parameters were valid and the charge was attempted and
		// refused (card_error). A definite "not charged".
		res.Outcome = Declined
		res.DeclineCode = apiErr.DeclineCode
		if res.DeclineCode == "" {
			res.DeclineCode = apiErr.Code
		}
		res.ChargeID = se.ChargeID
		if pi := se.PaymentIntent; pi != nil {
			res.PaymentIntentID = pi.ID
			if res.ChargeID == "" && pi.LatestCharge != nil {
				res.ChargeID = pi.LatestCharge.ID
			}
		}
		return res, nil
	case status == http.StatusConflict, status == http.StatusTooManyRequests, status >= 500:
		// 409: another request with this key is still running (nothing is
		// saved for this one). 429: rate limited or a lock timeout. 5xx: the
		// PSP failed somewhere, possibly after charging. All open.
		res.Outcome = Unknown
		res.Cause = apiErr
		return res, nil
	case se.Type == stripe.ErrorTypeIdempotency:
		// 400 idempotency_error: the key was first used with different
		// parameters. Nothing ran.
		return res, fmt.Errorf("%w: %w", ErrKeyReuse, apiErr)
	case status >= 400 && status < 500:
		// 400 invalid request, 401/403 bad key, 404 no such object: the PSP
		// refused the request before acting on it.
		return res, fmt.Errorf("%w: %w", ErrInvalidRequest, apiErr)
	default:
		res.Outcome = Unknown
		res.Cause = apiErr
		return res, nil
	}
}

// fromPaymentIntent classifies a PaymentIntent the PSP returned.
func fromPaymentIntent(pi *stripe.PaymentIntent) Result {
	res := Result{PaymentIntentID: pi.ID, Replayed: replayed(pi.LastResponse)}
	if pi.LastResponse != nil {
		res.HTTPStatus = pi.LastResponse.StatusCode
	}
	if pi.LatestCharge != nil {
		res.ChargeID = pi.LatestCharge.ID
	}
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded:
		res.Outcome = Succeeded
	case stripe.PaymentIntentStatusRequiresPaymentMethod, stripe.PaymentIntentStatusCanceled:
		// The last attempt failed (or none was made) and no money moved.
		res.Outcome = Declined
		if e := pi.LastPaymentError; e != nil {
			res.DeclineCode = string(e.DeclineCode)
			if res.DeclineCode == "" {
				res.DeclineCode = string(e.Code)
			}
		}
	default:
		// processing: Stripe finishes it on its own, succeeded or failed
		// (ask again). requires_action: only a PaymentIntent confirmed
		// without error_on_requires_action (before that flag was sent) can
		// sit there; no money has moved. requires_capture: authorized, not
		// captured: money held, not taken, so never Succeeded (a merchant
		// is not credited for it). requires_confirmation: never confirmed.
		// All are open; past the resolver's horizon they alarm.
		res.Outcome = Pending
	}
	return res
}

// fromRefund classifies a Refund the PSP returned.
func fromRefund(rf *stripe.Refund) Result {
	res := Result{RefundID: rf.ID, Replayed: replayed(rf.LastResponse)}
	if rf.LastResponse != nil {
		res.HTTPStatus = rf.LastResponse.StatusCode
	}
	if rf.PaymentIntent != nil {
		res.PaymentIntentID = rf.PaymentIntent.ID
	}
	if rf.Charge != nil {
		res.ChargeID = rf.Charge.ID
	}
	switch rf.Status {
	case stripe.RefundStatusSucceeded:
		res.Outcome = Succeeded
	case stripe.RefundStatusFailed, stripe.RefundStatusCanceled:
		res.Outcome = Declined
		res.DeclineCode = string(rf.FailureReason)
	default:
		// pending, requires_action: accepted, not settled.
		res.Outcome = Pending
	}
	return res
}

// replayed reports Stripe's Idempotent-Replayed header: the answer came from
// the PSP's idempotency store, not from a new action.
func replayed(r *stripe.APIResponse) bool {
	return r != nil && r.Header.Get("Idempotent-Replayed") == "true"
}

// Call says what a charge call is to its key: the first call ever made with
// it, or a replay of a call another process may have made (a takeover of a
// dead owner's PENDING row, the resolver).
type Call int

const (
	// FirstCall: this process wrote the payment's PENDING row itself, so no
	// call with the key was made before this one.
	FirstCall Call = iota
	// Replay: a call with the key may already have reached the PSP, made by
	// someone else, whose outcome this process never saw.
	Replay
)

// NotCharged reports what a Charge error proves: true only when no charge
// can exist under the request's key. It is the one rule the API and the
// resolver apply to a PSP refusal.
//
// A refusal by our own client's checks was never sent, by anyone. On a
// FirstCall any refusal (400, 401/403 bad or restricted key, 404) proves
// nothing was charged: the PSP refused before acting, and no earlier call
// exists. On a Replay only a 400 invalid_request_error proves it: the PSP
// compared the very parameters the original sent and refused them, so it
// holds no saved result for the key. An authentication or routing refusal
// (401, 403, 404) is answered before the PSP looks at the key, so it says
// nothing about the original call, which may have charged. A key reuse
// (idempotency_error) never proves anything.
func NotCharged(err error, call Call) bool {
	if !errors.Is(err, ErrInvalidRequest) || errors.Is(err, ErrKeyReuse) {
		return false
	}
	var apiErr *APIError
	if !errors.As(err, &apiErr) {
		return true
	}
	if call == FirstCall {
		return apiErr.HTTPStatus >= 400 && apiErr.HTTPStatus < 500
	}
	return apiErr.HTTPStatus == http.StatusBadRequest && apiErr.Type == string(stripe.ErrorTypeInvalidRequest)
}
