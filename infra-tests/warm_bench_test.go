package infratests

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/localcloud/lambdarun"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// noInline is the lambdas rule's flag whose CPU cost BenchmarkLambdaWarmInvoke
// measures: it keeps api and resolver under the size target.
const noInline = "-gcflags=all=-l"

// warmBody is one 30 USD payment; every call sends the same body, so a repeat
// of a key is a replay, never a 422.
const warmBody = `{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_card_visa"}`

// paymentEvent is POST /payments as an HTTP API (payload 2.0) event behind a
// JWT authorizer, stamped now as the gateway stamps arrival.
func paymentEvent(key string) events.APIGatewayV2HTTPRequest {
	return events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "POST /payments", RawPath: "/payments",
		Headers: map[string]string{"idempotency-key": key, "content-type": "application/json"},
		Body:    warmBody,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			TimeEpoch: time.Now().UnixMilli(),
			HTTP:      events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/payments"},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": "bench-warm"}},
			},
		},
	}
}

// pay invokes fl with POST /payments for key and checks the answer: 201, and
// marked replayed exactly when replay is set. It returns the invocation's
// wall time as the caller sees it (the emulator's hop included, the same for
// both builds).
func pay(b *testing.B, fl *testenv.RunningLambda, variant, key string, replay bool) time.Duration {
	b.Helper()
	ev := paymentEvent(key)
	start := time.Now()
	out, err := fl.Invoke(ev, 20*time.Second)
	took := time.Since(start)
	if err != nil {
		b.Fatalf("%s: %v", variant, err)
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		b.Fatalf("%s: invocation answered %q", variant, out)
	}
	replayed := ""
	for k, v := range resp.Headers {
		if strings.EqualFold(k, "Idempotent-Replayed") {
			replayed = v
		}
	}
	if resp.StatusCode != http.StatusCreated || (replayed == "true") != replay {
		b.Fatalf("%s: key %s (replay %v): answer %d, Idempotent-Replayed %q: %s", variant, key, replay, resp.StatusCode, replayed, resp.Body)
	}
	return took
}

// cpu is the bootstrap's CPU time so far.
func cpu(b *testing.B, fl *testenv.RunningLambda) time.Duration {
	b.Helper()
	d, err := fl.CPU()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func p50(ds []time.Duration) time.Duration {
	c := slices.Clone(ds)
	slices.Sort(c)
	return c[len(c)/2]
}

// BenchmarkLambdaWarmInvoke measures what the lambdas rule's no-inlining flag
// costs a warm api instance: the bootstrap built exactly as `make lambdas`
// builds it and the same build with inlining on, both under aws-lambda-rie
// against the same table, ledger and PSP simulator, invoked interleaved
// (alternating which goes first) so machine noise hits both alike. Each
// iteration sends each build one replay of a completed payment and one first
// call with a fresh key. It also reports the stripped linux/arm64 size of the
// inlined build: what the flag saves.
func BenchmarkLambdaWarmInvoke(b *testing.B) {
	root, err := localenv.Root()
	if err != nil {
		b.Fatal(err)
	}
	mk, err := lambdarun.MakefileLambdaBuild(root)
	if err != nil {
		b.Fatal(err)
	}
	inl, ok := mk.Without(noInline)
	if !ok {
		b.Fatalf("the lambdas rule has no %s: there is no inlining cost to measure (drop this benchmark)", noInline)
	}
	sized := filepath.Join(b.TempDir(), "api")
	if err := inl.Build(root, "api", sized); err != nil {
		b.Fatal(err)
	}
	st, err := os.Stat(sized)
	if err != nil {
		b.Fatal(err)
	}
	inlineMiB := float64(st.Size()) / (1 << 20)

	env := testenv.AWS(b)
	db := testenv.DynamoDB(b)
	_, dsn := testenv.Ledger(b)
	// A simulator of the benchmark's own: the shared one may carry faults
	// another run injected.
	sim := pspsim.New(pspsim.Config{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	psp := httptest.NewServer(sim)
	b.Cleanup(func() { psp.Close(); sim.Close() })
	vars := []string{
		"AWS_REGION=" + env.Get("AWS_REGION"),
		"AWS_ENDPOINT_URL=" + env.Get("AWS_ENDPOINT_URL"),
		"AWS_ENDPOINT_URL_DYNAMODB=" + env.Get("AWS_ENDPOINT_URL_DYNAMODB"),
		stackenv.IdemTable + "=" + testenv.NewTable(b, db, "pk"),
		stackenv.OutboxTable + "=" + testenv.NewTable(b, db, "event_id"),
		stackenv.LedgerDSN + "=" + dsn,
		stackenv.PSPURL + "=" + psp.URL,
	}

	type variant struct {
		name   string
		fl     *testenv.RunningLambda
		replay string // the key of the payment it replays
		first  []time.Duration
		again  []time.Duration
		// The bootstrap's own CPU time, summed over the timed calls.
		firstCPU, againCPU time.Duration
	}
	vs := []*variant{
		{name: "noinline", fl: testenv.StartLambda(b, testenv.BuildLambdaWith(b, "api", mk), vars)},
		{name: "inline", fl: testenv.StartLambda(b, testenv.BuildLambdaWith(b, "api", inl), vars)},
		// As built, but with GOMAXPROCS at the machine's CPUs instead of
		// boot.FitProcs' one per 1,769 MB: what fitting it saves.
		{name: "allprocs", fl: testenv.StartLambda(b, testenv.BuildLambdaWith(b, "api", mk), append(slices.Clone(vars), fmt.Sprintf("GOMAXPROCS=%d", runtime.NumCPU())))},
	}
	run := testenv.RandomID(4)
	for _, v := range vs {
		// The cold start and the first call of the replayed payment, then a
		// few untimed calls so pools and connections are warm in both.
		v.replay = fmt.Sprintf("warm-%s-%s-replayed", run, v.name)
		pay(b, v.fl, v.name, v.replay, false)
		for i := range 3 {
			pay(b, v.fl, v.name, fmt.Sprintf("warm-%s-%s-warmup-%d", run, v.name, i), false)
			pay(b, v.fl, v.name, v.replay, true)
		}
	}
	for i := 0; b.Loop(); i++ {
		// Each variant takes each place in turn.
		order := make([]*variant, len(vs))
		for k := range vs {
			order[k] = vs[(i+k)%len(vs)]
		}
		for _, v := range order {
			c0 := cpu(b, v.fl)
			v.again = append(v.again, pay(b, v.fl, v.name, v.replay, true))
			v.againCPU += cpu(b, v.fl) - c0
		}
		for _, v := range order {
			c0 := cpu(b, v.fl)
			v.first = append(v.first, pay(b, v.fl, v.name, fmt.Sprintf("warm-%s-%s-%d", run, v.name, i), false))
			v.firstCPU += cpu(b, v.fl) - c0
		}
	}
	// Reported after the loop: b.Loop's first call resets what was
	// reported before it.
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for _, v := range vs {
		b.ReportMetric(ms(p50(v.again)), "api-warm-replay-"+v.name+"-p50-ms")
		b.ReportMetric(ms(p50(v.first)), "api-warm-first-"+v.name+"-p50-ms")
		us := func(d time.Duration, n int) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(n) }
		b.ReportMetric(us(v.againCPU, len(v.again)), "api-cpu-replay-"+v.name+"-us")
		b.ReportMetric(us(v.firstCPU, len(v.first)), "api-cpu-first-"+v.name+"-us")
	}
	b.ReportMetric(ms(p50(vs[0].again))/ms(p50(vs[1].again)), "api-warm-replay-noinline/inline")
	b.ReportMetric(ms(p50(vs[0].first))/ms(p50(vs[1].first)), "api-warm-first-noinline/inline")
	b.ReportMetric(ms(p50(vs[0].again))/ms(p50(vs[2].again)), "api-warm-replay-noinline/allprocs")
	b.ReportMetric(ms(p50(vs[0].first))/ms(p50(vs[2].first)), "api-warm-first-noinline/allprocs")
	b.ReportMetric(inlineMiB, "api-inline-MiB")
}
