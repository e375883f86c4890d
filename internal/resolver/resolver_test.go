package resolver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/psp"
	"github.com/oncepay/oncepay/internal/resolver"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

var ctx = context.Background()

func loseReply(t *testing.T, w *worldtest.World, pid string) {
	t.Helper()
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.ChargeKey(pid)}, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
		t.Fatal(err)
	}
}

func run(t *testing.T, r *resolver.Resolver) resolver.Report {
	t.Helper()
	rep, err := r.Run(ctx)
	if err != nil {
		t.Fatalf("resolver run: %v (report %+v)", err, rep)
	}
	return rep
}

func outboxItem(t *testing.T, w *worldtest.World, eventID string) bool {
	t.Helper()
	out, err := w.Dynamo.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(w.OutboxTable), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"event_id": &types.AttributeValueMemberS{Value: eventID}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Item) > 0
}

// The story's main line (docs/mechanism.md#seed-part-0,
// docs/mechanism.md#seed-part-5): the PSP charges and the reply is lost, so
// the payment is UNKNOWN behind a stored pointer. The resolver replays the
// derived key with the row's parameters, gets the saved charge back, settles
// by CAS, rewrites the pointer into the final answer (the API's bytes), and
// publishes the event. One charge.
func TestLostReplyIsSettledByTheResolverWithTheChargeFromTheReplay(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	pid := ids.PaymentID(ids.Scope("u1", "K1"))
	loseReply(t, w, pid)
	if r := w.Pay("u1", "K1", worldtest.Body3000); r.Status != http.StatusAccepted {
		t.Fatalf("first call = %d %s", r.Status, r.Body)
	}
	if rec, _ := w.Record("u1", "K1"); !rec.Pointer {
		t.Fatalf("record = %+v, want a pointer", rec)
	}
	w.Clock.Advance(time.Second)

	rep := run(t, w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{}))
	if rep.Claimed != 1 || rep.Succeeded != 1 || rep.PointersRewritten != 1 || rep.Published != 1 || rep.PSPCalls != 1 {
		t.Fatalf("report = %+v", rep)
	}
	ch := w.Sim.Charges()
	if len(ch) != 1 || ch[0].IdempotencyKey != ids.ChargeKey(pid) {
		t.Fatalf("charges = %+v, want one under the derived key", ch)
	}
	p := w.Row("u1", "K1")
	if p.State != ledger.Succeeded || p.PSPCharge != ch[0].ID {
		t.Fatalf("row = %s charge %q, want SUCCEEDED with %s from the replay", p.State, p.PSPCharge, ch[0].ID)
	}
	// The stored pointer is now the final answer, byte for byte the API's.
	rec, found := w.Record("u1", "K1")
	want, _ := api.FinalAnswer(p)
	if !found || rec.Pointer || rec.Answer == nil || rec.Answer.Status != http.StatusCreated || string(rec.Answer.Body) != string(want.Body) ||
		rec.Answer.Headers.Get("Content-Type") != want.Headers.Get("Content-Type") {
		t.Fatalf("record = %+v, want the final answer %s", rec, want.Body)
	}
	repeat := w.Pay("u1", "K1", worldtest.Body3000)
	if repeat.Status != http.StatusCreated || string(repeat.Body) != string(want.Body) || repeat.Headers.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("repeat = %d %s", repeat.Status, repeat.Body)
	}
	if !outboxItem(t, w, ids.EventID(pid, "SUCCEEDED")) {
		t.Fatal("the event was not put into the outbox")
	}
	if n := w.Count(`SELECT count(*) FROM journal_entries WHERE payment_id = $1`, pid); n != 2 {
		t.Fatalf("journal entries = %d", n)
	}
	if got := w.Metric("ResolverSucceeded"); got != 1 {
		t.Fatalf("ResolverSucceeded = %v", got)
	}
	// Nothing is left to do.
	if rep := run(t, w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{})); rep.Claimed != 0 || rep.PSPCalls != 0 {
		t.Fatalf("second run = %+v", rep)
	}
	if n := len(w.Sim.Charges()); n != 1 {
		t.Fatalf("charges = %d", n)
	}
}

// A crashed owner (docs/mechanism.md#seed-part-3): the intent is written, the
// owner dies before the PSP call. The resolver leaves the PENDING row alone
// until its deadline plus the margin has passed, then replays the call — the
// first one to reach the PSP — and settles it. The owner's IN_PROGRESS record
// is never touched.
func TestAStalePendingRowIsSettledOnlyAfterItsDeadlinePlusTheMargin(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	w.Hooks.AfterPendingInsert = func(context.Context) error { return api.ErrCrash }
	w.Rebuild()
	if r := w.Pay("u1", "K1", worldtest.Body3000); r.Status != http.StatusInternalServerError {
		t.Fatalf("crashed request = %d", r.Status)
	}
	res := w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{})
	w.Clock.Advance(w.Timing.Deadline + w.Timing.Margin) // deadline + margin reached, not passed
	if rep := run(t, res); rep.Claimed != 0 {
		t.Fatalf("the resolver took a PENDING row whose owner may still run: %+v", rep)
	}
	w.Clock.Advance(time.Millisecond)
	rep := run(t, res)
	if rep.Claimed != 1 || rep.Succeeded != 1 || rep.PointersRewritten != 0 {
		t.Fatalf("report = %+v", rep)
	}
	if p := w.Row("u1", "K1"); p.State != ledger.Succeeded || len(w.Sim.Charges()) != 1 {
		t.Fatalf("row %s, charges %d", p.State, len(w.Sim.Charges()))
	}
	if rec, _ := w.Record("u1", "K1"); rec.State != idem.InProgress {
		t.Fatalf("the crashed owner's record = %+v: the resolver must not touch IN_PROGRESS", rec)
	}
	// The phone's retry takes the lease over and answers from the row.
	w.Hooks = api.Hooks{}
	w.Rebuild()
	if r := w.Pay("u1", "K1", worldtest.Body3000); r.Status != http.StatusCreated || len(w.Sim.Charges()) != 1 {
		t.Fatalf("retry = %d %s, charges %d", r.Status, r.Body, len(w.Sim.Charges()))
	}
}

// The resolver crashes after the PSP answered and before the CAS. Its
// lease keeps the next run off the row until it lapses; then the next run
// replays again (the PSP answers from its saved result) and settles. One
// charge.
func TestResolverCrashBetweenTheReplayAndTheCASTheNextRunFinishes(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	pid := ids.PaymentID(ids.Scope("u1", "K1"))
	loseReply(t, w, pid)
	w.Pay("u1", "K1", worldtest.Body3000)

	crashing := w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{
		Hooks: resolver.Hooks{AfterPSPAnswer: func(context.Context, string) error { return resolver.ErrCrash }},
	})
	if rep := run(t, crashing); rep.Crashed != 1 || rep.PSPCalls != 1 {
		t.Fatalf("crashing run = %+v", rep)
	}
	if p := w.Row("u1", "K1"); p.State != ledger.Unknown {
		t.Fatalf("row = %s after the crash", p.State)
	}
	next := w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{})
	if rep := run(t, next); rep.Claimed != 0 {
		t.Fatalf("a run took a row another run still holds: %+v", rep)
	}
	w.Clock.Advance(w.ResolverConfig().Lease + time.Second)
	rep := run(t, next)
	if rep.Claimed != 1 || rep.Succeeded != 1 {
		t.Fatalf("next run = %+v", rep)
	}
	ch := w.Sim.Charges()
	if p := w.Row("u1", "K1"); len(ch) != 1 || p.State != ledger.Succeeded || p.PSPCharge != ch[0].ID {
		t.Fatalf("row %s charge %q, charges %+v", p.State, p.PSPCharge, ch)
	}
	var attempts int
	if err := w.Pool.QueryRow(ctx, `SELECT resolve_attempts FROM payments WHERE payment_id = $1`, pid).Scan(&attempts); err != nil || attempts != 2 {
		t.Fatalf("resolve_attempts = %d, %v", attempts, err)
	}
}

// insertOpen writes an open payments row directly, as the API would have
// left it.
func insertOpen(t *testing.T, w *worldtest.World, caller, key, state string, createdAgo time.Duration) string {
	t.Helper()
	pid := ids.PaymentID(ids.Scope(caller, key))
	if _, err := w.Pool.Exec(ctx, `
		INSERT INTO payments (payment_id, caller_id, client_key, fingerprint, amount, currency, merchant_id, order_id,
		                      payment_method, state, deadline_at, created_at)
		VALUES ($1, $2, $3, 'H', 3000, 'USD', 'm1', '42', 'pm_card_visa', $4, $5, now() - make_interval(secs => $6))`,
		pid, caller, key, state, w.Clock.Now().Add(-time.Minute), createdAgo.Seconds()); err != nil {
		t.Fatal(err)
	}
	return pid
}

// After the PSP key window (docs/mechanism.md#seed-part-1): the PSP may have
// forgotten the key, and a replay would be a new charge. The resolver looks
// the payment up by our reference instead: found -> settled with its charge
// (and no new charge); NotFound after the window -> no charge exists ->
// FAILED.
func TestAfterTheKeyWindowTheResolverLooksUpAndNeverReplays(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	charged := insertOpen(t, w, "u1", "K-old-charged", "UNKNOWN", 25*time.Hour)
	never := insertOpen(t, w, "u1", "K-old-never", "UNKNOWN", 25*time.Hour)
	// 25 hours ago the charge went through; the PSP has forgotten its key since.
	res, err := w.PSP.Charge(ctx, psp.ChargeRequest{IdempotencyKey: ids.ChargeKey(charged), PaymentID: charged, MerchantID: "m1",
		Amount: 3000, Currency: "USD", PaymentMethod: "pm_card_visa"})
	if err != nil || res.Outcome != psp.Succeeded {
		t.Fatalf("setup charge: %+v %v", res, err)
	}
	w.Sim.Advance(25 * time.Hour)

	rep := run(t, w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{}))
	if rep.Claimed != 2 || rep.Succeeded != 1 || rep.Failed != 1 {
		t.Fatalf("report = %+v", rep)
	}
	if n := len(w.Sim.Charges()); n != 1 {
		t.Fatalf("charges = %d: a replay after the window charged anew", n)
	}
	if p := w.Row("u1", "K-old-charged"); p.State != ledger.Succeeded || p.PSPCharge != res.ChargeID {
		t.Fatalf("charged row = %s %q, want SUCCEEDED with %s", p.State, p.PSPCharge, res.ChargeID)
	}
	if p := w.Row("u1", "K-old-never"); p.State != ledger.Failed || p.DeclineCode != "psp_no_charge" {
		t.Fatalf("never-charged row = %s %q, want FAILED", p.State, p.DeclineCode)
	}
	_ = never
}

// Inside the window a saved 500 keeps coming back for the key (Stripe saves
// 500s): the resolver looks the payment up instead, and since NotFound proves
// nothing inside the window, it leaves the payment open — and, past the
// horizon, reports it (metric UnknownOverHorizon) for a human.
func TestASaved500IsLookedUpAndLeftOpenInsideTheWindow(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	pid := ids.PaymentID(ids.Scope("u1", "K1"))
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.ChargeKey(pid)}, Kind: pspsim.FaultError5xx}); err != nil {
		t.Fatal(err)
	}
	if r := w.Pay("u1", "K1", worldtest.Body3000); r.Status != http.StatusAccepted {
		t.Fatalf("first call = %d %s", r.Status, r.Body)
	}
	res := w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{})
	rep := run(t, res)
	if rep.Claimed != 1 || rep.Open != 1 || rep.PSPCalls != 2 || rep.OpenOverHorizon != 0 {
		t.Fatalf("report = %+v, want a replay and a look-up, left open", rep)
	}
	if p := w.Row("u1", "K1"); p.State != ledger.Unknown || len(w.Sim.Charges()) != 0 {
		t.Fatalf("row %s, charges %d", p.State, len(w.Sim.Charges()))
	}
	// Left open, its lease was given back: the next run asks again.
	w.Clock.Advance(16 * time.Minute)
	rep = run(t, res)
	if rep.Claimed != 1 || rep.Open != 1 || rep.OpenOverHorizon != 1 {
		t.Fatalf("second run = %+v", rep)
	}
	if got := w.Metric("UnknownOverHorizon"); got != 1 {
		t.Fatalf("UnknownOverHorizon summed %v over the runs, want 0 then 1", got)
	}
}

// Two runs at once (docs/mechanism.md#seed-part-5: safe to run twice at
// once): FOR UPDATE SKIP LOCKED and the lease give them disjoint rows; every
// row is settled once.
func TestTwoRunsAtOnceTakeDisjointRows(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	const n = 40
	for i := range n {
		insertOpen(t, w, "u1", fmt.Sprintf("K%02d", i), "UNKNOWN", time.Minute)
	}
	cfg := w.ResolverConfig()
	cfg.Limit = 25 // neither run can take them all
	a := w.Resolver(cfg, worldtest.ResolverOptions{})
	b := w.Resolver(cfg, worldtest.ResolverOptions{})
	var ra, rb resolver.Report
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); ra = run(t, a) }()
	go func() { defer wg.Done(); rb = run(t, b) }()
	wg.Wait()
	if ra.Claimed+rb.Claimed != n || ra.Succeeded+rb.Succeeded != n || ra.AlreadySettled+rb.AlreadySettled != 0 ||
		ra.Claimed > cfg.Limit || rb.Claimed > cfg.Limit {
		t.Fatalf("runs = %+v and %+v, want %d rows split between them", ra, rb, n)
	}
	if got := len(w.Sim.Charges()); got != n {
		t.Fatalf("charges = %d, want %d", got, n)
	}
	if c := w.Count(`SELECT count(*) FROM payments WHERE state = 'SUCCEEDED' AND resolve_attempts = 1`); c != n {
		t.Fatalf("%d rows taken exactly once, want %d", c, n)
	}
	t.Logf("run A took %d, run B took %d", ra.Claimed, rb.Claimed)
}

// The outbox sweep runs after the settles: an intent recorded but never put
// (its API died before the put) is put.
func TestTheRunSweepsAnIntentNeverPut(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	pid := insertOpen(t, w, "u1", "K1", "UNKNOWN", time.Minute)
	if _, _, moved, err := w.Ledger.Settle(ctx, pid, ledger.Outcome{State: ledger.Succeeded, PSPCharge: "ch_x"}, w.Clock.Now()); err != nil || !moved {
		t.Fatal(moved, err)
	}
	if _, err := w.Pool.Exec(ctx, `UPDATE outbox_intents SET created_at = now() - interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	rep := run(t, w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{}))
	if rep.Sweep.Found != 1 || rep.Sweep.Created != 1 || rep.Sweep.Redriven != 1 || !outboxItem(t, w, ids.EventID(pid, "SUCCEEDED")) {
		t.Fatalf("sweep = %+v", rep.Sweep)
	}
}

// Shared limits (docs/mechanism.md#seed-part-12): UNKNOWN payments pile up in
// an outage, and the resolver's replays must not starve live payments. With
// the cap at N calls/s the simulator never sees more than N of the resolver's
// requests in any one-second window (arrival times recorded in front of its
// handler), every payment is settled, and live payments made through the API
// meanwhile, on their own client, all succeed. The cap sits in the resolver's
// PSP client's transport, where the requests leave. Two shapes: 1,000
// payments with N = 200 (an outage's backlog; on a small or busy machine the
// work itself may be slower than the cap), and 60 with N = 20, light enough
// that the cap is certainly what binds: the achieved rate must then be close
// to it.
func TestResolverCapsItsPSPCallsAndLivePaymentsGoOn(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rows, capN int
		binding    bool
	}{
		{"1000 payments at 200 per second", 1000, 200, false},
		{"60 payments at 20 per second, the cap binding", 60, 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) { capScenario(t, tc.rows, tc.capN, tc.binding) })
	}
}

func capScenario(t *testing.T, rows, capN int, binding bool) {
	var mu sync.Mutex
	var arrivals []time.Time
	// The live payments get the real 5 s deadline: what is under test is
	// the PSP's capacity, not a 400 ms deadline on a busy test machine.
	w := worldtest.New(t, worldtest.Options{Timing: config.Default(), WrapSim: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Test-Caller") == "resolver" {
				mu.Lock()
				arrivals = append(arrivals, time.Now())
				mu.Unlock()
			}
			h.ServeHTTP(rw, r)
		})
	}})
	if _, err := w.Pool.Exec(ctx, `
		INSERT INTO payments (payment_id, caller_id, client_key, fingerprint, amount, currency, merchant_id, order_id,
		                      payment_method, state, deadline_at)
		SELECT 'pay_bulk_' || i, 'bulk', 'K' || i, 'H', 100 + i, 'USD', 'm' || (i % 7), 'o' || i, 'pm_card_visa', 'UNKNOWN', $1
		FROM generate_series(1, $2) AS i`, w.Clock.Now().Add(-time.Minute), rows); err != nil {
		t.Fatal(err)
	}
	cfg := w.ResolverConfig()
	cfg.PSPRate, cfg.Limit, cfg.Concurrency = float64(capN), rows, 16
	limit := resolver.NewCap(cfg.PSPRate)
	// The outbox put is left to the sweep here: DynamoDB Local serialises
	// writes to a table with a stream (tens of ms each on a long-running
	// local cloud), and this test is about the PSP, not the emulator.
	// Publishing after a settle is checked by the other tests.
	res := w.Resolver(cfg, worldtest.ResolverOptions{PSP: w.NewPSP(limit.Transport(tagTransport{})), Cap: limit, NoPublisher: true})

	// Live payments through the API, on their own PSP client, meanwhile.
	stop := make(chan struct{})
	liveDone := make(chan []api.Response)
	go func() {
		var out []api.Response
		for i := 0; ; i++ {
			select {
			case <-stop:
				liveDone <- out
				return
			default:
			}
			out = append(out, w.Pay("live", fmt.Sprintf("L%d", i), worldtest.Body3000))
			time.Sleep(50 * time.Millisecond)
		}
	}()
	start := time.Now()
	rep := run(t, res)
	elapsed := time.Since(start)
	close(stop)
	live := <-liveDone

	if rep.Claimed != rows || rep.Succeeded != rows {
		t.Fatalf("report = %+v", rep)
	}
	if n := w.Count(`SELECT count(*) FROM payments WHERE caller_id = 'bulk' AND state = 'SUCCEEDED'`); n != rows {
		t.Fatalf("%d of %d settled", n, rows)
	}
	if len(live) == 0 {
		t.Fatal("no live payment was made meanwhile")
	}
	for i, r := range live {
		if r.Status != http.StatusCreated {
			t.Fatalf("live payment %d = %d %s", i, r.Status, r.Body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(arrivals) != rows {
		t.Fatalf("the simulator saw %d resolver calls, want %d", len(arrivals), rows)
	}
	sort.Slice(arrivals, func(i, j int) bool { return arrivals[i].Before(arrivals[j]) })
	worst, j := 0, 0
	for i := range arrivals { // the most calls in any window [t, t+1s)
		for arrivals[i].Sub(arrivals[j]) >= time.Second {
			j++
		}
		worst = max(worst, i-j+1)
	}
	if worst > capN {
		t.Fatalf("%d resolver calls in one second, cap %d", worst, capN)
	}
	rate := float64(rows-1) / arrivals[len(arrivals)-1].Sub(arrivals[0]).Seconds()
	if binding && rate < 0.75*float64(capN) {
		t.Fatalf("achieved %.1f calls/s with the cap at %d: something other than the cap bound the run", rate, capN)
	}
	if got := len(w.Sim.Charges()); got != rows+len(live) {
		t.Fatalf("charges = %d, want %d + %d live", got, rows, len(live))
	}
	t.Logf("%d payments settled in %s: busiest 1 s window %d calls (cap %d), %.1f calls/s; %d live payments, all 201",
		rows, elapsed.Round(time.Millisecond), worst, capN, rate, len(live))
}

// tagTransport marks the resolver's requests for the counting wrapper.
type tagTransport struct{}

func (tagTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Test-Caller", "resolver")
	return http.DefaultTransport.RoundTrip(r)
}

// The report is the Lambda's answer: it marshals.
func TestHandleReturnsTheReport(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	rep, err := w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{}).Handle(ctx, json.RawMessage(`{"source":"aws.events"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(rep)
	if !strings.Contains(string(b), `"claimed":0`) {
		t.Fatalf("report = %s", b)
	}
}
