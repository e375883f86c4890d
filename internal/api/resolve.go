package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/home"
	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/psp"
)

// Resolver is what the resolve call needs from the ledger beyond Ledger
// (internal/ledger.Store has it).
type Resolver interface {
	GetByKey(ctx context.Context, caller, key string) (ledger.Payment, error)
	InsertVoid(ctx context.Context, paymentID, caller, key string) (ledger.Payment, bool, error)
}

// voider is the key store's insert-if-absent VOID (internal/idem.Store).
type voider interface {
	Void(ctx context.Context, scope, paymentID string, now, expires time.Time) error
}

// The subresources of a payment, POST /payments/{key}/{action}.
const (
	actionResolve = "resolve"
	actionRefund  = "refund"
)

// keyPath is the path of a subresource of the payment under key: the key
// verbatim, since every byte of payment.KeyAlphabet is unreserved (RFC 3986
// §2.3) and needs no escaping. So the Location a client follows holds the
// very string it sent in Idempotency-Key, and reads back as that key
// through every front door.
func keyPath(key, action string) string { return "/payments/" + key + "/" + action }

// splitKeyPath reads /payments/{key}/{action} from a decoded path (the HTTP
// API and the local front door deliver it decoded; HandleALB decodes the
// load balancer's). The key is everything between "/payments/" and the
// last "/": a key holding "/" (from a %2F) is then simply an invalid key,
// which the caller answers with 400, never a shorter key's scope.
func splitKeyPath(path string) (key, action string, ok bool) {
	rest, ok := strings.CutPrefix(path, "/payments/")
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		// No key at all (/payments//resolve): no route, as behind the
		// HTTP API, whose {key} never matches an empty segment.
		return "", "", false
	}
	key, action = rest[:i], rest[i+1:]
	if action != actionResolve && action != actionRefund {
		return "", "", false
	}
	return key, action, true
}

// subresource routes POST /payments/{key}/resolve and
// POST /payments/{key}/refund. A key the header could not carry (one
// outside payment.KeyAlphabet) is a 400 that
// touches nothing: resolving it would void a scope no payment can ever
// have, and the app would take that as "make a new key and pay again".
func (h *Handler) subresource(ctx context.Context, r Request) Response {
	key, action, ok := splitKeyPath(r.Path)
	if !ok {
		return problemResponse(problem.NotFound())
	}
	if r.Method != http.MethodPost {
		resp := problemResponse(problem.MethodNotAllowed())
		resp.Headers.Set("Allow", http.MethodPost)
		return resp
	}
	if err := payment.ValidateKey(key); err != nil {
		// The path's key is the payment's Idempotency-Key: same rules.
		detail := "the key in the path is not a valid Idempotency-Key"
		var fe *payment.FieldError
		if errors.As(err, &fe) {
			detail += ": " + fe.Reason // a fixed text, never the key itself
		}
		return problemResponse(problem.BadRequest("key", detail))
	}
	if action == actionRefund {
		return h.refund(ctx, r, key)
	}
	return h.resolve(ctx, r, key)
}

// resolve is the resolve call (docs/mechanism.md#seed-part-4): "did it go
// through?" that changes the state, not just reads it. Found: the payment's
// state. Absent (or only an expired key record): insert-if-absent VOID in
// BOTH stores, the ledger first — its unique (caller, key) decides, racing
// fairly with a late original's InsertPending — and answer "not found, and it
// never will be". Only the caller's own key is ever looked at: the scope is
// the caller's.
func (h *Handler) resolve(ctx context.Context, r Request, key string) Response {
	led, ok := h.d.Ledger.(Resolver)
	if !ok {
		h.d.Log.Error("resolve: the ledger does not support GetByKey/InsertVoid")
		return problemResponse(problem.Internal())
	}
	now := h.d.Clock.Now()
	scope := ids.Scope(r.Caller, key)
	pid := ids.PaymentID(scope)
	log := h.d.Log.With("scope", scope, "payment_id", pid, "op", "resolve")

	// 1. The key record first: cheap, and it tells the log what the
	// accelerator believed. The ledger row decides.
	rec, recFound, err := h.d.Claims.Get(ctx, scope, now)
	degraded := false
	if err != nil {
		degraded = true
		log.Warn("key store unavailable; resolving on the durable guard alone", "err", err)
		h.d.Metrics.Count("KeyStoreDegraded", 1)
	}
	row, err := led.GetByKey(ctx, r.Caller, key)
	switch {
	case err == nil:
		if row.State == ledger.Void && !recFound && !degraded {
			// An earlier resolve died between its two inserts, or the
			// record's window passed: finish what it started.
			h.voidRecord(ctx, scope, pid, now, log)
		}
		resp := resolved(row)
		log.Info("resolve: found", "state", row.State, "record_state", rec.State, "status", resp.Status)
		return resp
	case !errors.Is(err, ledger.ErrNotFound):
		log.Error("resolve: ledger unavailable", "err", err)
		return problemResponse(problem.LedgerUnavailable())
	}

	// 2. Absent. In one Region that means the request never reached the
	// durable guard. Across Regions it may mean the guard's row was written
	// in a Region that failed before it replicated (docs/regions.md): the
	// PSP then knows the payment, and "never ran" would be false. Asked
	// first; a yes keeps the key open (the client's retry with the same key
	// runs it here, and the PSP replays its charge).
	if h.d.Homes != nil {
		if resp, stop := h.askPSPBeforeVoid(ctx, r.home.Home, pid, now, log); stop {
			return resp
		}
	}
	row, inserted, err := led.InsertVoid(ctx, pid, r.Caller, key)
	if errors.Is(err, ledger.ErrOutcomeUnknown) {
		// The pay path's rule (attempt.afterUnknownInsert): the reply was
		// lost and the VOID row may exist, so "nothing ran" could be false.
		// Ask again with a fresh context: the same insert-if-absent.
		log.Warn("resolve: VOID insert outcome unknown; asking the ledger again", "err", err)
		h.d.Metrics.Count("LedgerInsertUnknown", 1)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.d.Timing.Margin)
		first := err
		row, inserted, err = led.InsertVoid(rctx, pid, r.Caller, key)
		cancel()
		if err != nil {
			log.Error("resolve: VOID insert unconfirmed; answering 503 without saying nothing ran",
				"err", err, "first_err", first)
			h.d.Metrics.Count("LedgerInsertUnconfirmed", 1)
			return problemResponse(problem.LedgerUnconfirmed(h.d.Timing.Margin))
		}
		// A VOID row is the one the first try wrote (or a concurrent
		// resolve's, the same outcome): finish the void.
		inserted = inserted || row.State == ledger.Void
	}
	if err != nil {
		// Definitely not written.
		log.Error("resolve: could not record the void; nothing ran", "err", err)
		return problemResponse(problem.LedgerUnavailable())
	}
	if !inserted {
		// A late original's InsertPending got there first: it runs, and
		// the app keeps waiting instead of making a new key.
		resp := resolved(row)
		log.Info("resolve: the original won the race", "state", row.State, "status", resp.Status)
		return resp
	}
	if !degraded {
		h.voidRecord(ctx, scope, pid, now, log)
	}
	h.d.Metrics.Count("KeyVoided", 1)
	log.Info("resolve: voided: not found, and it never will be", "record_state", rec.State)
	return resolved(row)
}

// looker finds a payment at the PSP by our reference (psp.Client.Lookup).
type looker interface {
	Lookup(ctx context.Context, paymentID string) (psp.Result, error)
}

// lostRowHold is how long after a caller's home moved an absent key is not
// voided at all: the PSP's search, which tells a lost row from a key never
// sent, lags its charges by up to an hour during Stripe's outages (A4 in
// docs/guarantees.md), and what a failover loses was charged just before
// the move. Holding the key open costs the client a wait; voiding a charged
// key would let its next tap pay twice.
const lostRowHold = time.Hour

// askPSPBeforeVoid keeps an absent key open (409, retry with the same key)
// when its payment may have been lost with another Region's last writes:
// the caller's home moved less than lostRowHold ago, or the PSP knows the
// payment, or cannot be asked. The client's retry with the same key then
// runs the payment here, and the PSP replays its charge.
func (h *Handler) askPSPBeforeVoid(ctx context.Context, rec home.Record, pid string, now time.Time, log *slog.Logger) (Response, bool) {
	if !rec.MovedAt.IsZero() && now.Sub(rec.MovedAt) < lostRowHold {
		log.Warn("resolve: absent key of a caller moved recently; not voiding", "moved_at", rec.MovedAt, "home_version", rec.Version)
		h.d.Metrics.Count("ResolveHeld", 1)
		return problemResponse(problem.InProgress(h.d.Timing.Margin)), true
	}
	l, ok := h.d.PSP.(looker)
	if !ok {
		// No way to ask: never "nothing ran" on a guess.
		log.Warn("resolve: absent key, and this PSP client cannot look a payment up; not voiding")
		h.d.Metrics.Count("ResolveHeld", 1)
		return problemResponse(problem.InProgress(h.d.Timing.Margin)), true
	}
	res, err := l.Lookup(ctx, pid)
	switch {
	case err != nil:
		log.Warn("resolve: absent key, and the PSP could not be asked; not voiding", "err", err)
		h.d.Metrics.Count("ResolveHeld", 1)
	case res.Outcome != psp.NotFound:
		log.Error("resolve: absent key the PSP knows: its row was lost with another Region's last writes; not voiding", "outcome", res.Outcome)
		h.d.Metrics.Count("ResolveLostRow", 1)
	default:
		return Response{}, false
	}
	return problemResponse(problem.InProgress(h.d.Timing.Margin)), true
}

// voidRecord is the key store's half of the void. A record that holds the
// scope (an original that claimed it but had not written its row when the
// void won) is left alone: that original meets the VOID row, answers 409
// and marks its own record VOID.
func (h *Handler) voidRecord(ctx context.Context, scope, pid string, now time.Time, log *slog.Logger) {
	v, ok := h.d.Claims.(voider)
	if !ok {
		return
	}
	err := v.Void(ctx, scope, pid, now, now.Add(h.d.Timing.KeyWindow))
	var exists *idem.ExistsError
	switch {
	case err == nil, errors.As(err, &exists):
	default:
		log.Warn("resolve: could not write the VOID key record; the ledger's VOID row answers", "err", err)
	}
}

// resolved is the resolve call's answer for a row: 200 VOID for a voided
// key, the payment's own answer otherwise (202 PROCESSING while PENDING or
// UNKNOWN, "still confirming"; 201 or 402 once final).
func resolved(p ledger.Payment) Response {
	if p.State == ledger.Void {
		return jsonResponse(http.StatusOK, nil, paymentBody{PaymentID: p.ID, State: string(ledger.Void)})
	}
	return render(p)
}
