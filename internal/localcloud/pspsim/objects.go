package pspsim

import (
	"encoding/json"
	"maps"
	"net/http"
	"time"
)

// Charge is a charge the simulator made: money taken from a card. Declined
// attempts are not listed (their PaymentIntent shows them). It is the element
// of GET /_sim/charges, a documented, stable interface.
type Charge struct {
	ID             string            `json:"id"`              // ch_...
	PaymentIntent  string            `json:"payment_intent"`  // pi_...
	IdempotencyKey string            `json:"idempotency_key"` // the key of the request that charged
	Amount         int64             `json:"amount"`          // minor units
	AmountRefunded int64             `json:"amount_refunded"` // minor units refunded so far
	Currency       string            `json:"currency"`        // lower-case ISO 4217
	Metadata       map[string]string `json:"metadata"`        // the PaymentIntent's metadata (payment_id, merchant_id)
	Created        int64             `json:"created"`         // Unix seconds by the simulator's clock, as in Stripe
}

// Refund is a refund the simulator made; the element of GET /_sim/refunds.
type Refund struct {
	ID             string            `json:"id"`              // re_...
	PaymentIntent  string            `json:"payment_intent"`  // pi_...
	Charge         string            `json:"charge"`          // ch_...
	IdempotencyKey string            `json:"idempotency_key"` // the key of the request that refunded
	Amount         int64             `json:"amount"`          // minor units
	Currency       string            `json:"currency"`        // lower-case ISO 4217
	Metadata       map[string]string `json:"metadata"`        // the refund's own metadata
	Created        int64             `json:"created"`         // Unix seconds by the simulator's clock
}

// Charges returns a copy of the charges made, oldest first.
func (s *Sim) Charges() []Charge {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Charge, 0, len(s.charges))
	for _, c := range s.charges {
		cp := *c
		cp.Metadata = maps.Clone(c.Metadata)
		out = append(out, cp)
	}
	return out
}

// Refunds returns a copy of the refunds made, oldest first.
func (s *Sim) Refunds() []Refund {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Refund, 0, len(s.refunds))
	for _, r := range s.refunds {
		cp := *r
		cp.Metadata = maps.Clone(r.Metadata)
		out = append(out, cp)
	}
	return out
}

// paymentIntent is Stripe's PaymentIntent object, with the fields stripe-go
// and oncepay read.
type paymentIntent struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountCapturable   int64             `json:"amount_capturable"`
	AmountReceived     int64             `json:"amount_received"`
	CaptureMethod      string            `json:"capture_method"`
	ClientSecret       string            `json:"client_secret"`
	ConfirmationMethod string            `json:"confirmation_method"`
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	LastPaymentError   *apiError         `json:"last_payment_error"`
	LatestCharge       *string           `json:"latest_charge"`
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	NextAction         *nextAction       `json:"next_action"`
	PaymentMethod      string            `json:"payment_method"`
	PaymentMethodTypes []string          `json:"payment_method_types"`
	Status             string            `json:"status"`

	createdAt time.Time // precise, for the search lag
	key       string    // the Idempotency-Key of the request that created it
}

// nextAction is what a requires_action PaymentIntent asks of the client.
type nextAction struct {
	Type string `json:"type"` // use_stripe_sdk: the card holder authenticates in Stripe.js
}

// refundObject is Stripe's Refund object.
type refundObject struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Charge        string            `json:"charge"`
	Created       int64             `json:"created"`
	Currency      string            `json:"currency"`
	Metadata      map[string]string `json:"metadata"`
	PaymentIntent string            `json:"payment_intent"`
	Reason        *string           `json:"reason"`
	Status        string            `json:"status"`
}

// Stripe error types.
const (
	typeAPI            = "api_error"
	typeCard           = "card_error"
	typeIdempotency    = "idempotency_error"
	typeInvalidRequest = "invalid_request_error"
)

// apiError is the object inside Stripe's {"error": ...} answers (and a
// PaymentIntent's last_payment_error).
type apiError struct {
	Type          string         `json:"type"`
	Code          string         `json:"code,omitempty"`
	DeclineCode   string         `json:"decline_code,omitempty"`
	Message       string         `json:"message"`
	Param         string         `json:"param,omitempty"`
	Charge        string         `json:"charge,omitempty"`
	PaymentIntent *paymentIntent `json:"payment_intent,omitempty"`
}

// reply is one HTTP answer of the Stripe API, as saved under a key.
type reply struct {
	status    int
	body      []byte
	requestID string
	// set when answering
	idemKey         string
	replayed        bool
	originalRequest string
}

func jsonReply(status int, v any) reply {
	body, err := json.MarshalIndent(v, "", "  ")
	if err != nil { // only our own types are marshalled; this is a bug
		panic("pspsim: marshal reply: " + err.Error())
	}
	return reply{status: status, body: append(body, '\n')}
}

func errorReply(status int, e apiError) reply {
	return jsonReply(status, map[string]apiError{"error": e})
}

func invalid(param, code, msg string) reply {
	return errorReply(http.StatusBadRequest, apiError{Type: typeInvalidRequest, Code: code, Param: param, Message: msg})
}

// writeReply writes r with Stripe's headers.
func writeReply(w http.ResponseWriter, r reply) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if r.requestID != "" {
		h.Set("Request-Id", r.requestID)
	}
	if r.idemKey != "" {
		h.Set("Idempotency-Key", r.idemKey)
	}
	if r.replayed {
		h.Set("Idempotent-Replayed", "true")
		h.Set("Original-Request", r.originalRequest)
	}
	w.WriteHeader(r.status)
	_, _ = w.Write(r.body)
}
