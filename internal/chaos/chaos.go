// Package chaos runs randomized fault schedules over the whole payment path
// (internal/story's World: the real handlers over the local cloud, on a fake
// clock) and checks, after quiescence, the invariants effectively-once
// rests on. A schedule is a function of its seed: the same seed draws the
// same payments, the same interleaving of requests, clock moves, hop runs
// and faults, so a failing seed replays when run again with that seed (each
// hop runs one thing at a time, story.Options.Serial).
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

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/pspsim"
	"github.com/oncepay/oncepay/internal/resolver"
	"github.com/oncepay/oncepay/internal/story"
)

// The crash and fault points a schedule can hit; Result.Covered counts them.
const (
	APIAfterClaim         = "api.AfterClaim"
	APIAfterPendingInsert = "api.AfterPendingInsert"
	APIAfterPSPReply      = "api.AfterPSPReply"
	APIBeforeComplete     = "api.BeforeComplete"
	APIPaused             = "api.paused-owner"
	ResolverAfterAnswer   = "resolver.AfterPSPAnswer"
	RelayAfterSend        = "relay.crash-after-send"
	WorkerBeforeEvent     = "worker.BeforeEvent"
	WorkerAfterCommit     = "worker.AfterCommit"
	WorkerAfterPush       = "worker.AfterPush"
	PSPLoseReply          = "psp.lose_reply"
	PSPError5xx           = "psp.error_5xx"
	PSPDropBefore         = "psp.drop_before"
	WebhookDuplicate      = "webhook.duplicate"
	WebhookDrop           = "webhook.drop"
	QueueRedelivery       = "queue.redelivery"
	// QueueDeadLettered: five failed deliveries moved an event to the DLQ
	// and quiescence redrove it (an outcome, not a fault the runner arms).
	QueueDeadLettered = "queue.dead-lettered"
)

// Points lists every point, for the coverage report.
var Points = []string{APIAfterClaim, APIAfterPendingInsert, APIAfterPSPReply, APIBeforeComplete, APIPaused,
	ResolverAfterAnswer, RelayAfterSend, WorkerBeforeEvent, WorkerAfterCommit, WorkerAfterPush,
	PSPLoseReply, PSPError5xx, PSPDropBefore, WebhookDuplicate, WebhookDrop, QueueRedelivery}

// Result is what one schedule did and found.
type Result struct {
	Seed       uint64
	Payments   int
	Steps      int
	Covered    map[string]int // crash and fault points that fired
	Violations []string
	Trace      []string // the schedule, step by step
	NotQuiet   bool     // the world never quiesced after it
}

// Runner plays schedules on one World, one after another. Each schedule
// uses callers, keys and merchants of its own, so schedules never meet.
type Runner struct {
	w *story.World

	mu     sync.Mutex
	plan   *schedule // the schedule being played
	paused map[string]*pausedReq
}

// NewRunner returns a Runner on w, which should be built with
// story.Options{Serial: true} so schedules replay.
func NewRunner(w *story.World) *Runner {
	r := &Runner{w: w, paused: map[string]*pausedReq{}}
	w.SetAPIHooks(api.Hooks{
		AfterClaim:         r.apiHook(APIAfterClaim),
		AfterPendingInsert: r.apiHook(APIAfterPendingInsert),
		AfterPSPReply:      r.apiHook(APIAfterPSPReply),
		BeforeComplete:     r.apiHook(APIBeforeComplete),
	})
	return r
}

// payment is one payment of a schedule: a caller's key and the request's
// meaning.
type payment struct {
	caller, key, merchant string
	amount                int64
	pid                   string
	body, reuse           string // the request; the same key with another amount
}

// answer is one API answer the schedule saw.
type answer struct {
	step   int
	p      *payment
	kind   string // pay, reuse, late, resolve, zombie
	other  bool   // sent with the other amount (the reuse body)
	status int
	state  string
	charge string
}

type schedule struct {
	seed     uint64
	rng      *rand.Rand
	payments []*payment
	answers  []answer
	states   map[string]string // payment id -> last seen state
	covered  map[string]int
	trace    []string
	viol     []string
	step     int
	// nextCrash is the crash point armed for the next API request (its
	// ctx carries it), workerCrash and resolverCrash for the next run.
	workerCrash   string
	resolverCrash bool
	notQuiet      bool
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
	done chan api.Response
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
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.plan != nil {
		r.plan.covered[point]++
	}
}

// Run plays the schedule of seed and checks it.
func (r *Runner) Run(ctx context.Context, seed uint64) (Result, error) {
	s := &schedule{seed: seed, rng: rand.New(rand.NewPCG(seed, 0x6f6e6365706179)), states: map[string]string{}, covered: map[string]int{}}
	r.mu.Lock()
	r.plan = s
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.plan = nil
		r.mu.Unlock()
	}()
	r.w.SetWorkerHooks(r.workerHooks(s))
	r.w.SetResolverHooks(resolver.Hooks{AfterPSPAnswer: func(context.Context, string) error {
		if s.resolverCrash {
			s.resolverCrash = false
			r.cover(ResolverAfterAnswer)
			return resolver.ErrCrash
		}
		return nil
	}})
	defer r.w.SetWorkerHooks(inbox.Hooks{})
	defer r.w.SetResolverHooks(resolver.Hooks{})

	merchants := 1 + s.rng.IntN(3)
	callers := 1 + s.rng.IntN(3)
	n := 2 + s.rng.IntN(5)
	for i := range n {
		p := &payment{
			caller:   fmt.Sprintf("c%d-%d", seed, s.rng.IntN(callers)),
			key:      fmt.Sprintf("K%d", i),
			merchant: fmt.Sprintf("m%d-%d", seed, s.rng.IntN(merchants)),
			amount:   int64(100 * (1 + s.rng.IntN(50))),
		}
		p.pid = story.PaymentID(p.caller, p.key)
		pm := "pm_card_visa"
		if s.rng.IntN(8) == 0 {
			pm = "pm_card_chargeDeclined" // the simulator declines it: FAILED, 402
		}
		p.body = fmt.Sprintf(`{"merchant_id":%q,"order_id":"o%d","amount":%d,"currency":"USD","payment_method":%q}`, p.merchant, i, p.amount, pm)
		p.reuse = strings.Replace(p.body, fmt.Sprintf(`"amount":%d`, p.amount), fmt.Sprintf(`"amount":%d`, p.amount+1), 1)
		s.payments = append(s.payments, p)
	}
	steps := 10 + s.rng.IntN(30)
	for range steps {
		if err := r.step(ctx, s); err != nil {
			return s.result(), fmt.Errorf("seed %d step %d: %w", seed, s.step, err)
		}
		if err := r.observe(ctx, s); err != nil {
			return s.result(), err
		}
	}
	// Quiescence: the paused owners wake, the crash points are cleared, and
	// every hop runs until nothing moves.
	r.wakeAll(ctx, s)
	s.workerCrash, s.resolverCrash = "", false
	r.w.Sim.ClearFaults()
	s.log("quiesce")
	redriven := r.w.Redriven.Load()
	err := r.w.Settle(ctx)
	if n := r.w.Redriven.Load() - redriven; n > 0 {
		s.covered[QueueDeadLettered] += int(n)
		s.log("settle redrove %d messages from the DLQ", n)
	}
	if errors.Is(err, story.ErrNotQuiet) {
		// A schedule that never quiesces is a finding, not a broken run.
		s.violate("%v", err)
		s.notQuiet = true
	} else if err != nil {
		return s.result(), fmt.Errorf("seed %d: %w", seed, err)
	}
	if err := r.observe(ctx, s); err != nil {
		return s.result(), err
	}
	if err := r.check(ctx, s); err != nil {
		return s.result(), err
	}
	return s.result(), nil
}

func (s *schedule) result() Result {
	return Result{Seed: s.seed, Payments: len(s.payments), Steps: s.step, Covered: s.covered, Violations: s.viol, Trace: s.trace, NotQuiet: s.notQuiet}
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
	case k < 30: // a request for p, maybe with a fault at the PSP or a crash in the API
		r.pspFault(s, p)
		r.send(ctx, s, p, "pay")
	case k < 36: // a paused owner
		if _, busy := r.paused[p.pid]; busy {
			return r.wake(ctx, s, p)
		}
		r.pause(ctx, s, p)
	case k < 41:
		return r.wake(ctx, s, p)
	case k < 45: // key reuse with another amount
		r.call(ctx, s, p, "reuse", p.reuse, w.Clock.Now(), nil)
	case k < 48: // a late original: stamped past the deadline
		r.call(ctx, s, p, "late", p.body, w.Clock.Now().Add(-w.Timing.Deadline-time.Second), nil)
	case k < 51: // "did it go through?"
		resp := w.Resolve(ctx, p.caller, p.key)
		s.record(p, "resolve", resp)
	case k < 61:
		d := time.Duration(s.rng.IntN(3000)) * time.Millisecond
		if s.rng.IntN(4) == 0 {
			d = w.Timing.Deadline + w.Timing.Margin + time.Duration(s.rng.IntN(2000))*time.Millisecond // past a lease
		}
		if s.rng.IntN(25) == 0 {
			d = 2 * time.Hour // past the key record's window
		}
		w.Clock.Advance(d)
		s.log("clock +%s", d)
	case k < 69: // the resolver, maybe crashing after a PSP answer
		s.resolverCrash = s.rng.IntN(3) == 0
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
	case k < 74: // the PSP's webhooks (in whatever order they meet the resolver)
		n, err := w.Sim.FlushWebhooks(ctx)
		if err != nil {
			return fmt.Errorf("webhooks: %w", err)
		}
		s.log("webhooks: %d delivered", n)
	case k < 82: // the relay, maybe crashing after its send
		crash := s.rng.IntN(3) == 0
		if crash {
			w.RelayCrashes.Store(1)
		}
		n, err := w.Stream.Step(ctx)
		if err != nil {
			return fmt.Errorf("relay: %w", err)
		}
		if crash && w.RelayCrashes.Load() == 0 {
			r.cover(RelayAfterSend)
		}
		w.RelayCrashes.Store(0)
		s.log("relay: %d records (crash armed %v)", n, crash)
	case k < 92: // the worker, maybe dying at one of its crash points
		s.workerCrash = ""
		if s.rng.IntN(2) == 0 {
			s.workerCrash = []string{WorkerBeforeEvent, WorkerAfterCommit, WorkerAfterPush}[s.rng.IntN(3)]
		}
		n, err := w.Queue.Step(ctx)
		if err != nil {
			return fmt.Errorf("worker: %w", err)
		}
		s.log("worker: %d messages (crash armed %q)", n, s.workerCrash)
		s.workerCrash = ""
	case k < 96: // visibility timeouts run out: redeliveries
		n, err := w.Queue.Expire(ctx)
		if err != nil {
			return err
		}
		if n > 0 {
			r.cover(QueueRedelivery)
		}
		s.log("queue: %d redelivered", n)
	default:
		got, err := w.CollectPushes(ctx)
		if err != nil {
			return err
		}
		s.log("phone: %d pushes", len(got))
	}
	return nil
}

// pspFault arms, sometimes, a fault at the PSP for p's next charge call and
// sometimes a webhook fault for the event it causes.
func (r *Runner) pspFault(s *schedule, p *payment) {
	key := ids.ChargeKey(p.pid)
	var kind pspsim.FaultKind
	switch s.rng.IntN(10) {
	case 0, 1:
		kind = pspsim.FaultLoseReply
		r.cover(PSPLoseReply)
	case 2:
		kind = pspsim.FaultError5xx
		r.cover(PSPError5xx)
	case 3:
		kind = pspsim.FaultDropBefore
		r.cover(PSPDropBefore)
	}
	if kind != "" {
		// The real hold of a lost reply is short: the PSP client gets its
		// error at once and the deadline path is the same.
		_ = r.w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: key}, Kind: kind, DelayMS: 20})
		s.log("psp fault %s on %s", kind, p.pid)
	}
	switch s.rng.IntN(8) {
	case 0:
		_ = r.w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: key}, Kind: pspsim.FaultWebhookDuplicate})
		r.cover(WebhookDuplicate)
	case 1:
		_ = r.w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: key}, Kind: pspsim.FaultWebhookDrop})
		r.cover(WebhookDrop)
	}
}

// send is a request for p that may crash at one of the API's points.
func (r *Runner) send(ctx context.Context, s *schedule, p *payment, kind string) {
	var pl *reqPlan
	if s.rng.IntN(3) == 0 {
		pl = &reqPlan{point: []string{APIAfterClaim, APIAfterPendingInsert, APIAfterPSPReply, APIBeforeComplete}[s.rng.IntN(4)]}
	}
	r.call(ctx, s, p, kind, p.body, r.w.Clock.Now(), pl)
}

func (r *Runner) call(ctx context.Context, s *schedule, p *payment, kind, body string, arrival time.Time, pl *reqPlan) {
	point := ""
	if pl != nil {
		point = pl.point
		ctx = context.WithValue(ctx, planKey{}, pl)
	}
	resp := r.w.Pay(ctx, p.caller, p.key, body, arrival)
	crash := ""
	switch {
	case pl != nil && pl.point == "":
		crash = " crashed at " + point
	case pl != nil:
		crash = " (crash at " + point + " not reached)"
	}
	s.record(p, kind, resp)
	s.log("%s %s/%s ->%s %d %s", kind, p.caller, p.key, crash, resp.Status, stateOf(resp))
}

// pause starts a request for p that freezes at one of the API's points
// until wake.
func (r *Runner) pause(ctx context.Context, s *schedule, p *payment) {
	pl := &reqPlan{point: []string{APIAfterClaim, APIAfterPendingInsert, APIAfterPSPReply, APIBeforeComplete}[s.rng.IntN(4)],
		pause: make(chan struct{}), at: make(chan struct{})}
	pr := &pausedReq{p: p, plan: pl, done: make(chan api.Response, 1)}
	point := pl.point
	cctx := context.WithValue(context.WithoutCancel(ctx), planKey{}, pl)
	arrival := r.w.Clock.Now()
	go func() { pr.done <- r.w.Pay(cctx, p.caller, p.key, p.body, arrival) }()
	select {
	case <-pl.at:
		r.paused[p.pid] = pr
		r.cover(APIPaused)
		s.log("pay %s/%s pauses at %s", p.caller, p.key, point)
	case resp := <-pr.done:
		// It never reached the point (a repeat answered): an ordinary request.
		s.record(p, "pay", resp)
		s.log("pay %s/%s (pause at %s not reached) -> %d %s", p.caller, p.key, point, resp.Status, stateOf(resp))
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
	case resp := <-pr.done:
		s.record(p, "zombie", resp)
		s.log("zombie %s/%s wakes -> %d %s", p.caller, p.key, resp.Status, stateOf(resp))
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Minute):
		return errors.New("a woken owner did not answer within a minute")
	}
}

func (r *Runner) wakeAll(ctx context.Context, s *schedule) {
	for _, p := range s.payments {
		_ = r.wake(ctx, s, p)
	}
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

// --- what the schedule saw, and the checks ---

type body struct {
	State     string `json:"state"`
	PSPCharge string `json:"psp_charge"`
}

func stateOf(resp api.Response) string {
	var b body
	_ = json.Unmarshal(resp.Body, &b)
	return b.State
}

func (s *schedule) record(p *payment, kind string, resp api.Response) {
	var b body
	_ = json.Unmarshal(resp.Body, &b)
	s.answers = append(s.answers, answer{step: s.step, p: p, kind: kind, other: kind == "reuse", status: resp.Status, state: b.State, charge: b.PSPCharge})
}

// edges are the payment's state moves (seed Part 5; "" is no row yet).
// States are sampled between steps and one step can make several moves (a
// request inserts PENDING and settles it), so a sampled move must be a path
// along these edges; a move out of a final state never is.
var edges = map[string][]string{
	"":        {"PENDING", "VOID"},
	"PENDING": {"UNKNOWN", "SUCCEEDED", "FAILED"},
	"UNKNOWN": {"SUCCEEDED", "FAILED"},
}

func allowed(from, to string) bool {
	for _, next := range edges[from] {
		if next == to || allowed(next, to) {
			return true
		}
	}
	return false
}

// observe reads the schedule's payments' states and checks each move seen
// since the last look.
func (r *Runner) observe(ctx context.Context, s *schedule) error {
	pids := make([]string, len(s.payments))
	for i, p := range s.payments {
		pids[i] = p.pid
	}
	rows, err := r.w.Pool.Query(ctx, `SELECT payment_id, state FROM payments WHERE payment_id = ANY($1)`, pids)
	if err != nil {
		return fmt.Errorf("observe: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var pid, st string
		if err := rows.Scan(&pid, &st); err != nil {
			return err
		}
		if prev := s.states[pid]; prev != st {
			if !allowed(prev, st) {
				s.violate("step %d: %s moved %q -> %q, outside the allowed edges", s.step, pid, prev, st)
			}
			s.states[pid] = st
		}
	}
	return rows.Err()
}

// check runs the invariants on the quiescent world.
func (r *Runner) check(ctx context.Context, s *schedule) error {
	w := r.w
	charges := map[string][]pspsim.Charge{}
	for _, c := range w.Sim.Charges() {
		charges[c.Metadata["payment_id"]] = append(charges[c.Metadata["payment_id"]], c)
	}
	// A push the worker published may still be on its way through the
	// topic to the watching queue, or be invisible for the watching
	// queue's visibility timeout after a receive lost on the wire: wait up
	// to five such timeouts for every one the ledger marked SENT.
	for range int(5 * story.WatchVisibility / (100 * time.Millisecond)) {
		sent, err := w.Int(ctx, `SELECT count(*) FROM notif WHERE state = 'SENT' AND event_id LIKE ANY($1)`, r.eventPatterns(s))
		if err != nil {
			return fmt.Errorf("check: %w", err)
		}
		if _, err := w.CollectPushes(ctx); err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, d := range w.PushLog() {
			seen[d.EventID] = true
		}
		if int64(len(seenOf(seen, s))) >= sent {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	pushes := map[string]int{}
	for _, d := range w.PushLog() {
		if d.ReplaceID == "" || d.ReplaceID != d.PaymentID {
			s.violate("a push for %s carries replace id %q", d.PaymentID, d.ReplaceID)
		}
		pushes[d.PaymentID]++
	}
	wantBalance := map[string]int64{}
	for _, p := range s.payments {
		var state, charge string
		var amount int64
		err := w.Pool.QueryRow(ctx, `SELECT state, COALESCE(psp_charge, ''), COALESCE(amount, 0) FROM payments WHERE payment_id = $1`, p.pid).Scan(&state, &charge, &amount)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("check: %w", err)
		}
		// Whichever of the two requests for the key ran first is the
		// payment; the other one is the key reuse.
		otherFirst := amount == p.amount+1
		ch := charges[p.pid]
		if len(ch) > 1 {
			s.violate("%s: %d PSP charges", p.pid, len(ch))
		}
		evID := ids.EventID(p.pid, "SUCCEEDED")
		credits, err := w.Int(ctx, `SELECT count(*) FROM credits WHERE event_id = $1`, evID)
		if err != nil {
			return err
		}
		switch state {
		case "SUCCEEDED":
			wantBalance[p.merchant] += amount
			if len(ch) != 1 || ch[0].ID != charge {
				s.violate("%s SUCCEEDED with charge %q, the PSP holds %d charges", p.pid, charge, len(ch))
			}
			if credits != 1 {
				s.violate("%s SUCCEEDED, credited %d times", p.pid, credits)
			}
			if pushes[p.pid] < 1 {
				s.violate("%s SUCCEEDED, never notified", p.pid)
			}
		case "UNKNOWN", "PENDING":
			// Open after quiescence is allowed only where the PSP holds
			// nothing (a saved 5xx keeps the replay open inside the window).
			if len(ch) > 0 {
				s.violate("%s still %s after quiescence, with a charge at the PSP", p.pid, state)
			}
			if credits != 0 {
				s.violate("%s %s but credited", p.pid, state)
			}
		case "FAILED":
			if len(ch) > 0 {
				s.violate("%s is FAILED but the PSP charged it", p.pid)
			}
			if credits != 0 {
				s.violate("%s is FAILED but credited", p.pid)
			}
			if pushes[p.pid] < 1 {
				s.violate("%s FAILED, the buyer was never told", p.pid)
			}
		default: // VOID, or no row
			if len(ch) > 0 {
				s.violate("%s is %q but the PSP charged it", p.pid, state)
			}
			if credits != 0 {
				s.violate("%s is %q but credited", p.pid, state)
			}
		}
		for _, a := range s.answers {
			if a.p != p {
				continue
			}
			if msg := contradicts(a, a.other != otherFirst, state, charge); msg != "" {
				s.violate("step %d %s %s/%s answered %d %s %s: %s (final %s)", a.step, a.kind, p.caller, p.key, a.status, a.state, a.charge, msg, state)
			}
		}
	}
	merchants := map[string]bool{}
	for _, p := range s.payments {
		merchants[p.merchant] = true
	}
	for m := range merchants {
		bal, err := w.Balance(ctx, m)
		if err != nil {
			return err
		}
		sum, err := w.Int(ctx, `SELECT COALESCE(sum(cents), 0) FROM credits WHERE merchant_id = $1`, m)
		if err != nil {
			return err
		}
		if bal != sum || bal != wantBalance[m] {
			s.violate("merchant %s: balance %d, credits sum %d, SUCCEEDED payments sum %d", m, bal, sum, wantBalance[m])
		}
	}
	slices.Sort(s.viol)
	return nil
}

// eventPatterns are LIKE patterns for the schedule's events.
func (r *Runner) eventPatterns(s *schedule) []string {
	out := make([]string, len(s.payments))
	for i, p := range s.payments {
		out[i] = p.pid + ":%"
	}
	return out
}

// seenOf keeps the pushed event ids that belong to the schedule.
func seenOf(seen map[string]bool, s *schedule) []string {
	var out []string
	for id := range seen {
		for _, p := range s.payments {
			if strings.HasPrefix(id, p.pid+":") {
				out = append(out, id)
			}
		}
	}
	return out
}

// contradicts says how an answer contradicts the ledger's final state, or
// "". reused: the answer was to the request that is not the payment.
func contradicts(a answer, reused bool, final, charge string) string {
	if a.kind == "resolve" {
		reused = false
	}
	switch {
	case reused && a.kind != "late":
		if a.status == http.StatusCreated || a.status == http.StatusAccepted || a.status == http.StatusPaymentRequired {
			return "a reused key with another amount was answered as a payment"
		}
		return ""
	case a.kind == "late":
		if a.status != http.StatusServiceUnavailable {
			return "a request older than the deadline was not refused"
		}
		return ""
	}
	switch {
	case a.status == http.StatusCreated && (final != "SUCCEEDED" || a.state != "SUCCEEDED" || a.charge != charge):
		return "told SUCCEEDED"
	case a.status == http.StatusPaymentRequired && final != "FAILED":
		return "told FAILED"
	case a.kind == "resolve" && a.status == http.StatusOK && a.state == "VOID" && final != "VOID":
		return "told VOID"
	case a.status == http.StatusUnprocessableEntity:
		return "the same request was answered 422"
	}
	return ""
}
