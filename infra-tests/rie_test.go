package infratests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncepay/oncepay/internal/localenv"
	"github.com/oncepay/oncepay/internal/pspsim"
	"github.com/oncepay/oncepay/internal/testenv"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestAPIBootstrapUnderTheLambdaRuntimeInterfaceEmulator builds the api
// function exactly as `make lambdas` does (same package, tags and flags; the
// host's architecture instead of arm64, which this machine cannot run), runs
// it under aws-lambda-rie, and sends it an HTTP API event for one payment.
func TestAPIBootstrapUnderTheLambdaRuntimeInterfaceEmulator(t *testing.T) {
	env := testenv.AWS(t)
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
	build := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, "bootstrap"), "./lambdas/api")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}

	// The function's world: a table and a database of this test's own, and
	// the PSP simulator.
	db := testenv.DynamoDB(t)
	table := testenv.NewTable(t, db, "pk")
	_, dsn := testenv.Ledger(t)
	sim := pspsim.New(pspsim.Config{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	psp := httptest.NewServer(sim)
	defer psp.Close()
	defer sim.Close()

	port := freePort(t)
	cmd := exec.Command(rie, "--runtime-interface-emulator-address", fmt.Sprintf("127.0.0.1:%d", port), filepath.Join(dir, "bootstrap"))
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"AWS_REGION=" + env.Get("AWS_REGION"), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"AWS_ENDPOINT_URL=" + env.Get("AWS_ENDPOINT_URL"),
		"AWS_ENDPOINT_URL_DYNAMODB=" + env.Get("AWS_ENDPOINT_URL_DYNAMODB"),
		localenv.IdemTable + "=" + table,
		localenv.LedgerDSN + "=" + dsn,
		localenv.PSPURL + "=" + psp.URL,
	}
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	ev := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "POST /payments", RawPath: "/payments",
		Headers: map[string]string{"idempotency-key": "rie-K1", "content-type": "application/json"},
		Body:    `{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_card_visa"}`,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			TimeEpoch: time.Now().UnixMilli(),
			HTTP:      events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/payments"},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": "u1"}},
			},
		},
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/2015-03-31/functions/function/invocations", port)
	var resp events.APIGatewayV2HTTPResponse
	deadline := time.Now().Add(20 * time.Second)
	for {
		// The emulator needs a moment to listen; the event carries a fresh stamp each try.
		ev.RequestContext.TimeEpoch = time.Now().UnixMilli()
		payload, _ := json.Marshal(ev)
		r, err := http.Post(url, "application/json", bytes.NewReader(payload))
		if err == nil {
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if err := json.Unmarshal(b, &resp); err != nil {
				t.Fatalf("invocation answered %q: %v\nlogs:\n%s", b, err, logs.String())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("emulator never answered: %v\nlogs:\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if resp.StatusCode != http.StatusCreated || !strings.Contains(resp.Body, `"state":"SUCCEEDED"`) {
		t.Fatalf("answer %d %s\nlogs:\n%s", resp.StatusCode, resp.Body, logs.String())
	}
	if ch := sim.Charges(); len(ch) != 1 || ch[0].Amount != 3000 || !strings.HasSuffix(ch[0].IdempotencyKey, ":charge") {
		t.Fatalf("charges = %+v", ch)
	}
}
