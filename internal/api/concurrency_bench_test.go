package api_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/frontdoor"
)

// sweepClients are the concurrency levels of BenchmarkConcurrency.
var sweepClients = []int{1, 4, 16, 64, 256}

// sweepLevel is how long each level runs.
const sweepLevel = 2 * time.Second

// BenchmarkConcurrency drives the API over HTTP through the local front
// door (bearer token, payload-2.0 event, the api handler) with vegeta used as
// a library: at each level, n clients send first calls with distinct keys
// back to back for sweepLevel, and the throughput and p99 are reported. Then
// 64 clients send the same key at once: exactly one charge, or it fails.
// One process stands in for many Lambda instances here, so the ledger pool
// is sized for the sweep (32 connections) rather than for one instance (2).
func BenchmarkConcurrency(b *testing.B) {
	w := newWorld(b)
	w.timing = config.Default()
	pc, err := pgxpool.ParseConfig(w.pool.Config().ConnString())
	if err != nil {
		b.Fatal(err)
	}
	pc.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(b.Context(), pc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	w.pool, w.ledger = pool, ledger.New(pool)
	w.rebuildRealClock()
	secret := []byte("bench-secret-bench-secret-bench!")
	srv := httptest.NewServer(&frontdoor.Server{Invoke: w.h.HandleAPIGatewayV2, Secret: secret})
	b.Cleanup(srv.Close)
	token, err := frontdoor.Mint(secret, "bench", time.Hour, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	hdr := func(key string) http.Header {
		return http.Header{"Authorization": {"Bearer " + token}, "Content-Type": {"application/json"}, "Idempotency-Key": {key}}
	}
	var seq atomic.Int64
	run := 0
	type level struct{ rps, p50, p99, ok float64 }
	results := map[int]level{}
	var dupCharges, dupCreated, dupErrors int
	for b.Loop() {
		run++
		for _, n := range sweepClients {
			tr := func(t *vegeta.Target) error {
				t.Method, t.URL = http.MethodPost, srv.URL+"/payments"
				t.Header = hdr(fmt.Sprintf("sweep-%d-%d-%d", run, n, seq.Add(1)))
				t.Body = []byte(body3000)
				return nil
			}
			atk := vegeta.NewAttacker(vegeta.Workers(uint64(n)), vegeta.MaxWorkers(uint64(n)), vegeta.KeepAlive(true), vegeta.Connections(n), vegeta.Timeout(30*time.Second))
			var m vegeta.Metrics
			for res := range atk.Attack(tr, vegeta.Rate{Freq: 0}, sweepLevel, fmt.Sprintf("c%d", n)) {
				m.Add(res)
			}
			m.Close()
			// A level's answers other than 201 (a 202 when the deadline
			// passed, a 503 when a dependency shed load) are reported, not
			// fatal: the sweep is there to find where that starts.
			ok201 := float64(m.StatusCodes["201"]) / float64(max(m.Requests, 1))
			b.Logf("%d clients: %d requests, %.0f req/s, p50 %v, p99 %v, statuses %v", n, m.Requests, m.Throughput, m.Latencies.P50, m.Latencies.P99, m.StatusCodes)
			results[n] = level{rps: m.Throughput, p50: ms(m.Latencies.P50), p99: ms(m.Latencies.P99), ok: ok201}
		}

		// 64 duplicates of one key, all in flight together.
		before := len(w.charges())
		key := fmt.Sprintf("dup-%d", run)
		var sent atomic.Int64
		tr := func(t *vegeta.Target) error {
			if sent.Add(1) > 64 {
				return vegeta.ErrNoTargets
			}
			t.Method, t.URL, t.Header, t.Body = http.MethodPost, srv.URL+"/payments", hdr(key), []byte(body3000)
			return nil
		}
		atk := vegeta.NewAttacker(vegeta.Workers(64), vegeta.MaxWorkers(64), vegeta.Connections(64), vegeta.Timeout(30*time.Second))
		dupCreated = 0
		statuses, errs := map[int]int{}, map[string]int{}
		for res := range atk.Attack(tr, vegeta.Rate{Freq: 0}, 0, "dup64") {
			if res.Error == vegeta.ErrNoTargets.Error() {
				continue // the targeter's end, after the 64th request: not a request
			}
			statuses[int(res.Code)]++
			if res.Code == 0 {
				errs[res.Error]++
			}
			if res.Code == http.StatusCreated && !strings.Contains(string(res.Body), `"PROCESSING"`) {
				dupCreated++
			}
		}
		dupCharges = len(w.charges()) - before
		if dupCharges != 1 {
			b.Fatalf("64 duplicates of one key charged %d times (statuses %v)", dupCharges, statuses)
		}
		b.Logf("64 duplicates: statuses %v, transport errors %v", statuses, errs)
		dupErrors = statuses[0]
	}
	for _, n := range sweepClients {
		r := results[n]
		b.ReportMetric(r.rps, fmt.Sprintf("c%d-req/s", n))
		b.ReportMetric(r.p50, fmt.Sprintf("c%d-p50-ms", n))
		b.ReportMetric(r.p99, fmt.Sprintf("c%d-p99-ms", n))
		b.ReportMetric(r.ok, fmt.Sprintf("c%d-201-ratio", n))
	}
	b.ReportMetric(float64(dupCharges), "dup64-charges")
	b.ReportMetric(float64(dupCreated), "dup64-201s")
	b.ReportMetric(float64(dupErrors), "dup64-transport-errors")
}
