package psp

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"
)

// Event is a verified PSP webhook event, reduced to the ids and the terms
// the webhook handler needs. The event ID is the inbox key: the PSP delivers each event
// at least once, so the same ID can arrive many times.
type Event struct {
	// ID is the PSP's event id (evt_...), stable across redeliveries.
	ID string
	// Type is the event type, e.g. payment_intent.succeeded or
	// payment_intent.payment_failed.
	Type string
	// PaymentIntentID is the PaymentIntent the event is about.
	PaymentIntentID string
	// PaymentID is our reference from the object's metadata; empty if the
	// object was not created by oncepay.
	PaymentID string
	// ChargeID is the latest charge (for a PaymentIntent) or the charge
	// itself (for a charge or refund event).
	ChargeID string
	// DeclineCode is the last payment error's code on a failure event.
	DeclineCode string
	// Amount (minor units) and Currency (as the PSP writes it, lower case)
	// are the object's own: what the webhook compares with the ledger row
	// before it settles anything. 0 and "" when the object has none.
	Amount   int64
	Currency string
	// RefundID, RefundStatus and RefundFailure are set for an event whose
	// object is a refund (refund.updated, refund.failed,
	// charge.refund.updated): its id, status (pending, succeeded, failed,
	// canceled, requires_action) and failure_reason.
	RefundID      string
	RefundStatus  string
	RefundFailure string
}

// ParseWebhook verifies a webhook the way Stripe signs them (the
// Stripe-Signature header: t=<unix>,v1=HMAC-SHA256(secret, t + "." +
// payload)), rejects a timestamp older than tolerance (replay protection; 0
// means stripe-go's default of 5 minutes), and extracts the ids.
//
// API-version mismatches are allowed: the fields read here (id, type and the
// object's id, metadata, latest_charge, payment_intent) are the same in every
// API version, and an endpoint pinned to another version must not make us
// drop real payment events. Any failure wraps ErrInvalidWebhook.
func ParseWebhook(payload []byte, sigHeader, secret string, tolerance time.Duration) (Event, error) {
	if secret == "" {
		return Event{}, fmt.Errorf("%w: no signing secret configured", ErrInvalidWebhook)
	}
	if tolerance <= 0 {
		tolerance = webhook.DefaultTolerance
	}
	ev, err := webhook.ConstructEventWithOptions(payload, sigHeader, secret, webhook.ConstructEventOptions{
		Tolerance:                tolerance,
		IgnoreAPIVersionMismatch: true,
	})
	if err != nil {
		return Event{}, fmt.Errorf("%w: %w", ErrInvalidWebhook, err)
	}
	if ev.ID == "" || ev.Type == "" || ev.Data == nil || len(ev.Data.Raw) == 0 {
		return Event{}, fmt.Errorf("%w: event without id, type or data.object", ErrInvalidWebhook)
	}
	var obj struct {
		ID               string            `json:"id"`
		Object           string            `json:"object"`
		Metadata         map[string]string `json:"metadata"`
		LatestCharge     json.RawMessage   `json:"latest_charge"`
		PaymentIntent    json.RawMessage   `json:"payment_intent"`
		Charge           json.RawMessage   `json:"charge"`
		Status           string            `json:"status"`
		Amount           int64             `json:"amount"`
		Currency         string            `json:"currency"`
		FailureReason    string            `json:"failure_reason"`
		LastPaymentError *struct {
			Code        string `json:"code"`
			DeclineCode string `json:"decline_code"`
		} `json:"last_payment_error"`
	}
	if err := json.Unmarshal(ev.Data.Raw, &obj); err != nil {
		return Event{}, fmt.Errorf("%w: data.object: %w", ErrInvalidWebhook, err)
	}
	out := Event{ID: ev.ID, Type: string(ev.Type), PaymentID: obj.Metadata[MetaPaymentID], Amount: obj.Amount, Currency: obj.Currency}
	switch obj.Object {
	case "payment_intent":
		out.PaymentIntentID = obj.ID
		out.ChargeID = expandableID(obj.LatestCharge)
	case "charge":
		out.ChargeID = obj.ID
		out.PaymentIntentID = expandableID(obj.PaymentIntent)
	case "refund":
		out.ChargeID = expandableID(obj.Charge)
		out.PaymentIntentID = expandableID(obj.PaymentIntent)
		out.RefundID, out.RefundStatus, out.RefundFailure = obj.ID, obj.Status, obj.FailureReason
	default: // other objects that point at both
		out.ChargeID = expandableID(obj.Charge)
		out.PaymentIntentID = expandableID(obj.PaymentIntent)
	}
	if e := obj.LastPaymentError; e != nil {
		out.DeclineCode = e.DeclineCode
		if out.DeclineCode == "" {
			out.DeclineCode = e.Code
		}
	}
	return out, nil
}

// expandableID reads a Stripe "expandable" field: either an id string or an
// expanded object with an id.
func expandableID(raw json.RawMessage) string {
	var id string
	if json.Unmarshal(raw, &id) == nil {
		return id
	}
	var obj struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(raw, &obj) == nil {
		return obj.ID
	}
	return ""
}
