package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/problem"
)

// headerReplayed marks every answer this request did not produce itself, as
// Stripe's header does: a client can always tell a replay from a fresh answer.
const headerReplayed = "Idempotent-Replayed"

// paymentBody is the JSON of a payment in answers.
type paymentBody struct {
	PaymentID   string `json:"payment_id"`
	State       string `json:"state"`
	MerchantID  string `json:"merchant_id,omitempty"`
	OrderID     string `json:"order_id,omitempty"`
	Amount      int64  `json:"amount,omitempty"`
	Currency    string `json:"currency,omitempty"`
	PSPCharge   string `json:"psp_charge,omitempty"`
	DeclineCode string `json:"decline_code,omitempty"`
}

func jsonResponse(status int, h http.Header, v any) Response {
	b, err := json.Marshal(v)
	if err != nil {
		return problemResponse(problem.Internal())
	}
	if h == nil {
		h = http.Header{}
	}
	h.Set("Content-Type", "application/json")
	return Response{Status: status, Headers: h, Body: b}
}

// declineInvalidRequest is the decline code of a payment FAILED because the
// PSP refused the request itself (psp.NotCharged), not the card.
const declineInvalidRequest = "psp_invalid_request"

// render answers from the payments row as it stands: 201 SUCCEEDED, 402
// FAILED, 502 FAILED by the PSP's refusal of the request, 202 PROCESSING
// while PENDING or UNKNOWN, 409 for a voided key. It is the only rendering
// of a payment, so an answer stored at settle time, a pointer rendered
// later and the resolver's rewrite are the same bytes.
func render(p ledger.Payment) Response {
	switch p.State {
	case ledger.Failed:
		if p.DeclineCode == declineInvalidRequest {
			// Not a card decline: the provider refused our request. Nothing
			// was charged; a new key may try again once that is fixed.
			pr := problem.PSPRejected("The payment service refused the request. Nothing was charged.")
			pr.Extensions = map[string]any{"payment_id": p.ID, "state": string(p.State), "decline_code": p.DeclineCode}
			return problemResponse(pr)
		}
		fallthrough
	case ledger.Succeeded:
		status := http.StatusCreated
		if p.State == ledger.Failed {
			status = http.StatusPaymentRequired
		}
		return jsonResponse(status, nil, paymentBody{
			PaymentID: p.ID, State: string(p.State), MerchantID: p.MerchantID, OrderID: p.OrderID,
			Amount: p.Amount, Currency: p.Currency, PSPCharge: p.PSPCharge, DeclineCode: p.DeclineCode,
		})
	case ledger.Void:
		return problemResponse(problem.KeyVoided())
	default:
		return Response{Status: http.StatusAccepted, Headers: processingHeaders(p.ClientKey), Body: processingBody(p.ID)}
	}
}

func processingBody(paymentID string) []byte {
	b, _ := json.Marshal(paymentBody{PaymentID: paymentID, State: "PROCESSING"})
	return b
}

// processingHeaders point the client at the resolve call.
func processingHeaders(key string) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Location", keyPath(key, actionResolve))
	h.Set("Retry-After", "1")
	return h
}

// answerOf is the stored form of a final answer.
func answerOf(r Response) *idem.Answer {
	return &idem.Answer{Status: r.Status, Headers: r.Headers, Body: r.Body}
}

// replay answers with a stored final answer, marked as a replay.
func replay(a *idem.Answer) Response {
	h := a.Headers.Clone()
	if h == nil {
		h = http.Header{}
	}
	return replayed(Response{Status: a.Status, Headers: h, Body: a.Body})
}

func replayed(r Response) Response {
	if r.Headers == nil {
		r.Headers = http.Header{}
	}
	r.Headers.Set(headerReplayed, "true")
	return r
}

func problemResponse(p problem.Problem) Response {
	b, err := json.Marshal(p)
	if err != nil {
		b = []byte(`{"title":"internal error","status":500}`)
	}
	h := http.Header{}
	h.Set("Content-Type", problem.ContentType)
	if p.Status == http.StatusConflict || p.Status == http.StatusServiceUnavailable {
		if ra, ok := p.Extensions["retry_after"].(int); ok && ra > 0 {
			h.Set("Retry-After", strconv.Itoa(ra))
		}
	}
	return Response{Status: p.Status, Headers: h, Body: b}
}

// badRequest turns a validation error into a 400 naming the field.
func badRequest(err error) Response {
	var fe *payment.FieldError
	if errors.As(err, &fe) {
		return problemResponse(problem.BadRequest(fe.Field, fe.Reason))
	}
	return problemResponse(problem.BadRequest("", "invalid request"))
}
