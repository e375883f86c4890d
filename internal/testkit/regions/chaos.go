package regions

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/reconcile"
	"github.com/oncepay/oncepay/internal/testkit/story"
)

// Schedule is the outcome of one two-Region chaos schedule.
type Schedule struct {
	Seed     uint64
	Lag      time.Duration
	Payments int
	// FailAt is the step R1 failed at (the failover followed at once).
	FailAt int
	// Fired counts the faults and moves that happened (never what was
	// merely drawn).
	Fired map[string]int
	// Violations are the invariants broken; empty is a pass.
	Violations []string
	// Reconciled is the outcome counts of the reconciliation R2 runs after
	// the failover (reconcile.Report.Counts); Again, of the second run over
	// the same span, which must move nothing.
	Reconciled, Again map[string]int
	// Log is the schedule's steps, for a failing seed.
	Log []string

	failedAt time.Time // when R1 failed (real time: the ledgers' now())
}

type cpay struct {
	caller, key, body, pid string
	amount                 int64
	final                  *Answer
	answers                []Answer
	sent                   bool
	// resolved is R2's answer to "did it go through?" after the failover.
	resolved Answer
}

// Chaos plays one randomized schedule, a function of its seed, on a fresh
// System with a standby: two to four payments through R1 (a few sent to R2
// first, which must send them home), faults at the api's crash points and
// the PSP's lost replies, the resolver, the relay and the worker run in
// between, and R1 failing at a random step, followed at once by the
// runbook's failover (in half the schedules from inside a request R1's api
// is serving, which then dies or goes on in R1, unfenced); then every open
// payment is retried in R2 until it has a final answer, and R1 comes back
// and its leftovers are drained. Then R2 runs the reconciliation against
// the PSP (internal/reconcile), and its relay and worker carry what the
// run moved. The money invariants are checked over the PSP and the home
// ledger (R2's, the promoted standby: R1's unreplicated writes are
// discarded, as Aurora's are):
//
//   - no payment charged twice (whatever key its replays carried);
//   - every PSP charge has exactly one SUCCEEDED home row with that
//     charge, and is credited exactly once; no other payment credited;
//   - m1's balance = 12,000 + what the PSP charged;
//   - every charged payment's final answer is SUCCEEDED with the PSP's
//     charge, and none that was not charged answers SUCCEEDED;
//   - every charged payment shows on the phone (its pushes, one per
//     Region at most, carry one replace id);
//   - before the reconciliation, a charged payment the home ledger lacks
//     is only one R1 wrote in its last lag (the ledger's RPO), and every
//     such payment, and nothing else, is adopted by it; it finds nothing
//     for a human, reverses nothing, and a second run moves nothing.
func Chaos(ctx context.Context, seed uint64) (Schedule, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	sc := Schedule{Seed: seed, Lag: time.Duration(50+rng.IntN(350)) * time.Millisecond, Fired: map[string]int{}}
	s, err := New(ctx, Options{Standby: true, Lag: sc.Lag})
	if err != nil {
		return sc, err
	}
	defer s.Close()
	if armSchedule != nil {
		armSchedule(s)
	}
	logf := func(format string, args ...any) { sc.Log = append(sc.Log, fmt.Sprintf(format, args...)) }
	n := 2 + rng.IntN(3)
	sc.Payments = n
	pays := make([]*cpay, n)
	for i := range pays {
		amount := int64(1000 * (1 + rng.IntN(5)))
		caller, key := fmt.Sprintf("u%d", i+1), fmt.Sprintf("K%d-%d", seed, i)
		pays[i] = &cpay{caller: caller, key: key, amount: amount, pid: story.PaymentID(caller, key),
			body: fmt.Sprintf(`{"merchant_id":"m1","order_id":"o%d","amount":%d,"currency":"USD","payment_method":"pm_card_visa"}`, i, amount)}
	}
	steps := 3*n + rng.IntN(6)
	sc.FailAt = rng.IntN(steps)
	live := s.R1 // the Region serving the callers
	now := 0.0
	tick := func(d float64) {
		// Settle moves the shared clock by minutes: count on from it.
		now = max(now, s.Clock.Now().Sub(s.T0).Seconds()) + d
		s.setClock(now)
	}
	failed := false
	// At FailAt, in half the schedules (while a payment is still unsent),
	// R1 fails with a request inside its api: the failover runs from the
	// api's hook, and the request then goes on in R1, half alive and
	// unfenced (its home replica cut off from the move), or dies there.
	failover := func() error {
		sc.failedAt = time.Now()
		s.Fail()
		moved, err := s.Failover(ctx)
		if err != nil {
			return err
		}
		failed, live = true, s.R2
		sc.Fired["failover"]++
		logf("R1 fails; failover: promoted, %d home record(s) moved", len(moved))
		return nil
	}
	for step := 0; step < steps; step++ {
		if step == sc.FailAt && !failed {
			var unsent []*cpay
			for _, p := range pays {
				if !p.sent {
					unsent = append(unsent, p)
				}
			}
			if len(unsent) > 0 && rng.IntN(2) == 0 {
				// In flight: a first send through R1 (its claim and its PSP
				// call are the api's), the failover from inside it.
				p := unsent[rng.IntN(len(unsent))]
				fault := []string{"failover_after_claim", "failover_after_psp"}[rng.IntN(2)] + []string{"_goes_on", "_dies"}[rng.IntN(2)]
				tick(0.5)
				a, err := s.chaosSend(ctx, s.R1, p, fault, failover, &sc, now)
				if err != nil {
					return sc, err
				}
				logf("step %d: %s/%s via %s (fault %q): %d %s %s", step, p.caller, p.key, s.R1.Region, fault, a.Status, a.State, a.Type)
				if !failed {
					return sc, fmt.Errorf("step %d: the failover in flight (%s) did not run", step, fault)
				}
				continue
			}
			if err := failover(); err != nil {
				return sc, err
			}
		}
		switch op := rng.IntN(7); {
		case op <= 2: // a send: the first, or a retry
			p := pays[rng.IntN(n)]
			if p.final != nil {
				continue
			}
			tick(0.5)
			door := live
			if !failed && rng.IntN(4) == 0 {
				door = s.R2 // the network routes it to the other Region
			}
			fault := ""
			if !p.sent {
				fault = []string{"", "", "lose_reply", "crash_after_psp", "crash_after_claim"}[rng.IntN(5)]
			}
			a, err := s.chaosSend(ctx, door, p, fault, nil, &sc, now)
			if err != nil {
				return sc, err
			}
			logf("step %d: %s/%s via %s (fault %q): %d %s %s", step, p.caller, p.key, door.Region, fault, a.Status, a.State, a.Type)
		case op == 3:
			tick(6)
			r, err := live.Resolver()
			if err != nil {
				return sc, err
			}
			rep, err := r.Run(ctx)
			if err != nil {
				return sc, fmt.Errorf("step %d: %s's resolver: %w", step, live.Region, err)
			}
			logf("step %d: %s's resolver settled %d", step, live.Region, rep.Succeeded+rep.Failed)
		case op == 4:
			if _, err := live.Stream.Drain(ctx); err != nil {
				return sc, err
			}
			logf("step %d: %s's relay", step, live.Region)
		case op == 5:
			if _, err := live.Queue.Drain(ctx); err != nil {
				return sc, err
			}
			logf("step %d: %s's worker", step, live.Region)
		default:
			time.Sleep(time.Duration(rng.Int64N(int64(sc.Lag))))
		}
	}
	if !failed {
		if err := failover(); err != nil {
			return sc, err
		}
	}
	// Quiescence: R2 settles and the phone retries every open payment in R2
	// until it has a final answer.
	for round := 0; round < 6; round++ {
		if err := s.R2.Settle(ctx); err != nil {
			return sc, fmt.Errorf("settle R2: %w", err)
		}
		open := 0
		for _, p := range pays {
			if p.final != nil {
				continue
			}
			tick(1)
			a, err := s.chaosSend(ctx, s.R2, p, "", nil, &sc, now)
			if err != nil {
				return sc, err
			}
			logf("quiesce %d: %s/%s in R2: %d %s %s", round, p.caller, p.key, a.Status, a.State, a.Type)
			if p.final == nil {
				open++
			}
		}
		if open == 0 {
			break
		}
	}
	// "Did it go through?" in R2 for every payment: across a failover an
	// absent row must never be answered VOID for a payment the PSP charged.
	for _, p := range pays {
		p.resolved = read(s.R2.Resolve(ctx, p.caller, p.key))
		logf("resolve %s/%s in R2: %d %s %s", p.caller, p.key, p.resolved.Status, p.resolved.State, p.resolved.Type)
	}
	// R1 comes back: its relay sends what it had not; its worker writes
	// through the ledger's writer endpoint, now R2's.
	// Caught up, not drained: a drain ends at its first quiet polls, and
	// DynamoDB Local's stream can show a record later than that.
	relayed, err := s.R1.RelayCaughtUp(ctx)
	if err != nil {
		return sc, err
	}
	logf("R1 back: its relay sent %d record(s)", relayed)
	consumer, err := s.R1.ConsumerOn(s.R2.Pool)
	if err != nil {
		return sc, err
	}
	if _, err := consumer.Drain(ctx); err != nil {
		return sc, err
	}
	if st := consumer.Stats(); st.Received > 0 {
		sc.Fired["leftover"] += st.Received
	}
	logf("R1 back: its relay and worker drained (%+v)", consumer.Stats())
	if err := s.R2.Settle(ctx); err != nil {
		return sc, err
	}
	if _, err := s.R1.AwaitPushes(ctx, 500*time.Millisecond); err != nil {
		return sc, err
	}
	if _, err := s.R2.CollectPushes(ctx); err != nil {
		return sc, err
	}
	if n := int(s.R1.EMF.Sum("PaymentAdopted") + s.R2.EMF.Sum("PaymentAdopted")); n > 0 {
		sc.Fired["adopted"] += n
	}
	// The last word: R2 reconciles against the PSP. What R1 charged,
	// answered and wrote in its last lag is charged at the PSP and absent
	// from the home ledger; the run adopts it from the charge's metadata,
	// with its event, and R2's relay and worker credit and push it.
	absent, err := s.beforeReconcile(ctx, pays, &sc)
	if err != nil {
		return sc, err
	}
	var rlog bytes.Buffer // the runs are synchronous: no lock needed
	rec, err := s.Reconciler(&rlog)
	if err != nil {
		return sc, err
	}
	from, to := s.Span()
	rep, err := rec.Run(ctx, from, to)
	if err != nil {
		return sc, fmt.Errorf("R2's reconciliation: %w", err)
	}
	sc.Reconciled = rep.Counts
	if n := rep.Counts[string(reconcile.Adopted)]; n > 0 {
		sc.Fired["adopted_by_reconciliation"] += n
	}
	logf("R2's reconciliation over [%s, %s): %v, %d finding(s)", from.Format(time.TimeOnly), to.Format(time.TimeOnly), rep.Counts, rep.Findings)
	if err := s.R2.Settle(ctx); err != nil {
		return sc, fmt.Errorf("settle R2 after the reconciliation: %w", err)
	}
	if err := s.awaitR2Pushes(ctx, absent); err != nil {
		return sc, err
	}
	again, err := rec.Run(ctx, from, to)
	if err != nil {
		return sc, fmt.Errorf("R2's second reconciliation: %w", err)
	}
	sc.Again = again.Counts
	logf("R2's second reconciliation: %v, %d finding(s)", again.Counts, again.Findings)
	if n := s.pushes.total(); n > 0 {
		sc.Fired["push.answer_lost"] += n
	}
	if err := s.check(ctx, pays, &sc, absent, rep, again); err != nil {
		return sc, err
	}
	if len(sc.Violations) > 0 {
		// The runs' own account of what they moved, for the failing seed.
		for _, l := range strings.Split(strings.TrimSpace(rlog.String()), "\n") {
			if !strings.Contains(l, `"level":"INFO"`) || strings.Contains(l, `"msg":"reconciled"`) {
				logf("reconcile log: %s", l)
			}
		}
	}
	return sc, nil
}

// beforeReconcile reads the home ledger after quiescence, before the
// reconciliation, and returns the charged payments it has no row of. Each
// must be R1's RPO loss, checked to be what it claims: R1's own
// (discarded) ledger wrote it within the lag before R1 failed, the buyer
// was answered SUCCEEDED with the PSP's charge, R1's worker credited it
// and pushed. Anything older is replication that stopped working. A
// charged payment the home ledger holds in any state but SUCCEEDED is the
// path's failure, never the reconciliation's to excuse.
func (s *System) beforeReconcile(ctx context.Context, pays []*cpay, sc *Schedule) (map[string]bool, error) {
	violate := func(format string, args ...any) { sc.Violations = append(sc.Violations, fmt.Sprintf(format, args...)) }
	charges := s.chargesByPayment()
	shown := s.shown()
	absent := map[string]bool{}
	for _, p := range pays {
		ch := charges[p.pid]
		if len(ch) == 0 {
			continue
		}
		row, err := s.R2.Ledger.Get(ctx, p.pid)
		if err != nil && !errors.Is(err, ledger.ErrNotFound) {
			return nil, err
		}
		if row.State != "" {
			if row.State != ledger.Succeeded {
				violate("%s: charged (%s), yet after quiescence the home ledger holds it %s: the path left it to the reconciliation", p.pid, ch[0].ID, row.State)
			}
			continue
		}
		absent[p.pid] = true
		var written time.Time
		err = s.R1.Pool.QueryRow(ctx, `SELECT created_at FROM payments WHERE payment_id = $1`, p.pid).Scan(&written)
		r1Credits, cerr := s.R1.Int(ctx, `SELECT count(*) FROM credits WHERE event_id LIKE $1 || ':%'`, p.pid)
		switch {
		case err != nil || cerr != nil:
			violate("%s: charged (%s), unknown to both Regions' ledgers (%v %v)", p.pid, ch[0].ID, err, cerr)
		case written.Before(sc.failedAt.Add(-sc.Lag - lostSlack)):
			violate("%s: charged, unknown to the home ledger, yet written in R1 %v before R1 failed (lag %v): replication stopped", p.pid, sc.failedAt.Sub(written).Round(time.Millisecond), sc.Lag)
		case p.final == nil || p.final.State != string(ledger.Succeeded) || p.final.PSPCharge != ch[0].ID:
			violate("%s: charged, unknown to the home ledger, and its final answer is %+v, not SUCCEEDED with %s", p.pid, p.final, ch[0].ID)
		case r1Credits != 1 || shown[p.pid] == 0:
			violate("%s: charged, unknown to the home ledger; R1 credited it %d time(s) and the phone shows it %d time(s): not R1's consumed copy", p.pid, r1Credits, shown[p.pid])
		}
	}
	return absent, nil
}

// awaitR2Pushes waits, bounded, for R2's push of every payment the
// reconciliation was to adopt: the worker marks it SENT before the topic
// has delivered it to the phone's queue. A push that never comes is the
// check's to report.
func (s *System) awaitR2Pushes(ctx context.Context, pids map[string]bool) error {
	for range 10 {
		seen := map[string]bool{}
		for _, d := range s.R2.PushLog() {
			seen[d.ReplaceID] = true
		}
		missing := false
		for pid := range pids {
			missing = missing || !seen[pid]
		}
		if !missing {
			return nil
		}
		if _, err := s.R2.AwaitPushes(ctx, time.Second); err != nil {
			return err
		}
	}
	return nil
}

// chargesByPayment is the PSP's charges by the payment id their key was
// derived from.
func (s *System) chargesByPayment() map[string][]pspsim.Charge {
	out := map[string][]pspsim.Charge{}
	for _, c := range s.Sim.Charges() {
		pid, _, _ := strings.Cut(c.IdempotencyKey, ":")
		out[pid] = append(out[pid], c)
	}
	return out
}

// pushesOf lists a payment's pushes, by Region, for a violation.
func (s *System) pushesOf(pid string) string {
	var out []string
	for _, w := range []*story.World{s.R1, s.R2} {
		for _, d := range w.PushLog() {
			if d.ReplaceID == pid {
				out = append(out, w.Region+": "+d.EventID+" "+d.State)
			}
		}
	}
	return strings.Join(out, "; ")
}

// shown counts both Regions' pushes by replace id.
func (s *System) shown() map[string]int {
	out := map[string]int{}
	for _, d := range append(s.R1.PushLog(), s.R2.PushLog()...) {
		out[d.ReplaceID]++
	}
	return out
}

// chaosSend sends p to door (following a 421 once, as the client does),
// with a fault on this send, and records the answer. A failover_* fault
// runs during (the failover) from door's api hook after the claim or after
// the PSP's reply; the request then goes on in the failed Region or dies.
func (s *System) chaosSend(ctx context.Context, door *story.World, p *cpay, fault string, during func() error, sc *Schedule, now float64) (_ Answer, err error) {
	chargeKey := ids.ChargeKey(p.pid)
	clear := func() {}
	switch fault {
	case "lose_reply":
		if err := s.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: chargeKey}, Kind: pspsim.FaultLoseReply, Times: 1}); err != nil {
			return Answer{}, err
		}
		for _, w := range []*story.World{s.R1, s.R2} {
			w.OnPSP = func(key string, err error) {
				if key == chargeKey && err != nil {
					sc.Fired["psp.lose_reply"]++
					s.setClock(now + 5.1) // past the deadline: the api records UNKNOWN
				}
			}
		}
		clear = func() { s.R1.OnPSP, s.R2.OnPSP = nil, nil }
	case "crash_after_psp", "crash_after_claim":
		crash := func(context.Context) error { sc.Fired["api."+fault]++; return api.ErrCrash }
		h := api.Hooks{AfterPSPReply: crash}
		if fault == "crash_after_claim" {
			h = api.Hooks{AfterClaim: crash}
		}
		for _, w := range []*story.World{s.R1, s.R2} {
			w.SetAPIHooks(h)
		}
		clear = func() { s.R1.SetAPIHooks(api.Hooks{}); s.R2.SetAPIHooks(api.Hooks{}) }
	case "failover_after_claim_goes_on", "failover_after_claim_dies", "failover_after_psp_goes_on", "failover_after_psp_dies":
		var failErr error
		fail := func(context.Context) error {
			if failErr = during(); failErr != nil {
				return failErr
			}
			sc.Fired[fault]++
			if strings.HasSuffix(fault, "_dies") {
				return api.ErrCrash
			}
			return nil
		}
		h := api.Hooks{AfterPSPReply: fail}
		if strings.Contains(fault, "after_claim") {
			h = api.Hooks{AfterClaim: fail}
		}
		door.SetAPIHooks(h)
		defer func() {
			if failErr != nil && err == nil {
				err = fmt.Errorf("failover in flight: %w", failErr)
			}
		}()
		clear = func() { door.SetAPIHooks(api.Hooks{}) }
	}
	a := read(door.Pay(ctx, p.caller, p.key, p.body, door.At(now)))
	if w := s.Follow(a); w != nil {
		sc.Fired["misdirected"]++
		p.answers = append(p.answers, a)
		a = read(w.Pay(ctx, p.caller, p.key, p.body, w.At(now)))
	}
	clear()
	p.sent = true
	p.answers = append(p.answers, a)
	if a.Status == http.StatusCreated || a.Status == http.StatusPaymentRequired {
		p.final = &a
	}
	return a, nil
}

// check reads the PSP and the home ledger after the reconciliation and
// records every broken invariant. absent are the charged payments the
// home ledger lacked before it; rep and again are its two runs' reports.
func (s *System) check(ctx context.Context, pays []*cpay, sc *Schedule, absent map[string]bool, rep, again reconcile.Report) error {
	home := s.R2
	violate := func(format string, args ...any) { sc.Violations = append(sc.Violations, fmt.Sprintf(format, args...)) }
	charges := s.chargesByPayment()
	var charged int64
	for _, c := range s.Sim.Charges() {
		charged += c.Amount
		// One SUCCEEDED home row holds each charge: the payment's own, or
		// the one the reconciliation adopted.
		n, err := home.Int(ctx, `SELECT count(*) FROM payments WHERE psp_charge = $1 AND state = 'SUCCEEDED'`, c.ID)
		if err != nil {
			return err
		}
		if n != 1 {
			violate("PSP charge %s (key %s): %d SUCCEEDED home row(s) hold it, want 1", c.ID, c.IdempotencyKey, n)
		}
	}
	shown := s.shown()
	for _, p := range pays {
		ch := charges[p.pid]
		credits, err := home.Int(ctx, `SELECT count(*) FROM credits WHERE event_id LIKE $1 || ':%'`, p.pid)
		if err != nil {
			return err
		}
		if len(ch) > 1 {
			violate("%s: %d PSP charges", p.pid, len(ch))
		}
		if credits > 1 {
			violate("%s: credited %d times", p.pid, credits)
		}
		homeRow, err := home.Ledger.Get(ctx, p.pid)
		if err != nil && !errors.Is(err, ledger.ErrNotFound) {
			return err
		}
		for _, c := range ch {
			if c.Amount != p.amount {
				violate("%s: PSP charge %s is %d, the payment %d", p.pid, c.ID, c.Amount, p.amount)
			}
		}
		// A payment the reconciliation adopted was pushed in R1 and is
		// pushed again by R2, with the same replace id; and a publish
		// whose answer was lost may have gone out before the SDK's retry
		// sent it again: one more copy, the same replace id.
		if lost := s.LostPushAnswers(ids.ReplaceID(p.pid)); shown[p.pid] > 2+lost {
			violate("%s: %d pushes; at most one per Region, and one more per publish whose answer was lost (%d) (%s)", p.pid, shown[p.pid], lost, s.pushesOf(p.pid))
		}
		for _, a := range p.answers {
			if a.Status == http.StatusCreated && (len(ch) == 0 || a.PSPCharge != ch[0].ID) {
				violate("%s: answered 201 with charge %q, the PSP holds %d", p.pid, a.PSPCharge, len(ch))
			}
		}
		if len(ch) >= 1 && p.resolved.State == "VOID" {
			violate("%s: charged (%s), yet R2's resolve answered VOID (\"never ran\")", p.pid, ch[0].ID)
		}
		switch {
		case len(ch) >= 1:
			if homeRow.State != ledger.Succeeded || homeRow.PSPCharge != ch[0].ID {
				violate("%s: charged (%s), yet the home ledger's row is %q with charge %q after the reconciliation", p.pid, ch[0].ID, homeRow.State, homeRow.PSPCharge)
			}
			if credits != 1 {
				r1Credits, _ := s.R1.Int(ctx, `SELECT count(*) FROM credits WHERE event_id LIKE $1 || ':%'`, p.pid)
				violate("%s: charged (%s) but credited %d times (home row %q; R1's lost ledger holds %d credit(s))", p.pid, ch[0].ID, credits, homeRow.State, r1Credits)
			}
			if p.final == nil || p.final.State != string(ledger.Succeeded) || p.final.PSPCharge != ch[0].ID {
				violate("%s: charged (%s) but its final answer is %+v", p.pid, ch[0].ID, p.final)
			}
			if shown[p.pid] == 0 {
				violate("%s: charged, never shown on the phone", p.pid)
			}
			if absent[p.pid] && !slices.ContainsFunc(s.R2.PushLog(), func(d notify.Data) bool { return d.ReplaceID == p.pid }) {
				violate("%s: adopted by the reconciliation, never pushed by R2", p.pid)
			}
		default:
			if credits != 0 {
				violate("%s: never charged but credited", p.pid)
			}
			if homeRow.State == ledger.Succeeded {
				violate("%s: never charged but SUCCEEDED in the home ledger", p.pid)
			}
			if p.final != nil && p.final.State == string(ledger.Succeeded) {
				violate("%s: never charged but answered SUCCEEDED", p.pid)
			}
		}
	}
	bal, err := home.Balance(ctx, "m1")
	if err != nil {
		return err
	}
	if bal != 12000+charged {
		violate("m1's balance in the home ledger is %d, want 12,000 + %d charged", bal, charged)
	}
	for pid := range charges {
		if !known(pays, pid) {
			violate("a PSP charge under %s maps to no payment of the schedule", pid)
		}
	}
	// The reconciliation: R1's lost payments adopted, nothing else moved
	// (no ledger corruption is injected here: a finding, a settle or a
	// reversal is the path's failure or the run's), and a re-run moves
	// nothing.
	if n := rep.Counts[string(reconcile.Adopted)]; n != len(absent) {
		violate("the reconciliation adopted %d payment(s); the home ledger lacked %d charged one(s)", n, len(absent))
	}
	for o, n := range rep.Counts {
		if o != string(reconcile.Agree) && o != string(reconcile.Adopted) {
			violate("the reconciliation's outcome %s for %d payment(s): only agree and adopted are expected", o, n)
		}
	}
	for o, n := range again.Counts {
		if o != string(reconcile.Agree) {
			violate("the second reconciliation over the same span: %s for %d payment(s), want all agree", o, n)
		}
	}
	for _, r := range []reconcile.Report{rep, again} {
		if r.Findings > 0 || r.Counts[string(reconcile.NeedsHuman)] > 0 {
			fs, err := home.Ledger.Findings(ctx, r.RunID)
			if err != nil {
				return err
			}
			violate("reconciliation run %d: %d finding(s) for a human: %+v", r.RunID, r.Findings, fs)
		}
	}
	if rf := s.Sim.Refunds(); len(rf) > 0 {
		// The schedule refunds nothing: every refund is a reversal.
		violate("the PSP holds %d refund(s) (first %s under %s): the reconciliation reversed a charge", len(rf), rf[0].ID, rf[0].IdempotencyKey)
	}
	return nil
}

func known(pays []*cpay, pid string) bool {
	for _, p := range pays {
		if p.pid == pid {
			return true
		}
	}
	return false
}

// armSchedule, when set (tests only), arms faults on a schedule's System
// before its first step.
var armSchedule func(*System)

// lostSlack covers the time between a commit's now() in R1 and the moment
// the replicator's proxy had it in hand: the check's tolerance, not a
// replication allowance.
const lostSlack = 250 * time.Millisecond
