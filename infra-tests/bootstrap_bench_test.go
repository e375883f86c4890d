package infratests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/localcloud/lambdarun"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
	"github.com/oncepay/oncepay/internal/webhook"
)

// coldStartEvents are invocations that change nothing: a route that does
// not exist, an empty stream batch, an unsigned webhook, a resolver pass over
// an empty ledger, a worker's notification sweep tick (Lambda never sends
// an empty SQS batch, and the worker refuses one). A function's reply to them (a 404, an empty batch response,
// a 400) is a successful invocation: what is timed is init plus one trip
// through the handler.
var coldStartEvents = map[string]any{
	"api": events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: "GET /cold-start", RawPath: "/cold-start",
		RequestContext: events.APIGatewayV2HTTPRequestContext{HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "GET", Path: "/cold-start"}}},
	"resolver": map[string]any{},
	"webhook": events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: "POST /webhooks/psp", RawPath: "/webhooks/psp", Body: "{}",
		RequestContext: events.APIGatewayV2HTTPRequestContext{HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/webhooks/psp"}}},
	"worker": map[string]any{"version": "0", "id": "cold-start", "detail-type": "Scheduled Event", "source": "aws.events",
		"account": "123456789012", "time": "2026-12-01T00:00:00Z", "region": "us-east-1", "resources": []string{}, "detail": map[string]any{}},
	"relay": events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{}},
}

// BenchmarkLambdaBootstrap reports, per function, the stripped linux/arm64
// bootstrap's size as `make lambdas` builds it, and its cold start under
// aws-lambda-rie: from the emulator's process start to the first successful
// invocation (the emulator starts the bootstrap on that invocation, as Lambda
// does), one fresh emulator per sample. The migrate function is sized but
// not started: its one invocation is the migration itself.
func BenchmarkLambdaBootstrap(b *testing.B) {
	root, err := localenv.Root()
	if err != nil {
		b.Fatal(err)
	}
	mk, err := lambdarun.MakefileLambdaBuild(root)
	if err != nil {
		b.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(root, "lambdas"))
	if err != nil {
		b.Fatal(err)
	}
	var fns []string
	for _, e := range entries {
		if e.IsDir() {
			fns = append(fns, e.Name())
		}
	}
	dir := b.TempDir()
	sizes := map[string]float64{}
	for _, fn := range fns {
		out := filepath.Join(dir, fn)
		if err := mk.Build(root, fn, out); err != nil {
			b.Fatal(err)
		}
		st, err := os.Stat(out)
		if err != nil {
			b.Fatal(err)
		}
		sizes[fn] = float64(st.Size()) / (1 << 20)
	}

	env := testenv.AWS(b)
	db := testenv.DynamoDB(b)
	_, dsn := testenv.Ledger(b)
	vars := []string{}
	for k, v := range env {
		vars = append(vars, k+"="+v)
	}
	vars = append(vars,
		stackenv.IdemTable+"="+testenv.NewTable(b, db, "pk"),
		stackenv.OutboxTable+"="+testenv.NewTable(b, db, "event_id"),
		stackenv.LedgerDSN+"="+dsn,
		webhook.EnvSecret+"=whsec_cold_start",
	)
	bootstraps := map[string]string{}
	for fn := range coldStartEvents {
		bootstraps[fn] = testenv.BuildLambda(b, fn)
	}
	cold := map[string][]time.Duration{}
	for b.Loop() {
		for fn, ev := range coldStartEvents {
			fl := testenv.StartLambda(b, bootstraps[fn], vars)
			out, err := fl.Invoke(ev, 20*time.Second)
			took := time.Since(fl.Started)
			fl.Stop()
			if err != nil {
				b.Fatalf("%s: %v", fn, err)
			}
			var fail struct {
				ErrorType string `json:"errorType"`
			}
			if json.Unmarshal(out, &fail) == nil && fail.ErrorType != "" || strings.Contains(string(out), "Runtime.ExitError") {
				b.Fatalf("%s: the cold invocation failed: %s", fn, out)
			}
			cold[fn] = append(cold[fn], took)
		}
	}
	// Reported after the loop: b.Loop's first call resets what was
	// reported before it.
	for fn, mib := range sizes {
		b.ReportMetric(mib, fn+"-MiB")
	}
	for fn, ds := range cold {
		slices.Sort(ds)
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, fn+"-cold-p50-ms")
	}
}
