package blackbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Crash run sizes: the issue's 200 payments, a few clients at once.
const (
	crashPayments = 200
	crashClients  = 4
	// crashSettle bounds the settle after the last kill. A worker killed
	// mid-batch leaves its messages invisible for the events queue's
	// visibility timeout (180 s: 6 x the worker's 30 s, the template's), so
	// the bound is that plus the resolver's minute and slack.
	crashSettle = 270 * time.Second
	// aimWait bounds one aimed kill: how long the runner waits for an
	// invocation of a function no kill has yet caught mid-invocation, to
	// kill its environment while it runs (a relay batch takes
	// milliseconds: a kill at a random moment, or after a status read,
	// finds it idle).
	aimWait = 5 * time.Second
	// crashPace spaces each client's payments.
	crashPace = 500 * time.Millisecond
)

// killTally is what the crash run's kills of one function did.
type killTally struct {
	killed, busy int
	aimed        int // aimed kills asked of the runner (in flight)
	missed       int // aimed kills that found no invocation within aimWait
}

func (k killTally) String() string {
	return fmt.Sprintf("killed %d (%d busy; %d aimed in-flight kills, %d found nothing to kill)", k.killed, k.busy, k.aimed, k.missed)
}

// crashPayment is one payment of the crash run and what its client heard.
type crashPayment struct {
	who     actors
	key     string
	pid     string
	body    payBody
	decline bool
	again   bool // sent again after its answer

	mu      sync.Mutex
	answers []answer // the final answers (201, 402, 202) its sends got
}

// killing keeps the crash run's kills away from the other cases: the kill
// answers busy environments first, so an api kill would hit another case's
// request, and a worker batch killed with another case's event in it hides
// that event for the queue's 180 s visibility timeout, far past that case's
// bounds. The other cases hold it for reading while they run (calm); the
// crash run holds it for writing while it pays and kills and until its
// payments have settled: its backlog (bisected, retried and re-driven
// batches) delayed another case's event past that case's bounds (CI: a
// 201 -> push of 15.6 s, over the 10 s the case allows).
var killing sync.RWMutex

// calm waits until no kill run is under way and keeps one from starting
// until the case ends.
func calm(t *testing.T) {
	killing.RLock()
	t.Cleanup(killing.RUnlock)
}

func (p *crashPayment) heard(a answer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.answers = append(p.answers, a)
}

// TestCrashFaultsOnTheRealBinaries: while 200 payments flow from a few
// clients (some keys sent twice at once, some sent again after their
// answer), execution environments of the relay, the worker and the api are
// SIGKILLed through the local cloud's admin API at random moments.
// Afterwards every payment is charged at most once, every SUCCEEDED one is
// credited exactly once and notified under its id, every declined one is
// FAILED with no charge and no credit, and nothing is stuck: no event the
// worker has not taken, no notification intent PENDING.
func TestCrashFaultsOnTheRealBinaries(t *testing.T) {
	t.Parallel()
	s := live(t)
	s.needAdmin(t)
	ctx := context.Background()
	victims := []string{"relay", "worker", "api"}
	before, err := s.status(ctx)
	if err != nil {
		t.Fatalf("the local cloud's status: %v", err)
	}
	for _, fn := range victims {
		if _, ok := before[fn]; !ok {
			t.Fatalf("the local cloud runs no function %q (status lists %v)", fn, keys(before))
		}
	}

	// Three callers and three merchants of the case's own.
	var who [3]actors
	for i := range who {
		who[i] = newActors(fmt.Sprintf("crash%d", i))
	}
	payments := make([]*crashPayment, crashPayments)
	for i := range payments {
		w := who[i%len(who)]
		p := &crashPayment{who: w, key: fmt.Sprintf("K%03d", i), decline: i%10 == 9, again: i%5 == 2}
		method := "pm_card_visa"
		if p.decline {
			method = "pm_card_chargeDeclined"
		}
		p.pid = w.paymentID(p.key)
		p.body = w.body(fmt.Sprintf("o-%03d", i), int64(100+i), method)
		payments[i] = p
	}
	// Every 7th key is sent by two clients at once; every 5th again after
	// its answer (the second send is part of the same job).
	jobs := make(chan *crashPayment, 2*crashPayments)
	for i, p := range payments {
		jobs <- p
		if i%7 == 3 {
			jobs <- p
		}
	}
	close(jobs)

	killing.Lock()
	var unlock sync.Once
	defer unlock.Do(killing.Unlock)
	killCtx, stopKills := context.WithCancel(ctx)
	kills := map[string]*killTally{}
	for _, fn := range victims {
		kills[fn] = &killTally{}
	}
	var killErrs []error
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for {
			select {
			case <-killCtx.Done():
				return
			case <-time.After(time.Duration(100+rand.IntN(500)) * time.Millisecond):
			}
			fn := victims[rand.IntN(len(victims))]
			// Kills go to a function no kill has caught busy yet, while one is
			// left, aimed by the runner: it kills the function's next
			// invocation while it runs. The others are kills at a random
			// moment (busy environments first, idle ones otherwise).
			var unbusy []string
			for _, v := range victims {
				if kills[v].busy == 0 {
					unbusy = append(unbusy, v)
				}
			}
			var n, busy int
			var err error
			if len(unbusy) > 0 {
				fn = unbusy[rand.IntN(len(unbusy))]
				kills[fn].aimed++
				// Not cancelled with the kills: the aim must have fired or
				// lapsed on the stack before the other cases may run (an
				// armed aim would kill one of their invocations), so the
				// request runs to its answer (at most aimWait).
				n, busy, err = s.killInFlight(ctx, fn, aimWait)
				if err == nil && n == 0 {
					kills[fn].missed++
				}
			} else {
				n, busy, err = s.kill(ctx, fn, 1)
			}
			if err != nil {
				killErrs = append(killErrs, err)
			} else {
				kills[fn].killed += n
				kills[fn].busy += busy
			}
			if killCtx.Err() != nil {
				return
			}
		}
	}()

	start := time.Now()
	var wg sync.WaitGroup
	var sendErrs sync.Map
	for range crashClients {
		wg.Go(func() {
			for p := range jobs {
				// Paced, so the payments flow for ~25 s: long enough for
				// aimed kills to catch each function mid-invocation (at full
				// speed 200 payments take ~8 s on an idle machine).
				time.Sleep(crashPace)
				if err := s.payThroughCrashes(ctx, p); err != nil {
					sendErrs.Store(p.pid, err)
					continue
				}
				if p.again {
					if err := s.payThroughCrashes(ctx, p); err != nil {
						sendErrs.Store(p.pid, err)
					}
				}
			}
		})
	}
	wg.Wait()
	stopKills()
	<-killed
	load := time.Since(start)
	for _, err := range killErrs {
		t.Errorf("kill: %v", err)
	}
	after, err := s.status(ctx)
	if err != nil {
		t.Errorf("the local cloud's status: %v", err)
	}
	var line []string
	for _, fn := range victims {
		k := kills[fn]
		line = append(line, fmt.Sprintf("%s %s", fn, k))
		// Killing an idle warm environment crashes nothing: each function
		// must have been killed mid-invocation at least once (the relay's
		// millisecond batches too: the runner aims those kills).
		if k.busy == 0 {
			t.Errorf("no %s environment was killed mid-invocation (%s): the case did not crash it", fn, k)
		}
		if err == nil {
			if d, db := after[fn].Killed-before[fn].Killed, after[fn].KilledBusy-before[fn].KilledBusy; d < int64(k.killed) || db < int64(k.busy) {
				t.Errorf("%s: the status counts %d kills (%d busy) during the run, the kill answers %d (%d busy)", fn, d, db, k.killed, k.busy)
			}
		}
	}
	killLine := strings.Join(line, ", ")
	t.Logf("%d payments by %d clients in %s; environments %s", crashPayments, crashClients, load.Round(time.Second), killLine)
	sendErrs.Range(func(pid, err any) bool {
		t.Errorf("%s: the client never got an answer: %v", pid, err)
		return true
	})

	// Settle: every payment final, every event taken, no intent PENDING.
	reports := map[string]report{}
	open := map[string]string{}
	settleStart := time.Now()
	for _, p := range payments {
		open[p.pid] = "not read"
	}
	_, err = eventually(ctx, crashSettle, 2*time.Second, func(ctx context.Context) error {
		for _, p := range payments {
			if _, todo := open[p.pid]; !todo {
				continue
			}
			r, err := s.inspect.read(ctx, p.pid)
			switch {
			case err != nil:
				open[p.pid] = err.Error()
			case !final(r.Payment.State):
				open[p.pid] = r.Payment.State
			case len(r.pushIntents()) == 0:
				open[p.pid] = r.Payment.State + " with no push intent"
			case len(r.open()) > 0:
				open[p.pid] = strings.Join(r.open(), ", ")
			default:
				reports[p.pid] = r
				delete(open, p.pid)
			}
		}
		if len(open) > 0 {
			return fmt.Errorf("%w: %d payments not settled", errNotYet, len(open))
		}
		return nil
	})
	settled := time.Since(settleStart).Round(time.Second)
	unlock.Do(killing.Unlock)
	t.Logf("settled %d of %d payments %s after the load", len(reports), crashPayments, settled)
	// `make test` shows only lines starting "SUMMARY " (scripts/testsummary.sh):
	// the kill counts are what the run's verdict rests on.
	fmt.Printf("SUMMARY crash run: %s; %d payments by %d clients in %s, %d settled %s after the load\n",
		killLine, crashPayments, crashClients, load.Round(time.Second), len(reports), settled)
	if err != nil {
		for pid, why := range open {
			t.Errorf("stuck after %s: %s: %s", crashSettle, pid, why)
		}
	}

	pids := make([]string, len(payments))
	for i, p := range payments {
		pids[i] = p.pid
	}
	charges, err := s.psp.charges(ctx, pids...)
	if err != nil {
		t.Fatalf("charges: %v", err)
	}
	// The pushes of a settled payment are on their way (or in): give the
	// last ones the issue's bound.
	time.Sleep(issuePushBound)
	delta := map[string]int64{}
	wantDelta := map[string]int64{}
	alerts := map[int]int{}
	for _, p := range payments {
		r, settled := reports[p.pid]
		ch := charges[p.pid]
		if len(ch) > 1 {
			t.Errorf("%s charged %d times: %+v", p.pid, len(ch), ch)
		}
		for _, a := range p.answers {
			if a.Status == http.StatusCreated && p.decline || a.Status == http.StatusPaymentRequired && !p.decline {
				t.Errorf("%s (decline=%v) answered %v", p.pid, p.decline, a)
			}
		}
		if !settled {
			continue
		}
		wantState := "SUCCEEDED"
		if p.decline {
			wantState = "FAILED"
		}
		if r.Payment.State != wantState {
			t.Errorf("%s is %s, want %s", p.pid, r.Payment.State, wantState)
			continue
		}
		delta[p.who.merchant] += r.credited()
		pushes := s.pushes.of(p.pid)
		// Its intent is SENT now: nothing may push it again (the suite
		// looks again at the end).
		s.pushes.settled(p.pid, len(pushes))
		alerts[len(pushes)]++
		if len(pushes) == 0 {
			t.Errorf("%s %s: no push reached the suite's queue", p.pid, r.Payment.State)
		}
		for _, pu := range pushes {
			if pu.ReplaceID != p.pid || pu.State != wantState {
				t.Errorf("%s: push %+v, want replace id %s, state %s", p.pid, pu.Data, p.pid, wantState)
			}
		}
		if got := r.pushIntents(); len(got) != 1 || got[0] != "SENT" {
			t.Errorf("%s: push intents %v, want one SENT", p.pid, got)
		}
		if wantState == "FAILED" {
			if len(ch) != 0 || len(r.Credits) != 0 {
				t.Errorf("%s declined: %d charges, credits %+v; want none", p.pid, len(ch), r.Credits)
			}
			continue
		}
		wantDelta[p.who.merchant] += p.body.Amount
		if len(ch) != 1 || r.Payment.PSPCharge == nil || ch[0].ID != *r.Payment.PSPCharge {
			t.Errorf("%s SUCCEEDED: the PSP holds %+v, the ledger names %v", p.pid, ch, r.Payment.PSPCharge)
		}
		if len(r.Credits) != 1 || r.Credits[0].Amount != p.body.Amount {
			t.Errorf("%s SUCCEEDED: credits %+v, want exactly one of %d", p.pid, r.Credits, p.body.Amount)
		}
	}
	for _, w := range who {
		if delta[w.merchant] != wantDelta[w.merchant] {
			t.Errorf("merchant %s's balance moved by %d, its SUCCEEDED payments sum to %d", w.merchant, delta[w.merchant], wantDelta[w.merchant])
		}
	}
	t.Logf("pushes per payment (count: payments): %v; a worker killed between its push and SENT pushes again under the same replace id", alerts)
}

// payThroughCrashes sends p until it gets an answer that stands (201, 402,
// or 202 for the resolver to finish), as a client with a journal does:
// the same key after a 5xx (an api environment killed under it), a 409
// (another send holds the key, or a killed one's lease has not run out)
// or a dropped connection.
func (s *surface) payThroughCrashes(ctx context.Context, p *crashPayment) error {
	deadline := time.Now().Add(3 * time.Minute)
	var last error
	for wait := 200 * time.Millisecond; time.Now().Before(deadline); wait = min(2*wait, 3*time.Second) {
		a, err := s.pay(ctx, p.who.caller, p.key, p.body)
		switch {
		case err != nil:
			last = err
		case a.Status == http.StatusCreated || a.Status == http.StatusPaymentRequired || a.Status == http.StatusAccepted:
			p.heard(a)
			return nil
		case a.Status == http.StatusConflict || a.Status >= 500:
			last = fmt.Errorf("answer %v", a)
		default:
			return fmt.Errorf("answer %v", a)
		}
		time.Sleep(wait + time.Duration(rand.IntN(200))*time.Millisecond)
	}
	return errors.Join(errors.New("no answer that stands within 3 minutes"), last)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
