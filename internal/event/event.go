// Package event defines the payment event that travels from the ledger's
// outbox intent through the DynamoDB outbox item, the relay and the FIFO
// queue to the worker. Its id is derived (ids.EventID), never random, so every
// re-send of it is recognisably the same event.
package event

import (
	"encoding/json"
	"fmt"
	"time"
)

// The kinds of event, named by the state the payment reached. The event id
// is ids.EventID(payment_id, kind).
const (
	Succeeded = "SUCCEEDED" // charged: the merchant is credited, the buyer told
	Failed    = "FAILED"    // declined: nothing credited, the buyer told
	Refunded  = "REFUNDED"  // the charge was refunded: the merchant is debited, the buyer told
	// RefundFailed compensates a REFUNDED event whose refund the PSP failed
	// later (Stripe's refund.failed after succeeded): the merchant is
	// credited back, the buyer told the payment stands.
	RefundFailed = "REFUND_FAILED"
	// Reversed: a reconciliation refunded a charge the buyer was told did
	// not happen (the payment FAILED or VOID) or a second charge of one
	// payment. No merchant money moves (none was credited); the buyer is
	// told the money is on its way back.
	Reversed = "REVERSED"
)

// Event is a payment reaching a published state.
type Event struct {
	EventID    string    `json:"event_id"`   // <payment_id>:<state>
	PaymentID  string    `json:"payment_id"` //
	State      string    `json:"state"`      // Succeeded, Failed, Refunded, RefundFailed or Reversed
	MerchantID string    `json:"merchant_id"`
	CallerID   string    `json:"caller_id"` // whose devices are notified; an opaque subject, no personal data
	Amount     int64     `json:"amount"`    // minor units
	Currency   string    `json:"currency"`
	PSPCharge  string    `json:"psp_charge,omitempty"`
	OccurredAt time.Time `json:"occurred_at"`
	// ClientKey and Fingerprint are the payment's Idempotency-Key and
	// request fingerprint (payment events only): with them the home
	// Region's inbox can write the row of a payment a failover lost from
	// its ledger when the failed Region's copy of the event arrives
	// (inbox.Config.Adopt, docs/regions.md).
	ClientKey   string `json:"client_key,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
}

// Marshal encodes e as the JSON payload stored and sent everywhere.
func (e Event) Marshal() ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("event: marshal %s: %w", e.EventID, err)
	}
	return b, nil
}

// Unmarshal decodes a payload and checks the fields every consumer relies on.
func Unmarshal(b []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return Event{}, fmt.Errorf("event: decode: %w", err)
	}
	if e.EventID == "" || e.PaymentID == "" || e.MerchantID == "" || e.State == "" {
		return Event{}, fmt.Errorf("event: payload lacks event_id, payment_id, merchant_id or state")
	}
	return e, nil
}
