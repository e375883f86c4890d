// Package chaos runs randomized fault schedules over the whole payment path
// (internal/story's World: the real handlers over the local cloud, on a fake
// clock) and checks, after quiescence, the invariants effectively-once
// rests on; then a reconciliation against the PSP's records runs over the
// schedule's span, and the PSP and the ledger must agree (reconcile.go).
// A schedule is a function of its seed: the same seed draws the same
// payments, the same front door and wire shapes, the same interleaving of
// requests, clock moves, hop runs and faults, so a failing seed replays
// when run again with that seed (each hop runs one thing at a time,
// story.Options.Serial).
//
// The fault model: crashes and pauses at every hop's crash points; the
// PSP's lost replies, 5xx (before anything ran, or saved after the charge
// was made), dropped requests, duplicated, late (out of order) and lost
// webhooks, a second event id for one change (charge.* beside
// payment_intent.*), refunds that settle later, fail, or succeed and fail
// later, a search index that lags behind the charges, cards that need 3-D
// Secure, payment methods that do not exist or were single-use and already
// paid, and its API key refused for a while (401/403); downstream outages that
// outlast every retry and then recover (the relay's SQS sends, the
// worker's SNS publishes, the key-record store, the ledger for every
// function at once: ledgerdown.go); ambiguous ledger commits
// (internal/faultnet: the statement committed, its reply lost); queue
// redeliveries; refunds; and every request through one of the two front
// doors' event shapes. Coverage counts what FIRED, never what was armed.
//
// One behaviour of the PSP is out of reach: Stripe prunes a key some time
// past 24 h (pspsim's jittered pruning). The resolver measures its key
// window on the database's clock, which the world's fake clock does not
// move, so no schedule lives past it; and moving only the simulator's
// clock past 24 h would make it forget keys the resolver is still told to
// replay, which Stripe never does (pspsim.Config.Validate refuses that
// world). For the same reason there is no look-up after the key window.
package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/resolver"
	"github.com/oncepay/oncepay/internal/testkit/faultnet"
	"github.com/oncepay/oncepay/internal/testkit/story"
)

// The crash and fault points a schedule can hit; Result.Covered counts the
// times each one fired.
const (
	APIAfterClaim          = "api.AfterClaim"
	APIAfterPendingInsert  = "api.AfterPendingInsert"
	APIAfterPSPReply       = "api.AfterPSPReply"
	APIBeforeComplete      = "api.BeforeComplete"
	APIPaused              = "api.paused-owner"
	ResolverAfterAnswer    = "resolver.AfterPSPAnswer"
	RelayAfterSend         = "relay.crash-after-send"
	WorkerBeforeEvent      = "worker.BeforeEvent"
	WorkerAfterCommit      = "worker.AfterCommit"
	WorkerAfterPush        = "worker.AfterPush"
	PSPLoseReply           = "psp.lose_reply"
	PSPError5xx            = "psp.error_5xx"
	PSPDropBefore          = "psp.drop_before"
	PSPUnauthorized        = "psp.unauthorized" // a call refused 401 while the API key is broken
	PSPForbidden           = "psp.forbidden"    // a call refused 403
	WebhookDuplicate       = "webhook.duplicate"
	WebhookDrop            = "webhook.drop"
	PSPError5xxAfterCharge = "psp.error_5xx_after_charge" // a 500 saved after the charge was made
	PSPRefundPending       = "psp.refund_pending"         // a refund answered pending, settling later
	PSPRefundFail          = "psp.refund_fail"            // a refund answered pending that fails
	PSPRefundFailLater     = "psp.refund_fail_later"      // a refund answered succeeded that fails later
	PSPSearchLag           = "psp.search_lag"             // a PaymentIntent a search left out (the index lags)
	PSPRequiresAction      = "psp.card_requires_action"   // a confirm with a 3-D Secure card
	PSPUnknownMethod       = "psp.unknown_payment_method" // a confirm refused: no such PaymentMethod
	PSPMethodReused        = "psp.payment_method_reused"  // a confirm refused: single-use, already paid
	WebhookDelay           = "webhook.delay"              // an event held back, delivered after later ones
	WebhookSecondEvent     = "webhook.second_event"       // the charge.* event of a change, a second event id, received
	QueueRedelivery        = "queue.redelivery"
	SQSDown                = "sqs.send-down"        // a relay send failed in an SQS outage
	SNSDown                = "sns.publish-down"     // a worker publish failed in an SNS outage
	KeyStoreDown           = "dynamodb.claims-down" // a key-record call failed in a DynamoDB outage
	LedgerReplyLost        = "ledger.reply-lost"    // a ledger round trip ran, its reply was lost (any statement)
	// PSPError5xxAfterChargeRefund is error_5xx_after_charge fired on a
	// refund key: the only way the refund path's look-up (the charge's list
	// of refunds) runs.
	PSPError5xxAfterChargeRefund = "psp.error_5xx_after_charge(refund)"
	// Outcomes, not faults the runner arms: the give-up paths.
	// RelayGaveUp: the stream mapping discarded records after every retry
	// (the outbox sweep must re-drive them). QueueDeadLettered: five failed
	// deliveries moved an event to the DLQ and quiescence redrove it.
	RelayGaveUp       = "relay.gave-up"
	QueueDeadLettered = "queue.dead-lettered"
)

// Points lists every point and outcome a long run must reach, for the
// coverage report. QueueDeadLettered is counted but not required: since a
// credit no longer waits on its push, only a worker that fails five times
// in a row before its commit reaches the DLQ, which schedules rarely draw.
var Points = []string{APIAfterClaim, APIAfterPendingInsert, APIAfterPSPReply, APIBeforeComplete, APIPaused,
	ResolverAfterAnswer, RelayAfterSend, WorkerBeforeEvent, WorkerAfterCommit, WorkerAfterPush,
	PSPLoseReply, PSPError5xx, PSPDropBefore, PSPUnauthorized, PSPForbidden, WebhookDuplicate, WebhookDrop,
	PSPError5xxAfterCharge, PSPRefundPending, PSPRefundFail, PSPRefundFailLater, PSPSearchLag, PSPRequiresAction,
	PSPUnknownMethod, PSPMethodReused, WebhookDelay, WebhookSecondEvent,
	QueueRedelivery, SQSDown, SNSDown, KeyStoreDown, LedgerReplyLost, LedgerDown, RelayGaveUp,
	PSPError5xxAfterChargeRefund}

// netStatements are the statement kinds an ambiguous commit is armed on
// ("" is any statement): the API's and the resolver's settle transactions
// and the worker's commit (COMMIT), the durable guard's insert, the CAS
// moves, the refund intent and the inbox row.
var netStatements = []string{"COMMIT", "INSERT INTO payments", "UPDATE payments", "INSERT INTO refunds", "UPDATE refunds", "INSERT INTO processed", ""}

// pspPoint maps a simulator fault kind to its point.
var pspPoint = map[pspsim.FaultKind]string{
	pspsim.FaultLoseReply: PSPLoseReply, pspsim.FaultError5xx: PSPError5xx, pspsim.FaultDropBefore: PSPDropBefore,
	pspsim.FaultUnauthorized: PSPUnauthorized, pspsim.FaultForbidden: PSPForbidden,
	pspsim.FaultWebhookDuplicate: WebhookDuplicate, pspsim.FaultWebhookDrop: WebhookDrop,
	pspsim.FaultError5xxAfterCharge: PSPError5xxAfterCharge, pspsim.FaultRefundPending: PSPRefundPending,
	pspsim.FaultRefundFail: PSPRefundFail, pspsim.FaultRefundFailLater: PSPRefundFailLater,
	pspsim.FaultWebhookDelay: WebhookDelay,
}

// The simulator's clocks as the runner uses them. Every wait is far longer
// than a schedule takes in real time, so nothing the runner does not move
// happens by the real clock and a schedule stays a function of its seed.
const (
	// refundSettles is how long a delayed pending (or failing) refund takes
	// to settle by the simulator's clock: the runner moves that clock by
	// it, once a delayed refund was made, and never otherwise, so a world's
	// simulator stays hours short of Stripe's 24 h key window over its
	// WorldSchedules.
	refundSettles = 5 * time.Minute
	// searchLag is the search index's lag in the schedules that draw one:
	// nothing charged during the schedule is found by a search until
	// quiescence, when the index has caught up (the lag is lifted).
	searchLag = time.Hour
	// webhookHeld is a late event's hold (webhook_delay) and a refused
	// delivery's retry backoff: only a flush of every pending event
	// delivers them, never a delivery of the events that are due.
	webhookHeld = time.Hour
)

// chaosPSP is the simulator's configuration in a chaos world: the endpoint
// is subscribed to every event type, so one change reaches it as two
// events with two ids (payment_intent.* and charge.*) and a refund's late
// settlement (refund.updated, refund.failed) reaches it at all; a refused
// delivery waits for a flush.
func chaosPSP(next func(*pspsim.Config)) func(*pspsim.Config) {
	return func(c *pspsim.Config) {
		c.WebhookEvents = []string{"*"}
		c.WebhookBackoff, c.WebhookBackoffMax = webhookHeld, webhookHeld
		if next != nil {
			next(c)
		}
	}
}

// Result is what one schedule did and found.
type Result struct {
	Seed       uint64
	Payments   int
	Steps      int
	Door       string         // the front door its requests came through
	Covered    map[string]int // crash and fault points that fired
	Violations []string
	Trace      []string // the schedule, step by step
	NotQuiet   bool     // the world never quiesced after it
	// Reconciled counts the outcomes of the reconciliation run over the
	// schedule's span after it (reconcile.Report.Counts); Again, of the
	// second run, which must move nothing.
	Reconciled, Again map[string]int
}

// Runner plays schedules on one World, one after another. Each schedule
// uses callers, keys and merchants of its own, so schedules never meet.
type Runner struct {
	w   *story.World
	out *outages // nil: the world has no outage wrappers

	mu     sync.Mutex
	plan   *schedule // the schedule being played
	paused map[string]*pausedReq
}

// NewRunner returns a Runner on w, which should be built with
// story.Options{Serial: true} so schedules replay. A world built without
// the runner's outage wrappers and faultnet proxy (RunMany builds worlds
// with both) plays the same schedules without those faults firing.
func NewRunner(w *story.World) *Runner { return newRunner(w, nil) }

func newRunner(w *story.World, out *outages) *Runner {
	r := &Runner{w: w, out: out, paused: map[string]*pausedReq{}}
	w.SetAPIHooks(api.Hooks{
		AfterClaim:         r.apiHook(APIAfterClaim),
		AfterPendingInsert: r.apiHook(APIAfterPendingInsert),
		AfterPSPReply:      r.apiHook(APIAfterPSPReply),
		BeforeComplete:     r.apiHook(APIBeforeComplete),
	})
	return r
}

// newWorld builds a world with every fault the runner injects wired in.
func newWorld(ctx context.Context, opts story.Options) (*Runner, error) {
	out := newOutages()
	opts.FaultNet = true
	opts.FreshPSPConnections = true
	opts.PSPConfig = chaosPSP(opts.PSPConfig)
	out.install(&opts)
	w, err := story.New(ctx, opts)
	if err != nil {
		return nil, err
	}
	return newRunner(w, out), nil
}

// payment is one payment of a schedule: a caller's key and the request's
// meaning.
type payment struct {
	caller, key, merchant string
	amount                int64
	pid                   string
	body, reuse           string // the request; the same key with another amount
	refundKey             string // the refund request's own Idempotency-Key
}

// answer is one API answer the schedule saw (or, kind "record", the answer
// the key record stores for every later retry).
type answer struct {
	step   int
	p      *payment
	kind   string // pay, reuse, late, resolve, zombie, refund, again, record
	other  bool   // sent with the other amount (the reuse body)
	status int
	state  string
	charge string
	ptype  string // the problem type of an error answer
}

type schedule struct {
	seed     uint64
	rng      *rand.Rand
	door     frontDoor
	payments []*payment
	answers  []answer
	states   map[string]string // payment id -> last seen state
	covered  map[string]int
	trace    []string
	viol     []string
	step     int
	// workerCrash is the crash point armed for the next worker run,
	// resolverCrash for the next resolver run.
	workerCrash   string
	resolverCrash bool
	notQuiet      bool
	// pspArmed is the simulator fault uses armed, per kind: what is left
	// of them at quiescence did not fire.
	pspArmed map[pspsim.FaultKind]int
	// refund5xxArmed is the error_5xx_after_charge rules armed on refund
	// keys, counted apart (psp.error_5xx_after_charge(refund)): the
	// refund's look-up path is only exercised when one fires.
	refund5xxArmed int
	// charges and refunds the simulator held before the schedule began:
	// later ones are the schedule's.
	chargesBefore, refundsBefore int
	// statsBefore is the simulator's behaviour counts before the schedule.
	statsBefore pspsim.Stats
	// delayedRefunds counts, per refund key, the rules armed with a
	// delayed settlement that had not fired when the simulator's clock
	// last moved for them.
	delayedRefunds map[string]int
	// cards are the payment methods the schedule's payments carry.
	cards map[string]string
	// armedOn and firedOn count the simulator's fault rules per key and
	// kind: what the checker may excuse (check.go, noteFiredByKey).
	armedOn, firedOn map[keyFault]int
	endClock         time.Time // the clock when the last step ended
	discarded        int       // the stream's discarded records before the schedule
	// simStart is the simulator's clock when the schedule began: the
	// reconciliation's span starts there (reconcile.go).
	simStart time.Time
	// reconciled and reconciledAgain are the outcome counts of the
	// reconciliation after the schedule and of the second run.
	reconciled, reconciledAgain map[string]int
}

// plan keys a request's crash point into its context.
type planKey struct{}

type reqPlan struct {
	point string // where it crashes or pauses
	pause chan struct{}
	at    chan struct{} // closed when the request reaches the pause
}

type pausedReq struct {
	p    *payment
	plan *reqPlan
	done chan paused
}

type paused struct {
	resp api.Response
	how  string
	err  error
}

func (r *Runner) apiHook(point string) func(context.Context) error {
	return func(ctx context.Context) error {
		pl, _ := ctx.Value(planKey{}).(*reqPlan)
		if pl == nil || pl.point != point {
			return nil
		}
		pl.point = "" // once: a takeover in the same request runs on
		if pl.pause != nil {
			close(pl.at)
			<-pl.pause
			return nil
		}
		r.cover(point)
		return api.ErrCrash
	}
}

func (r *Runner) cover(point string) {
	r.coverN(point, 1)
}

func (r *Runner) coverN(point string, n int) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.plan != nil {
		r.plan.covered[point] += n
	}
}

// Run plays the schedule of seed and checks it. An error means the
// schedule could not be played (a fault that could not be armed, a hop that
// failed outright): a failed run, never a clean one.
func (r *Runner) Run(ctx context.Context, seed uint64) (Result, error) {
	s := &schedule{seed: seed, rng: rand.New(rand.NewPCG(seed, 0x6f6e6365706179)), states: map[string]string{},
		covered: map[string]int{}, pspArmed: map[pspsim.FaultKind]int{}, delayedRefunds: map[string]int{}, cards: map[string]string{}}
	r.mu.Lock()
	r.plan = s
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.plan = nil
		r.mu.Unlock()
	}()
	r.w.SetWorkerHooks(r.workerHooks(s))
	mine := map[string]bool{}
	r.w.SetResolverHooks(resolver.Hooks{AfterPSPAnswer: func(_ context.Context, pid string) error {
		// Only for the schedule's own payments: an earlier schedule's open
		// payment the resolver also asks about must not take the crash.
		if s.resolverCrash && mine[pid] {
			s.resolverCrash = false
			r.cover(ResolverAfterAnswer)
			return resolver.ErrCrash
		}
		return nil
	}})
	defer r.w.SetWorkerHooks(inbox.Hooks{})
	defer r.w.SetResolverHooks(resolver.Hooks{})
	s.chargesBefore, s.refundsBefore = len(r.w.Sim.Charges()), len(r.w.Sim.Refunds())
	s.simStart = r.w.Sim.Now()
	s.discarded = r.w.Stream.Stats().Discarded
	s.statsBefore = r.w.Sim.Stats()

	s.door = frontDoor{alb: s.rng.IntN(2) == 0}
	s.door.multiValue = s.door.alb && s.rng.IntN(2) == 0
	s.log("front door: %s", s.door)
	merchants := 1 + s.rng.IntN(3)
	callers := 1 + s.rng.IntN(3)
	n := 2 + s.rng.IntN(5)
	// The PSP's search index lags behind its charges in some schedules
	// (Stripe's search is eventually consistent): a look-up inside the
	// schedule, after a saved 500, finds nothing yet.
	lag := time.Duration(0)
	if s.rng.IntN(3) != 0 {
		lag = searchLag
	}
	if err := r.w.Sim.SetSearchLag(lag); err != nil {
		return s.result(), fmt.Errorf("seed %d: set the search lag: %w", seed, err)
	}
	s.log("search lag: %s", lag)
	// Some schedules' buyer pays with a saved card that was never attached
	// to a Customer: a single-use PaymentMethod, which pays once.
	shared := ""
	if s.rng.IntN(4) == 0 {
		shared = fmt.Sprintf("pm_1Saved%d", seed)
		if err := r.w.Sim.AddPaymentMethod(shared); err != nil {
			return s.result(), fmt.Errorf("seed %d: add a payment method: %w", seed, err)
		}
	}
	keys := map[string]bool{}
	for i := range n {
		p := &payment{
			caller:   fmt.Sprintf("c%d-%d", seed, s.rng.IntN(callers)),
			merchant: fmt.Sprintf("m%d-%d", seed, s.rng.IntN(merchants)),
			amount:   int64(100 * (1 + s.rng.IntN(50))),
		}
		for p.key = newKey(s.rng); keys[p.caller+"\x00"+p.key]; p.key = newKey(s.rng) {
		}
		keys[p.caller+"\x00"+p.key] = true
		p.refundKey = newKey(s.rng)
		p.pid = story.PaymentID(p.caller, p.key)
		pm := "pm_card_visa"
		switch k := s.rng.IntN(16); {
		case k < 2:
			pm = "pm_card_chargeDeclined" // the simulator declines it: FAILED, 402
		case k == 2:
			pm = "pm_card_threeDSecure2Required" // 3-D Secure, confirmed with error_on_requires_action: FAILED, 402
		case k == 3:
			pm = "pm_card_authenticationRequired"
		case k == 4:
			pm = fmt.Sprintf("pm_1Gone%d", seed) // no such PaymentMethod: 400, nothing charged
		case k < 12 && shared != "":
			pm = shared
		}
		s.cards[p.pid] = pm
		p.body = fmt.Sprintf(`{"merchant_id":%q,"order_id":"o%d","amount":%d,"currency":"USD","payment_method":%q}`, p.merchant, i, p.amount, pm)
		p.reuse = strings.Replace(p.body, fmt.Sprintf(`"amount":%d`, p.amount), fmt.Sprintf(`"amount":%d`, p.amount+1), 1)
		s.payments = append(s.payments, p)
		mine[p.pid] = true
		s.log("payment %s: %s/%q", p.pid, p.caller, p.key)
	}
	steps := 10 + s.rng.IntN(30)
	for range steps {
		before, err := r.beforeStep(ctx, s)
		if err != nil {
			return s.result(), err
		}
		if err := r.step(ctx, s); err != nil {
			return s.result(), fmt.Errorf("seed %d step %d: %w", seed, s.step, err)
		}
		if err := r.observe(ctx, s); err != nil {
			return s.result(), err
		}
		if err := r.checkNothingRan(ctx, s, before); err != nil {
			return s.result(), err
		}
	}
	s.endClock = r.w.Clock.Now()
	// Quiescence: the paused owners wake, the crash points are cleared,
	// every downstream recovers, and every hop runs until nothing moves.
	if err := r.wakeAll(ctx, s); err != nil {
		return s.result(), fmt.Errorf("seed %d: %w", seed, err)
	}
	s.workerCrash, s.resolverCrash = "", false
	r.countPSPFired(s)
	r.w.Sim.ClearFaults()
	// Eventually: the search index catches up, and the refunds made to
	// settle later have had their time.
	if err := r.w.Sim.SetSearchLag(0); err != nil {
		return s.result(), fmt.Errorf("seed %d: lift the search lag: %w", seed, err)
	}
	r.settleRefunds(s)
	r.recoverOutages(s)
	if r.w.Net != nil {
		r.w.Net.Disarm()
	}
	s.log("quiesce")
	if err := r.settle(ctx, s); err != nil {
		return s.result(), err
	}
	if err := r.askAgain(ctx, s); err != nil {
		return s.result(), err
	}
	if err := r.observe(ctx, s); err != nil {
		return s.result(), err
	}
	r.countSimStats(s)
	if err := r.check(ctx, s); err != nil {
		return s.result(), err
	}
	if !s.notQuiet {
		// The last word: the PSP's records against the ledger's. A world
		// that never quiesced has its violation already, and a run over
		// it would judge what is still moving.
		if err := r.reconcileAfter(ctx, s); err != nil {
			return s.result(), err
		}
		slices.Sort(s.viol)
	}
	return s.result(), nil
}

func refundKind(k pspsim.FaultKind) bool {
	return k == pspsim.FaultRefundPending || k == pspsim.FaultRefundFail || k == pspsim.FaultRefundFailLater
}

// countSimStats counts the simulator's behaviours that acted during the
// schedule (its quiescence included).
func (r *Runner) countSimStats(s *schedule) {
	now, was := r.w.Sim.Stats(), s.statsBefore
	s.covered[PSPSearchLag] += now.SearchHidden - was.SearchHidden
	s.covered[PSPRequiresAction] += now.RequiresAction - was.RequiresAction
	s.covered[PSPUnknownMethod] += now.UnknownPaymentMethod - was.UnknownPaymentMethod
	s.covered[PSPMethodReused] += now.PaymentMethodReused - was.PaymentMethodReused
	for k, v := range s.covered {
		if v == 0 {
			delete(s.covered, k)
		}
	}
}

// settleRefunds moves the simulator's clock past a delayed refund's
// settlement when one was made since the last move: its refund.updated
// (and refund.failed) events are raised, and a GET reads it final. A
// delayed refund rule still armed made nothing yet and needs nothing.
func (r *Runner) settleRefunds(s *schedule) {
	if len(s.delayedRefunds) == 0 {
		return
	}
	left := map[string]int{}
	for _, f := range r.w.Sim.Faults() {
		if refundKind(f.Kind) && f.DelayMS > 0 {
			left[f.Match.IdempotencyKey] += f.Times
		}
	}
	made := 0
	for key, armed := range s.delayedRefunds {
		made += armed - left[key]
		if left[key] == 0 {
			delete(s.delayedRefunds, key)
		} else {
			s.delayedRefunds[key] = left[key]
		}
	}
	if made == 0 {
		return
	}
	r.w.Sim.Advance(refundSettles)
	s.log("psp clock +%s: %d delayed refunds settle", refundSettles, made)
}

// settle runs every hop until nothing moves; a world that never quiesces
// is a finding.
func (r *Runner) settle(ctx context.Context, s *schedule) error {
	redriven := r.w.Redriven.Load()
	err := r.w.Settle(ctx)
	if n := r.w.Redriven.Load() - redriven; n > 0 {
		s.covered[QueueDeadLettered] += int(n)
		s.log("settle redrove %d messages from the DLQ", n)
	}
	if d := r.w.Stream.Stats().Discarded - s.discarded; d > 0 {
		s.covered[RelayGaveUp] = d // whichever step or round gave up
	}
	if errors.Is(err, story.ErrNotQuiet) {
		s.violate("%v", err)
		s.notQuiet = true
		return nil
	}
	if err != nil {
		return fmt.Errorf("seed %d: %w", s.seed, err)
	}
	return nil
}

func (s *schedule) result() Result {
	return Result{Seed: s.seed, Payments: len(s.payments), Steps: s.step, Door: s.door.String(), Covered: s.covered,
		Violations: s.viol, Trace: s.trace, NotQuiet: s.notQuiet, Reconciled: s.reconciled, Again: s.reconciledAgain}
}

func (s *schedule) log(format string, args ...any) {
	s.trace = append(s.trace, fmt.Sprintf("%3d ", s.step)+fmt.Sprintf(format, args...))
}

func (s *schedule) violate(format string, args ...any) {
	s.viol = append(s.viol, fmt.Sprintf(format, args...))
}

// step draws and plays one action.
func (r *Runner) step(ctx context.Context, s *schedule) error {
	s.step++
	w := r.w
	p := s.payments[s.rng.IntN(len(s.payments))]
	switch k := s.rng.IntN(100); {
	case k < 27 || k >= 98: // a request for p, maybe with a fault at the PSP or the ledger, or a crash in the API
		r.pspFault(s, p, ids.ChargeKey(p.pid), true)
		return r.withNet(s, func() error { return r.send(ctx, s, p, "pay") })
	case k < 32: // a paused owner
		if _, busy := r.paused[p.pid]; busy {
			return r.wake(ctx, s, p)
		}
		return r.pause(ctx, s, p)
	case k < 36:
		return r.wake(ctx, s, p)
	case k < 39: // key reuse with another amount
		return r.call(ctx, s, p, "reuse", p.reuse, w.Clock.Now(), nil)
	case k < 41: // a late original: stamped past the deadline
		return r.call(ctx, s, p, "late", p.body, w.Clock.Now().Add(-w.Timing.Deadline-time.Second), nil)
	case k < 44: // "did it go through?", maybe with a lost ledger reply (its VOID insert's)
		return r.withNet(s, func() error { return r.resolve(ctx, s, p, "/payments/"+p.key+"/resolve") })
	case k < 50: // a refund, maybe with a fault at the PSP or the ledger
		r.pspFault(s, p, ids.RefundKey(p.pid), false)
		return r.withNet(s, func() error { return r.refund(ctx, s, p) })
	case k < 58:
		d := time.Duration(s.rng.IntN(3000)) * time.Millisecond
		if s.rng.IntN(4) == 0 {
			d = w.Timing.Deadline + w.Timing.Margin + time.Duration(s.rng.IntN(2000))*time.Millisecond // past a lease
		}
		if s.rng.IntN(25) == 0 {
			d = 2 * time.Hour // past the key record's window
		}
		w.Clock.Advance(d)
		s.log("clock +%s", d)
		if s.rng.IntN(2) == 0 {
			r.settleRefunds(s) // the PSP's own time passes too
		}
	case k < 65: // the resolver, maybe crashing after a PSP answer
		s.resolverCrash = s.rng.IntN(3) == 0
		return r.withNet(s, func() error {
			rr, err := w.Resolver()
			if err != nil {
				return err
			}
			rep, err := rr.Run(ctx)
			if err != nil {
				return fmt.Errorf("resolver: %w", err)
			}
			s.resolverCrash = false
			s.log("resolver: claimed %d succeeded %d failed %d open %d crashed %d", rep.Claimed, rep.Succeeded, rep.Failed, rep.Open, rep.Crashed)
			return nil
		})
	case k < 69: // the PSP's webhooks (in whatever order they meet the resolver)
		// Half the time only the events that are due: a late one (and a
		// refused one, backing off) waits for a later flush, so it arrives
		// after events raised after it.
		deliver, what := w.Sim.FlushWebhooks, "all"
		if s.rng.IntN(2) == 0 {
			deliver, what = w.Sim.DeliverDueWebhooks, "due"
		}
		return r.withNet(s, func() error {
			n, err := deliver(ctx)
			if err != nil {
				// A delivery the endpoint refused (a 503 while the ledger's
				// reply was lost) stays pending: the PSP delivers it again.
				// The error names this world's event ids: kept out of the
				// trace, which must replay byte for byte from the seed.
				s.log("webhooks (%s): %d delivered, some refused", what, n)
				return nil
			}
			s.log("webhooks (%s): %d delivered", what, n)
			return nil
		})
	case k < 76: // the relay, maybe crashing after its send
		crash := s.rng.IntN(3) == 0
		if crash {
			w.RelayCrashes.Store(1)
		}
		// Until caught up with every write before the step: one poll of
		// DynamoDB Local's stream can return part of it under load, and the
		// trace must be the seed's, not the machine's.
		_, err := w.RelayCaughtUp(ctx)
		if err != nil {
			return fmt.Errorf("relay: %w", err)
		}
		if crash && w.RelayCrashes.Load() == 0 {
			r.cover(RelayAfterSend)
		}
		w.RelayCrashes.Store(0)
		// The count stays out of the trace: how many records one catch-up
		// takes depends on how the emulator's stream hands them over under
		// load (seen: 6 and 4 for the same seed), and the trace must replay
		// byte for byte from the seed.
		s.log("relay: caught up (crash armed %v)", crash)
	case k < 84: // the worker, maybe dying at one of its crash points
		s.workerCrash = ""
		if s.rng.IntN(2) == 0 {
			s.workerCrash = []string{WorkerBeforeEvent, WorkerAfterCommit, WorkerAfterPush}[s.rng.IntN(3)]
		}
		return r.withNet(s, func() error {
			n, err := w.Queue.Step(ctx)
			if err != nil {
				return fmt.Errorf("worker: %w", err)
			}
			s.log("worker: %d messages (crash armed %q)", n, s.workerCrash)
			s.workerCrash = ""
			return nil
		})
	case k < 87: // visibility timeouts run out: redeliveries
		n, err := w.Queue.Expire(ctx)
		if err != nil {
			return err
		}
		if n > 0 {
			r.cover(QueueRedelivery)
		}
		s.log("queue: %d redelivered", n)
	case k < 90:
		got, err := w.CollectPushes(ctx)
		if err != nil {
			return err
		}
		s.log("phone: %d pushes", len(got))
	case k < 92:
		return r.sqsOutage(ctx, s)
	case k < 94:
		return r.snsOutage(ctx, s)
	case k < 96: // the key store, or the ledger, goes down for its next few calls
		if s.rng.IntN(2) == 0 {
			return r.ledgerOutage(s)
		}
		n := 1 + s.rng.IntN(12)
		if r.out != nil {
			r.out.claims.arm(n)
		}
		s.log("key store down for its next %d calls", n)
	default: // the PSP refuses our API key for its next few calls
		kind := pspsim.FaultUnauthorized
		if s.rng.IntN(2) == 0 {
			kind = pspsim.FaultForbidden
		}
		n := 1 + s.rng.IntN(6)
		if err := w.Sim.AddFault(pspsim.Fault{Kind: kind, Times: n}); err != nil {
			return fmt.Errorf("arm psp %s: %w", kind, err)
		}
		s.pspArmed[kind] += n
		s.log("psp answers %s to its next %d calls", kind, n)
	}
	return nil
}

// sqsOutage breaks the relay's sends, runs the relay until its stream is
// quiet — past every retry, so the mapping discards the records, when the
// outage is long — and recovers.
func (r *Runner) sqsOutage(ctx context.Context, s *schedule) error {
	n := 3
	if s.rng.IntN(2) == 0 {
		n = 1 << 20 // outlasts the mapping's retries
	}
	if r.out == nil {
		return nil
	}
	before := r.w.Stream.Stats().Discarded
	r.out.sqs.arm(n)
	recs, err := r.w.Stream.Drain(ctx)
	fired := r.out.sqs.recover()
	if err != nil {
		return fmt.Errorf("relay in an SQS outage: %w", err)
	}
	r.coverN(SQSDown, fired)
	gaveUp := r.w.Stream.Stats().Discarded - before
	s.log("SQS down (%d calls): relay handed %d records, %d sends failed, %d records discarded", n, recs, fired, gaveUp)
	return nil
}

// snsOutage breaks the worker's publishes and runs the worker and the
// queue's redeliveries until, when the outage is long, its messages have
// had every delivery the redrive policy allows; then it recovers.
func (r *Runner) snsOutage(ctx context.Context, s *schedule) error {
	n := 2
	if s.rng.IntN(2) == 0 {
		n = 1 << 20
	}
	if r.out == nil {
		return nil
	}
	r.out.sns.arm(n)
	got := 0
	for range 6 {
		m, err := r.w.Queue.Step(ctx)
		if err != nil {
			r.out.sns.recover()
			return fmt.Errorf("worker in an SNS outage: %w", err)
		}
		got += m
		back, err := r.w.Queue.Expire(ctx)
		if err != nil {
			r.out.sns.recover()
			return err
		}
		if m == 0 && back == 0 {
			break // nothing in the queue and nothing in flight
		}
	}
	fired := r.out.sns.recover()
	r.coverN(SNSDown, fired)
	s.log("SNS down (%d calls): worker got %d messages, %d publishes failed", n, got, fired)
	return nil
}

// recoverOutages ends every outage still running and counts what fired.
func (r *Runner) recoverOutages(s *schedule) {
	r.recoverLedger()
	if r.out == nil {
		return
	}
	q, n, c := r.out.recoverAll()
	r.coverN(SQSDown, q)
	r.coverN(SNSDown, n)
	r.coverN(KeyStoreDown, c)
}

// withNet arms, sometimes, an ambiguous commit on the ledger for the
// duration of f: a statement kind, and how many of its round trips pass
// first. What did not fire is disarmed after f.
func (r *Runner) withNet(s *schedule, f func() error) error {
	f = r.inLedgerOutage(s, f)
	if s.rng.IntN(6) != 0 {
		return f()
	}
	rule := faultnet.Rule{Statement: netStatements[s.rng.IntN(len(netStatements))], Skip: s.rng.IntN(3)}
	if r.w.Net == nil {
		return f()
	}
	before := total(r.w.Net.Fired())
	if err := r.w.Net.Arm(rule); err != nil {
		return fmt.Errorf("arm an ambiguous commit: %w", err)
	}
	err := f()
	r.w.Net.Disarm()
	if fired := total(r.w.Net.Fired()) - before; fired > 0 {
		r.coverN(LedgerReplyLost, fired)
		kind := rule.Statement
		if kind == "" {
			kind = "any"
		}
		r.coverN(LedgerReplyLost+"("+kind+")", fired)
		s.log("ledger reply lost after %q (skip %d)", rule.Statement, rule.Skip)
		if isLedgerError(err) {
			// A function invocation that failed on a lost ledger reply (the
			// resolver's run, say) is what Lambda retries: an outcome, not a
			// broken schedule. Any other error is the schedule's.
			s.log("  the invocation failed") // not err: it names the world's database and port
			return nil
		}
	}
	return err
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// pspFault arms, sometimes, a fault at the PSP for the next call under key
// and, for a charge, sometimes a webhook fault for the event it causes.
func (r *Runner) pspFault(s *schedule, p *payment, key string, charge bool) {
	var kind pspsim.FaultKind
	switch k := s.rng.IntN(12); k {
	case 0, 1:
		kind = pspsim.FaultLoseReply
	case 2:
		kind = pspsim.FaultError5xx
	case 3:
		kind = pspsim.FaultDropBefore
	case 4, 5:
		// The charge (or refund) is made and a 500 saved in front of it:
		// every replay of the key answers 500 while the charge (refund)
		// stands; only a look-up finds it (a search for a charge, the
		// charge's list of refunds for a refund). It fires only on the
		// key's first call to run, so for a charge it is drawn twice as
		// often before the payment has a row.
		if !charge || k == 4 || s.states[p.pid] == "" {
			kind = pspsim.FaultError5xxAfterCharge
		}
	}
	match := pspsim.Match{IdempotencyKey: key}
	if kind != "" {
		// The real hold of a lost reply is short: the PSP client gets its
		// error at once and the deadline path is the same.
		r.addPSPFault(s, pspsim.Fault{Match: match, Kind: kind, DelayMS: 20})
		s.log("psp fault %s on %s", kind, key)
	}
	if !charge {
		r.refundFault(s, match)
		return
	}
	// Webhook faults act on the first event the charge raises
	// (payment_intent.*); its charge.* twin goes out as usual, so a late
	// one arrives after its twin.
	switch s.rng.IntN(8) {
	case 0:
		r.addPSPFault(s, pspsim.Fault{Match: match, Kind: pspsim.FaultWebhookDuplicate})
	case 1:
		r.addPSPFault(s, pspsim.Fault{Match: match, Kind: pspsim.FaultWebhookDrop})
	case 2:
		r.addPSPFault(s, pspsim.Fault{Match: match, Kind: pspsim.FaultWebhookDelay, DelayMS: webhookHeld.Milliseconds()})
		s.log("psp holds the first event of %s back", key)
	}
}

// refundFault arms, sometimes, how the refund the next call under key
// makes settles (pending, then succeeded; pending, then failed; succeeded,
// then failed), at once (on the PSP's next call) or after refundSettles of
// its clock; and, sometimes, late or doubled deliveries of the refund's
// events. Refund events are never dropped: a refund that fails after it
// succeeded is told by its webhook alone (Stripe retries it for three
// days). A PSP that never tells is the reconciliation's to catch
// (reconcile.go runs one after every schedule, over what the path left).
func (r *Runner) refundFault(s *schedule, match pspsim.Match) {
	kinds := []pspsim.FaultKind{pspsim.FaultRefundPending, pspsim.FaultRefundFail, pspsim.FaultRefundFailLater, pspsim.FaultRefundFailLater}
	if k := s.rng.IntN(5); k < len(kinds) {
		f := pspsim.Fault{Match: match, Kind: kinds[k]}
		if s.rng.IntN(2) == 0 {
			f.DelayMS = refundSettles.Milliseconds()
			s.delayedRefunds[match.IdempotencyKey]++
		}
		r.addPSPFault(s, f)
		s.log("psp refund %s on %s (settles after %d ms of its clock)", f.Kind, match.IdempotencyKey, f.DelayMS)
	}
	// A refund raises up to five events (refund.created, charge.refunded,
	// then refund.updated, refund.failed, charge.refund.updated).
	switch s.rng.IntN(6) {
	case 0:
		r.addPSPFault(s, pspsim.Fault{Match: match, Kind: pspsim.FaultWebhookDuplicate, Times: 5})
	case 1:
		r.addPSPFault(s, pspsim.Fault{Match: match, Kind: pspsim.FaultWebhookDelay, Times: 5, DelayMS: webhookHeld.Milliseconds()})
	}
}

func (r *Runner) addPSPFault(s *schedule, f pspsim.Fault) {
	if err := r.w.Sim.AddFault(f); err != nil {
		// A rule the simulator refuses is the runner's bug: say so loudly.
		s.violate("step %d: the runner could not arm psp fault %s: %v", s.step, f.Kind, err)
		return
	}
	s.pspArmed[f.Kind] += max(f.Times, 1)
	s.armOn(f)
	if refund5xx(f) {
		s.refund5xxArmed += max(f.Times, 1)
	}
}

func refund5xx(f pspsim.Fault) bool {
	return f.Kind == pspsim.FaultError5xxAfterCharge && strings.HasSuffix(f.Match.IdempotencyKey, ":cancel:refund")
}

// countPSPFired counts the simulator faults that fired: armed minus what
// is still armed (every rule in the simulator is this schedule's; the
// previous schedule cleared its own).
func (r *Runner) countPSPFired(s *schedule) {
	left := map[pspsim.FaultKind]int{}
	refundLeft := 0
	rules := r.w.Sim.Faults()
	for _, f := range rules {
		left[f.Kind] += f.Times
		if refund5xx(f) {
			refundLeft += f.Times
		}
	}
	if fired := s.refund5xxArmed - refundLeft; fired > 0 {
		s.covered[PSPError5xxAfterChargeRefund] += fired
	}
	s.noteFiredByKey(rules)
	for kind, armed := range s.pspArmed {
		if refundKind(kind) {
			continue // counted once the refund settled (check.go, coverRefundSettled)
		}
		if fired := armed - left[kind]; fired > 0 {
			s.covered[pspPoint[kind]] += fired
		}
	}
}

// --- requests ---

// send is a request for p that may crash at one of the API's points.
func (r *Runner) send(ctx context.Context, s *schedule, p *payment, kind string) error {
	var pl *reqPlan
	if s.rng.IntN(3) == 0 {
		pl = &reqPlan{point: []string{APIAfterClaim, APIAfterPendingInsert, APIAfterPSPReply, APIBeforeComplete}[s.rng.IntN(4)]}
	}
	return r.call(ctx, s, p, kind, p.body, r.w.Clock.Now(), pl)
}

// wireRNG is a request's own source of wire choices, drawn from the
// schedule's: a request that runs on another goroutine (a paused owner)
// draws nothing from the schedule meanwhile.
func wireRNG(s *schedule) *rand.Rand { return rand.New(rand.NewPCG(s.rng.Uint64(), s.rng.Uint64())) }

func (r *Runner) call(ctx context.Context, s *schedule, p *payment, kind, body string, arrival time.Time, pl *reqPlan) error {
	point := ""
	if pl != nil {
		point = pl.point
		ctx = context.WithValue(ctx, planKey{}, pl)
	}
	resp, how, err := s.door.send(ctx, r.w.API, wireRNG(s), hreq{path: "/payments", caller: p.caller, key: p.key, body: body, arrival: arrival})
	if err != nil {
		return err
	}
	crash := ""
	switch {
	case pl != nil && pl.point == "":
		crash = " crashed at " + point
	case pl != nil:
		crash = " (crash at " + point + " not reached)"
	}
	s.record(p, kind, resp)
	s.log("%s %s/%s [%s] ->%s %d %s", kind, p.caller, p.key, how, crash, resp.Status, stateOf(resp))
	return r.follow(ctx, s, p, kind, resp)
}

// follow is the client after a 202: it asks the resolve call the Location
// header names, half the time.
func (r *Runner) follow(ctx context.Context, s *schedule, p *payment, kind string, resp api.Response) error {
	if resp.Status != http.StatusAccepted || kind == "reuse" {
		return nil
	}
	loc := locationPath(resp.Headers)
	if loc == "" {
		s.violate("step %d %s %s/%s: 202 without a Location header", s.step, kind, p.caller, p.key)
		return nil
	}
	if s.rng.IntN(2) == 0 {
		return nil
	}
	return r.resolve(ctx, s, p, loc)
}

// resolve is POST {path} ("did it go through?").
func (r *Runner) resolve(ctx context.Context, s *schedule, p *payment, path string) error {
	resp, how, err := s.door.send(ctx, r.w.API, wireRNG(s), hreq{path: path, caller: p.caller, body: "", arrival: r.w.Clock.Now()})
	if err != nil {
		return err
	}
	s.record(p, "resolve", resp)
	s.log("resolve %s/%s [%s] -> %d %s%s", p.caller, p.key, how, resp.Status, stateOf(resp), problemOf(resp))
	return nil
}

// refund is POST /payments/{key}/refund with the refund's own key.
func (r *Runner) refund(ctx context.Context, s *schedule, p *payment) error {
	resp, how, err := s.door.send(ctx, r.w.API, wireRNG(s), hreq{path: "/payments/" + p.key + "/refund", caller: p.caller,
		key: p.refundKey, body: `{}`, arrival: r.w.Clock.Now()})
	if err != nil {
		return err
	}
	s.record(p, "refund", resp)
	s.log("refund %s/%s [%s] -> %d %s%s", p.caller, p.key, how, resp.Status, stateOf(resp), problemOf(resp))
	return nil
}

// pause starts a request for p that freezes at one of the API's points
// until wake.
func (r *Runner) pause(ctx context.Context, s *schedule, p *payment) error {
	pl := &reqPlan{point: []string{APIAfterClaim, APIAfterPendingInsert, APIAfterPSPReply, APIBeforeComplete}[s.rng.IntN(4)],
		pause: make(chan struct{}), at: make(chan struct{})}
	pr := &pausedReq{p: p, plan: pl, done: make(chan paused, 1)}
	point := pl.point
	cctx := context.WithValue(context.WithoutCancel(ctx), planKey{}, pl)
	req := hreq{path: "/payments", caller: p.caller, key: p.key, body: p.body, arrival: r.w.Clock.Now()}
	rng := wireRNG(s)
	go func() {
		resp, how, err := s.door.send(cctx, r.w.API, rng, req)
		pr.done <- paused{resp, how, err}
	}()
	select {
	case <-pl.at:
		r.paused[p.pid] = pr
		r.cover(APIPaused)
		s.log("pay %s/%s pauses at %s", p.caller, p.key, point)
		return nil
	case res := <-pr.done:
		if res.err != nil {
			return res.err
		}
		// It never reached the point (a repeat answered): an ordinary request.
		s.record(p, "pay", res.resp)
		s.log("pay %s/%s [%s] (pause at %s not reached) -> %d %s", p.caller, p.key, res.how, point, res.resp.Status, stateOf(res.resp))
		return r.follow(ctx, s, p, "pay", res.resp)
	}
}

// wake lets p's paused owner run on, and waits for its answer.
func (r *Runner) wake(ctx context.Context, s *schedule, p *payment) error {
	pr, ok := r.paused[p.pid]
	if !ok {
		return nil
	}
	delete(r.paused, p.pid)
	close(pr.plan.pause)
	select {
	case res := <-pr.done:
		if res.err != nil {
			return res.err
		}
		s.record(p, "zombie", res.resp)
		s.log("zombie %s/%s [%s] wakes -> %d %s", p.caller, p.key, res.how, res.resp.Status, stateOf(res.resp))
		return r.follow(ctx, s, p, "zombie", res.resp)
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Minute):
		return errors.New("a woken owner did not answer within a minute")
	}
}

func (r *Runner) wakeAll(ctx context.Context, s *schedule) error {
	for _, p := range s.payments {
		if err := r.wake(ctx, s, p); err != nil {
			return err
		}
	}
	return nil
}

func (r *Runner) workerHooks(s *schedule) inbox.Hooks {
	at := func(point string) func(context.Context, event.Event) error {
		return func(context.Context, event.Event) error {
			if s.workerCrash != point {
				return nil
			}
			s.workerCrash = ""
			r.cover(point)
			return errors.New("chaos: worker died at " + point)
		}
	}
	return inbox.Hooks{BeforeEvent: at(WorkerBeforeEvent), AfterCommit: at(WorkerAfterCommit), AfterPush: at(WorkerAfterPush)}
}

// --- what the schedule saw ---

type body struct {
	State     string `json:"state"`
	PSPCharge string `json:"psp_charge"`
	Type      string `json:"type"` // a problem's type
}

func stateOf(resp api.Response) string {
	var b body
	_ = json.Unmarshal(resp.Body, &b)
	return b.State
}

func problemOf(resp api.Response) string {
	var b body
	_ = json.Unmarshal(resp.Body, &b)
	if b.Type == "" {
		return ""
	}
	return " " + b.Type[strings.LastIndexByte(b.Type, '/')+1:]
}

func (s *schedule) record(p *payment, kind string, resp api.Response) {
	var b body
	_ = json.Unmarshal(resp.Body, &b)
	s.answers = append(s.answers, answer{step: s.step, p: p, kind: kind, other: kind == "reuse", status: resp.Status,
		state: b.State, charge: b.PSPCharge, ptype: b.Type})
}
