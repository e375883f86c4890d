// Package worldtest builds, for integration tests, one payment world over
// real parts: DynamoDB Local (a key-record table and an outbox table of the
// test's own), a fresh migrated PostgreSQL database, the PSP simulator over
// HTTP with the real Stripe client, the webhook handler behind an HTTP
// server the simulator signs and delivers to (on demand), and a fake clock.
// The api, resolver and webhook tests share it instead of copying it.
package worldtest

import (
	"bytes"
	"cmp"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/clock"
	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/psp"
	"github.com/oncepay/oncepay/internal/resolver"
	"github.com/oncepay/oncepay/internal/testkit/albsign"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
	"github.com/oncepay/oncepay/internal/webhook"
)

// T0 is the fake clock's start.
var T0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// Body3000 is the story's payment: order 42, $30.00.
const Body3000 = `{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_card_visa"}`

// Timing keeps the story's rules with a short deadline, so a lost reply
// costs a test 400 ms of real time instead of 5 s.
func Timing() config.Timing {
	return config.Timing{Deadline: 400 * time.Millisecond, ClientTimeout: 10 * time.Second, Margin: time.Second, KeyWindow: time.Hour}
}

// SteadyTiming is Timing with the production deadline (5 s), for a test
// whose subject is not the deadline but which asserts that a call reached
// the PSP: under a loaded CI machine the 400 ms deadline can lapse before
// the PSP call leaves, and the answer is then a correct 202 that tests
// nothing of what the case is about.
func SteadyTiming() config.Timing {
	t := Timing()
	t.Deadline = 5 * time.Second
	return t
}

// Options shape a World. The zero value is the usual world.
type Options struct {
	// Timing of the API; zero: Timing().
	Timing config.Timing
	// WrapSim wraps the simulator's handler (to watch the requests).
	WrapSim func(http.Handler) http.Handler
}

// World is one payment system over real parts.
type World struct {
	T      testing.TB
	Clock  *clock.Fake
	Sim    *pspsim.Sim
	SimURL string
	Pool   *pgxpool.Pool
	Dynamo *dynamodb.Client
	// ClaimsTable is the key record table of the test's own.
	ClaimsTable string
	Claims      *idem.Store
	Ledger      *ledger.Store
	PSP         *psp.Client
	// Outbox puts events into an outbox table of the test's own;
	// OutboxStream is that table's stream, for a relay to read.
	Outbox       *outbox.Publisher
	OutboxTable  string
	OutboxStream string
	// Logs receives every JSON log line and EMF metric line.
	Logs   *SyncBuffer
	Log    *slog.Logger
	Timing config.Timing
	Hooks  api.Hooks
	API    *api.Handler
	// Webhook is the webhook handler; WebhookURL is where the simulator
	// delivers (ManualWebhooks: only when a test flushes).
	Webhook       *webhook.Handler
	WebhookURL    string
	WebhookSecret string
	// Homes routes callers to their home Region (nil: one Region); set it
	// and Rebuild.
	Homes api.Homes
}

// SyncBuffer is a goroutine-safe log sink.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// Bytes returns a copy of everything written.
func (s *SyncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.b.Bytes()...)
}

// Metric sums an EMF metric over everything logged so far.
func (w *World) Metric(name string) float64 { return metrics.Sum(w.Logs.Bytes(), name) }

// New builds a World; everything is torn down when the test ends.
func New(t testing.TB, o Options) *World {
	t.Helper()
	db := testenv.DynamoDB(t)
	table := testenv.NewTable(t, db, "pk")
	outboxTable, outboxStream := testenv.NewOutboxTable(t, db)
	pool, _ := testenv.Ledger(t)
	w := &World{
		T: t, Clock: clock.NewFake(T0), Pool: pool, Dynamo: db, Logs: &SyncBuffer{}, Timing: o.Timing,
		OutboxTable: outboxTable, OutboxStream: outboxStream, ClaimsTable: table, WebhookSecret: "whsec_test_" + testenv.RandomID(8),
	}
	if w.Timing == (config.Timing{}) {
		w.Timing = Timing()
	}
	w.Log = slog.New(slog.NewJSONHandler(w.Logs, nil))
	quiet := slog.New(slog.NewJSONHandler(io.Discard, nil))
	w.Claims = idem.NewStore(db, table)
	w.Ledger = ledger.New(pool)
	var err error
	w.Outbox, err = outbox.NewPublisher(db, outbox.Config{Table: outboxTable, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}

	// The webhook endpoint exists before the simulator, which must know it.
	var hook http.Handler = http.NotFoundHandler()
	var hookMu sync.RWMutex
	hookSrv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		hookMu.RLock()
		h := hook
		hookMu.RUnlock()
		h.ServeHTTP(rw, r)
	}))
	t.Cleanup(hookSrv.Close)
	w.WebhookURL = hookSrv.URL + webhook.Path

	w.Sim = pspsim.New(pspsim.Config{
		Logger: quiet, WebhookURL: w.WebhookURL, WebhookSecret: w.WebhookSecret, ManualWebhooks: true,
		WebhookEvents: webhook.Subscribed,
	})
	var simHandler http.Handler = w.Sim
	if o.WrapSim != nil {
		simHandler = o.WrapSim(simHandler)
	}
	srv := httptest.NewServer(simHandler)
	t.Cleanup(func() { srv.Close(); w.Sim.Close() })
	w.SimURL = srv.URL
	w.PSP = w.NewPSP(nil)

	w.Webhook, err = webhook.New(webhook.Config{Secret: w.WebhookSecret}, webhook.Deps{
		Ledger: w.Ledger, Publisher: w.Outbox, Clock: w.Clock, Log: w.Log, Metrics: metrics.New(w.Logs, "webhook"),
	})
	if err != nil {
		t.Fatal(err)
	}
	hookMu.Lock()
	hook = w.Webhook
	hookMu.Unlock()
	w.Rebuild()
	return w
}

// NewPSP returns a Stripe client of its own for the simulator (tagging its
// requests through rt when given).
func (w *World) NewPSP(rt http.RoundTripper) *psp.Client {
	w.T.Helper()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: rt}
	c, err := psp.New(psp.Config{APIKey: "sk_test_x", BaseURL: w.SimURL, HTTPClient: hc,
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		w.T.Fatal(err)
	}
	return c
}

// Rebuild makes the API handler again from the world's parts and hooks.
func (w *World) Rebuild() {
	w.API = api.New(api.Deps{
		Claims: w.Claims, Ledger: w.Ledger, PSP: w.PSP, Publisher: w.Outbox, Clock: w.Clock, Timing: w.Timing,
		Log: w.Log, Metrics: metrics.New(w.Logs, "api"), Hooks: w.Hooks,
		ALB: albsign.Default.Verifier(w.Clock.Now), Homes: w.Homes,
	})
}

// ResolverConfig is a resolver configuration for tests: the world's margin,
// a cap high enough not to slow a small test down.
func (w *World) ResolverConfig() resolver.Config {
	c := resolver.DefaultConfig()
	c.Margin = w.Timing.Margin
	c.PSPRate = 500
	c.Limit = 100
	return c
}

// ResolverOptions shape a resolver built by World.Resolver.
type ResolverOptions struct {
	Hooks resolver.Hooks
	// PSP is the resolver's PSP client; nil: the world's.
	PSP resolver.PSP
	// Cap is the cap PSP's transport applies (resolver.Deps.Cap).
	Cap *resolver.Cap
	// NoPublisher leaves the outbox put to the sweep (resolver.Deps.Publisher
	// nil).
	NoPublisher bool
	// SweepClaims gives the resolver the claim table's sweep (the MRSC
	// option's, which has no TTL).
	SweepClaims bool
	// IsHome is resolver.Deps.IsHome (across Regions); nil: not asked.
	IsHome func(ctx context.Context) (bool, error)
	// Ledger is the resolver's ledger; nil: the world's.
	Ledger *ledger.Store
}

// Resolver builds a resolver over the world's parts.
func (w *World) Resolver(cfg resolver.Config, o ResolverOptions) *resolver.Resolver {
	w.T.Helper()
	if o.PSP == nil {
		o.PSP = w.PSP
	}
	sw, err := outbox.NewSweeper(w.Outbox, w.Pool, outbox.SweepConfig{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		w.T.Fatal(err)
	}
	d := resolver.Deps{
		Ledger: cmp.Or(o.Ledger, w.Ledger), PSP: o.PSP, Claims: w.Claims, Publisher: w.Outbox, Sweeper: sw, Clock: w.Clock,
		Log: w.Log, Metrics: metrics.New(w.Logs, "resolver"), Hooks: o.Hooks, Cap: o.Cap, IsHome: o.IsHome,
	}
	if o.NoPublisher {
		d.Publisher = nil
	}
	if o.SweepClaims {
		d.ClaimSweeper = idem.NewSweeper(w.Dynamo, w.ClaimsTable)
	}
	r, err := resolver.New(cfg, d)
	if err != nil {
		w.T.Fatal(err)
	}
	return r
}

// Call sends one request to the API, arriving now.
func (w *World) Call(method, path, caller, key, body string) api.Response {
	h := http.Header{}
	if key != "" {
		h.Set("Idempotency-Key", key)
	}
	h.Set("Content-Type", "application/json")
	return w.API.Serve(context.Background(), api.Request{
		Method: method, Path: path, Headers: h, Body: []byte(body), Caller: caller, Arrival: w.Clock.Now(),
	})
}

// Pay is POST /payments.
func (w *World) Pay(caller, key, body string) api.Response {
	return w.Call(http.MethodPost, "/payments", caller, key, body)
}

// Resolve is POST /payments/{key}/resolve.
func (w *World) Resolve(caller, key string) api.Response {
	return w.Call(http.MethodPost, "/payments/"+key+"/resolve", caller, "", "")
}

// Refund is POST /payments/{key}/refund with the refund's own key.
func (w *World) Refund(caller, paymentKey, refundKey string) api.Response {
	return w.Call(http.MethodPost, "/payments/"+paymentKey+"/refund", caller, refundKey, "")
}

// Count runs a count query.
func (w *World) Count(sql string, args ...any) int {
	w.T.Helper()
	var n int
	if err := w.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		w.T.Fatal(err)
	}
	return n
}

// Row reads the payments row of (caller, key).
func (w *World) Row(caller, key string) ledger.Payment {
	w.T.Helper()
	p, err := w.Ledger.GetByKey(context.Background(), caller, key)
	if err != nil {
		w.T.Fatalf("payments row (%s, %s): %v", caller, key, err)
	}
	return p
}

// Record reads the key record of (caller, key) as of the fake clock.
func (w *World) Record(caller, key string) (idem.Record, bool) {
	w.T.Helper()
	r, found, err := w.Claims.Get(context.Background(), ids.Scope(caller, key), w.Clock.Now())
	if err != nil {
		w.T.Fatal(err)
	}
	return r, found
}

// Charges counts the simulator's charges under a PSP key ("": all).
func (w *World) Charges(key string) int {
	n := 0
	for _, c := range w.Sim.Charges() {
		if key == "" || c.IdempotencyKey == key {
			n++
		}
	}
	return n
}
