// Package resolver settles every unknown (docs/mechanism.md#seed-part-5). It runs
// on a schedule (EventBridge in AWS; the local harness and the tests call
// Run directly) and on demand.
//
// A run takes, with a short lease, the payments whose outcome is open: every
// UNKNOWN one, and every PENDING one whose deadline plus the clock margin
// has passed (its owner crashed or froze after writing the intent). For each
// it asks the PSP, through a token bucket of its own (golang.org/x/time/rate)
// so replays after an outage never starve live payments:
//
//   - inside the PSP's key window (counted from created_at): the same call
//     again, with the same derived key and the same parameters from the row.
//     The PSP answers with the original's saved result, or runs the call if
//     the original never reached it. A saved 5xx keeps coming back for that
//     key, so then the payment is looked up instead; a Pending answer is
//     followed with Retrieve. "Inside" is decided at the call, after the
//     rate cap's wait: a replay goes only if it lands at least the call
//     timeout plus the margin before the window closes, and is a look-up
//     otherwise (whose NotFound, the window perhaps still open, leaves the
//     row open).
//   - after the window: psp.Lookup by our own reference (metadata
//     payment_id). A replay there would be a new charge. NotFound after the
//     window means no charge exists: FAILED.
//
// A definite answer settles the row by compare-and-set (ledger.Settle: the
// journal and the outbox intent in the same transaction), rewrites the key
// record's stored pointer into the final answer (the API's own rendering,
// byte for byte), and publishes the event. An open answer leaves the row
// for the next run.
//
// Beside the payments, in the same run and at the same time, it retries the
// open refunds that are due (package refund), sweeps the outbox (intents
// recorded but never put are put).
// Each phase has its own bound, so no backlog in one can take a run from
// the others; payments and refunds share the one PSP rate cap.
//
// Two runs at once are harmless: the compare-and-set and the derived keys
// make double work a replay, and the lease (taken with FOR UPDATE SKIP
// LOCKED) makes it rare.
package resolver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/clock"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/psp"
	"github.com/oncepay/oncepay/internal/refund"
)

// Ledger is the part of internal/ledger.Store the resolver uses.
type Ledger interface {
	ClaimUnsettled(ctx context.Context, c ledger.Claim) ([]ledger.Unsettled, error)
	ReleaseUnsettled(ctx context.Context, paymentIDs []string) error
	CountOpenBefore(ctx context.Context, before time.Time) (int, error)
	Settle(ctx context.Context, paymentID string, o ledger.Outcome, now time.Time, hooks ...ledger.Hook) (ledger.Payment, *event.Event, bool, error)
	ClaimRefunds(ctx context.Context, c ledger.Claim) ([]ledger.Refund, error)
	// ReadOnly is true in a standby Region before its promotion.
	ReadOnly(ctx context.Context) (bool, error)
	refund.Ledger
}

// PSP is the part of internal/psp.Client the resolver calls.
type PSP interface {
	Charge(ctx context.Context, req psp.ChargeRequest) (psp.Result, error)
	Retrieve(ctx context.Context, paymentIntentID string) (psp.Result, error)
	refund.PSP
}

// ClaimSweeper deletes expired key records (internal/idem.Sweeper).
type ClaimSweeper interface {
	Sweep(ctx context.Context, now time.Time, pages int) (idem.SweepReport, error)
}

// claimSweepPages bounds one run's sweep of the claim table (100 items a
// page): the next run of a warm resolver goes on where this one stopped.
const claimSweepPages = 20

// Claims rewrites stored pointers (internal/idem.Store).
type Claims interface {
	Finalize(ctx context.Context, scope, paymentID string, a *idem.Answer) error
}

// Publisher puts a committed event's outbox item (internal/outbox.Publisher).
type Publisher interface {
	Publish(ctx context.Context, e event.Event) error
}

// Sweeper marks the outbox intents the consumer has processed and re-drives
// the others (internal/outbox.Sweeper).
type Sweeper interface {
	Sweep(ctx context.Context) (outbox.SweepResult, error)
}

// ErrCrash, returned by a Hook, makes the run drop the payment on the spot,
// writing nothing more for it (not even the lease's release), as a process
// that died there would. Tests only.
var ErrCrash = errors.New("resolver: injected crash")

// Hooks are failure-injection points; nil in production.
type Hooks struct {
	// AfterPSPAnswer runs after the PSP answered about a payment and
	// before anything is written.
	AfterPSPAnswer func(ctx context.Context, paymentID string) error
}

// Deps are the Resolver's collaborators. Claims, Publisher and Sweeper may
// be nil: no pointer rewrite, no outbox put (the sweep will), no sweep.
type Deps struct {
	Ledger    Ledger
	PSP       PSP
	Claims    Claims
	Publisher Publisher
	Sweeper   Sweeper
	Clock     clock.Clock      // nil: the system clock
	Log       *slog.Logger     // nil: slog.Default()
	Metrics   *metrics.Emitter // nil: none
	Hooks     Hooks
	// ClaimSweeper deletes expired key records from a claim table without a
	// TTL (the MRSC option, docs/regions.md); nil: the table's TTL does.
	ClaimSweeper ClaimSweeper
	// IsHome reports whether this Region is the deployment's default home
	// (the home record "*", docs/regions.md), asked only when the ledger
	// is read-only: a standby waits for its promotion, but the home's own
	// ledger read-only is an outage nothing else reports (HomeLedgerReadOnly).
	// nil: one Region, not asked.
	IsHome func(ctx context.Context) (bool, error)
	// Cap: the cap the PSP client's transport already applies
	// (Cap.Transport), so the resolver does not wait twice. nil: the
	// resolver applies a cap of Config.PSPRate before each call.
	Cap *Cap
}

// Resolver settles open payments and refunds. It is safe for concurrent
// use; build it once per process (Lambda reuse), so its token bucket spans
// every run.
type Resolver struct {
	cfg Config
	d   Deps
	cap *Cap // nil: the PSP client's transport applies Deps.Cap
}

// New returns a Resolver; it fills the defaults of cfg and d.
func New(cfg Config, d Deps) (*Resolver, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Ledger == nil || d.PSP == nil {
		return nil, errors.New("resolver: Deps.Ledger and Deps.PSP are required")
	}
	if d.Clock == nil {
		d.Clock = clock.System{}
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	r := &Resolver{cfg: cfg, d: d}
	if d.Cap == nil {
		r.cap = NewCap(cfg.PSPRate)
	}
	return r, nil
}

// Report says what one run did.
type Report struct {
	Standby           bool               `json:"standby,omitempty"`        // the ledger was read-only: a standby Region, nothing done
	HomeReadOnly      bool               `json:"home_read_only,omitempty"` // read-only in the Region that homes the callers (HomeLedgerReadOnly)
	ClaimsSwept       int                `json:"claims_swept,omitempty"`   // expired key records deleted (a claim table without TTL)
	Claimed           int                `json:"claimed"`                  // open payments taken
	Succeeded         int                `json:"succeeded"`                // settled SUCCEEDED by this run
	Failed            int                `json:"failed"`                   // settled FAILED by this run
	AlreadySettled    int                `json:"already_settled"`          // settled meanwhile by someone else (webhook, API)
	Open              int                `json:"open"`                     // the PSP's answer was still open: left for the next run
	Errors            int                `json:"errors"`                   // the answer came but could not be recorded
	Crashed           int                `json:"crashed,omitempty"`        // dropped by a test hook
	PointersRewritten int                `json:"pointers_rewritten"`
	Published         int                `json:"published"`
	PSPCalls          int64              `json:"psp_calls"`
	Refunds           RefundReport       `json:"refunds"`
	Sweep             outbox.SweepResult `json:"sweep"`
	// OpenOverHorizon counts the payments still open whose deadline passed
	// more than Config.Horizon ago (the gauge UnknownOverHorizon).
	OpenOverHorizon int `json:"open_over_horizon"`
}

// RefundReport says what one run did about refunds.
type RefundReport struct {
	Claimed   int `json:"claimed"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Open      int `json:"open"`
	Errors    int `json:"errors"`
}

// run is one Run's shared state.
type run struct {
	calls  atomic.Int64
	stopAt time.Time // real time after which no new work starts; zero: none
}

// starting reports whether new work may start: the context is live and the
// run is not so close to its deadline that a PSP call and the writes after
// it could be cut off.
func (rn *run) starting(ctx context.Context) bool {
	return ctx.Err() == nil && (rn.stopAt.IsZero() || time.Now().Before(rn.stopAt))
}

// Handle is the Lambda entry point: an EventBridge scheduled event, or any
// payload for an on-demand run, is one Run.
func (r *Resolver) Handle(ctx context.Context, _ json.RawMessage) (Report, error) {
	return r.Run(ctx)
}

// Run is one pass, three phases side by side: the open payments, the due
// refunds and the outbox sweep. (PENDING notifications have their own
// trigger, the worker function's schedule: inbox.Function.) Each phase is
// bounded by its own limit and stops starting work near ctx's deadline, so
// every phase makes progress every run whatever the others' backlog (a
// payments backlog once took every run whole, and refund retries and the
// sweep never ran during an incident). Payments and refunds share the PSP
// rate cap, whose token bucket serves waiting calls in turn: each phase's
// calls go out as they queue, neither waits for the other to finish.
//
// With Config.Concurrency 1 the phases run one after the other instead.
// Run blocks until every phase is done or ctx ends; rows it took but did
// not start are given back. An error means a store could not be read; a
// PSP answer that stays open is not an error.
func (r *Resolver) Run(ctx context.Context) (Report, error) {
	var rep Report
	// A standby Region's ledger is read-only until its promotion
	// (docs/regions.md): it has nothing to settle yet, and every write
	// would fail. After the promotion the same run takes every open
	// payment the failed Region left.
	if !r.cfg.CheckStandby {
		// One Region: no standby, no check.
	} else if ro, err := r.d.Ledger.ReadOnly(ctx); err != nil {
		// An Aurora global database's secondary serves nothing at its
		// writer endpoint until its promotion: outside the home Region a
		// ledger host that does not resolve is that wait, not a failure to
		// alarm on every minute. Any other failure, and any failure in the
		// home Region, is an error.
		if wait, err := ledger.StandbyWait(ctx, err, r.d.IsHome); !wait {
			return rep, err
		}
		rep.Standby = true
		r.d.Metrics.Count("ResolverStandby", 1)
		r.d.Log.Info("standby: the ledger's writer does not answer until this Region is promoted; nothing to settle", "err", err)
		return rep, nil
	} else if ro {
		rep.Standby = true
		r.d.Metrics.Count("ResolverStandby", 1)
		if r.d.IsHome == nil {
			r.d.Log.Info("standby: the ledger is read-only until this Region is promoted; nothing to settle")
			return rep, nil
		}
		// The same read-only ledger in the home Region means nobody settles
		// its callers' payments: no error and no UNKNOWN count would say so.
		home, err := r.d.IsHome(ctx)
		if err != nil {
			return rep, fmt.Errorf("resolver: the ledger is read-only and the home record cannot be read: %w", err)
		}
		if home {
			rep.HomeReadOnly = true
			r.d.Metrics.Count("HomeLedgerReadOnly", 1)
			r.d.Log.Error("the home Region's ledger is read-only: its callers' open payments wait unsettled (a lost writer, or a move before the promotion; docs/regions.md)")
			return rep, nil
		}
		r.d.Log.Info("standby: the ledger is read-only until this Region is promoted; nothing to settle")
		return rep, nil
	}
	rn := &run{}
	if dl, ok := ctx.Deadline(); ok {
		// Lambda's deadline: leave room for a call and its writes.
		rn.stopAt = dl.Add(-r.cfg.CallTimeout - 2*time.Second)
	}
	// Each phase writes only its own part of the report.
	var payErr, refundErr error
	phases := []func(){
		func() { payErr = r.payments(ctx, &rep, rn) },
		func() { refundErr = r.refunds(ctx, &rep.Refunds, rn) },
		func() {
			rep.Sweep = r.sweep(ctx, rn)
			rep.ClaimsSwept = r.sweepClaims(ctx, rn)
		},
	}
	if r.cfg.Concurrency == 1 {
		// One thing at a time, phases in turn: what a replayable test
		// schedule needs (internal/chaos), at the cost of the guarantee.
		for _, phase := range phases {
			phase()
		}
	} else {
		var wg sync.WaitGroup
		for _, phase := range phases {
			wg.Go(phase)
		}
		wg.Wait()
	}
	errs := []error{payErr, refundErr}
	rep.PSPCalls = rn.calls.Load()
	m := r.d.Metrics
	if n, err := r.d.Ledger.CountOpenBefore(ctx, r.d.Clock.Now().Add(-r.cfg.Horizon)); err != nil {
		r.d.Log.Warn("could not count the payments open beyond the horizon", "err", err)
	} else {
		rep.OpenOverHorizon = n
		m.Count("UnknownOverHorizon", n) // a gauge: the stack alarms on its Maximum
		if n > 0 {
			r.d.Log.Error("payments still open beyond the resolver's horizon: money in doubt", "count", n, "horizon", r.cfg.Horizon.String())
		}
	}
	m.Count("ResolverSettled", rep.Succeeded+rep.Failed)
	m.Count("ResolverSucceeded", rep.Succeeded)
	m.Count("ResolverFailed", rep.Failed)
	m.Count("ResolverOpen", rep.Open)
	m.Count("ResolverErrors", rep.Errors+rep.Refunds.Errors)
	m.Count("ResolverPSPCalls", int(rep.PSPCalls))
	m.Count("PointersRewritten", rep.PointersRewritten)
	r.d.Log.Info("resolver run", "claimed", rep.Claimed, "succeeded", rep.Succeeded, "failed", rep.Failed,
		"already_settled", rep.AlreadySettled, "open", rep.Open, "errors", rep.Errors, "psp_calls", rep.PSPCalls,
		"refunds_claimed", rep.Refunds.Claimed, "refunds_succeeded", rep.Refunds.Succeeded, "refunds_open", rep.Refunds.Open,
		"swept", rep.Sweep.Found)
	return rep, errors.Join(errs...)
}

// outcome is what became of one payment in a run.
type outcome int

const (
	settledSucceeded outcome = iota
	settledFailed
	alreadySettled
	open
	errored
	crashed
	notStarted
)

func (r *Resolver) payments(ctx context.Context, rep *Report, rn *run) error {
	rows, err := r.d.Ledger.ClaimUnsettled(ctx, ledger.Claim{
		Now: r.d.Clock.Now(), Margin: r.cfg.Margin, Lease: r.cfg.Lease, KeyWindow: r.cfg.KeyWindow, Limit: r.cfg.Limit,
	})
	if err != nil {
		return fmt.Errorf("resolver: take open payments: %w", err)
	}
	rep.Claimed = len(rows)
	var mu sync.Mutex
	var release []string
	parallel(ctx, r.cfg.Concurrency, rows, func(ctx context.Context, u ledger.Unsettled) {
		o, rewritten, published := notStarted, false, false
		if rn.starting(ctx) {
			o, rewritten, published = r.resolve(ctx, u, rn)
		}
		mu.Lock()
		defer mu.Unlock()
		switch o {
		case settledSucceeded:
			rep.Succeeded++
		case settledFailed:
			rep.Failed++
		case alreadySettled:
			rep.AlreadySettled++
		case open:
			rep.Open++
			release = append(release, u.ID)
		case notStarted:
			release = append(release, u.ID)
		case errored:
			rep.Errors++
		case crashed:
			rep.Crashed++
		}
		if rewritten {
			rep.PointersRewritten++
		}
		if published {
			rep.Published++
		}
	})
	if len(release) > 0 {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Margin+time.Second)
		defer cancel()
		if err := r.d.Ledger.ReleaseUnsettled(wctx, release); err != nil {
			r.d.Log.Warn("could not release leases; they lapse on their own", "count", len(release), "err", err)
		}
	}
	return nil
}

// resolve asks the PSP about one payment and records a definite answer.
func (r *Resolver) resolve(ctx context.Context, u ledger.Unsettled, rn *run) (o outcome, rewritten, published bool) {
	log := r.d.Log.With("payment_id", u.ID, "state", u.State, "attempt", u.Attempts, "in_key_window", u.InKeyWindow)
	res, how, err := r.ask(ctx, u, rn)
	if h := r.d.Hooks.AfterPSPAnswer; h != nil {
		if herr := h(ctx, u.ID); errors.Is(herr, ErrCrash) {
			return crashed, false, false
		}
	}
	settle, final := decide(res, how, err)
	if !final {
		attrs := []any{"how", how, "outcome", res.Outcome.String()}
		if err != nil {
			attrs = append(attrs, "err", err)
		}
		if res.Cause != nil {
			attrs = append(attrs, "cause", res.Cause.Error())
		}
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			log.Error("PSP refused the resolver's call; left open, never guessed", attrs...)
		} else {
			log.Info("outcome still open; left for the next run", attrs...)
		}
		return open, false, false
	}
	// The answer came: record it even if the run's context is ending.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.CallTimeout)
	defer cancel()
	p, ev, moved, err := r.d.Ledger.Settle(wctx, u.ID, settle, r.d.Clock.Now())
	if err != nil {
		log.Error("the PSP answered but the payment could not be settled; the lease lapses and a later run asks again",
			"how", how, "state_to", settle.State, "err", err)
		return errored, false, false
	}
	if !moved {
		log.Info("already settled by someone else", "how", how, "state_now", p.State)
		return alreadySettled, false, false
	}
	log.Info("settled", "how", how, "state_to", p.State, "psp_charge", p.PSPCharge, "decline_code", p.DeclineCode,
		"psp_replayed", res.Replayed)
	rewritten = r.rewrite(wctx, p, log)
	published = r.publish(wctx, ev, log)
	if p.State == ledger.Succeeded {
		return settledSucceeded, rewritten, published
	}
	return settledFailed, rewritten, published
}

// Ways the resolver asked the PSP.
const (
	howReplay   = "replay"
	howRetrieve = "retrieve"
	howLookup   = "lookup"
)

// ask puts the question the key window allows.
func (r *Resolver) ask(ctx context.Context, u ledger.Unsettled, rn *run) (psp.Result, string, error) {
	if !u.InKeyWindow {
		res, err := r.lookup(ctx, u.ID, rn)
		return res, howLookup, err
	}
	late := false
	res, err := r.call(ctx, rn, func(ctx context.Context) (psp.Result, error) {
		// Decided again here, after the rate cap's wait and the rows before
		// this one: the claim's "inside the window" may have run out since.
		if !r.replayable(u) {
			late = true
			return r.d.PSP.Lookup(ctx, u.ID)
		}
		// The API's request, field for field: the PSP compares parameters.
		return r.d.PSP.Charge(ctx, psp.ChargeRequest{
			IdempotencyKey: ids.ChargeKey(u.ID), PaymentID: u.ID, MerchantID: u.MerchantID,
			CallerID: u.CallerID, ClientKey: u.ClientKey, Fingerprint: u.Fingerprint,
			Amount: u.Amount, Currency: u.Currency, PaymentMethod: u.PaymentMethod,
		})
	})
	switch {
	case late:
		// The key may be pruned by the time a replay lands, which would then
		// charge anew: looked up instead. The window may still be open (and
		// a recent replay's charge not yet searchable), so NotFound proves
		// nothing; a later run, past the window, decides it.
		r.d.Log.Info("the PSP key window closes before a replay could land; looked up instead",
			"payment_id", u.ID, "key_window_closes_in", time.Until(u.KeyWindowCloses).String())
		if err == nil && res.Outcome == psp.NotFound {
			res.Outcome = psp.Unknown
		}
		return res, howLookup, err
	case errors.Is(err, psp.ErrKeyReuse):
		// The key's first request carried other parameters: one sent by an
		// older client (before error_on_requires_action was sent). Nothing
		// ran for this replay; what the first one did is found by our
		// reference. Inside the window NotFound proves nothing.
		res, err = r.lookup(ctx, u.ID, rn)
		if err == nil && res.Outcome == psp.NotFound {
			res.Outcome = psp.Unknown
		}
		return res, howLookup, err
	case err != nil:
		return res, howReplay, err
	case res.Outcome == psp.Pending && res.PaymentIntentID != "":
		// A replay would only replay "pending": read the PaymentIntent now.
		res, err = r.call(ctx, rn, func(ctx context.Context) (psp.Result, error) {
			return r.d.PSP.Retrieve(ctx, res.PaymentIntentID)
		})
		return res, howRetrieve, err
	case res.Outcome == psp.Unknown && res.Replayed:
		// A saved error keeps coming back for this key
		// (docs/mechanism.md#seed-part-1): look the payment up. Inside the
		// window NotFound proves nothing.
		res, err = r.lookup(ctx, u.ID, rn)
		if err == nil && res.Outcome == psp.NotFound {
			res.Outcome = psp.Unknown
		}
		return res, howLookup, err
	}
	return res, howReplay, nil
}

// replayable reports whether a replay sent now still lands inside the
// PSP's key window: the request leaves within CallTimeout (the call's
// context bounds any wait in a capping transport and the client's own
// retries), and Margin covers the offset between the database's clock,
// which stamped created_at, and the PSP's.
func (r *Resolver) replayable(u ledger.Unsettled) bool {
	return time.Now().Add(r.cfg.CallTimeout + r.cfg.Margin).Before(u.KeyWindowCloses)
}

func (r *Resolver) lookup(ctx context.Context, paymentID string, rn *run) (psp.Result, error) {
	return r.call(ctx, rn, func(ctx context.Context) (psp.Result, error) { return r.d.PSP.Lookup(ctx, paymentID) })
}

// call makes one PSP call under the rate cap and the call timeout.
func (r *Resolver) call(ctx context.Context, rn *run, f func(context.Context) (psp.Result, error)) (psp.Result, error) {
	if err := r.wait(ctx, rn); err != nil {
		return psp.Result{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	res, err := f(cctx)
	if errors.Is(err, psp.ErrNotSent) {
		r.d.Metrics.Count(psp.MetricKeyUnreadable, 1)
	}
	return res, err
}

// wait takes a token from the rate cap (unless the PSP client's transport
// does), waiting no later than the run's stop time, and counts the call.
func (r *Resolver) wait(ctx context.Context, rn *run) error {
	if r.cap != nil {
		wctx := ctx
		if !rn.stopAt.IsZero() {
			var cancel context.CancelFunc
			wctx, cancel = context.WithDeadline(ctx, rn.stopAt)
			defer cancel()
		}
		if err := r.cap.Wait(wctx); err != nil {
			return err
		}
	} else if !rn.starting(ctx) {
		return context.DeadlineExceeded
	}
	rn.calls.Add(1)
	return nil
}

// decide turns the PSP's answer into a settle, or reports it open.
func decide(res psp.Result, how string, err error) (ledger.Outcome, bool) {
	switch {
	case err != nil && how == howReplay && psp.NotCharged(err, psp.Replay):
		// The PSP refused the very request the owner sent, as invalid,
		// inside the key window: it holds no result for the key (a result
		// would have been replayed), so the owner's call never charged.
		return ledger.Outcome{State: ledger.Failed, DeclineCode: "psp_invalid_request"}, true
	case err != nil:
		return ledger.Outcome{}, false
	case res.Outcome == psp.Succeeded:
		charge := res.ChargeID
		if charge == "" {
			charge = res.PaymentIntentID
		}
		return ledger.Outcome{State: ledger.Succeeded, PSPCharge: charge}, true
	case res.Outcome == psp.Declined:
		return ledger.Outcome{State: ledger.Failed, PSPCharge: res.PaymentIntentID, DeclineCode: res.DeclineCode}, true
	case res.Outcome == psp.NotFound && how == howLookup:
		// After the key window, nothing carries our reference: no charge.
		return ledger.Outcome{State: ledger.Failed, DeclineCode: "psp_no_charge"}, true
	}
	return ledger.Outcome{}, false
}

// rewrite turns the key record's pointer into the final answer, exactly as
// the API would render it. A record that is not a pointer to p is left
// alone.
func (r *Resolver) rewrite(ctx context.Context, p ledger.Payment, log *slog.Logger) bool {
	if r.d.Claims == nil {
		return false
	}
	ans, ok := api.FinalAnswer(p)
	if !ok {
		return false
	}
	scope := ids.Scope(p.CallerID, p.ClientKey)
	err := r.d.Claims.Finalize(ctx, scope, p.ID, ans)
	switch {
	case err == nil:
		log.Info("pointer rewritten to the final answer", "scope", scope, "status", ans.Status)
		return true
	case errors.Is(err, idem.ErrNotPointer):
		return false
	default:
		log.Warn("could not rewrite the pointer; it still renders the final state", "scope", scope, "err", err)
		return false
	}
}

func (r *Resolver) publish(ctx context.Context, ev *event.Event, log *slog.Logger) bool {
	if ev == nil || r.d.Publisher == nil {
		return false
	}
	if err := r.d.Publisher.Publish(ctx, *ev); err != nil {
		log.Warn("outbox put failed; the sweep will re-put it", "event_id", ev.EventID, "err", err)
		return false
	}
	return true
}

// sweep re-puts the outbox intents left unpublished (Sweeper's own limit
// bounds it). It needs no PSP call, so nothing else in the run can hold it
// back.
// sweepClaims deletes expired key records when the claim table has no TTL;
// it returns how many.
func (r *Resolver) sweepClaims(ctx context.Context, rn *run) int {
	if r.d.ClaimSweeper == nil || !rn.starting(ctx) {
		return 0
	}
	// Bounded by the run's own stop: the sweep only reclaims space, and
	// must not take the time the run's last metrics need.
	sctx := ctx
	if !rn.stopAt.IsZero() {
		var cancel context.CancelFunc
		sctx, cancel = context.WithDeadline(ctx, rn.stopAt)
		defer cancel()
	}
	res, err := r.d.ClaimSweeper.Sweep(sctx, r.d.Clock.Now(), claimSweepPages)
	if err != nil {
		r.d.Log.Warn("claim table sweep incomplete; the next run goes on", "err", err)
		r.d.Metrics.Count("ClaimsSweepFailed", 1)
	}
	r.d.Metrics.Count("ClaimsSwept", res.Deleted)
	return res.Deleted
}

func (r *Resolver) sweep(ctx context.Context, rn *run) outbox.SweepResult {
	if r.d.Sweeper == nil || !rn.starting(ctx) {
		return outbox.SweepResult{}
	}
	res, err := r.d.Sweeper.Sweep(ctx)
	if err != nil {
		r.d.Log.Warn("outbox sweep incomplete; the next run retries", "err", err)
	}
	return res
}

func (r *Resolver) refunds(ctx context.Context, rep *RefundReport, rn *run) error {
	if !rn.starting(ctx) {
		return nil
	}
	now := r.d.Clock.Now()
	rows, err := r.d.Ledger.ClaimRefunds(ctx, ledger.Claim{
		Now: now, Margin: r.cfg.Margin, Lease: r.cfg.Lease, Limit: r.cfg.RefundLimit,
	})
	if err != nil {
		return fmt.Errorf("resolver: take due refunds: %w", err)
	}
	rep.Claimed = len(rows)
	att := &refund.Attempter{
		Ledger: r.d.Ledger, PSP: r.d.PSP, Publisher: r.d.Publisher, Backoff: r.cfg.Refund, CallTimeout: r.cfg.CallTimeout,
		WriteTimeout: r.cfg.CallTimeout, Log: r.d.Log, Metrics: r.d.Metrics,
		Wait: func(ctx context.Context) error { return r.wait(ctx, rn) },
	}
	var mu sync.Mutex
	parallel(ctx, r.cfg.Concurrency, rows, func(ctx context.Context, rf ledger.Refund) {
		if !rn.starting(ctx) {
			return // its lease lapses; a later run takes it
		}
		row, err := att.Attempt(ctx, rf, r.d.Clock.Now())
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil && !row.State.Final():
			rep.Errors++
		case row.State == ledger.RefundSucceeded:
			rep.Succeeded++
		case row.State == ledger.RefundFailed:
			rep.Failed++
		default:
			rep.Open++
		}
	})
	return nil
}

// parallel runs f on every item with at most n at once, and returns when
// all have returned. Once ctx ends, the remaining items are still passed
// to f (which must check ctx), so each gets its bookkeeping.
func parallel[T any](ctx context.Context, n int, items []T, f func(context.Context, T)) {
	work := make(chan T)
	var wg sync.WaitGroup
	for range min(n, len(items)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				f(ctx, it)
			}
		}()
	}
	for _, it := range items {
		work <- it
	}
	close(work)
	wg.Wait()
}
