package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/lambdarun"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
)

// Lambda builds ./lambdas/<fn> exactly as `make lambdas` does (same tags
// and flags; the host's architecture instead of arm64), starts it under
// aws-lambda-rie with env, and returns a function that invokes it.
func Lambda(t testing.TB, fn string, env []string) func(event any) []byte {
	t.Helper()
	fl := StartLambda(t, BuildLambda(t, fn), env)
	return func(event any) []byte {
		t.Helper()
		b, err := fl.Invoke(event, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// RIE is aws-lambda-rie from make setup; missing, the test skips outside CI
// and fails in it.
func RIE(t testing.TB) string {
	t.Helper()
	root, err := localenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	rie := filepath.Join(root, ".local", "bin", "aws-lambda-rie")
	if _, err := os.Stat(rie); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("aws-lambda-rie missing (make setup): %v", err)
		}
		t.Skip("aws-lambda-rie missing: run make setup")
	}
	return rie
}

// BuildLambda builds ./lambdas/<fn> with the Makefile's tags and flags for
// the host's architecture (the emulator runs it here) and returns the
// bootstrap's path.
func BuildLambda(t testing.TB, fn string) string {
	t.Helper()
	root, err := localenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	mk, err := lambdarun.MakefileLambdaBuild(root)
	if err != nil {
		t.Fatal(err)
	}
	return BuildLambdaWith(t, fn, mk)
}

// BuildLambdaWith is BuildLambda with the given build instead of the
// Makefile's (a variant of it: a benchmark comparing flags).
func BuildLambdaWith(t testing.TB, fn string, mk lambdarun.LambdaBuild) string {
	t.Helper()
	root, err := localenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "bootstrap")
	if err := mk.Build(root, fn, out, lambdarun.HostArch()); err != nil {
		t.Fatal(err)
	}
	return out
}

// RunningLambda is a bootstrap under aws-lambda-rie: one execution
// environment of the function runner (lambdarun.Process), stopped when the
// test ends.
type RunningLambda struct {
	Started time.Time // when the emulator process was started
	proc    *lambdarun.Process
	logs    *syncBuffer
	boot    int // the bootstrap's pid, once CPU found it
}

// StartLambda starts bootstrap under aws-lambda-rie with env (after test
// credentials and the host's PATH). The emulator starts the bootstrap on the
// first invocation, as Lambda does on a cold start; it is stopped when the
// test ends (or by Stop).
func StartLambda(t testing.TB, bootstrap string, env []string) *RunningLambda {
	t.Helper()
	logs := &syncBuffer{}
	proc, err := lambdarun.StartProcess(lambdarun.ProcessConfig{
		Function:  bootstrap,
		RIE:       RIE(t),
		Bootstrap: bootstrap,
		Env:       append([]string{"PATH=" + os.Getenv("PATH"), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test"}, env...),
		Output:    logs,
	})
	if err != nil {
		t.Fatalf("%v\nlogs:\n%s", err, logs.String())
	}
	fl := &RunningLambda{Started: proc.Started, proc: proc, logs: logs}
	t.Cleanup(fl.Stop)
	return fl
}

// Stop kills the emulator and its bootstrap.
func (fl *RunningLambda) Stop() { fl.proc.Stop() }

// Invoke sends event and returns the function's response payload; a
// handler's error is a *invoke.FunctionError.
func (fl *RunningLambda) Invoke(event any, patience time.Duration) ([]byte, error) {
	payload, err := json.Marshal(event)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	b, err := fl.proc.Invoke(ctx, payload)
	if err != nil && !errors.Is(err, context.Canceled) {
		return nil, fmt.Errorf("%w\nlogs:\n%s", err, fl.logs.String())
	}
	return b, err
}

// syncBuffer is the emulator's output, written by exec's copying goroutine
// and read by a failing test.
type syncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// CPU is the CPU time the function's bootstrap has used so far, every
// thread summed, from the kernel's per-task schedstat (nanoseconds, not the
// 10 ms ticks of /proc/<pid>/stat): the process's own cost, apart from the
// emulator's and the caller's. It is an error before the first invocation
// started the bootstrap. Linux only.
func (fl *RunningLambda) CPU() (time.Duration, error) {
	// The bootstrap lives as long as its environment: find it once, and
	// again only when it is gone (a restarted environment), not by
	// reading every process's stat around each invocation.
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", fl.boot)); fl.boot == 0 || err != nil {
		pid, err := childOf(fl.proc.PID)
		if err != nil {
			return 0, err
		}
		fl.boot = pid
	}
	pid := fl.boot
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("bootstrap %d: no task schedstat (%v)", pid, err)
	}
	var sum int64
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that exited since the glob
		}
		fields := strings.Fields(string(b))
		if len(fields) == 0 {
			return 0, fmt.Errorf("%s: empty", f)
		}
		ns, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", f, err)
		}
		sum += ns
	}
	return time.Duration(sum), nil
}

// childOf is the one child of process ppid: the emulator's bootstrap (which
// the emulator starts in a process group of its own).
func childOf(ppid int) (int, error) {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return 0, fmt.Errorf("list processes: %w", err)
	}
	found := 0
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // gone since the glob
		}
		// pid (comm) state ppid ...: comm may hold spaces and parens.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 || fields[1] != strconv.Itoa(ppid) {
			continue
		}
		pid, err := strconv.Atoi(strings.Fields(s[:i])[0])
		if err != nil {
			continue
		}
		if found != 0 {
			return 0, fmt.Errorf("process %d has more than one child (%d, %d)", ppid, found, pid)
		}
		found = pid
	}
	if found == 0 {
		return 0, fmt.Errorf("process %d: no bootstrap running", ppid)
	}
	return found, nil
}
