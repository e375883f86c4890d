package lambdarun_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/invoke"
)

func functionError(t *testing.T, err error, typ string) *invoke.FunctionError {
	t.Helper()
	var fe *invoke.FunctionError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, want a *invoke.FunctionError %s", err, typ)
	}
	if fe.Type != typ {
		t.Fatalf("error type = %q (%s), want %q", fe.Type, fe.Message, typ)
	}
	return fe
}

// The first invocation starts an environment (a cold start); the second is
// served warm by the same processes, with the template's environment and
// the runtime's variables, and the function's timeout as its deadline.
func TestColdStartThenWarmReuse(t *testing.T) {
	f := probeFunction(t, 2, 5*time.Second)
	r := newRunner(t, f)
	if s := status(t, r, "ProbeFunction"); len(s.Environments) != 0 {
		t.Fatalf("environments before any invocation: %+v", s.Environments)
	}
	first := mustProbe(t, r, probeEvent{Getenv: "ONCEPAY_PROBE"})
	cold := status(t, r, "ProbeFunction")
	if len(cold.Environments) != 1 || cold.Environments[0].Served != 1 || cold.Environments[0].Busy {
		t.Fatalf("after the cold start: %+v", cold)
	}
	second := mustProbe(t, r, probeEvent{Getenv: "AWS_LAMBDA_FUNCTION_NAME"})
	warm := status(t, r, "ProbeFunction")
	if second.PID != first.PID {
		t.Errorf("the warm call ran in bootstrap %d, the cold one in %d", second.PID, first.PID)
	}
	if len(warm.Environments) != 1 || warm.Environments[0].PID != cold.Environments[0].PID || warm.Environments[0].Served != 2 || warm.Invocations != 2 {
		t.Errorf("after the warm call: %+v (cold %+v)", warm, cold)
	}
	if first.Getenv != "from-the-template" || second.Getenv != "ProbeFunction" {
		t.Errorf("environment: ONCEPAY_PROBE=%q AWS_LAMBDA_FUNCTION_NAME=%q", first.Getenv, second.Getenv)
	}
	if second.DeadlineMS <= 3000 || second.DeadlineMS > 5000 {
		t.Errorf("the handler's deadline is %d ms away, want the 5 s timeout", second.DeadlineMS)
	}
	// The function's log: the runner's line, the emulator's, the handler's.
	if b, err := os.ReadFile(f.Log); err != nil || !strings.Contains(string(b), `"msg":"environment started"`) || !strings.Contains(string(b), "START RequestId") {
		t.Errorf("the function's log lacks the start and the invocation: %v\n%s", err, b)
	}
}

// MaxEnvironments+1 concurrent slow invocations: MaxEnvironments
// environments serve them, the one left over is throttled at once.
func TestConcurrencyPastMaxEnvironmentsIsThrottled(t *testing.T) {
	const maxEnvs = 2
	r := newRunner(t, probeFunction(t, maxEnvs, 10*time.Second))
	var wg sync.WaitGroup
	answers := make([]probeAnswer, maxEnvs+1)
	errs := make([]error, maxEnvs+1)
	took := make([]time.Duration, maxEnvs+1)
	for i := range maxEnvs + 1 {
		wg.Go(func() {
			start := time.Now()
			answers[i], errs[i] = callProbe(r, probeEvent{SleepMS: 3000})
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	pids := map[int]bool{}
	throttled := 0
	for i, err := range errs {
		switch {
		case errors.Is(err, invoke.ErrThrottled):
			throttled++
			if took[i] > time.Second {
				t.Errorf("the throttled call took %s: it waited instead of answering at once", took[i])
			}
		case err != nil:
			t.Errorf("call %d: %v", i, err)
		default:
			pids[answers[i].PID] = true
		}
	}
	if throttled != 1 || len(pids) != maxEnvs {
		t.Errorf("throttled %d, served by %d bootstraps; want 1 and %d", throttled, len(pids), maxEnvs)
	}
	if s := status(t, r, "ProbeFunction"); len(s.Environments) != maxEnvs || s.Invocations != maxEnvs {
		t.Errorf("status %+v: want %d environments and invocations", s, maxEnvs)
	}
}

// Killed mid-invocation, the environment's whole process group dies (the
// emulator and the bootstrap), the invocation answers Runtime.ExitError,
// and the next invocation cold-starts another environment.
func TestKillMidInvocationAnswersExitErrorAndTheNextCallColdStarts(t *testing.T) {
	r := newRunner(t, probeFunction(t, 1, 10*time.Second))
	bootstrap := mustProbe(t, r, probeEvent{}).PID
	before := status(t, r, "ProbeFunction").Environments[0]
	errc := make(chan error, 1)
	go func() {
		_, err := callProbe(r, probeEvent{SleepMS: 8000})
		errc <- err
	}()
	waitBusy(t, r, "ProbeFunction", 1)
	if n, busy, err := r.Kill("ProbeFunction", 5); n != 1 || busy != 1 || err != nil {
		t.Fatalf("Kill = %d (%d busy), %v; want 1, busy", n, busy, err)
	}
	select {
	case err := <-errc:
		functionError(t, err, "Runtime.ExitError")
	case <-time.After(5 * time.Second):
		t.Fatal("the killed invocation did not answer")
	}
	// The whole environment dies with the kill, the bootstrap too (it
	// sleeps 8 s more if only the emulator is killed).
	waitDead(t, before.PID, 2*time.Second)
	waitDead(t, bootstrap, 2*time.Second)
	after := mustProbe(t, r, probeEvent{})
	s := status(t, r, "ProbeFunction")
	if after.PID == bootstrap || len(s.Environments) != 1 || s.Environments[0].PID == before.PID || s.Killed != 1 || s.KilledBusy != 1 {
		t.Errorf("after the kill: bootstrap %d (was %d), status %+v (was %+v)", after.PID, bootstrap, s, before)
	}
}

// Kill takes busy environments first: with one busy and one idle, killing
// one kills the busy one.
func TestKillTakesBusyEnvironmentsFirst(t *testing.T) {
	r := newRunner(t, probeFunction(t, 2, 10*time.Second))
	errc := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := callProbe(r, probeEvent{SleepMS: 1500})
			errc <- err
		}()
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		_, err := callProbe(r, probeEvent{SleepMS: 8000})
		errc <- err
	}()
	s := waitBusy(t, r, "ProbeFunction", 1)
	var busy, idle int
	for _, e := range s.Environments {
		if e.Busy {
			busy = e.PID
		} else {
			idle = e.PID
		}
	}
	if n, b, _ := r.Kill("ProbeFunction", 1); n != 1 || b != 1 {
		t.Fatalf("Kill = %d (%d busy); want 1, busy", n, b)
	}
	functionError(t, <-errc, "Runtime.ExitError")
	waitDead(t, busy, 2*time.Second)
	if left := status(t, r, "ProbeFunction").Environments; len(left) != 1 || left[0].PID != idle {
		t.Errorf("left %+v; want only the idle %d (busy was %d)", left, idle, busy)
	}
	if _, _, err := r.Kill("NoSuchFunction", 1); !errors.Is(err, invoke.ErrUnknownFunction) {
		t.Errorf("Kill of an unknown function: %v", err)
	}
}

// An aimed kill waits for the next invocation and kills its environment
// while it runs: the invocation answers Runtime.ExitError, the kill counts
// busy, and the next call cold-starts. An aim whose wait ends first kills
// nothing, then or later.
func TestKillInFlightKillsTheNextInvocationMidRun(t *testing.T) {
	r := newRunner(t, probeFunction(t, 1, 10*time.Second))
	if n, b, err := r.KillInFlight(context.Background(), "ProbeFunction", 100*time.Millisecond); n != 0 || b != 0 || err != nil {
		t.Fatalf("an aim with no invocation = %d (%d busy), %v; want nothing", n, b, err)
	}
	pid := mustProbe(t, r, probeEvent{SleepMS: 100}).PID // not killed by the lapsed aim
	type result struct{ n, b int }
	aimed := make(chan result, 1)
	go func() {
		n, b, _ := r.KillInFlight(context.Background(), "ProbeFunction", 10*time.Second)
		aimed <- result{n, b}
	}()
	// The aim is registered before the call only eventually: keep calling
	// until one is killed (each call sleeps 200 ms, far past the aim's delay).
	var err error
	for range 20 {
		if _, err = callProbe(r, probeEvent{SleepMS: 200}); err != nil {
			break
		}
	}
	functionError(t, err, "Runtime.ExitError")
	if got := <-aimed; got.n != 1 || got.b != 1 {
		t.Fatalf("KillInFlight = %d (%d busy); want 1, busy", got.n, got.b)
	}
	waitDead(t, pid, 2*time.Second)
	if s := status(t, r, "ProbeFunction"); s.Killed != 1 || s.KilledBusy != 1 {
		t.Errorf("status killed %d (busy %d); want 1 (busy 1)", s.Killed, s.KilledBusy)
	}
	if again := mustProbe(t, r, probeEvent{}).PID; again == pid {
		t.Errorf("after the aimed kill the function ran in the killed bootstrap %d", pid)
	}
	if _, _, err := r.KillInFlight(context.Background(), "NoSuchFunction", time.Millisecond); !errors.Is(err, invoke.ErrUnknownFunction) {
		t.Errorf("KillInFlight of an unknown function: %v", err)
	}
}

// An aimed kill spares a cold environment's first invocation (it would die
// in the runtime's init, before any handler code) and takes the next one,
// and an aim whose caller goes away is disarmed.
func TestKillInFlightTakesAWarmEnvironmentOnlyAndEndsWithItsContext(t *testing.T) {
	r := newRunner(t, probeFunction(t, 1, 10*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		_, _, _ = r.KillInFlight(ctx, "ProbeFunction", 10*time.Second)
	}()
	time.Sleep(50 * time.Millisecond) // the aim is armed
	cancel()
	<-gone
	mustProbe(t, r, probeEvent{SleepMS: 100}) // cold, then warm: the disarmed aim kills neither
	mustProbe(t, r, probeEvent{SleepMS: 100})
	if s := status(t, r, "ProbeFunction"); s.Killed != 0 {
		t.Fatalf("a disarmed aim killed %d environments", s.Killed)
	}

	r = newRunner(t, probeFunction(t, 1, 10*time.Second))
	aimed := make(chan int, 1)
	go func() {
		n, _, _ := r.KillInFlight(context.Background(), "ProbeFunction", 10*time.Second)
		aimed <- n
	}()
	time.Sleep(50 * time.Millisecond)
	mustProbe(t, r, probeEvent{SleepMS: 200}) // the cold start is spared
	_, err := callProbe(r, probeEvent{SleepMS: 200})
	functionError(t, err, "Runtime.ExitError")
	if n := <-aimed; n != 1 {
		t.Fatalf("KillInFlight = %d, want 1", n)
	}
}

// Killing an idle warm environment crashes no invocation: Kill says so
// (busy 0), and only a kill mid-invocation counts as busy, in its answer
// and in the status.
func TestKillOfAnIdleEnvironmentIsNotCountedBusy(t *testing.T) {
	r := newRunner(t, probeFunction(t, 2, 10*time.Second))
	mustProbe(t, r, probeEvent{})
	if n, busy, err := r.Kill("ProbeFunction", 1); n != 1 || busy != 0 || err != nil {
		t.Fatalf("Kill of the idle one = %d (%d busy), %v; want 1, 0 busy", n, busy, err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := callProbe(r, probeEvent{SleepMS: 8000})
		errc <- err
	}()
	waitBusy(t, r, "ProbeFunction", 1)
	if n, busy, err := r.Kill("ProbeFunction", 1); n != 1 || busy != 1 || err != nil {
		t.Fatalf("Kill mid-invocation = %d (%d busy), %v; want 1, 1 busy", n, busy, err)
	}
	functionError(t, <-errc, "Runtime.ExitError")
	if s := status(t, r, "ProbeFunction"); s.Killed != 2 || s.KilledBusy != 1 {
		t.Errorf("status killed %d (busy %d); want 2 (busy 1)", s.Killed, s.KilledBusy)
	}
}

// A handler's error comes back as a FunctionError carrying its errorType
// and errorMessage (aws-lambda-rie answers 200 with the error document and
// no header), and the environment stays warm.
func TestHandlerErrorIsAFunctionErrorAndTheEnvironmentStaysWarm(t *testing.T) {
	r := newRunner(t, probeFunction(t, 1, 5*time.Second))
	pid := mustProbe(t, r, probeEvent{}).PID
	_, err := callProbe(r, probeEvent{Fail: "card declined by the probe"})
	fe := functionError(t, err, "probeError")
	if fe.Message != "card declined by the probe" || fe.Function != "ProbeFunction" {
		t.Errorf("error = %+v", fe)
	}
	if again := mustProbe(t, r, probeEvent{}).PID; again != pid {
		t.Errorf("after a handler error the function ran in bootstrap %d, before in %d", again, pid)
	}
}

// Lambda's payload limits hold locally: a request over 6 MB is refused
// before anything runs (RequestEntityTooLargeException, enforced by the
// runner), and an answer over its limit (6 MB + 100 bytes, enforced by
// aws-lambda-rie as by Lambda's runtime API, whose 413 makes the Go runtime
// exit) is a Function.ResponseSizeTooLarge error.
func TestPayloadsOverLambdasLimitsAreRefusedAsLambdaRefusesThem(t *testing.T) {
	const maxResponse = 6<<20 + 100
	r := newRunner(t, probeFunction(t, 1, 10*time.Second))
	mustProbe(t, r, probeEvent{})
	served := status(t, r, "ProbeFunction").Environments[0].Served
	big := []byte(`{"getenv":"` + strings.Repeat("x", invoke.MaxRequestPayload) + `"}`)
	if _, err := r.Invoke(context.Background(), "ProbeFunction", big); !errors.Is(err, invoke.ErrPayloadTooLarge) {
		t.Fatalf("a %d-byte request: err = %v, want ErrPayloadTooLarge", len(big), err)
	}
	if s := status(t, r, "ProbeFunction").Environments[0].Served; s != served {
		t.Fatalf("the refused request was served (%d invocations, was %d)", s, served)
	}
	// At the limit the request passes.
	if _, err := r.Invoke(context.Background(), "ProbeFunction", []byte(`{"getenv":"`+strings.Repeat("x", invoke.MaxRequestPayload-14)+`"}`)); err != nil {
		t.Fatalf("a request at the limit: %v", err)
	}
	_, err := callProbe(r, probeEvent{PadBytes: maxResponse})
	functionError(t, err, "Function.ResponseSizeTooLarge")
	// Just under the limit passes: the answer's JSON around the pad is ~40 bytes.
	if _, err := callProbe(r, probeEvent{PadBytes: maxResponse - 100}); err != nil {
		t.Fatalf("an answer under the limit: %v", err)
	}
}

// A bootstrap that exits mid-invocation answers Runtime.ExitError, and its
// environment is replaced.
func TestBootstrapExitAnswersExitErrorAndReplacesTheEnvironment(t *testing.T) {
	r := newRunner(t, probeFunction(t, 1, 5*time.Second))
	mustProbe(t, r, probeEvent{})
	env := status(t, r, "ProbeFunction").Environments[0].PID
	_, err := callProbe(r, probeEvent{Exit: true})
	functionError(t, err, "Runtime.ExitError")
	waitDead(t, env, 5*time.Second)
	mustProbe(t, r, probeEvent{})
	if s := status(t, r, "ProbeFunction"); len(s.Environments) != 1 || s.Environments[0].PID == env {
		t.Errorf("after the exit: %+v (was environment %d)", s, env)
	}
}

// An environment killed from outside while idle leaves the pool, and the
// next invocation is served by a new one instead of failing.
func TestAnEnvironmentThatDiedIdleIsReplacedOnDemand(t *testing.T) {
	r := newRunner(t, probeFunction(t, 1, 5*time.Second))
	mustProbe(t, r, probeEvent{})
	env := status(t, r, "ProbeFunction").Environments[0].PID
	if err := syscall.Kill(-env, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitDead(t, env, 5*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for len(status(t, r, "ProbeFunction").Environments) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the dead environment is still listed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	mustProbe(t, r, probeEvent{})
	if s := status(t, r, "ProbeFunction"); len(s.Environments) != 1 || s.Environments[0].PID == env {
		t.Errorf("after the outside kill: %+v", s)
	}
}

// Past the function's timeout the invocation answers Sandbox.Timedout and
// the environment is replaced (Lambda restarts the runtime).
func TestTimeoutAnswersSandboxTimedoutAndReplacesTheEnvironment(t *testing.T) {
	r := newRunner(t, probeFunction(t, 1, time.Second))
	pid := mustProbe(t, r, probeEvent{}).PID
	env := status(t, r, "ProbeFunction").Environments[0].PID
	start := time.Now()
	_, err := callProbe(r, probeEvent{SleepMS: 4000})
	functionError(t, err, "Sandbox.Timedout")
	if took := time.Since(start); took > 3500*time.Millisecond {
		t.Errorf("the timed-out invocation answered after %s: the 1 s timeout did not end it", took)
	}
	if again := mustProbe(t, r, probeEvent{}).PID; again == pid {
		t.Errorf("after the timeout the same bootstrap %d served", pid)
	}
	// A new environment, not the emulator re-initialising its runtime.
	if s := status(t, r, "ProbeFunction"); len(s.Environments) != 1 || s.Environments[0].PID == env {
		t.Errorf("after the timeout: %+v (was environment %d)", s, env)
	}
}

// Unknown functions, and invocations after Close, are refused without
// running anything; Close stops every environment.
func TestCloseStopsEveryEnvironment(t *testing.T) {
	r := newRunner(t, probeFunction(t, 2, 5*time.Second))
	if _, err := r.Invoke(context.Background(), "NoSuchFunction", nil); !errors.Is(err, invoke.ErrUnknownFunction) {
		t.Errorf("unknown function: %v", err)
	}
	mustProbe(t, r, probeEvent{})
	pid := status(t, r, "ProbeFunction").Environments[0].PID
	r.Close()
	if alive(pid) {
		t.Errorf("environment %d alive after Close", pid)
	}
	if _, err := callProbe(r, probeEvent{}); err == nil {
		t.Error("an invocation after Close ran")
	}
}
