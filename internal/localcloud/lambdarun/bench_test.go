package lambdarun_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncepay/oncepay/internal/localcloud/lambdarun"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// apiUnderTheRunner builds the template's api function and runs it under
// the runner with the local cloud's environment, one environment at most.
func apiUnderTheRunner(b *testing.B) (*lambdarun.Runner, lambdarun.Function, []byte) {
	b.Helper()
	tpl := testenv.TemplatePath(b)
	env := testenv.AWS(b)
	cfg := lambdarun.Config{Bootstraps: b.TempDir(), Logs: b.TempDir(), DefaultMaxEnvironments: 1}
	fns, err := lambdarun.FromTemplate(tpl, nil, cfg)
	if err != nil {
		b.Fatal(err)
	}
	var api lambdarun.Function
	for _, f := range fns {
		if f.Package == "lambdas/api" {
			api = f
		}
	}
	vars := map[string]string{} // no ONCEPAY_PSP_KEY_SECRET_ARN: the simulator's local key
	for k, v := range env {
		vars[k] = v
	}
	fns, err = lambdarun.FromTemplate(tpl, map[string]map[string]string{api.LogicalID: vars}, cfg)
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range fns {
		if f.LogicalID == api.LogicalID {
			api = f
		}
	}
	if _, err := lambdarun.Build(context.Background(), root(b), []lambdarun.Function{api}); err != nil {
		b.Fatal(err)
	}
	r, err := lambdarun.New([]lambdarun.Function{api}, lambdarun.Config{RIE: testenv.RIE(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	// A request the api refuses before any store (no arrival stamp): init
	// plus one trip through the handler, nothing stored.
	ev, _ := json.Marshal(events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: "GET /warm", RawPath: "/warm",
		RequestContext: events.APIGatewayV2HTTPRequestContext{HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "GET", Path: "/warm"}}})
	return r, api, ev
}

func invokeAPI(b *testing.B, r *lambdarun.Runner, fn string, ev []byte) time.Duration {
	b.Helper()
	start := time.Now()
	out, err := r.Invoke(context.Background(), fn, ev)
	took := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	// The api refuses it (no arrival stamp, no such route): a handled answer.
	if !strings.Contains(string(out), `"statusCode":400`) && !strings.Contains(string(out), `"statusCode":404`) {
		b.Fatalf("answer %s", out)
	}
	return took
}

func reportP50(b *testing.B, ds []time.Duration, name string) {
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, name+"-p50-ms")
	b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, name+"-p99-ms")
}

// BenchmarkRunnerWarmInvoke is one invocation of the api bootstrap in a warm
// environment of the runner, as a trigger sees it (the runner's and the
// emulator's hops included), interleaved with the same invocation sent
// straight to an emulator of the same bootstrap (warm-direct): the
// difference is what the runner's bookkeeping costs.
func BenchmarkRunnerWarmInvoke(b *testing.B) {
	r, api, ev := apiUnderTheRunner(b)
	env := make([]string, 0, len(api.Env))
	for k, v := range api.Env {
		env = append(env, k+"="+v)
	}
	direct, err := lambdarun.StartProcess(lambdarun.ProcessConfig{Function: api.LogicalID, RIE: testenv.RIE(b), Bootstrap: api.Bootstrap, Env: env})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(direct.Stop)
	send := func() time.Duration {
		start := time.Now()
		if _, err := direct.Invoke(context.Background(), ev); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for range 3 {
		invokeAPI(b, r, api.LogicalID, ev)
		send()
	}
	var ds, dd []time.Duration
	for b.Loop() {
		ds = append(ds, invokeAPI(b, r, api.LogicalID, ev))
		dd = append(dd, send())
	}
	reportP50(b, ds, "warm")
	reportP50(b, dd, "warm-direct")
}

// BenchmarkRunnerColdStart is an invocation of the api that finds no
// environment: each iteration kills the warm one first, so the call pays
// the emulator's start, the bootstrap's init and the first invocation.
func BenchmarkRunnerColdStart(b *testing.B) {
	r, api, ev := apiUnderTheRunner(b)
	fn := api.LogicalID
	invokeAPI(b, r, fn, ev)
	var ds []time.Duration
	for b.Loop() {
		if n, _, err := r.Kill(fn, 1); n != 1 || err != nil {
			b.Fatalf("Kill = %d, %v", n, err)
		}
		ds = append(ds, invokeAPI(b, r, fn, ev))
	}
	reportP50(b, ds, "cold")
}
