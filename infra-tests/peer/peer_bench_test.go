// Package peer benchmarks oncepay's api side by side with what a team would
// pick instead: Powertools for AWS Lambda's idempotency utility
// (TypeScript) over its DynamoDB persistence layer, the handler in
// _tools/peer doing the same charge (issue 18, item 1). Both run as Lambda
// bootstraps under aws-lambda-rie against the same DynamoDB Local and the
// same PSP simulator, invoked interleaved. Benchmarks only: nothing here
// runs in make test.
package peer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/localcloud/invoke"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

const (
	// body is one 30 USD payment; every call sends it, so a repeat of a key
	// is a replay on both sides, never a validation failure.
	body   = `{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_card_visa"}`
	caller = "bench-peer"
	// dupBurst is the concurrent-duplicates run: one environment per
	// request, as Lambda gives concurrent invocations.
	dupBurst = 64
	// dupStagger is how long after the original the single duplicate is
	// sent: long enough that the original is in flight (the emulator's hop
	// is about a millisecond), short of either side's first call.
	dupStagger = 2 * time.Millisecond
	// coldSamples fresh emulators per side, alternating.
	coldSamples = 5
	// inProgressType is the function error Powertools throws for a key
	// whose first call is still running.
	inProgressType = "IdempotencyAlreadyInProgressError"
)

// event is POST /payments as the HTTP API (payload 2.0) delivers it behind
// its JWT authorizer (apitest's builder, the one the api's own tests use).
func event(key string) events.APIGatewayV2HTTPRequest {
	ev, err := apitest.HTTPAPIEvent(http.MethodPost, "/payments", caller, map[string]string{"Idempotency-Key": key}, body, time.Now())
	if err != nil {
		panic(err) // a fixed path the gateway always takes
	}
	return ev
}

// answer is what API Gateway would answer for one invocation: the
// function's response, or 500 for a function error (whose type is kept).
type answer struct {
	status   int
	replayed bool   // oncepay's Idempotent-Replayed header (the peer sends none)
	errType  string // the function error's type, when it failed
	took     time.Duration
}

// label names an answer in the reported counts.
func (a answer) label() string {
	switch {
	case a.errType == inProgressType:
		return "500-inprogress"
	case a.errType != "":
		return "500-other"
	case a.replayed:
		return strconv.Itoa(a.status) + "-replayed"
	}
	return strconv.Itoa(a.status)
}

// refusal reports whether the answer tells a duplicate its key is in
// flight: oncepay's 409, the peer's in-progress error.
func (a answer) refusal() bool {
	return a.status == http.StatusConflict || a.errType == inProgressType
}

// side is one implementation under test, with its own counters on the wire.
type side struct {
	name      string
	bootstrap string
	vars      []string
	ddb, psp  *counter
	sql       *counter // nil: the side has no SQL store
	envs      []*testenv.RunningLambda

	first, replay []time.Duration
	dup1          []time.Duration // refusals of the pair's loser
	firstCounts   []perCall
	replayCounts  []perCall
	dup1Answers   map[string]int
}

// perCall is what one sequential invocation cost on the wire.
type perCall struct{ ddb, sql, psp counts }

func (s *side) snapshot() perCall {
	p := perCall{ddb: s.ddb.snapshot(), psp: s.psp.snapshot()}
	if s.sql != nil {
		p.sql = s.sql.snapshot()
	}
	return p
}

func (p perCall) sub(before perCall) perCall {
	return perCall{ddb: p.ddb.sub(before.ddb), sql: p.sql.sub(before.sql), psp: p.psp.sub(before.psp)}
}

// call invokes env with POST /payments for key. Only the runner failing
// (no answer from the emulator at all) is fatal.
func (s *side) call(b *testing.B, env *testenv.RunningLambda, key string) answer {
	b.Helper()
	a, err := invokeOnce(env, key)
	if err != nil {
		b.Fatalf("%s: %v", s.name, err)
	}
	return a
}

func invokeOnce(env *testenv.RunningLambda, key string) (answer, error) {
	start := time.Now()
	out, err := env.Invoke(event(key), 20*time.Second)
	took := time.Since(start)
	var fe *invoke.FunctionError
	if errors.As(err, &fe) {
		return answer{status: http.StatusInternalServerError, errType: fe.Type, took: took}, nil
	}
	if err != nil {
		return answer{}, err
	}
	var resp events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		return answer{}, fmt.Errorf("invocation answered %q: %w", out, err)
	}
	a := answer{status: resp.StatusCode, took: took}
	for k, v := range resp.Headers {
		if strings.EqualFold(k, "Idempotent-Replayed") && v == "true" {
			a.replayed = true
		}
	}
	return a, nil
}

// must201 checks a sequential call's answer: 201, marked as a replay when
// the side marks replays (the peer's stored answer is the original's bytes).
func (s *side) must201(b *testing.B, a answer, key string, replay bool) {
	b.Helper()
	if a.status != http.StatusCreated || (s.name == "oncepay" && a.replayed != replay) {
		b.Fatalf("%s: key %s (replay %v): answer %d %s (replayed %v)", s.name, key, replay, a.status, a.errType, a.replayed)
	}
}

func peerBootstrap(b *testing.B) string {
	root, err := localenv.Root()
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(root, "_tools", "peer")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@aws-lambda-powertools", "idempotency")); err != nil {
		b.Fatalf("the peer is not installed (make setup runs npm ci --prefix _tools/peer): %v", err)
	}
	return filepath.Join(dir, "bootstrap")
}

// nodeMajor is the major version of the node the peer's bootstrap runs on
// (its #! line finds it on PATH, as the emulator's environment does).
func nodeMajor(b *testing.B) float64 {
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		b.Fatalf("node --version: %v", err)
	}
	major, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(string(out)), "v"), ".")
	v, err := strconv.Atoi(major)
	if err != nil {
		b.Fatalf("node --version answered %q", out)
	}
	return float64(v)
}

// BenchmarkPeerSideBySide: each iteration sends each side (alternating
// which goes first) one first call with a fresh key and one replay of it on
// the same warm environment, counting what each costs on the wire, then one
// original with a duplicate sent dupStagger after it, on two environments.
// After the loop: 64 concurrent duplicates of one key per side on 64 warm
// environments, then cold starts (fresh emulators, first invocation a
// payment).
func BenchmarkPeerSideBySide(b *testing.B) {
	env := testenv.AWS(b)
	db := testenv.DynamoDB(b)
	_, dsn := testenv.Ledger(b)
	timing := config.Default()
	// One simulator of the benchmark's own, shared by both sides: the
	// stack's may carry faults another run injected.
	sim := pspsim.New(pspsim.Config{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	b.Cleanup(sim.Close)
	// The same Lambda settings for both: the api's timeout (Powertools takes
	// its in-progress expiry from the time left) and memory.
	lambdaVars := []string{
		"AWS_REGION=" + env.Get("AWS_REGION"),
		"AWS_LAMBDA_FUNCTION_TIMEOUT=" + strconv.Itoa(int(timing.FunctionTimeout()/time.Second)),
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=512",
	}

	oncepay := &side{name: "oncepay", bootstrap: testenv.BuildLambda(b, "api")}
	peer := &side{name: "peer", bootstrap: peerBootstrap(b)}
	var ddbURL, pspURL string
	ddbURL, oncepay.ddb = dynamoProxy(b, env.Get("AWS_ENDPOINT_URL_DYNAMODB"))
	pspURL, oncepay.psp = pspProxy(b, sim)
	pg, err := ledgerAddr(dsn)
	if err != nil {
		b.Fatal(err)
	}
	sp := newSQLProxy(b, pg)
	oncepay.sql = sp.k
	proxied, err := viaProxy(dsn, sp.ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	oncepay.vars = append(slices.Clone(lambdaVars),
		"AWS_LAMBDA_FUNCTION_NAME=api",
		"AWS_ENDPOINT_URL="+env.Get("AWS_ENDPOINT_URL"),
		"AWS_ENDPOINT_URL_DYNAMODB="+ddbURL,
		stackenv.IdemTable+"="+testenv.NewTable(b, db, "pk"),
		stackenv.OutboxTable+"="+testenv.NewTable(b, db, "event_id"),
		stackenv.LedgerDSN+"="+proxied,
		stackenv.PSPURL+"="+pspURL,
	)
	ddbURL, peer.ddb = dynamoProxy(b, env.Get("AWS_ENDPOINT_URL_DYNAMODB"))
	pspURL, peer.psp = pspProxy(b, sim)
	peer.vars = append(slices.Clone(lambdaVars),
		"AWS_LAMBDA_FUNCTION_NAME=peer",
		"AWS_ENDPOINT_URL_DYNAMODB="+ddbURL,
		"PEER_IDEMPOTENCY_TABLE="+testenv.NewTable(b, db, "id"),
		stackenv.PSPURL+"="+pspURL,
	)
	sides := []*side{oncepay, peer}
	run := testenv.RandomID(4)
	key := func(s *side, what string, i int) string { return fmt.Sprintf("%s-%s-%s-%d", run, s.name, what, i) }

	// Warm environments for the burst; the first two also carry the loop.
	// Each one's cold start and first call happen here, untimed.
	for _, s := range sides {
		s.envs = startWarm(b, s, dupBurst, func(i int) string { return key(s, "warm", i) })
		s.dup1Answers = map[string]int{}
		for i := range 3 {
			k := key(s, "warmup", i)
			s.must201(b, s.call(b, s.envs[0], k), k, false)
			s.must201(b, s.call(b, s.envs[0], k), k, true)
		}
	}
	// Both sides derive the same PSP key from the caller+key scope.
	for _, s := range sides {
		want := ids.ChargeKey(ids.PaymentID(ids.Scope(caller, key(s, "warmup", 0))))
		if !slices.ContainsFunc(sim.Charges(), func(c pspsim.Charge) bool { return c.IdempotencyKey == want }) {
			b.Fatalf("%s: no charge at the simulator under the derived key %s", s.name, want)
		}
	}

	for i := 0; b.Loop(); i++ {
		order := sides
		if i%2 == 1 {
			order = []*side{peer, oncepay}
		}
		for _, s := range order {
			k := key(s, "first", i)
			before := s.snapshot()
			a := s.call(b, s.envs[0], k)
			s.firstCounts = append(s.firstCounts, s.snapshot().sub(before))
			s.must201(b, a, k, false)
			s.first = append(s.first, a.took)
		}
		for _, s := range order {
			k := key(s, "first", i)
			before := s.snapshot()
			a := s.call(b, s.envs[0], k)
			s.replayCounts = append(s.replayCounts, s.snapshot().sub(before))
			s.must201(b, a, k, true)
			s.replay = append(s.replay, a.took)
		}
		for _, s := range order {
			k := key(s, "dup1", i)
			orig := make(chan answer, 1)
			go func() { a, _ := invokeOnce(s.envs[0], k); orig <- a }()
			time.Sleep(dupStagger)
			d := s.call(b, s.envs[1], k)
			o := <-orig
			if o.status == 0 {
				b.Fatalf("%s: the original of %s got no answer", s.name, k)
			}
			// Both answers of the pair: which one held the key is the
			// race's outcome, not the order of sending. The latency kept
			// is the refusal's, whichever of the two got it: how soon a
			// side tells a duplicate that the key is in flight.
			for _, a := range []struct {
				role string
				a    answer
			}{{"orig", o}, {"dup", d}} {
				s.dup1Answers[a.role+"-"+a.a.label()]++
				if a.a.refusal() {
					s.dup1 = append(s.dup1, a.a.took)
				}
			}
		}
	}

	// Reported after the loop: b.Loop's first call resets what was
	// reported before it.
	for _, s := range sides {
		reportLatency(b, "first-"+s.name, s.first)
		reportLatency(b, "replay-"+s.name, s.replay)
		b.ReportMetric(ms(quantile(s.dup1, 0.50)), "dup1-"+s.name+"-refused-p50-ms")
		for l, n := range s.dup1Answers {
			b.ReportMetric(float64(n), "dup1-"+s.name+"-"+l+"-n")
		}
		reportCounts(b, "first-"+s.name, s.firstCounts)
		reportCounts(b, "replay-"+s.name, s.replayCounts)
	}
	for _, m := range []struct {
		name string
		q    float64
		get  func(*side) []time.Duration
	}{
		{"first-p50", 0.50, func(s *side) []time.Duration { return s.first }},
		{"first-p99", 0.99, func(s *side) []time.Duration { return s.first }},
		{"replay-p50", 0.50, func(s *side) []time.Duration { return s.replay }},
		{"replay-p99", 0.99, func(s *side) []time.Duration { return s.replay }},
		{"dup1-refused-p50", 0.50, func(s *side) []time.Duration { return s.dup1 }},
	} {
		b.ReportMetric(ms(quantile(m.get(oncepay), m.q))/ms(quantile(m.get(peer), m.q)), m.name+"-oncepay/peer")
	}

	for _, s := range sides {
		burst(b, s, sim, key(s, "dup64", 0))
	}
	// The burst's environments are done with; cold starts get the machine.
	for _, s := range sides {
		for _, e := range s.envs {
			e.Stop()
		}
	}
	cold := map[string][]time.Duration{}
	for i := range coldSamples {
		order := sides
		if i%2 == 1 {
			order = []*side{peer, oncepay}
		}
		for _, s := range order {
			fl := testenv.StartLambda(b, s.bootstrap, s.vars)
			k := key(s, "cold", i)
			a := s.call(b, fl, k)
			took := time.Since(fl.Started)
			fl.Stop()
			s.must201(b, a, k, false)
			cold[s.name] = append(cold[s.name], took)
		}
	}
	for _, s := range sides {
		b.ReportMetric(ms(quantile(cold[s.name], 0.5)), "cold-"+s.name+"-p50-ms")
	}
	b.ReportMetric(ms(quantile(cold["oncepay"], 0.5))/ms(quantile(cold["peer"], 0.5)), "cold-p50-oncepay/peer")
	b.ReportMetric(nodeMajor(b), "peer-node-major")
}

// ledgerAddr is the host:port of dsn's server (PostgreSQL's port when the
// DSN names none).
func ledgerAddr(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("ledger DSN: %w", err)
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "5432"), nil
	}
	return u.Host, nil
}

// startWarm starts n environments of s and gives each its cold start and a
// first call (key(i)), a few at a time: on 2 cores more only queue.
func startWarm(b *testing.B, s *side, n int, key func(int) string) []*testenv.RunningLambda {
	b.Helper()
	envs := make([]*testenv.RunningLambda, n)
	for i := range envs {
		envs[i] = testenv.StartLambda(b, s.bootstrap, s.vars)
	}
	answers := make([]answer, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i, e := range envs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			answers[i], errs[i] = invokeOnce(e, key(i))
		}()
	}
	wg.Wait()
	for i := range envs {
		if errs[i] != nil {
			b.Fatalf("%s: warming environment %d: %v", s.name, i, errs[i])
		}
		s.must201(b, answers[i], key(i), false)
	}
	return envs
}

// burst sends one request with key k to every environment of s at once and
// reports the answers, the PSP calls the side made and the charges the
// simulator holds under the key's derived PSP key. More than one charge is
// fatal for oncepay (its target) and reported for the peer.
func burst(b *testing.B, s *side, sim *pspsim.Sim, k string) {
	b.Helper()
	before := s.psp.snapshot()
	answers := make([]answer, len(s.envs))
	errs := make([]error, len(s.envs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, e := range s.envs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i], errs[i] = invokeOnce(e, k)
		}()
	}
	close(start)
	wg.Wait()
	labels := map[string]int{}
	types := map[string]int{}
	var took []time.Duration
	for i, a := range answers {
		if errs[i] != nil {
			b.Fatalf("%s: duplicate %d of %s: %v", s.name, i, k, errs[i])
		}
		labels[a.label()]++
		if a.errType != "" {
			types[a.errType]++
		}
		took = append(took, a.took)
	}
	pspKey := ids.ChargeKey(ids.PaymentID(ids.Scope(caller, k)))
	charges := 0
	for _, c := range sim.Charges() {
		if c.IdempotencyKey == pspKey {
			charges++
		}
	}
	calls := s.psp.snapshot().sub(before).calls["charge"]
	b.Logf("%s: %d duplicates of one key: answers %v, function errors %v, %d PSP calls, %d charges", s.name, len(s.envs), labels, types, calls, charges)
	if s.name == "oncepay" && charges != 1 {
		b.Fatalf("oncepay: %d duplicates of one key charged %d times (answers %v)", len(s.envs), charges, labels)
	}
	p := fmt.Sprintf("dup%d-%s-", len(s.envs), s.name)
	b.ReportMetric(float64(charges), p+"charges")
	b.ReportMetric(float64(calls), p+"psp-calls")
	for l, n := range labels {
		b.ReportMetric(float64(n), p+l+"-n")
	}
	b.ReportMetric(ms(quantile(took, 0.5)), p+"p50-ms")
	b.ReportMetric(ms(quantile(took, 1)), p+"max-ms")
}

func reportLatency(b *testing.B, name string, ds []time.Duration) {
	b.ReportMetric(ms(quantile(ds, 0.50)), name+"-p50-ms")
	b.ReportMetric(ms(quantile(ds, 0.99)), name+"-p99-ms")
}

// reportCounts reports the mean cost of one call on the wire: DynamoDB
// requests (and each operation's), durable writes, SQL statements and
// commits, PSP calls.
func reportCounts(b *testing.B, name string, calls []perCall) {
	b.Helper()
	n := float64(len(calls))
	var ddbReq, ddbW, sqlSt, sqlC, psp float64
	ops := map[string]float64{}
	for _, c := range calls {
		if c.sql.calls["unreadable"] > 0 {
			b.Fatalf("%s: the ledger session was encrypted: its statements cannot be counted (the benchmark needs sslmode=disable)", name)
		}
		ddbReq += float64(c.ddb.total())
		ddbW += float64(c.ddb.writes)
		sqlSt += float64(c.sql.total())
		sqlC += float64(c.sql.writes)
		psp += float64(c.psp.calls["charge"])
		for op, v := range c.ddb.calls {
			ops[op] += float64(v)
		}
	}
	b.ReportMetric(ddbReq/n, name+"-ddb-requests")
	b.ReportMetric(ddbW/n, name+"-ddb-writes")
	b.ReportMetric(sqlSt/n, name+"-sql-statements")
	b.ReportMetric(sqlC/n, name+"-sql-commits")
	b.ReportMetric((ddbW+sqlC)/n, name+"-durable-writes")
	b.ReportMetric(psp/n, name+"-psp-calls")
	for op, v := range ops {
		b.ReportMetric(v/n, name+"-ddb-"+op)
	}
	if len(calls) > 0 {
		b.Logf("%s, the last call: DynamoDB %v; SQL %v", name, calls[len(calls)-1].ddb, calls[len(calls)-1].sql)
	}
}

// quantile is the nearest-rank q-quantile of ds (q = 1: the maximum).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	c := slices.Clone(ds)
	slices.Sort(c)
	i := int(q*float64(len(c))+0.999999) - 1
	return c[min(max(i, 0), len(c)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
