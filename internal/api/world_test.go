package api_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/clock"
	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/psp"
	"github.com/oncepay/oncepay/internal/testkit/albsign"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

// world is one payment API over real parts: DynamoDB Local (a table of the
// test's own), a fresh PostgreSQL database, the PSP simulator over HTTP with
// the real Stripe client, and a fake clock.
type world struct {
	wt     *worldtest.World
	t      testing.TB
	clock  *clock.Fake
	sim    *pspsim.Sim
	pspURL string
	pool   *pgxpool.Pool
	claims *idem.Store
	ledger *ledger.Store
	psp    *psp.Client
	outbox *outbox.Publisher
	db     *dynamodb.Client
	table  string
	logs   *worldtest.SyncBuffer
	timing config.Timing
	hooks  api.Hooks
	h      *api.Handler
}

// testTiming keeps the story's rules but a short deadline, so a lost reply
// costs the test 1 s of real time instead of 5 s. Not shorter: on a loaded
// 2-core CI machine a whole first call has taken more than 400 ms, and a
// request that runs past the deadline answers what the test did not ask.
func testTiming() config.Timing {
	return config.Timing{Deadline: time.Second, ClientTimeout: 10 * time.Second, Margin: time.Second, KeyWindow: time.Hour}
}

// newWorld builds the API's test world on worldtest's parts (DynamoDB Local,
// a fresh database, the simulator over HTTP, a fake clock) and keeps the
// handler here, so tests can rebuild it with hooks or broken parts.
func newWorld(t testing.TB) *world {
	t.Helper()
	wt := worldtest.New(t, worldtest.Options{Timing: testTiming()})
	w := &world{
		t: t, wt: wt, clock: wt.Clock, sim: wt.Sim, pspURL: wt.SimURL, pool: wt.Pool, claims: wt.Claims,
		ledger: wt.Ledger, psp: wt.PSP, outbox: wt.Outbox, db: wt.Dynamo, table: wt.ClaimsTable,
		logs: wt.Logs, timing: wt.Timing,
	}
	w.rebuild()
	return w
}

// rebuildRealClock makes the handler on the system clock (benchmarks).
func (w *world) rebuildRealClock() {
	w.h = api.New(api.Deps{
		Claims: w.claims, Ledger: w.ledger, PSP: w.psp, Publisher: w.outbox, Timing: w.timing,
		Log: slog.New(slog.NewJSONHandler(io.Discard, nil)), ALB: albsign.Default.Verifier(time.Now),
	})
}

// rebuild makes the handler again from the world's parts and hooks.
func (w *world) rebuild() {
	w.h = api.New(api.Deps{
		Claims: w.claims, Ledger: w.ledger, PSP: w.psp, Publisher: w.outbox, Clock: w.clock, Timing: w.timing,
		Log: slog.New(slog.NewJSONHandler(w.logs, nil)), Metrics: metrics.New(w.logs, "api"), Hooks: w.hooks,
		ALB: albsign.Default.Verifier(w.clock.Now),
	})
}

const body3000 = `{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_card_visa"}`

func (w *world) pay(caller, key, body string) api.Response {
	return w.payAt(caller, key, body, w.clock.Now())
}

func (w *world) payAt(caller, key, body string, arrival time.Time) api.Response {
	h := http.Header{}
	if key != "" {
		h.Set("Idempotency-Key", key)
	}
	h.Set("Content-Type", "application/json")
	return w.h.Serve(context.Background(), api.Request{
		Method: http.MethodPost, Path: "/payments", Headers: h, Body: []byte(body), Caller: caller, Arrival: arrival,
	})
}

func (w *world) charges() []pspsim.Charge { return w.sim.Charges() }

// The readers go to the world's real stores, even while a test has swapped
// a broken one into the handler.
func (w *world) countRows(sql string, args ...any) int         { return w.wt.Count(sql, args...) }
func (w *world) row(caller, key string) ledger.Payment         { return w.wt.Row(caller, key) }
func (w *world) record(caller, key string) (idem.Record, bool) { return w.wt.Record(caller, key) }

type answer struct {
	PaymentID   string `json:"payment_id"`
	State       string `json:"state"`
	Amount      int64  `json:"amount"`
	PSPCharge   string `json:"psp_charge"`
	DeclineCode string `json:"decline_code"`
	Type        string `json:"type"`
	Field       string `json:"field"`
}

func decode(t *testing.T, r api.Response) answer {
	t.Helper()
	var a answer
	if err := json.Unmarshal(r.Body, &a); err != nil {
		t.Fatalf("answer %d %q: %v", r.Status, r.Body, err)
	}
	return a
}

func expectStatus(t *testing.T, r api.Response, status int) answer {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status = %d, want %d; body %s", r.Status, status, r.Body)
	}
	return decode(t, r)
}

func replayedHeader(r api.Response) bool { return r.Headers.Get("Idempotent-Replayed") == "true" }

// unreachableDynamo is a DynamoDB client whose endpoint refuses connections.
func unreachableDynamo() *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String("http://127.0.0.1:1"),
		Credentials: aws.AnonymousCredentials{}, RetryMaxAttempts: 1,
	})
}

// crashOnce is a crash point that crashes its first pass only.
func crashOnce() func(context.Context) error {
	crashed := false
	return func(context.Context) error {
		if !crashed {
			crashed = true
			return api.ErrCrash
		}
		return nil
	}
}

// unreachableLedger is a ledger whose pool connects nowhere.
func unreachableLedger(t *testing.T) *ledger.Store {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return ledger.New(pool)
}
