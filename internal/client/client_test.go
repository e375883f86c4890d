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

	"github.com/oncepay/oncepay/internal/apitest"
	"github.com/oncepay/oncepay/internal/client"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/localenv"
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

// 1,000 randomized runs with dropped replies, dropped requests, replies later
// than the client's timeout and restarts: never two charges for one intent,
// never a new key while the old one is unresolved.
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
	faults := func(next http.Handler) http.Handler {
		lose := dropper("/", 1<<30)(next)
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
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
	tok := w.Token(t, "u1")
	j := openJournal(t)
	for run := range runs {
		p := order42
		p.OrderID = fmt.Sprintf("o%d", run)
		var keys []string
		for attempt := 0; ; attempt++ {
			if attempt > 50 {
				t.Fatalf("run %d: no final answer after 50 tries (keys %v)", run, keys)
			}
			c := client.New(client.Config{BaseURL: door.URL, Token: tok, Timeout: timing.ClientTimeout, Attempts: 3, ResolvePolls: 3,
				HTTP:  &http.Client{Timeout: timing.ClientTimeout, Transport: &http.Transport{DisableKeepAlives: true}},
				Sleep: func(context.Context, time.Duration) error { return nil }}, j)
			ctx, cancel := context.WithCancel(context.Background())
			if chance(0.05) { // the app is killed mid-flight and restarts
				time.AfterFunc(time.Duration(rng.IntN(20))*time.Millisecond, cancel)
			}
			r, err := c.Pay(ctx, p)
			cancel()
			if err != nil {
				t.Fatalf("run %d: %v", run, err)
			}
			if len(keys) == 0 || keys[len(keys)-1] != r.Key {
				keys = append(keys, r.Key)
			}
			if r.State == client.Succeeded {
				break
			}
			if r.State == client.Unknown {
				time.Sleep(timing.Deadline + timing.Margin) // past the owner's deadline: the resolver's to settle
				if _, err := settle.Run(context.Background()); err != nil {
					t.Fatalf("run %d: resolver: %v", run, err)
				}
			}
		}
		// Every key but the last was voided by the server before the next was made.
		for _, k := range keys[:len(keys)-1] {
			var state string
			if err := w.Pool.QueryRow(context.Background(), `SELECT state FROM payments WHERE caller_id = 'u1' AND client_key = $1`, k).Scan(&state); err != nil || state != "VOID" {
				t.Fatalf("run %d: key %s was replaced while %q (err %v)", run, k, state, err)
			}
		}
		if got := chargesFor(w, "u1", keys[len(keys)-1]); got != 1 {
			t.Fatalf("run %d: %d charges for the intent", run, got)
		}
	}
	if got, want := len(w.Charges()), runs; got != want {
		t.Fatalf("%d charges for %d paid orders", got, want)
	}
	voided := w.Scalar(t, `SELECT count(*) FROM payments WHERE state = 'VOID'`)
	t.Logf("%d runs: %d charges, %d keys voided and replaced", runs, len(w.Charges()), voided)
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
