package client_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/internal/client"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
)

var order42 = client.Payment{MerchantID: "m1", OrderID: "42", Amount: 3000, Currency: "USD", PaymentMethod: "pm_card_visa"}

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

func buildCLI(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		root, err := localenv.Root()
		if err != nil {
			cliErr = err
			return
		}
		dir, err := os.MkdirTemp("", "oncepay-cli")
		if err != nil {
			cliErr = err
			return
		}
		cliPath = filepath.Join(dir, "oncepay")
		cmd := exec.Command("go", "build", "-o", cliPath, "./cmd/oncepay")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			cliErr = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return cliPath
}

func chargesFor(w *apitest.World, caller, key string) int {
	n := 0
	want := ids.ChargeKey(ids.PaymentID(ids.Scope(caller, key)))
	for _, c := range w.Charges() {
		if c.IdempotencyKey == want {
			n++
		}
	}
	return n
}

// kill -9 of the CLI at each journal write: right after the tap's intent
// is written (before the first send), right after a reply arrived (before
// it is journaled), right after the outcome is written. The journal opens
// cleanly, the key survives, and the next run resumes that intent with that
// key (or answers from the journal): one charge, one payment row.
func TestKillNineResumesTheSameIntentWithTheSameKey(t *testing.T) {
	for _, point := range []string{"after-journal", "after-send", "after-final"} {
		t.Run(point, func(t *testing.T) {
			cli := buildCLI(t)
			w := apitest.New(t, config.Timing{})
			door := w.Door(t, nil)
			journal := filepath.Join(t.TempDir(), "journal")
			args := []string{"pay", "--order", "42", "--amount", "3000", "--url", door.URL, "--token", w.Token(t, "u1"), "--journal", journal, "--json"}

			first := exec.Command(cli, args...)
			first.Env = append(os.Environ(), "ONCEPAY_CLIENT_CRASH="+point)
			err := first.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the first run was not killed: %v", err)
			}
			j := openJournalAt(t, journal)
			in, err := intentFor(j, door.URL, "u1", "42")
			j.Close()
			wantState, wantCharges := client.Open, 1
			switch point {
			case "after-journal":
				wantCharges = 0
			case "after-final":
				wantState = client.Final
			}
			if err != nil || in.State != wantState {
				t.Fatalf("journal after the kill: %+v %v, want %s", in, err, wantState)
			}
			if got := chargesFor(w, "u1", in.Key); got != wantCharges {
				t.Fatalf("charges after the kill = %d, want %d", got, wantCharges)
			}

			out, err := exec.Command(cli, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("second run: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), `"state":"SUCCEEDED"`) || !strings.Contains(string(out), in.Key) {
				t.Fatalf("second run printed %s, want SUCCEEDED with key %s", out, in.Key)
			}
			if got := chargesFor(w, "u1", in.Key); got != 1 {
				t.Fatalf("charges = %d, want 1", got)
			}
			if n := w.Scalar(t, `SELECT count(*) FROM payments`); n != 1 {
				t.Fatalf("payments = %d: a second key was used", n)
			}
		})
	}
}

// dropper runs the real front door but throws the reply away for the first
// n requests whose path has prefix: the server acted, the client hears nothing.
func dropper(prefix string, n int32) func(http.Handler) http.Handler {
	var left atomic.Int32
	left.Store(n)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if !strings.HasPrefix(r.URL.Path, prefix) || left.Add(-1) < 0 {
				next.ServeHTTP(rw, r)
				return
			}
			next.ServeHTTP(httptest.NewRecorder(), r) // the work happens
			if hj, ok := rw.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close() // the reply is lost
				}
			}
		})
	}
}

func fastClient(door string, tok string, j *client.Journal) *client.Client {
	return client.New(client.Config{BaseURL: door, Token: tok, Timeout: 2 * time.Second,
		HTTP:  &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
		Sleep: func(context.Context, time.Duration) error { return nil }}, j)
}

func TestDroppedRepliesAreRetriedWithTheSameKeyAndResolved(t *testing.T) {
	for _, tc := range []struct {
		name  string
		drops int32
	}{{"two replies lost", 2}, {"every send's reply lost, then resolved", 4}} {
		t.Run(tc.name, func(t *testing.T) {
			w := apitest.New(t, config.Timing{})
			door := w.Door(t, dropper("/payments", tc.drops))
			j := openJournal(t)
			r, err := fastClient(door.URL, w.Token(t, "u1"), j).Pay(context.Background(), order42)
			if err != nil || r.State != client.Succeeded {
				t.Fatalf("result = %+v, %v", r, err)
			}
			if got := chargesFor(w, "u1", r.Key); got != 1 || len(w.Charges()) != 1 {
				t.Fatalf("charges = %d (all: %d), want 1", got, len(w.Charges()))
			}
			if n := w.Scalar(t, `SELECT count(*) FROM payments`); n != 1 {
				t.Fatalf("payments = %d", n)
			}
		})
	}
}

// refusals are what a retry can hear from something other than the API's
// final answer: refusals, and 2xx/3xx the API never sends to POST /payments.
var refusals = []int{400, 403, 404, 405, 408, 413, 422, 200, 204, 302, 307}

// 1,000 randomized runs with dropped replies, dropped requests, replies later
// than the client's timeout and restarts; a retry answered with a refusal
// (a 4xx, or a 2xx/3xx the API never sends) after an unknown send; deploys
// that bump the fingerprint version (and roll it back) under live
// requests; two taps at once; two callers paying the same order ids on one
// journal. Never two charges for one order of one caller, never a new key
// while the old one is unresolved.
func TestRandomizedRunsNeverChargeTwiceNorRekeyAnUnresolvedIntent(t *testing.T) {
	runs := 1000
	if testing.Short() {
		runs = 100
	}
	timing := config.Timing{Deadline: 150 * time.Millisecond, Margin: 50 * time.Millisecond, ClientTimeout: 400 * time.Millisecond, KeyWindow: time.Hour}
	w := apitest.New(t, timing)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 42))
	var mu sync.Mutex
	chance := func(p float64) bool { mu.Lock(); defer mu.Unlock(); return rng.Float64() < p }
	pick := func(n int) int { mu.Lock(); defer mu.Unlock(); return rng.IntN(n) }
	var (
		sent                = sync.Map{} // Idempotency-Keys the front door has seen: a send with one is a retry
		refused, deploys    atomic.Int32
		deployMu            sync.Mutex
		rollback            func()
		deployOrRollBackNow = func() {
			deployMu.Lock()
			defer deployMu.Unlock()
			if rollback == nil {
				rollback = payment.DeployNextVersion()
			} else {
				rollback()
				rollback = nil
			}
			deploys.Add(1)
		}
	)
	t.Cleanup(func() {
		if rollback != nil {
			rollback()
		}
	})
	faults := func(next http.Handler) http.Handler {
		lose := dropper("/", 1<<30)(next)
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if chance(0.02) { // a deploy lands while requests are in flight
				deployOrRollBackNow()
			}
			if k := r.Header.Get("Idempotency-Key"); k != "" {
				if _, retry := sent.LoadOrStore(k, true); retry && chance(0.40) {
					// The retry of a send whose outcome the app does not know
					// is answered by something else: a question, not an answer.
					refused.Add(1)
					status := refusals[pick(len(refusals))]
					if status >= 300 && status < 400 {
						rw.Header().Set("Location", "/elsewhere")
					}
					rw.WriteHeader(status)
					return
				}
			}
			if strings.HasSuffix(r.URL.Path, "/resolve") && chance(0.05) {
				// The resolve call refused too: still a question.
				refused.Add(1)
				rw.WriteHeader(refusals[pick(len(refusals))])
				return
			}
			switch {
			case chance(0.10): // the request never arrives
				if hj, ok := rw.(http.Hijacker); ok {
					if c, _, err := hj.Hijack(); err == nil {
						c.Close()
						return
					}
				}
			case chance(0.15): // the reply is lost
				lose.ServeHTTP(rw, r)
				return
			case chance(0.03): // the request arrives after the client gave up
				time.Sleep(timing.ClientTimeout + 50*time.Millisecond)
			}
			next.ServeHTTP(rw, r)
		})
	}
	door := w.Door(t, faults)
	settle := w.Resolver(t) // the schedule's resolver: it settles what lost replies leave UNKNOWN
	tokens := map[string]string{"u1": w.Token(t, "u1"), "u2": w.Token(t, "u2")}
	j := openJournal(t)
	newClient := func(caller string) *client.Client {
		return client.New(client.Config{BaseURL: door.URL, Token: tokens[caller], Timeout: timing.ClientTimeout, Attempts: 3, ResolvePolls: 3,
			HTTP:  &http.Client{Timeout: timing.ClientTimeout, Transport: &http.Transport{DisableKeepAlives: true}},
			Sleep: func(context.Context, time.Duration) error { return nil }}, j)
	}
	paid, doubleTaps := 0, 0
	for run := range runs {
		p := order42
		p.OrderID = fmt.Sprintf("o%d", run)
		callers := []string{"u1"}
		if chance(0.3) { // the other account on this device buys the same order id
			callers = append(callers, "u2")
		}
		if pick(2) == 0 {
			callers[0] = "u2"
			if len(callers) == 2 {
				callers[1] = "u1"
			}
		}
		for _, caller := range callers {
			keys := map[string]bool{}
			won := ""
			for attempt := 0; won == ""; attempt++ {
				if attempt > 50 {
					t.Fatalf("run %d, %s: no final answer after 50 tries (keys %v)", run, caller, keys)
				}
				ctx, cancel := context.WithCancel(context.Background())
				if chance(0.05) { // the app is killed mid-flight and restarts
					time.AfterFunc(time.Duration(pick(20))*time.Millisecond, cancel)
				}
				taps := 1
				if chance(0.10) { // two taps at once
					taps = 2
					doubleTaps++
				}
				results := make([]client.Result, taps)
				errs := make([]error, taps)
				var wg sync.WaitGroup
				for i := range taps {
					wg.Go(func() { results[i], errs[i] = newClient(caller).Pay(ctx, p) })
				}
				wg.Wait()
				cancel()
				unknown := false
				for i, r := range results {
					if errs[i] != nil {
						t.Fatalf("run %d, %s: %v", run, caller, errs[i])
					}
					keys[r.Key] = true
					switch r.State {
					case client.Succeeded:
						if won != "" && won != r.Key {
							t.Fatalf("run %d, %s: two keys paid: %s and %s", run, caller, won, r.Key)
						}
						won = r.Key
					case client.Unknown:
						unknown = true
					}
				}
				if won == "" && unknown {
					time.Sleep(timing.Deadline + timing.Margin) // past the owner's deadline: the resolver's to settle
					if _, err := settle.Run(context.Background()); err != nil {
						t.Fatalf("run %d: resolver: %v", run, err)
					}
				}
			}
			// Every other key was voided by the server before the next was
			// made, and never charged; the paid key was charged once.
			for k := range keys {
				if k == won {
					continue
				}
				var state string
				if err := w.Pool.QueryRow(context.Background(), `SELECT state FROM payments WHERE caller_id = $1 AND client_key = $2`, caller, k).Scan(&state); err != nil || state != "VOID" {
					t.Fatalf("run %d, %s: key %s was replaced while %q (err %v)", run, caller, k, state, err)
				}
				if got := chargesFor(w, caller, k); got != 0 {
					t.Fatalf("run %d, %s: replaced key %s was charged %d times", run, caller, k, got)
				}
			}
			if got := chargesFor(w, caller, won); got != 1 {
				t.Fatalf("run %d, %s: %d charges for the order", run, caller, got)
			}
			paid++
		}
	}
	if got := len(w.Charges()); got != paid {
		t.Fatalf("%d charges for %d paid orders", got, paid)
	}
	voided := w.Scalar(t, `SELECT count(*) FROM payments WHERE state = 'VOID'`)
	t.Logf("%d runs, %d orders paid: %d charges, %d keys voided and replaced, %d retries refused, %d deploys and rollbacks, %d double taps",
		runs, paid, len(w.Charges()), voided, refused.Load(), deploys.Load(), doubleTaps)
	if refused.Load() == 0 || deploys.Load() == 0 || doubleTaps == 0 {
		t.Fatal("a fault never happened: the run proves less than it says")
	}
}

func TestBackoffIsFullJitterUnderTheCap(t *testing.T) {
	base, limit := 100*time.Millisecond, time.Second
	for attempt := range 12 {
		ceil := min(limit, base<<attempt)
		for range 200 {
			if d := client.Backoff(attempt, base, limit); d < 0 || d >= ceil {
				t.Fatalf("attempt %d: %s outside [0, %s)", attempt, d, ceil)
			}
		}
	}
}
