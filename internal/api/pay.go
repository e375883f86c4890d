package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/psp"
)

// attempt is one request's walk through HANDLE.
type attempt struct {
	h        *Handler
	req      payment.Request
	caller   string
	key      string
	fp       string
	scope    string
	pid      string
	owner    string
	deadline time.Time // arrival stamp + server deadline, on our clock
	log      *slog.Logger
	claimed  bool // this request holds the key record
	degraded bool // the key store could not be reached
}

// pay is HANDLE (docs/mechanism.md#seed-part-3).
func (h *Handler) pay(ctx context.Context, r Request) Response {
	now := h.d.Clock.Now()
	t := h.d.Timing
	// A stamp from the future (clock offset) would stretch the deadline:
	// count from our own now instead, which is only ever stricter.
	if r.Arrival.After(now) {
		r.Arrival = now
	}
	deadline := r.Arrival.Add(t.Deadline)
	// 1. A request older than the deadline runs nothing: its client may
	// already have given up and made a new key.
	if now.After(deadline) {
		h.d.Log.Info("refused: older than the deadline", "arrival", r.Arrival, "age_ms", now.Sub(r.Arrival).Milliseconds())
		return problemResponse(problem.DeadlineExceeded())
	}
	// Both forms of the header, `"K1"` (the IETF draft's) and `K1`, name
	// the key K1 and so the same scope.
	key, err := payment.KeyFromHeader(r.Headers.Get("Idempotency-Key"))
	if err != nil {
		return badRequest(err)
	}
	if len(r.Body) > payment.MaxBodyBytes {
		return problemResponse(problem.TooLarge(payment.MaxBodyBytes))
	}
	req, err := payment.Parse(r.Body) // receipt_email too: one reader of the body
	if err != nil {
		return badRequest(err)
	}
	scope := ids.Scope(r.Caller, key)
	a := &attempt{
		h: h, req: req, caller: r.Caller, key: key, fp: req.Fingerprint(), scope: scope,
		pid: ids.PaymentID(scope), owner: h.d.NewOwner(), deadline: deadline,
	}
	a.log = h.d.Log.With("scope", scope, "payment_id", a.pid, "owner", a.owner)
	// Work before the PSP call stops at the deadline: the fake clock of the
	// tests maps onto a real context deadline of the same remaining time.
	ctx, cancel := context.WithTimeout(ctx, deadline.Sub(now))
	defer cancel()
	resp := a.run(ctx, now)
	a.log.Info("answer", "status", resp.Status, "replayed", resp.Headers.Get(headerReplayed) == "true", "degraded", a.degraded)
	return resp
}

func (a *attempt) run(ctx context.Context, now time.Time) Response {
	h := a.h
	// 2. Claim the scope; an unexpired holder answers the repeat.
	err := h.d.Claims.Claim(ctx, idem.Claim{
		Scope: a.scope, Fingerprint: a.fp, Owner: a.owner, PaymentID: a.pid,
		Now: now, InProgressUntil: a.deadline, ExpiresAt: now.Add(h.d.Timing.KeyWindow),
	})
	var exists *idem.ExistsError
	switch {
	case err == nil:
		a.claimed = true
	case errors.As(err, &exists):
		if resp, done := a.answerRecord(ctx, exists.Record, now, 2); done {
			return resp
		}
	default:
		a.degrade(err)
	}
	if resp, crashed := a.hook(ctx, h.d.Hooks.AfterClaim); crashed {
		return resp
	}
	// 3. The durable guard, before any external call.
	intent := ledger.Payment{
		ID: a.pid, CallerID: a.caller, ClientKey: a.key, Fingerprint: a.fp,
		Amount: a.req.Amount, Currency: a.req.Currency, MerchantID: a.req.MerchantID,
		OrderID: a.req.OrderID, PaymentMethod: a.req.PaymentMethod, DeadlineAt: a.deadline,
	}
	row, inserted, err := h.d.Ledger.InsertPending(ctx, intent, a.req.ReceiptEmail)
	if errors.Is(err, ledger.ErrOutcomeUnknown) {
		return a.afterUnknownInsert(ctx, intent, err)
	}
	if err != nil {
		// Definitely not written: no PSP call without a durable intent.
		a.log.Error("ledger unavailable; nothing ran", "err", err)
		h.d.Metrics.Count("LedgerUnavailable", 1)
		a.release()
		return problemResponse(problem.LedgerUnavailable())
	}
	if resp, crashed := a.hook(ctx, h.d.Hooks.AfterPendingInsert); crashed {
		return resp
	}
	if !inserted {
		return a.fromRow(ctx, row)
	}
	// Across Regions, writing the PENDING row proves no earlier call only in
	// this Region: a failed Region may have charged under the same derived
	// key in its last replication lag, and a refusal this Region's PSP key
	// meets (a key never used before the failover) says nothing of that
	// charge. Only a refusal of the parameters then proves "not charged".
	call := psp.FirstCall
	if h.d.Homes != nil {
		call = psp.Replay
	}
	return a.charge(ctx, row, call)
}

// afterUnknownInsert handles an insert whose outcome is unknown (its reply
// was lost: the row may exist). "Nothing ran" would be a guess that the
// resolver could contradict with the first charge a minute later, after the
// client made a new key. So ask the ledger again, with a fresh context: the
// same insert-if-absent, which either writes the row now or returns the one
// that exists. A row with this request's deadline and fingerprint is the
// one its first try wrote: carry on from it. Any other row answers as a
// repeat's would. If the ledger still cannot say, keep the claim: a retry
// within the lease hears 409, and after it takes over and finds out; the
// resolver takes the row, if it exists, only once this request's deadline
// + margin has passed, when this request can no longer be running.
func (a *attempt) afterUnknownInsert(ctx context.Context, intent ledger.Payment, first error) Response {
	h := a.h
	a.log.Warn("PENDING insert outcome unknown; asking the ledger again", "err", first)
	h.d.Metrics.Count("LedgerInsertUnknown", 1)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.d.Timing.Margin)
	defer cancel()
	row, inserted, err := h.d.Ledger.InsertPending(rctx, intent, a.req.ReceiptEmail)
	if err != nil {
		a.log.Error("PENDING insert unconfirmed; keeping the claim, answering 503 without saying nothing ran",
			"err", err, "first_err", first)
		h.d.Metrics.Count("LedgerInsertUnconfirmed", 1)
		retry := a.deadline.Add(h.d.Timing.Margin).Sub(h.d.Clock.Now())
		return problemResponse(problem.LedgerUnconfirmed(retry))
	}
	ours := inserted || (row.State == ledger.Pending && row.Fingerprint == a.fp && row.DeadlineAt.Equal(a.deadline.Truncate(time.Microsecond)))
	if !ours {
		return a.fromRow(ctx, row)
	}
	a.log.Info("PENDING row confirmed after an unknown insert", "inserted_now", inserted)
	if ctx.Err() != nil || h.d.Clock.Now().After(a.deadline) {
		// No PSP call starts past the deadline: UNKNOWN and a pointer, and
		// the resolver makes the call with the derived key.
		return a.unknown(rctx, row)
	}
	// Conservatively a replay: only the deadline tells this row for ours.
	return a.charge(ctx, row, psp.Replay)
}

// degrade carries on with the durable guard alone: correctness never rested
// on the key store.
func (a *attempt) degrade(err error) {
	a.degraded = true
	a.log.Warn("key store unavailable; carrying on with the durable guard alone", "err", err)
	a.h.d.Metrics.Count("KeyStoreDegraded", 1)
}

// hook runs a test hook; a returned ErrCrash ends the request on the spot.
func (a *attempt) hook(ctx context.Context, f func(context.Context) error) (Response, bool) {
	if f == nil {
		return Response{}, false
	}
	if err := f(ctx); errors.Is(err, ErrCrash) {
		return problemResponse(problem.Internal()), true
	}
	return Response{}, false
}

// answerRecord answers a repeat from the record that holds the scope. done is
// false only when this request took over an expired lease and must go on.
func (a *attempt) answerRecord(ctx context.Context, rec idem.Record, now time.Time, depth int) (Response, bool) {
	h := a.h
	switch {
	case rec.State == idem.Void:
		return problemResponse(problem.KeyVoided()), true
	case !a.req.Matches(rec.Fingerprint) && rec.State == idem.Completed:
		// Checked on the record the failed condition returned (ALL_OLD). A
		// completed record's fingerprint passed the ledger's check.
		return problemResponse(problem.KeyReused()), true
	case !a.req.Matches(rec.Fingerprint) && !rec.LeaseExpired(now, h.d.Timing.Margin):
		// An in-progress claimant's fingerprint has not met the durable
		// guard yet: it may itself be the key reuse. Only the ledger row
		// says which request is the payment, so 422 waits for a row with
		// the other fingerprint: without a row, the claimant may die before
		// writing one and this request become the payment (found by the
		// chaos runner, seed 658: a 422 later contradicted by a 201).
		p, err := h.d.Ledger.Get(ctx, a.pid)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
		case err != nil:
			a.log.Error("key reuse check: ledger read failed", "err", err)
			return problemResponse(problem.LedgerUnavailable()), true
		case p.State == ledger.Void:
			return problemResponse(problem.KeyVoided()), true
		case !a.req.Matches(p.Fingerprint):
			return problemResponse(problem.KeyReused()), true
		}
		return problemResponse(problem.InProgress(rec.InProgressUntil.Add(h.d.Timing.Margin).Sub(now))), true
	case rec.State == idem.Completed && rec.Answer != nil:
		return replay(rec.Answer), true
	case rec.State == idem.Completed:
		p, err := h.d.Ledger.Get(ctx, rec.PaymentID)
		if errors.Is(err, ledger.ErrNotFound) && h.d.Homes != nil {
			// Across Regions the key record replicates apart from the
			// ledger: a failed Region's pointer arrived, its row did not
			// (lost in the failover). The pointer names this very payment
			// (the fingerprint matched above), so run it here: the insert
			// recreates the row, and the PSP call with the derived key (a
			// replay: the failed Region may have charged) gets its saved
			// result. The record needs no change; it points at the row.
			a.log.Warn("pointer without its ledger row (lost in a failover): running the payment again under the derived ids")
			h.d.Metrics.Count("PointerRowLost", 1)
			return Response{}, false
		}
		if err != nil {
			a.log.Error("pointer: ledger read failed", "err", err)
			return problemResponse(problem.LedgerUnavailable()), true
		}
		return replayed(render(p)), true
	}
	// IN_PROGRESS.
	if !rec.LeaseExpired(now, h.d.Timing.Margin) {
		return problemResponse(problem.InProgress(rec.InProgressUntil.Add(h.d.Timing.Margin).Sub(now))), true
	}
	// The lease has passed: take over, whatever fingerprint the dead owner
	// claimed with; the ledger row decides between the two requests.
	err := h.d.Claims.Takeover(ctx, a.scope, rec.Owner, a.owner, a.fp, a.deadline, now.Add(h.d.Timing.KeyWindow))
	switch {
	case err == nil:
		a.claimed = true
		a.log.Info("took over an expired lease", "previous_owner", rec.Owner)
		return Response{}, false
	case errors.Is(err, idem.ErrNotOwner) && depth > 0:
		// Another repeat took over first: answer what the record holds now.
		cur, found, gerr := h.d.Claims.Get(ctx, a.scope, now)
		if gerr == nil && found {
			return a.answerRecord(ctx, cur, now, depth-1)
		}
		if gerr != nil {
			a.degrade(gerr)
		}
		return Response{}, false
	case errors.Is(err, idem.ErrNotOwner):
		return problemResponse(problem.InProgress(time.Second)), true
	default:
		a.degrade(err)
		return Response{}, false
	}
}

// fromRow answers from the payments row that already holds (caller, key):
// the key record expired, was lost, or this request took over from an owner
// that got further than the record says.
func (a *attempt) fromRow(ctx context.Context, row ledger.Payment) Response {
	h := a.h
	now := h.d.Clock.Now()
	switch {
	case row.State == ledger.Void:
		if a.claimed {
			if err := h.d.Claims.MarkVoid(ctx, a.scope, a.owner, now.Add(h.d.Timing.KeyWindow)); err != nil {
				a.log.Warn("could not mark the key record void", "err", err)
			}
		}
		return problemResponse(problem.KeyVoided())
	case !a.req.Matches(row.Fingerprint):
		a.release()
		return problemResponse(problem.KeyReused())
	case row.State == ledger.Pending && !now.After(row.DeadlineAt.Add(h.d.Timing.Margin)):
		// Its owner may still be running (we only got here without the key
		// store's help): don't race it.
		a.release()
		return problemResponse(problem.InProgress(row.DeadlineAt.Add(h.d.Timing.Margin).Sub(now)))
	case row.State == ledger.Pending && !h.d.Timing.PSPKeyLive(row.DeadlineAt, a.deadline):
		// Past the PSP's key window (the resolver's, from the same config)
		// the PSP may have forgotten the key: a replay could be a new
		// charge. Leave it to the resolver's look-up by reference.
		a.log.Warn("PENDING payment past the PSP's key window; not replaying its key, leaving it to the resolver's look-up",
			"deadline_at", row.DeadlineAt, "psp_key_window", h.d.Timing.PSPKeyWindow.String())
		h.d.Metrics.Count("TakeoverPastPSPKeyWindow", 1)
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.d.Timing.Margin)
		defer cancel()
		return a.unknown(wctx, row)
	case row.State == ledger.Pending:
		// The owner died or froze after writing the intent: finish what it
		// started. The derived key makes our PSP call a replay of its call.
		a.log.Info("finishing a PENDING payment whose owner passed its deadline")
		return a.charge(ctx, row, psp.Replay)
	}
	return a.complete(ctx, row, replayed(render(row)))
}

// charge is steps 4 and 5: the PSP call with the derived key, then either one
// settle transaction (the reply came in time) or UNKNOWN and a pointer. call
// says whether an earlier call with the key may exist (a takeover): then a
// refusal proves less (psp.NotCharged).
func (a *attempt) charge(ctx context.Context, row ledger.Payment, call psp.Call) Response {
	h := a.h
	res, err := h.d.PSP.Charge(ctx, psp.ChargeRequest{
		IdempotencyKey: ids.ChargeKey(row.ID), PaymentID: row.ID, MerchantID: row.MerchantID,
		CallerID: row.CallerID, ClientKey: row.ClientKey, Fingerprint: row.Fingerprint,
		Amount: row.Amount, Currency: row.Currency, PaymentMethod: row.PaymentMethod,
	})
	if resp, crashed := a.hook(ctx, h.d.Hooks.AfterPSPReply); crashed {
		return resp
	}
	now := h.d.Clock.Now()
	// Past the deadline nothing new is committed; the writes that record the
	// unknown get the margin the function timeout leaves for them.
	late := now.After(a.deadline)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.d.Timing.Margin)
	defer cancel()
	var outcome ledger.Outcome
	switch {
	case late:
		a.log.Warn("PSP reply after the deadline; recording UNKNOWN", "outcome", res.Outcome.String())
		return a.unknown(wctx, row)
	case errors.Is(err, psp.ErrNotSent):
		// Nothing went out, but the intent is durable: the resolver pays it
		// once the key reads again. Never FAILED, never "nothing ran".
		a.log.Error("PSP call not sent: the API key could not be read; the payment waits UNKNOWN for the resolver", "err", err)
		h.d.Metrics.Count(psp.MetricKeyUnreadable, 1)
		return a.unknown(wctx, row)
	case err != nil && psp.NotCharged(err, call):
		a.log.Error("PSP refused the request; nothing was charged", "err", err, "takeover", call == psp.Replay)
		h.d.Metrics.Count("PSPRejected", 1)
		outcome = ledger.Outcome{State: ledger.Failed, DeclineCode: declineInvalidRequest}
	case errors.Is(err, psp.ErrInvalidRequest) && !errors.Is(err, psp.ErrKeyReuse):
		// A replay refused before the PSP looked at the key (a rotated or
		// restricted key: 401/403; 404): the dead owner's call may have
		// charged. Never read it as "not charged": the resolver settles it.
		a.log.Error("PSP refused a takeover's replay; says nothing about the original call, left UNKNOWN", "err", err)
		h.d.Metrics.Count("PSPRefusedReplay", 1)
		return a.unknown(wctx, row)
	case err != nil:
		// ErrKeyReuse cannot happen with derived keys and identical
		// parameters; if it does, don't guess: leave it to the resolver.
		a.log.Error("PSP call failed; outcome unknown", "err", err)
		return a.unknown(wctx, row)
	case res.Outcome == psp.Succeeded:
		charge := res.ChargeID
		if charge == "" {
			charge = res.PaymentIntentID
		}
		outcome = ledger.Outcome{State: ledger.Succeeded, PSPCharge: charge}
	case res.Outcome == psp.Declined:
		outcome = ledger.Outcome{State: ledger.Failed, PSPCharge: res.PaymentIntentID, DeclineCode: res.DeclineCode}
	default: // Unknown, Pending
		h.d.Metrics.Count("PSPUnknown", 1)
		a.log.Warn("PSP outcome unknown", "outcome", res.Outcome.String(), "cause", res.Cause)
		return a.unknown(wctx, row)
	}
	p, ev, moved, err := h.d.Ledger.Settle(wctx, row.ID, outcome, now)
	if err != nil {
		// The PSP acted but the ledger can't say so yet: the row stays
		// PENDING and the resolver settles it past its deadline.
		a.log.Error("settle failed after the PSP answered", "err", err)
		return a.completePointer(wctx, Response{Status: http.StatusAccepted, Headers: processingHeaders(a.key), Body: processingBody(row.ID)})
	}
	// The outbox put and the key-record completion are independent writes:
	// run them side by side, so the answer waits for one round trip, not two.
	published := make(chan struct{})
	go func() {
		defer close(published)
		if !moved || ev == nil || h.d.Publisher == nil {
			return
		}
		if err := h.d.Publisher.Publish(wctx, *ev); err != nil {
			a.log.Warn("outbox put failed; the sweep will re-put it", "event_id", ev.EventID, "err", err)
		}
	}()
	defer func() { <-published }()
	// One rendering for every answer about p: the one stored now is the one
	// a pointer or the resolver's rewrite would give.
	resp := render(p)
	// Lost the settle to the webhook or the resolver: the answer is still
	// this request's own when the row holds the outcome its own PSP call
	// got (the PSP's event about that call won the race); only a row
	// settled otherwise is a replay of someone else's answer.
	if !moved && (p.State != outcome.State || p.PSPCharge != outcome.PSPCharge) {
		resp = replayed(resp)
	}
	return a.complete(wctx, p, resp)
}

// unknown is the deadline path: PENDING -> UNKNOWN by compare-and-set, and a
// pointer in the key record, so repeats render the payment's state as it is.
func (a *attempt) unknown(ctx context.Context, row ledger.Payment) Response {
	p, _, err := a.h.d.Ledger.MarkUnknown(ctx, row.ID)
	if err != nil {
		a.log.Error("could not record UNKNOWN; the resolver will find the PENDING row", "err", err)
		p = row
	}
	return a.complete(ctx, p, render(p))
}

// complete stores the answer for p's state: a final answer when p is final,
// a pointer while it can still change.
func (a *attempt) complete(ctx context.Context, p ledger.Payment, resp Response) Response {
	if !p.State.Final() {
		return a.completePointer(ctx, resp)
	}
	return a.store(ctx, answerOf(resp), resp)
}

func (a *attempt) completePointer(ctx context.Context, resp Response) Response {
	return a.store(ctx, nil, resp)
}

// store completes the key record, only if this request still owns it. A
// request that lost ownership (a paused owner after a takeover) answers what
// the record holds instead.
func (a *attempt) store(ctx context.Context, ans *idem.Answer, resp Response) Response {
	h := a.h
	if resp2, crashed := a.hook(ctx, h.d.Hooks.BeforeComplete); crashed {
		return resp2
	}
	if !a.claimed {
		return resp
	}
	now := h.d.Clock.Now()
	err := h.d.Claims.Complete(ctx, a.scope, a.owner, ans, now.Add(h.d.Timing.KeyWindow))
	switch {
	case err == nil:
		return resp
	case errors.Is(err, idem.ErrNotOwner):
		a.log.Warn("completion refused: another request owns the record now; answering what it holds")
		cur, found, gerr := h.d.Claims.Get(ctx, a.scope, now)
		if gerr != nil || !found || cur.Owner == a.owner {
			// Still ours (an MRSC write conflict that outlasted its
			// retries refuses like a lost owner): the record stays in
			// progress until its lease passes and a repeat's takeover
			// meets the ledger row; this request's own answer stands.
			return resp
		}
		a.claimed = false
		if out, done := a.answerRecord(ctx, cur, now, 0); done {
			return out
		}
		return resp
	default:
		a.degrade(err)
		return resp
	}
}

// release forgets this request's claim: nothing ran, so nothing is remembered.
func (a *attempt) release() {
	if !a.claimed {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.h.d.Timing.Margin)
	defer cancel()
	if err := a.h.d.Claims.Release(ctx, a.scope, a.owner); err != nil {
		a.log.Warn("could not release the claim; it expires with its lease", "err", err)
	}
	a.claimed = false
}
