package lambdarun_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/invoke"
	"github.com/oncepay/oncepay/internal/localcloud/lambdarun"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// probePackage is a test-only function (testdata/probe) that reports its
// pid and environment, sleeps, fails or exits as its event asks.
const probePackage = "internal/localcloud/lambdarun/testdata/probe"

var (
	scratch   string
	probeOnce sync.Once
	probeBin  string
	probeErr  error
)

func TestMain(m *testing.M) {
	var err error
	scratch, err = os.MkdirTemp("", "lambdarun-test-")
	if err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(scratch)
	os.Exit(code)
}

func root(t testing.TB) string {
	t.Helper()
	r, err := localenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// probeBootstrap builds the probe once per test binary, with the Makefile's
// build, as the runner builds every function.
func probeBootstrap(t testing.TB) string {
	t.Helper()
	probeOnce.Do(func() {
		probeBin = filepath.Join(scratch, "probe", "bootstrap")
		_, probeErr = lambdarun.Build(context.Background(), root(t), []lambdarun.Function{
			{LogicalID: "ProbeFunction", Package: probePackage, Bootstrap: probeBin},
		})
	})
	if probeErr != nil {
		t.Fatal(probeErr)
	}
	return probeBin
}

// probeFunction is the probe as FromTemplate would describe it.
func probeFunction(t testing.TB, maxEnvs int, timeout time.Duration) lambdarun.Function {
	t.Helper()
	return lambdarun.Function{
		LogicalID:       "ProbeFunction",
		Name:            "ProbeFunction",
		Package:         probePackage,
		Bootstrap:       probeBootstrap(t),
		Log:             filepath.Join(t.TempDir(), "fn-probe.log"),
		Timeout:         timeout,
		MemoryMB:        128,
		Reserved:        -1,
		MaxEnvironments: maxEnvs,
		Env:             map[string]string{"ONCEPAY_PROBE": "from-the-template"},
	}
}

// newRunner runs fns under the installed aws-lambda-rie (testenv's CI rule:
// missing, the test skips outside CI and fails in it) and closes it at the
// end of the test.
func newRunner(t testing.TB, fns ...lambdarun.Function) *lambdarun.Runner {
	t.Helper()
	r, err := lambdarun.New(fns, lambdarun.Config{RIE: testenv.RIE(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Close()
		if t.Failed() {
			// What the emulators and the runner said: a failure's cause.
			for _, f := range fns {
				b, _ := os.ReadFile(f.Log)
				t.Logf("%s:\n%s", f.Log, b)
			}
		}
	})
	return r
}

type probeEvent struct {
	SleepMS int    `json:"sleep_ms,omitempty"`
	Fail    string `json:"fail,omitempty"`
	Exit    bool   `json:"exit,omitempty"`
	Getenv  string `json:"getenv,omitempty"`
	// PadBytes asks for an answer that many bytes longer.
	PadBytes int `json:"pad_bytes,omitempty"`
}

type probeAnswer struct {
	PID        int    `json:"pid"`
	Getenv     string `json:"getenv"`
	DeadlineMS int64  `json:"deadline_ms"`
}

func callProbe(r invoke.Invoker, ev probeEvent) (probeAnswer, error) {
	payload, _ := json.Marshal(ev)
	out, err := r.Invoke(context.Background(), "ProbeFunction", payload)
	if err != nil {
		return probeAnswer{}, err
	}
	var a probeAnswer
	if err := json.Unmarshal(out, &a); err != nil {
		return a, err
	}
	return a, nil
}

func mustProbe(t *testing.T, r invoke.Invoker, ev probeEvent) probeAnswer {
	t.Helper()
	a, err := callProbe(r, ev)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func status(t *testing.T, r invoke.Admin, fn string) invoke.FunctionStatus {
	t.Helper()
	for _, s := range r.Status() {
		if s.Function == fn {
			return s
		}
	}
	t.Fatalf("no status for %s", fn)
	return invoke.FunctionStatus{}
}

// waitBusy waits until fn has n busy environments.
func waitBusy(t *testing.T, r invoke.Admin, fn string, n int) invoke.FunctionStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := status(t, r, fn)
		busy := 0
		for _, e := range s.Environments {
			if e.Busy {
				busy++
			}
		}
		if busy == n {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d busy environments, want %d: %+v", fn, busy, n, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether a process with that pid runs (a zombie does not:
// an orphaned bootstrap waits for init to reap it).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces, the state follows its ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// waitDead waits up to patience until pid is gone (a killed process is
// reaped by its parent a moment later).
func waitDead(t *testing.T, pid int, patience time.Duration) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
