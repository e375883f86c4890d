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

	"github.com/oncepay/oncepay/internal/localenv"
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
	dir := t.TempDir()
	build := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, "bootstrap"), "./lambdas/"+fn)
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", fn, err, out)
	}
	// Both of the emulator's ports are picked free: its runtime API defaults
	// to 9001, which another emulator (another test) may hold.
	port, runtimePort := freePort(t), freePort(t)
	cmd := exec.Command(rie, "--runtime-interface-emulator-address", fmt.Sprintf("127.0.0.1:%d", port),
		"--runtime-api-address", fmt.Sprintf("127.0.0.1:%d", runtimePort), filepath.Join(dir, "bootstrap"))
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test"}, env...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := fmt.Sprintf("http://127.0.0.1:%d/2015-03-31/functions/function/invocations", port)
	return func(event any) []byte {
		t.Helper()
		payload, err := json.Marshal(event)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			r, err := http.Post(url, "application/json", bytes.NewReader(payload))
			if err == nil {
				b, _ := io.ReadAll(r.Body)
				r.Body.Close()
				return b
			}
			if time.Now().After(deadline) {
				t.Fatalf("emulator never answered: %v\nlogs:\n%s", err, logs.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
