package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/localenv"
)

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

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

// rieBinary is aws-lambda-rie from make setup; missing, the test skips
// outside CI and fails in it.
func rieBinary(t testing.TB) string {
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
	mk, err := MakefileLambdaBuild(root)
	if err != nil {
		t.Fatal(err)
	}
	return BuildLambdaWith(t, fn, mk)
}

// BuildLambdaWith is BuildLambda with the given build instead of the
// Makefile's (a variant of it: a benchmark comparing flags).
func BuildLambdaWith(t testing.TB, fn string, mk LambdaBuild) string {
	t.Helper()
	root, err := localenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "bootstrap")
	if err := mk.Build(root, fn, out, "GOARCH="+runtime.GOARCH); err != nil {
		t.Fatal(err)
	}
	return out
}

// RunningLambda is a bootstrap under aws-lambda-rie.
type RunningLambda struct {
	Started time.Time // when the emulator process was started
	url     string
	logs    *bytes.Buffer
	cmd     *exec.Cmd
}

// StartLambda starts bootstrap under aws-lambda-rie with env. The emulator
// starts the bootstrap on the first invocation, as Lambda does on a cold
// start; it is stopped when the test ends (or by Stop).
func StartLambda(t testing.TB, bootstrap string, env []string) *RunningLambda {
	t.Helper()
	rie := rieBinary(t)
	// Both of the emulator's ports are picked free: its runtime API defaults
	// to 9001, which another emulator (another test) may hold.
	port, runtimePort := freePort(t), freePort(t)
	cmd := exec.Command(rie, "--runtime-interface-emulator-address", fmt.Sprintf("127.0.0.1:%d", port),
		"--runtime-api-address", fmt.Sprintf("127.0.0.1:%d", runtimePort), bootstrap)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test"}, env...)
	logs := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	fl := &RunningLambda{url: fmt.Sprintf("http://127.0.0.1:%d/2015-03-31/functions/function/invocations", port), logs: logs, cmd: cmd}
	fl.Started = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fl.Stop)
	return fl
}

// Stop kills the emulator and its bootstrap.
func (fl *RunningLambda) Stop() {
	if fl.cmd.Process != nil && fl.cmd.ProcessState == nil {
		_ = fl.cmd.Process.Kill()
		_ = fl.cmd.Wait()
	}
}

// Invoke sends event, retrying while the emulator is not listening yet, and
// returns the function's response payload.
func (fl *RunningLambda) Invoke(event any, patience time.Duration) ([]byte, error) {
	payload, err := json.Marshal(event)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(patience)
	for {
		r, err := http.Post(fl.url, "application/json", bytes.NewReader(payload))
		if err == nil {
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			return b, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("emulator never answered: %v\nlogs:\n%s", err, fl.logs.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
}
