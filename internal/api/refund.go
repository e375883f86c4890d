package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/refund"
)

// RefundLedger is what the refund call needs from the ledger
// (internal/ledger.Store has it).
type RefundLedger interface {
	GetByKey(ctx context.Context, caller, key string) (ledger.Payment, error)
	InsertRefund(ctx context.Context, r ledger.Refund) (ledger.Refund, bool, error)
	GetRefundByKey(ctx context.Context, caller, refundKey string) (ledger.Refund, error)
	refund.Ledger
}

// The refund call's own problem types (RFC 9457), beside package problem's.
const (
	TypeNotRefundable = problem.TypeBase + "not-refundable"
	TypeRefundExists  = problem.TypeBase + "refund-exists"
	TypeRefundFailed  = problem.TypeBase + "refund-failed"
)

// refundBody is the JSON of a refund in answers.
type refundBody struct {
	Object    string `json:"object"` // "refund"
	PaymentID string `json:"payment_id"`
	State     string `json:"state"` // SUCCEEDED, or PROCESSING while open
	Amount    int64  `json:"amount,omitempty"`
	Currency  string `json:"currency,omitempty"`
	PSPRefund string `json:"psp_refund,omitempty"`
}

// refund is POST /payments/{key}/refund: a full refund of the caller's
// payment under key, as a compensation (package refund). The request
// carries its own Idempotency-Key, with the payment's semantics: the same
// refund key and the same meaning (this payment) replays — rendered from the
// refund row as it stands — and the same refund key for another payment is
// 422. The intent is recorded before the PSP call; only a SUCCEEDED payment
// can be refunded (else 409); a payment has at most one refund (a second
// refund key gets 409). An open PSP answer (a timeout) is 202: the resolver
// retries it with the same derived key.
func (h *Handler) refund(ctx context.Context, r Request, paymentKey string) Response {
	led, okL := h.d.Ledger.(RefundLedger)
	pspc, okP := h.d.PSP.(refund.PSP)
	if !okL || !okP {
		h.d.Log.Error("refund: the ledger or the PSP client does not support refunds")
		return problemResponse(problem.Internal())
	}
	now := h.d.Clock.Now()
	if r.Arrival.After(now) {
		r.Arrival = now
	}
	deadline := r.Arrival.Add(h.d.Timing.Deadline)
	if now.After(deadline) {
		return problemResponse(problem.DeadlineExceeded())
	}
	refundKey, err := payment.KeyFromHeader(r.Headers.Get("Idempotency-Key"))
	if err != nil {
		return badRequest(err)
	}
	pid := ids.PaymentID(ids.Scope(r.Caller, paymentKey))
	fp := refund.Fingerprint(pid)
	log := h.d.Log.With("scope", ids.Scope(r.Caller, paymentKey), "payment_id", pid, "op", "refund")
	ctx, cancel := context.WithTimeout(ctx, deadline.Sub(now))
	defer cancel()

	// 1. A repeat of a refund request is answered from its row.
	if row, err := led.GetRefundByKey(ctx, r.Caller, refundKey); err == nil {
		resp := h.refundRepeat(row, fp, paymentKey, now)
		log.Info("refund: repeat", "state", row.State, "status", resp.Status)
		return resp
	} else if !errors.Is(err, ledger.ErrRefundNotFound) {
		log.Error("refund: ledger unavailable", "err", err)
		return problemResponse(problem.LedgerUnavailable())
	}

	// 2. Only the caller's own SUCCEEDED payment can be refunded.
	p, err := led.GetByKey(ctx, r.Caller, paymentKey)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return problemResponse(problem.NotFound())
	case err != nil:
		log.Error("refund: ledger unavailable", "err", err)
		return problemResponse(problem.LedgerUnavailable())
	case p.State != ledger.Succeeded:
		log.Info("refund: refused", "state", p.State)
		return problemResponse(notRefundable())
	}

	// 3. The intent, before any PSP call.
	intent := ledger.Refund{
		PaymentID: p.ID, CallerID: r.Caller, RefundKey: refundKey, Fingerprint: fp, Amount: p.Amount,
		Currency: p.Currency, MerchantID: p.MerchantID, PSPCharge: p.PSPCharge, DeadlineAt: deadline,
	}
	row, inserted, err := led.InsertRefund(ctx, intent)
	if errors.Is(err, ledger.ErrOutcomeUnknown) {
		var resp Response
		var done bool
		if row, inserted, resp, done = h.refundAfterUnknownInsert(ctx, led, intent, paymentKey, err, log); done {
			return resp
		}
		err = nil
	}
	switch {
	case err != nil:
		// Definitely not written: no PSP call without a durable intent.
		log.Error("refund: could not record the intent; nothing was sent", "err", err)
		return problemResponse(problem.LedgerUnavailable())
	case !inserted && row.CallerID == r.Caller && row.RefundKey == refundKey:
		// A concurrent copy of this request recorded it first.
		return h.refundRepeat(row, fp, paymentKey, now)
	case !inserted:
		log.Info("refund: the payment already has a refund under another key", "state", row.State)
		return problemResponse(refundExists())
	}

	// 4. The first attempt. The resolver makes any other.
	att := refund.Attempter{
		Ledger: led, PSP: pspc, Publisher: h.d.Publisher, Metrics: h.d.Metrics, WriteTimeout: h.d.Timing.Margin,
		Log: h.d.Log.With("scope", ids.Scope(r.Caller, paymentKey), "op", "refund"), // it adds payment_id
	}
	row, err = att.Attempt(ctx, row, now)
	if err != nil {
		log.Warn("refund: first attempt incomplete; the resolver takes it from here", "err", err)
	}
	resp := renderRefund(row, paymentKey, now)
	log.Info("refund: answer", "state", row.State, "status", resp.Status)
	return resp
}

// refundAfterUnknownInsert is the pay path's rule (attempt.afterUnknownInsert)
// for the refund intent: the insert's reply was lost, so the PENDING refund
// row may exist, and the resolver would refund it a minute after an answer
// that said nothing was sent. Ask again with a fresh context: the same
// insert-if-absent writes the row now or returns the one that exists. A row
// with this request's key, fingerprint and deadline is the one its first try
// wrote: carry on from it (inserted comes back true). If the ledger still
// cannot say, answer 503 ledger-unconfirmed, never "nothing ran": the row, if
// it exists, holds the refund key until the deadline + margin (a retry hears
// 409 until then), and after it the resolver takes the row and a retry
// answers from it. done means resp is the answer.
func (h *Handler) refundAfterUnknownInsert(ctx context.Context, led RefundLedger, intent ledger.Refund, paymentKey string,
	first error, log *slog.Logger) (row ledger.Refund, inserted bool, resp Response, done bool) {
	log.Warn("refund: PENDING refund insert outcome unknown; asking the ledger again", "err", first)
	h.d.Metrics.Count("LedgerInsertUnknown", 1)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.d.Timing.Margin)
	defer cancel()
	row, inserted, err := led.InsertRefund(rctx, intent)
	if err != nil {
		log.Error("refund: PENDING refund insert unconfirmed; answering 503 without saying nothing ran",
			"err", err, "first_err", first)
		h.d.Metrics.Count("LedgerInsertUnconfirmed", 1)
		retry := intent.DeadlineAt.Add(h.d.Timing.Margin).Sub(h.d.Clock.Now())
		return ledger.Refund{}, false, problemResponse(problem.LedgerUnconfirmed(retry)), true
	}
	ours := inserted || (row.State == ledger.RefundPending && row.CallerID == intent.CallerID &&
		row.RefundKey == intent.RefundKey && row.Fingerprint == intent.Fingerprint &&
		row.DeadlineAt.Equal(intent.DeadlineAt.Truncate(time.Microsecond)))
	if !ours {
		return row, false, Response{}, false // answered as a repeat's would be
	}
	log.Info("refund: PENDING refund row confirmed after an unknown insert", "inserted_now", inserted)
	if ctx.Err() != nil || h.d.Clock.Now().After(intent.DeadlineAt) {
		// No PSP call starts past the deadline: PROCESSING, and the
		// resolver makes the call with the derived key.
		return row, true, renderRefund(row, paymentKey, h.d.Clock.Now()), true
	}
	return row, true, Response{}, false
}

// refundRepeat answers a repeat of a refund request from the refund row.
func (h *Handler) refundRepeat(row ledger.Refund, fp, paymentKey string, now time.Time) Response {
	if row.Fingerprint != fp {
		return problemResponse(problem.KeyReused())
	}
	if row.State == ledger.RefundPending && !now.After(row.DeadlineAt.Add(h.d.Timing.Margin)) {
		// Its first request may still be running: don't race it.
		return problemResponse(problem.InProgress(row.DeadlineAt.Add(h.d.Timing.Margin).Sub(now)))
	}
	return replayed(renderRefund(row, paymentKey, now))
}

// renderRefund answers from the refund row as it stands: 201 SUCCEEDED, 502
// for a refund the PSP refused, 202 PROCESSING while it is open.
func renderRefund(row ledger.Refund, paymentKey string, now time.Time) Response {
	switch row.State {
	case ledger.RefundSucceeded:
		return jsonResponse(http.StatusCreated, nil, refundBody{
			Object: "refund", PaymentID: row.PaymentID, State: string(row.State), Amount: row.Amount,
			Currency: row.Currency, PSPRefund: row.PSPRefund,
		})
	case ledger.RefundFailed:
		return problemResponse(refundFailed(row))
	}
	h := http.Header{}
	h.Set("Location", keyPath(paymentKey, actionRefund))
	retry := time.Second
	if d := row.NextAttemptAt.Sub(now); d > retry {
		retry = d
	}
	h.Set("Retry-After", strconv.Itoa(problem.RetryAfterSeconds(retry)))
	return jsonResponse(http.StatusAccepted, h, refundBody{Object: "refund", PaymentID: row.PaymentID, State: "PROCESSING"})
}

func notRefundable() problem.Problem {
	return problem.Problem{
		Type:   TypeNotRefundable,
		Title:  "Payment cannot be refunded",
		Status: http.StatusConflict,
		Detail: "Only a payment that succeeded can be refunded. Nothing was run.",
	}
}

func refundExists() problem.Problem {
	return problem.Problem{
		Type:   TypeRefundExists,
		Title:  "Payment already has a refund",
		Status: http.StatusConflict,
		Detail: "This payment already has a refund, requested with another Idempotency-Key. Nothing was run; repeat that request to see its state.",
	}
}

func refundFailed(row ledger.Refund) problem.Problem {
	ext := map[string]any{"payment_id": row.PaymentID}
	if row.FailureReason != "" {
		ext["failure_reason"] = row.FailureReason
	}
	return problem.Problem{
		Type:       TypeRefundFailed,
		Title:      "Refund failed",
		Status:     http.StatusBadGateway,
		Detail:     "The payment provider refused the refund.",
		Extensions: ext,
	}
}
