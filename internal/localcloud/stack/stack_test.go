package stack_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/localcloud/invoke"
	"github.com/oncepay/oncepay/internal/localcloud/provision"
	"github.com/oncepay/oncepay/internal/localcloud/stack"
	"github.com/oncepay/oncepay/internal/localcloud/trigger"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func byPrefix(t *testing.T, tpl *provision.Template, typ, prefix string) string {
	t.Helper()
	for _, id := range tpl.OfType(typ) {
		if strings.HasPrefix(id, prefix) {
			return id
		}
	}
	t.Fatalf("no %s %s*", typ, prefix)
	return ""
}

// fakeRunner runs recording handlers in process and remembers being closed.
type fakeRunner struct {
	mu     sync.Mutex
	calls  map[string][][]byte
	closed atomic.Bool
}

func (r *fakeRunner) Invoke(_ context.Context, fn string, payload []byte) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[fn] = append(r.calls[fn], payload)
	return nil, nil
}

func (r *fakeRunner) count(fn string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls[fn])
}

func (r *fakeRunner) records(fn string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for _, p := range r.calls[fn] {
		var ev events.DynamoDBEvent
		_ = json.Unmarshal(p, &ev)
		for _, rec := range ev.Records {
			ids = append(ids, rec.Change.Keys["event_id"].String())
		}
	}
	return ids
}

func (r *fakeRunner) Status() []invoke.FunctionStatus    { return nil }
func (r *fakeRunner) Kill(string, int) (int, int, error) { return 0, 0, nil }
func (r *fakeRunner) KillInFlight(context.Context, string, time.Duration) (int, int, error) {
	return 0, 0, nil
}
func (r *fakeRunner) Close() error { r.closed.Store(true); return nil }

// world is the template over resources of the test's own: its outbox
// table, events queue and failure queues stand for the stack's.
type world struct {
	tpl    *provision.Template
	phys   map[string]provision.Physical
	db     *dynamodb.Client
	table  string
	events testenv.Queue
	dir    string
}

func newWorld(t *testing.T) world {
	tpl := testenv.Template(t)
	db := testenv.DynamoDB(t)
	q := testenv.SQS(t)
	table, stream := testenv.NewOutboxTable(t, db)
	eventsQ := testenv.NewFIFOQueue(t, q, 30*time.Second, 5)
	phys := map[string]provision.Physical{}
	for _, id := range tpl.OfType("AWS::SQS::Queue") {
		std := testenv.NewStandardQueue(t, q)
		phys[id] = provision.Physical{Type: "AWS::SQS::Queue", Arn: std.Arn, URL: std.URL}
	}
	phys[byPrefix(t, tpl, "AWS::SQS::Queue", "DataEventsQueue")] = provision.Physical{Type: "AWS::SQS::Queue", Arn: eventsQ.Arn, URL: eventsQ.URL}
	phys[byPrefix(t, tpl, "AWS::DynamoDB::Table", "DataOutboxTable")] = provision.Physical{Type: "AWS::DynamoDB::Table", Name: table, StreamArn: stream}
	return world{tpl: tpl, phys: phys, db: db, table: table, events: eventsQ, dir: t.TempDir()}
}

func (w world) put(t *testing.T, id string) {
	t.Helper()
	if _, err := w.db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(w.table),
		Item: map[string]ddbtypes.AttributeValue{"event_id": &ddbtypes.AttributeValueMemberS{Value: id}}}); err != nil {
		t.Fatal(err)
	}
}

func (w world) service(t *testing.T, r stack.Runner, scale float64) *stack.Service {
	t.Helper()
	q := testenv.SQS(t)
	svc, err := stack.New(context.Background(), stack.Config{
		Template: w.tpl, Resources: w.phys, Region: "us-east-1", StateDir: w.dir, AdminAddr: "127.0.0.1:0", TimeScale: scale,
		Clients: trigger.Clients{Streams: testenv.DynamoDBStreams(t), Queues: q, Send: q},
		NewRunner: func(context.Context, *provision.Template, map[string]provision.Physical) (stack.Runner, error) {
			return r, nil
		},
		Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The service plays the template's triggers until SIGTERM, then stops
// every part, closes the runner and keeps the stream's position: a
// restart relays only what is new, as a Lambda mapping resumes.
func TestServiceRunsTheTriggersStopsOnSIGTERMAndResumesTheStreamWhereItStopped(t *testing.T) {
	w := newWorld(t)
	relay := byPrefix(t, w.tpl, "AWS::Lambda::Function", "RelayFunction")
	resolver := byPrefix(t, w.tpl, "AWS::Lambda::Function", "ResolverFunction")
	w.put(t, "pay_a:SUCCEEDED")

	r1 := &fakeRunner{calls: map[string][][]byte{}}
	svc := w.service(t, r1, 600)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	waitFor(t, 20*time.Second, "the relay gets the put and the resolver its ticks", func() bool {
		return len(r1.records(relay)) == 1 && r1.count(resolver) >= 2
	})
	resp, err := http.Get("http://" + svc.AdminAddr() + "/_local/status")
	if err != nil {
		t.Fatal(err)
	}
	var st stack.Status
	_ = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if len(st.Mappings) != 5 || len(st.Schedules) != 3 || st.Mappings[0].State != trigger.StateEnabled {
		t.Fatalf("status = %+v", st)
	}
	// The reconciliation's daily cron is listed and never played: at 600x
	// it would fire every 2.4 minutes of a test run otherwise (make
	// reconcile runs it on demand).
	reconcile := byPrefix(t, w.tpl, "AWS::Lambda::Function", "ReconcileFunction")
	listed := false
	for _, sc := range st.Schedules {
		if len(sc.Targets) != 1 || sc.Targets[0] != reconcile {
			continue
		}
		listed = true
		if sc.State != "Unsupported" || sc.Fired != 0 || r1.count(reconcile) != 0 {
			t.Errorf("the reconciliation's schedule %s is played: %+v", sc.Expression, sc)
		}
	}
	if !listed {
		t.Errorf("no schedule of the reconciliation in the status: %+v", st.Schedules)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the service did not stop within 15 s of SIGTERM")
	}
	if !r1.closed.Load() {
		t.Fatal("runner not closed")
	}
	if c, err := net.DialTimeout("tcp", svc.AdminAddr(), time.Second); err == nil {
		c.Close()
		t.Fatal("admin API still listening after the stop")
	}

	w.put(t, "pay_b:SUCCEEDED")
	r2 := &fakeRunner{calls: map[string][][]byte{}}
	svc2 := w.service(t, r2, 600)
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan error, 1)
	go func() { done2 <- svc2.Run(ctx2) }()
	waitFor(t, 20*time.Second, "the restarted relay gets the new put", func() bool { return len(r2.records(relay)) >= 1 })
	time.Sleep(500 * time.Millisecond) // a replay of pay_a would come in the same or the next poll
	cancel2()
	if err := <-done2; err != nil {
		t.Fatal(err)
	}
	if got := r2.records(relay); len(got) != 1 || got[0] != "pay_b:SUCCEEDED" {
		t.Fatalf("after the restart the relay got %v, want only pay_b", got)
	}
}

// The stack with the in-process runner plays the real relay and worker: an
// outbox event put on the stack's table is credited once, its push intent
// SENT, and one push reaches the phone with the payment id as replace id.
func TestInProcessStackCreditsAndNotifiesAnOutboxEventOnce(t *testing.T) {
	w := newWorld(t)
	pool, dsn := testenv.Ledger(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO merchant_balances (merchant_id, currency, balance) VALUES ('m1', 'USD', 12000)`); err != nil {
		t.Fatal(err)
	}
	snsc, q := testenv.SNS(t), testenv.SQS(t)
	topic := testenv.NewTopic(t, snsc)
	phone := testenv.NewStandardQueue(t, q)
	testenv.SubscribeQueue(t, snsc, topic, phone.Arn, true)
	// The in-process handlers read the process environment, as the
	// functions read theirs: point it at this test's resources.
	t.Setenv(stackenv.EventsQueueURL, w.events.URL)
	t.Setenv(stackenv.LedgerDSN, dsn)
	t.Setenv(stackenv.PushTopicArn, topic)
	t.Setenv(notify.EnvTopicFallback, "true")

	r := stack.NewInProcess(w.tpl, quiet)
	svc := w.service(t, r, 1)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	defer func() { cancel(); <-done }()

	pub, err := outbox.NewPublisher(w.db, outbox.Config{Table: w.table, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	e := event.Event{EventID: ids.EventID("pay_live1", event.Succeeded), PaymentID: "pay_live1", State: event.Succeeded, MerchantID: "m1",
		CallerID: "u1", Amount: 3000, Currency: "USD", OccurredAt: time.Now().UTC().Truncate(time.Second)}
	if err := pub.Publish(ctx, e); err != nil {
		t.Fatal(err)
	}
	pushes := harness.NewPushQueue(q, phone.URL)
	var got []notify.Data
	waitFor(t, 30*time.Second, "the push on the phone", func() bool {
		p, err := pushes.Collect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p...)
		return len(got) > 0
	})
	var balance int64
	var credits int
	var notif string
	if err := pool.QueryRow(ctx, `SELECT balance FROM merchant_balances WHERE merchant_id = 'm1' AND currency = 'USD'`).Scan(&balance); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM credits WHERE event_id = $1`, e.EventID).Scan(&credits); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT state FROM notif WHERE event_id = $1 AND channel = 'push'`, e.EventID).Scan(&notif); err != nil {
		t.Fatal(err)
	}
	if balance != 15000 || credits != 1 || notif != "SENT" {
		t.Fatalf("balance %d (want 15000), %d credits, push intent %s", balance, credits, notif)
	}
	if len(got) != 1 || got[0].ReplaceID != "pay_live1" || got[0].EventID != e.EventID {
		t.Fatalf("pushes = %+v", got)
	}
	st := svc.Admin().Status()
	var relayed, worked int64
	for _, f := range st.Functions {
		switch f.Short {
		case "relay":
			relayed = f.Invocations
		case "worker":
			worked = f.Invocations
		}
	}
	if relayed < 1 || worked < 1 {
		t.Fatalf("in-process invocations: relay %d, worker %d", relayed, worked)
	}
}

// The admin API has no authentication: an address another machine could
// reach is refused before anything starts.
func TestTheAdminAPIListensOnLoopbackOnly(t *testing.T) {
	started := false
	newRunner := func(context.Context, *provision.Template, map[string]provision.Physical) (stack.Runner, error) {
		started = true
		return nil, errors.New("not reached")
	}
	for _, addr := range []string{"0.0.0.0:8071", ":8071", "10.0.0.5:8071", "[::]:8071", "example.com:8071"} {
		_, err := stack.New(context.Background(), stack.Config{Template: &provision.Template{}, AdminAddr: addr, NewRunner: newRunner, Logger: quiet})
		if err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("%s: err = %v, want a refusal naming loopback", addr, err)
		}
	}
	if started {
		t.Error("a refused address started the function runner")
	}
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0", "localhost:0"} {
		if _, err := stack.New(context.Background(), stack.Config{Template: &provision.Template{}, AdminAddr: addr, NewRunner: newRunner, Logger: quiet}); err != nil && strings.Contains(err.Error(), "loopback") {
			t.Errorf("%s refused: %v", addr, err)
		}
	}
}

// busyRunner reports one busy environment until its invocation ends, and
// remembers whether it was closed with it still busy.
type busyRunner struct {
	*fakeRunner
	busyUntil    atomic.Int64 // unix nanoseconds
	closedBusy   atomic.Bool
	closedAtTime atomic.Int64
}

func (r *busyRunner) Status() []invoke.FunctionStatus {
	busy := time.Now().UnixNano() < r.busyUntil.Load()
	return []invoke.FunctionStatus{{Function: "WorkerFunction9E8CCBFD", MaxEnvironments: 1,
		Environments: []invoke.Environment{{ID: "env-1", PID: 1, Busy: busy}}}}
}

func (r *busyRunner) Close() error {
	r.closedBusy.Store(time.Now().UnixNano() < r.busyUntil.Load())
	r.closedAtTime.Store(time.Now().UnixNano())
	return r.fakeRunner.Close()
}

// A stop drains: an invocation in flight runs to its end before the
// environments are stopped (a stop is not a crash).
func TestAStopWaitsForTheInvocationsInFlightBeforeItStopsTheEnvironments(t *testing.T) {
	w := newWorld(t)
	r := &busyRunner{fakeRunner: &fakeRunner{calls: map[string][][]byte{}}}
	svc := w.service(t, r, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	waitFor(t, 10*time.Second, "the admin API", func() bool {
		resp, err := http.Get("http://" + svc.AdminAddr() + "/_local/status")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	r.busyUntil.Store(time.Now().Add(1500 * time.Millisecond).UnixNano())
	stopAt := time.Now()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if r.closedBusy.Load() || !r.closed.Load() {
		t.Fatalf("closed %v with the invocation still in flight %v", r.closed.Load(), r.closedBusy.Load())
	}
	if waited := time.Unix(0, r.closedAtTime.Load()).Sub(stopAt); waited < time.Second {
		t.Fatalf("the runner was closed %s after the stop, before the 1.5 s invocation ended", waited)
	}
}

// windowRunner answers the tumbling-window function with a state that
// counts the records its window has been handed, and records the state
// each invocation was handed; every other function is fakeRunner's.
type windowRunner struct {
	fakeRunner
	fn     string
	handed []map[string]string // the window function's handed states, in order
}

func (r *windowRunner) Invoke(ctx context.Context, fn string, payload []byte) ([]byte, error) {
	if fn != r.fn {
		return r.fakeRunner.Invoke(ctx, fn, payload)
	}
	var ev events.DynamoDBTimeWindowEvent
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.handed = append(r.handed, ev.State)
	r.mu.Unlock()
	n, _ := strconv.Atoi(ev.State["n"])
	return json.Marshal(events.DynamoDBTimeWindowEventResponse{TimeWindowEventResponseProperties: events.TimeWindowEventResponseProperties{
		State: map[string]string{"n": strconv.Itoa(n + len(ev.Records))}}})
}

func (r *windowRunner) states() []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.handed)
}

// Lambda checkpoints a tumbling window's state with the stream position:
// the service saves both at each commit, while it runs (a crash loses no
// pair), and a restart hands the open window's state on with the records
// after the checkpoint. Before, a restart kept the checkpoint and dropped
// the state, and the stream job took the fresh state for a restore and
// flushed a committed batch away (docs/stream-job.md#the-converse).
func TestARestartKeepsAWindowsStateWithItsCheckpoint(t *testing.T) {
	w := newWorld(t)
	fn := byPrefix(t, w.tpl, "AWS::Lambda::Function", "TotalsFunction")
	mapping := byPrefix(t, w.tpl, "AWS::Lambda::EventSourceMapping", "TotalsMapping")
	w.put(t, "pay_a:SUCCEEDED")

	r1 := &windowRunner{fakeRunner: fakeRunner{calls: map[string][][]byte{}}, fn: fn}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.service(t, r1, 600).Run(ctx) }()
	var saved struct {
		harness.Position
	}
	waitFor(t, 20*time.Second, "the window's state saved with its checkpoint while the service runs", func() bool {
		b, err := os.ReadFile(filepath.Join(w.dir, "mappings", mapping+".json"))
		if err != nil || json.Unmarshal(b, &saved) != nil {
			return false
		}
		for id, win := range saved.Windows {
			if win.State["n"] == "1" && saved.Checkpoints[id] != "" {
				return true
			}
		}
		return false
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	w.put(t, "pay_b:SUCCEEDED")
	r2 := &windowRunner{fakeRunner: fakeRunner{calls: map[string][][]byte{}}, fn: fn}
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { done <- w.service(t, r2, 600).Run(ctx2) }()
	defer func() { cancel2(); <-done }()
	waitFor(t, 20*time.Second, "the restarted window function invoked", func() bool { return len(r2.states()) > 0 })
	// The window a was counted in may have ended while the service was
	// down: then its final invoke comes first, handed the same state.
	if got := r2.states()[0]; got["n"] != "1" {
		t.Fatalf("the restarted window function was first handed %v, want the saved window's n=1", got)
	}
}
