// Package refund is the compensation that undoes a charge, done the way every
// compensation must be (docs/mechanism.md#refunds,
// docs/mechanism.md#seed-part-10): the intent is recorded before the first
// PSP call, every attempt carries the derived key <payment_id>:cancel:refund
// with the same parameters, so every retry is the same refund, and an attempt
// whose outcome is open leaves the refund UNKNOWN — never a guess — to be
// retried with exponential backoff. After the retry budget every further
// open attempt counts the metric RefundStuck and logs an error line carrying
// "alert":"RefundStuck", while the retries go on and the state stays UNKNOWN.
// No alarm watches that metric yet, and no reconciliation against the PSP
// exists: both are not built (docs/guarantees.md#not-built-yet).
//
// A refund the PSP answers pending (Stripe settles some later) is
// recorded with its PSP id, still UNKNOWN, and later attempts read it by
// id (GET /v1/refunds/{id}) until it is final: replaying the key would
// only repeat the saved "pending". A refund that fails after it succeeded
// (Stripe's refund.failed) is seen by the webhook handler, which moves it
// SUCCEEDED -> FAILED (ledger.SettleRefund).
//
// A 5xx under the refund key says nothing about whether the refund ran:
// Stripe saves a result once execution has begun, so a refund can stand
// behind a saved 500 that every replay repeats for the key's 24 h. Such an
// answer is settled from the PSP's list of the charge's refunds
// (psp.Client.FindRefund): succeeded, pending (then followed by id) or
// failed as the PSP holds it; only when none is found is the key replayed.
// So is a refusal: it says this request did not run, not that no refund
// exists (a replay after the key's 24 h, whose first reply was lost, is
// refused charge_already_refunded by the very refund it sent).
//
// The API makes the first attempt (POST /payments/{key}/refund); the
// resolver makes the others. Both use an Attempter.
package refund

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/psp"
)

// Fingerprint is the meaning of a refund request: a full refund of the
// payment. A refund key reused for another payment has another fingerprint.
func Fingerprint(paymentID string) string {
	sum := sha256.Sum256([]byte("refund:full\x00" + paymentID))
	return hex.EncodeToString(sum[:])
}

// Backoff is the retry schedule of an open refund.
//
// The zero value schedules the next attempt at once (the resolver's next
// run) and never alerts: what the API uses for its own first attempt, which
// leaves the schedule and the budget to the resolver.
type Backoff struct {
	// Base is the wait after the first open attempt; it doubles per attempt.
	Base time.Duration
	// Max caps the wait.
	Max time.Duration
	// Budget is the number of open attempts after which every further open
	// attempt alerts; 0: never.
	Budget int
}

// DefaultBackoff is 30 s doubling up to an hour, with a budget of 8
// attempts (about an hour of retries) before the alert.
func DefaultBackoff() Backoff { return Backoff{Base: 30 * time.Second, Max: time.Hour, Budget: 8} }

// Delay is the wait after the attempts-th open attempt (1-based): Base,
// 2 Base, 4 Base, ..., never more than Max (when Max > 0).
func (b Backoff) Delay(attempts int) time.Duration {
	if b.Base <= 0 {
		return 0
	}
	d := b.Base
	for i := 1; i < attempts; i++ {
		if b.Max > 0 && d >= b.Max {
			break
		}
		if d > time.Duration(1<<62)/2 { // no overflow, whatever the count
			break
		}
		d *= 2
	}
	if b.Max > 0 && d > b.Max {
		d = b.Max
	}
	return d
}

// Exhausted reports whether attempts open attempts have used up the budget:
// from then on every open attempt alerts.
func (b Backoff) Exhausted(attempts int) bool { return b.Budget > 0 && attempts >= b.Budget }

// Validate checks the schedule's values.
func (b Backoff) Validate() error {
	if b.Base < 0 || b.Max < 0 || b.Budget < 0 || (b.Max > 0 && b.Max < b.Base) {
		return fmt.Errorf("refund: backoff base %s, max %s, budget %d: must be non-negative with max >= base", b.Base, b.Max, b.Budget)
	}
	return nil
}

// Ledger is the part of internal/ledger.Store an Attempter writes.
type Ledger interface {
	SetRefundIntent(ctx context.Context, paymentID, paymentIntentID string) error
	SettleRefund(ctx context.Context, paymentID string, o ledger.RefundOutcome) (ledger.Refund, bool, error)
	RecordRefundAttempt(ctx context.Context, paymentID string, sent bool, pspRefund string, next time.Time) (ledger.Refund, error)
	MarkRefundAlerted(ctx context.Context, paymentID string, at time.Time) error
}

// PSP is the part of internal/psp.Client an Attempter calls.
type PSP interface {
	Refund(ctx context.Context, req psp.RefundRequest) (psp.Result, error)
	Lookup(ctx context.Context, paymentID string) (psp.Result, error)
	RetrieveRefund(ctx context.Context, refundID string) (psp.Result, error)
	FindRefund(ctx context.Context, paymentIntentID, chargeID, paymentID string) (psp.Result, error)
}

// Publisher puts a committed event's outbox item (internal/outbox).
type Publisher interface {
	Publish(ctx context.Context, e event.Event) error
}

// Attempter makes one refund attempt at a time. Its zero Wait, CallTimeout,
// Publisher, Log and Metrics are fine.
type Attempter struct {
	Ledger  Ledger
	PSP     PSP
	Backoff Backoff
	// Publisher, when set, puts the refund's event (ledger.RefundEvent) into
	// the outbox right after the settle committed it as an intent, as the
	// API does for a payment's event; nil (or a failed put) leaves it to the
	// resolver's outbox sweep, a grace period later.
	Publisher Publisher
	// Wait is called before every PSP call: the resolver's rate cap. nil:
	// no cap (the API's live path).
	Wait func(ctx context.Context) error
	// CallTimeout bounds one PSP call; 0: the caller's context alone.
	CallTimeout time.Duration
	// WriteTimeout bounds the ledger writes that record a PSP answer; they
	// run even when the caller's context has ended, so an answer that came
	// back is never lost. 0: 2 s.
	WriteTimeout time.Duration
	Log          *slog.Logger     // nil: slog.Default()
	Metrics      *metrics.Emitter // nil: none
}

// ErrNoIntent means the PaymentIntent to refund could not be found yet;
// the attempt sent nothing and was recorded as open.
var ErrNoIntent = errors.New("refund: the payment's PaymentIntent is not known yet")

// Attempt makes one attempt at r (an open refund): it finds the
// PaymentIntent to refund if the row does not name it yet (a GET by our
// reference), calls the PSP's refund with the derived key and the row's
// parameters, and records the answer: SUCCEEDED or FAILED by
// compare-and-set, or, for any open answer, the attempt and the next
// attempt's time. It returns the row as it stands afterwards. An error
// means the ledger could not be written; the PSP's own failures are open
// answers, never errors.
func (a *Attempter) Attempt(ctx context.Context, r ledger.Refund, now time.Time) (ledger.Refund, error) {
	log := a.log().With("payment_id", r.PaymentID, "attempts", r.Attempts)
	if r.State.Final() {
		return r, nil
	}
	if r.PSPRefund != "" {
		// The PSP answered pending before: follow the refund by its id.
		// Replaying the key would answer the saved "pending" for 24 h,
		// and after that window create a second refund request.
		return a.follow(ctx, r, now, log)
	}
	// By the charge the ledger holds when it is one (Stripe refunds by
	// charge= without a search, whose index lags behind writes); by the
	// PaymentIntent once known, which a row sent before this rule used
	// (the same key must carry the same parameters).
	pi, charge := r.PSPPaymentIntent, ""
	if pi == "" && strings.HasPrefix(r.PSPCharge, "ch_") {
		charge = r.PSPCharge
	}
	if pi == "" && charge == "" {
		var err error
		pi, err = a.findIntent(ctx, r, log)
		if ctx.Err() != nil {
			// The caller's time is up before anything was sent: no attempt
			// to count; the run's lease lapses and a later run takes it.
			return r, ctx.Err()
		}
		if err != nil {
			log.Warn("refund not sent: the PaymentIntent is not known yet", "err", err)
			return a.open(ctx, r, false, "", now, log)
		}
	}
	if err := a.wait(ctx); err != nil {
		return r, err
	}
	cctx, cancel := a.callContext(ctx)
	res, err := a.PSP.Refund(cctx, psp.RefundRequest{
		IdempotencyKey: ids.RefundKey(r.PaymentID), PaymentIntentID: pi, ChargeID: charge, Amount: r.Amount, PaymentID: r.PaymentID,
	})
	cancel()
	switch {
	case errors.Is(err, psp.ErrNotSent):
		// Nothing went out (the key could not be read): the refund's state
		// stays what it was, and the next attempt sends it.
		log.Error("refund not sent: the PSP key could not be read; the refund stays open", "err", err)
		a.Metrics.Count(psp.MetricKeyUnreadable, 1)
		return a.open(ctx, r, false, "", now, log)
	case err != nil:
		// A refusal says only that this request did not run, never that no
		// refund exists: an earlier attempt whose reply was lost may have
		// refunded, and a replay after the PSP forgot the key is a new
		// request, refused with charge_already_refunded by that very
		// refund. The PSP's list of the charge's refunds says which; none
		// of ours found, it stays open, never guessed.
		log.Warn("refund call refused; looking it up among the charge's refunds", "err", err)
		return a.find(ctx, r, pi, charge, now, "refusal", log)
	case res.Outcome == psp.Succeeded:
		return a.settle(ctx, r, ledger.RefundOutcome{State: ledger.RefundSucceeded, PSPRefund: res.RefundID, PSPPaymentIntent: res.PaymentIntentID}, log)
	case res.Outcome == psp.Declined:
		return a.settle(ctx, r, ledger.RefundOutcome{State: ledger.RefundFailed, PSPRefund: res.RefundID, FailureReason: res.DeclineCode,
			PSPPaymentIntent: res.PaymentIntentID}, log)
	case res.Outcome == psp.Pending && res.RefundID != "":
		// At the PSP, pending: record its id, so the next attempt follows
		// it with a GET instead of replaying the key.
		log.Info("refund pending at the PSP; it will be followed by id", "psp_refund", res.RefundID)
		return a.open(ctx, r, true, res.RefundID, now, log)
	case res.HTTPStatus >= 500:
		// A 5xx under the key: Stripe saves a result once execution has
		// begun, so the refund may stand behind it and every replay for
		// 24 h answers the same 500. The PSP's list of the charge's
		// refunds says what happened.
		log.Warn("refund answered 5xx; looking it up among the charge's refunds", "http_status", res.HTTPStatus, "replayed", res.Replayed)
		return a.find(ctx, r, pi, charge, now, "5xx", log)
	default: // Unknown
		cause := ""
		if res.Cause != nil {
			cause = res.Cause.Error()
		}
		log.Warn("refund outcome open; it will be retried with the same key", "outcome", res.Outcome.String(), "cause", cause)
		return a.open(ctx, r, true, "", now, log)
	}
}

// follow reads a refund the PSP answered pending (GET /v1/refunds/{id})
// and settles it once final; still pending, or the read failing, leaves it
// open with the backoff.
func (a *Attempter) follow(ctx context.Context, r ledger.Refund, now time.Time, log *slog.Logger) (ledger.Refund, error) {
	if err := a.wait(ctx); err != nil {
		return r, err
	}
	cctx, cancel := a.callContext(ctx)
	res, err := a.PSP.RetrieveRefund(cctx, r.PSPRefund)
	cancel()
	switch {
	case err != nil:
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		log.Warn("pending refund could not be read; it stays open", "psp_refund", r.PSPRefund, "err", err)
	case res.Outcome == psp.Succeeded:
		return a.settle(ctx, r, ledger.RefundOutcome{State: ledger.RefundSucceeded, PSPRefund: r.PSPRefund, PSPPaymentIntent: res.PaymentIntentID}, log)
	case res.Outcome == psp.Declined:
		return a.settle(ctx, r, ledger.RefundOutcome{State: ledger.RefundFailed, PSPRefund: r.PSPRefund, FailureReason: res.DeclineCode,
			PSPPaymentIntent: res.PaymentIntentID}, log)
	default:
		log.Info("refund still pending at the PSP", "psp_refund", r.PSPRefund, "outcome", res.Outcome.String())
	}
	return a.open(ctx, r, true, "", now, log)
}

// find settles a refund whose call answered something that does not say
// whether it ran (a 5xx, or a refusal; behind names which, for the logs)
// from the PSP's own records (GET /v1/refunds by the charge or
// PaymentIntent the refund was sent against): succeeded or failed settles
// it, pending records its id so later attempts follow it by id; none
// found, or the look-up failing, leaves it open, and only then does the
// next attempt replay the key.
func (a *Attempter) find(ctx context.Context, r ledger.Refund, pi, charge string, now time.Time, behind string, log *slog.Logger) (ledger.Refund, error) {
	if err := a.wait(ctx); err != nil {
		return a.open(ctx, r, true, "", now, log)
	}
	cctx, cancel := a.callContext(ctx)
	res, err := a.PSP.FindRefund(cctx, pi, charge, r.PaymentID)
	cancel()
	log = log.With("behind", behind)
	switch {
	case err != nil:
		log.Warn("refund look-up failed; the refund stays open", "err", err)
	case res.Outcome == psp.Succeeded:
		log.Info("refund found at the PSP", "psp_refund", res.RefundID)
		return a.settle(ctx, r, ledger.RefundOutcome{State: ledger.RefundSucceeded, PSPRefund: res.RefundID, PSPPaymentIntent: res.PaymentIntentID}, log)
	case res.Outcome == psp.Declined && res.RefundID != "":
		return a.settle(ctx, r, ledger.RefundOutcome{State: ledger.RefundFailed, PSPRefund: res.RefundID, FailureReason: res.DeclineCode,
			PSPPaymentIntent: res.PaymentIntentID}, log)
	case res.Outcome == psp.Pending && res.RefundID != "":
		log.Info("refund found pending at the PSP; it will be followed by id", "psp_refund", res.RefundID)
		return a.open(ctx, r, true, res.RefundID, now, log)
	default:
		log.Warn("no refund of ours at the PSP; it will be retried with the same key", "outcome", res.Outcome.String())
	}
	return a.open(ctx, r, true, "", now, log)
}

// findIntent returns the PaymentIntent whose charge the refund undoes: the
// payment's psp_charge when it is one, otherwise a look-up by our reference
// whose charge must be the payment's.
func (a *Attempter) findIntent(ctx context.Context, r ledger.Refund, log *slog.Logger) (string, error) {
	if strings.HasPrefix(r.PSPCharge, "pi_") {
		return r.PSPCharge, a.setIntent(ctx, r.PaymentID, r.PSPCharge)
	}
	if err := a.wait(ctx); err != nil {
		return "", err
	}
	cctx, cancel := a.callContext(ctx)
	res, err := a.PSP.Lookup(cctx, r.PaymentID)
	cancel()
	switch {
	case err != nil:
		return "", err
	case res.Outcome != psp.Succeeded || res.PaymentIntentID == "":
		return "", fmt.Errorf("%w: look-up answered %s", ErrNoIntent, res.Outcome)
	case r.PSPCharge != "" && res.ChargeID != r.PSPCharge:
		log.Error("the PaymentIntent found by our reference holds another charge than the ledger's; not refunding it",
			"payment_intent", res.PaymentIntentID, "found_charge", res.ChargeID, "ledger_charge", r.PSPCharge)
		return "", fmt.Errorf("%w: charge mismatch", ErrNoIntent)
	}
	return res.PaymentIntentID, a.setIntent(ctx, r.PaymentID, res.PaymentIntentID)
}

func (a *Attempter) setIntent(ctx context.Context, paymentID, pi string) error {
	wctx, cancel := a.writeContext(ctx)
	defer cancel()
	return a.Ledger.SetRefundIntent(wctx, paymentID, pi)
}

func (a *Attempter) settle(ctx context.Context, r ledger.Refund, o ledger.RefundOutcome, log *slog.Logger) (ledger.Refund, error) {
	wctx, cancel := a.writeContext(ctx)
	defer cancel()
	row, moved, err := a.Ledger.SettleRefund(wctx, r.PaymentID, o)
	if err != nil {
		log.Error("the PSP answered but the refund could not be settled; it stays open", "state", o.State, "err", err)
		return r, err
	}
	if moved {
		log.Info("refund settled", "state", row.State, "psp_refund", row.PSPRefund)
		a.Metrics.Count("Refund"+titleCase(string(row.State)), 1)
		if e, ok := ledger.SettledRefundEvent(row, r.State == ledger.RefundSucceeded); ok && a.Publisher != nil {
			if err := a.Publisher.Publish(wctx, e); err != nil {
				log.Warn("refund event's outbox put failed; the sweep will re-put it", "event_id", e.EventID, "err", err)
			}
		}
	}
	return row, nil
}

// open records an attempt that left the refund open, and alerts once the
// budget is used up.
func (a *Attempter) open(ctx context.Context, r ledger.Refund, sent bool, pspRefund string, now time.Time, log *slog.Logger) (ledger.Refund, error) {
	wctx, cancel := a.writeContext(ctx)
	defer cancel()
	attempts := r.Attempts + 1
	next := now.Add(a.Backoff.Delay(attempts))
	row, err := a.Ledger.RecordRefundAttempt(wctx, r.PaymentID, sent, pspRefund, next)
	if err != nil {
		log.Error("could not record the refund attempt", "err", err)
		return r, err
	}
	a.Metrics.Count("RefundRetried", 1)
	if !row.State.Final() && a.Backoff.Exhausted(row.Attempts) {
		a.Metrics.Count("RefundStuck", 1)
		log.Error("refund still open after its retry budget; the state stays UNKNOWN and retries go on",
			"alert", "RefundStuck", "attempts", row.Attempts, "budget", a.Backoff.Budget, "state", row.State,
			"refund_idempotency_key", ids.RefundKey(r.PaymentID), "next_attempt_at", next)
		if err := a.Ledger.MarkRefundAlerted(wctx, r.PaymentID, now); err != nil {
			log.Warn("could not stamp the alert", "err", err)
		}
	}
	return row, nil
}

func (a *Attempter) wait(ctx context.Context) error {
	if a.Wait == nil {
		return ctx.Err()
	}
	return a.Wait(ctx)
}

func (a *Attempter) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if a.CallTimeout > 0 {
		return context.WithTimeout(ctx, a.CallTimeout)
	}
	return context.WithCancel(ctx)
}

func (a *Attempter) writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d := a.WriteTimeout
	if d <= 0 {
		d = 2 * time.Second
	}
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

func (a *Attempter) log() *slog.Logger {
	if a.Log == nil {
		return slog.Default()
	}
	return a.Log
}

// titleCase turns SUCCEEDED into Succeeded for a metric name.
func titleCase(s string) string {
	if s == "" {
		return s
	}
	return s[:1] + strings.ToLower(s[1:])
}
