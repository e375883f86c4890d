package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/awsclient"
	"github.com/oncepay/oncepay/internal/awsclient/dynamoclient"
	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/testkit/callcount"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// countedWorld rebuilds w's DynamoDB client and ledger pool with a call
// counter on the wire: an SDK middleware and a pgx tracer.
func countedWorld(b testing.TB, w *world) *callcount.Counter {
	c := callcount.New()
	cfg, err := awsclient.Config(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	db := dynamoclient.New(cfg, func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, c.AWS) })
	pc, err := pgxpool.ParseConfig(w.pool.Config().ConnString())
	if err != nil {
		b.Fatal(err)
	}
	pc.ConnConfig.Tracer = c
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	w.db, w.pool = db, pool
	w.claims = idem.NewStore(db, w.table)
	w.outbox, err = outbox.NewPublisher(db, outbox.Config{Table: testenv.NewTable(b, db, "event_id"), Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	w.ledger = ledger.New(pool)
	w.rebuild()
	return c
}

// countKinds are the answers the request counts cover, in the order one
// round makes them.
var countKinds = []string{"happy", "replay", "pointer", "inprogress", "reused"}

// countWorld is a counted world set up for the request counts: a payment
// whose PSP reply was lost (its key holds a pointer) and a key held by an
// owner that died inside its lease.
func countWorld(tb testing.TB) (*world, *callcount.Counter) {
	w := newWorld(tb)
	// A deadline long enough for a loaded machine's ledger read (the counts
	// do not depend on it), short enough that the pointer's setup, which
	// waits it out once, stays quick.
	w.timing.Deadline = 2 * time.Second
	c := countedWorld(tb, w)

	// The pointer: a first call whose PSP reply is lost past the deadline.
	pid := ids.PaymentID(ids.Scope("bench", "pointer"))
	if err := w.sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.ChargeKey(pid)}, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
		tb.Fatal(err)
	}
	if r := w.pay("bench", "pointer", body3000); r.Status != http.StatusAccepted {
		tb.Fatalf("pointer setup answered %d %s", r.Status, r.Body)
	}
	// In progress: an owner that died after its PENDING insert, inside its
	// lease (the fake clock does not move).
	w.hooks.AfterPendingInsert = func(context.Context) error { return api.ErrCrash }
	w.rebuild()
	if r := w.pay("bench", "inprogress", body3000); r.Status != http.StatusInternalServerError {
		tb.Fatalf("in-progress setup answered %d", r.Status)
	}
	w.hooks = api.Hooks{}
	w.rebuild()
	c.Take()
	return w, c
}

// countRound makes one request of each kind under a fresh key and hands
// add the counter's snapshot after each.
func countRound(tb testing.TB, w *world, c *callcount.Counter, i int, add func(kind string, s callcount.Snapshot)) {
	key := fmt.Sprintf("count-%d", i)
	if r := w.pay("bench", key, body3000); r.Status != http.StatusCreated {
		tb.Fatalf("happy answered %d %s", r.Status, r.Body)
	}
	add("happy", c.Take())
	if r := w.pay("bench", key, body3000); r.Status != http.StatusCreated || !replayedHeader(r) {
		tb.Fatalf("replay answered %d", r.Status)
	}
	add("replay", c.Take())
	if r := w.pay("bench", "pointer", body3000); r.Status != http.StatusAccepted || !replayedHeader(r) {
		tb.Fatalf("pointer render answered %d %s", r.Status, r.Body)
	}
	add("pointer", c.Take())
	if r := w.pay("bench", "inprogress", body3000); r.Status != http.StatusConflict {
		tb.Fatalf("in progress answered %d", r.Status)
	}
	add("inprogress", c.Take())
	if r := w.pay("bench", key, `{"merchant_id":"m1","order_id":"42","amount":3001,"currency":"USD","payment_method":"pm_card_visa"}`); r.Status != http.StatusUnprocessableEntity {
		tb.Fatalf("reused key answered %d", r.Status)
	}
	add("reused", c.Take())
}

// TestDurableWriteBudget holds the budget the benchmark reports: at most five
// durable writes on the happy path, none for any kind of repeat, and one PSP
// call per payment.
func TestDurableWriteBudget(t *testing.T) {
	w, c := countWorld(t)
	charges0 := len(w.charges())
	countRound(t, w, c, 0, func(kind string, s callcount.Snapshot) {
		limit := 0
		if kind == "happy" {
			limit = 5
		}
		if s.Writes > limit {
			t.Errorf("%s: %d durable writes, budget %d: %s", kind, s.Writes, limit, s.String())
		}
		t.Logf("%s: %d durable writes: %s", kind, s.Writes, s.String())
	})
	if n := len(w.charges()) - charges0; n != 1 {
		t.Errorf("PSP charges for one payment and its repeats: %d, want 1", n)
	}
}

// BenchmarkRequestCounts counts, per request, the durable writes and the
// round trips of each kind of answer: the happy path (a first call that
// charges), the replay of a final answer, the render of a pointer (a first
// call whose PSP reply was lost, answered from the row), the 409 of a key
// in progress and the 422 of a reused key. The figures are exact counts;
// TestDurableWriteBudget holds the budget of ≤ 5 durable writes on the happy
// path and none on a repeat.
func BenchmarkRequestCounts(b *testing.B) {
	w, c := countWorld(b)
	sums := map[string]*callcount.Snapshot{}
	for _, k := range countKinds {
		sums[k] = &callcount.Snapshot{Calls: map[string]int{}}
	}
	add := func(kind string, s callcount.Snapshot) {
		t := sums[kind]
		t.Writes += s.Writes
		for k, v := range s.Calls {
			t.Calls[k] += v
		}
	}
	charges0 := len(w.charges())
	n := 0
	for i := 0; b.Loop(); i++ {
		n++
		countRound(b, w, c, i, add)
	}
	b.ReportMetric(float64(len(w.charges())-charges0)/float64(n), "happy-psp-calls")
	for _, k := range countKinds {
		s := sums[k]
		per := func(v int) float64 { return float64(v) / float64(n) }
		b.ReportMetric(per(s.Writes), k+"-writes")
		b.ReportMetric(per(s.RoundTrips()), k+"-roundtrips")
		b.ReportMetric(per(s.Count("DynamoDB.PutItem")+s.Count("DynamoDB.UpdateItem")+s.Count("DynamoDB.DeleteItem")), k+"-ddb-writes")
		b.ReportMetric(per(s.Count("DynamoDB.GetItem")+s.Count("DynamoDB.Query")), k+"-ddb-reads")
		b.ReportMetric(per(s.Count("SQL.")), k+"-sql-statements")
		b.ReportMetric(per(s.Count("SQL.COMMIT")), k+"-sql-commits")
		b.Logf("%s per request: %s", k, scaled(s, n))
	}
}

func scaled(s *callcount.Snapshot, n int) string {
	out := callcount.Snapshot{Calls: map[string]int{}, Writes: s.Writes / n}
	for k, v := range s.Calls {
		out.Calls[k] = v / n
	}
	return out.String()
}
