package totals_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
	"github.com/oncepay/oncepay/internal/totals"
)

// These tests play Lambda's part by hand: each invocation is handed the
// state the previous one answered, and a lost answer (the run died after
// writing) is played by handing the next run the older state again, as
// Lambda's retry from the last checkpoint does.

const shard = "shardId-00000001"

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

type world struct {
	t       *testing.T
	db      *dynamodb.Client
	sink    *totals.Table
	sqs     *sqs.Client
	recount testenv.Queue
	send    totals.Recount
	day     string // the day the totals are read for (default t0's)
}

func newWorld(t *testing.T) *world {
	t.Helper()
	db := testenv.DynamoDB(t)
	name := "t-totals-" + testenv.RandomID(6)
	if _, err := db.CreateTable(context.Background(), totals.TableSchema(name)); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name}) })
	sink, err := totals.NewTable(db, name)
	if err != nil {
		t.Fatal(err)
	}
	q := testenv.SQS(t)
	recount := testenv.NewStandardQueue(t, q)
	send, err := totals.RecountQueue(q, recount.URL)
	if err != nil {
		t.Fatal(err)
	}
	return &world{t: t, db: db, sink: sink, sqs: q, recount: recount, send: send}
}

func (w *world) job(cfg totals.Config) *totals.Job {
	w.t.Helper()
	cfg.Sink, cfg.Recount = w.sink, w.send
	j, err := totals.New(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	return j
}

// invocation is one window invoke's shape.
type invocation struct {
	state       map[string]string
	shard       string // default shard
	records     []events.DynamoDBEventRecord
	final       bool
	earlyFinish bool
	window      time.Time // the window's start; default t0's quarter hour
}

func (w *world) invoke(j *totals.Job, in invocation) map[string]string {
	w.t.Helper()
	resp, err := w.try(j, in)
	if err != nil {
		w.t.Fatalf("invoke: %v", err)
	}
	if resp.State == nil {
		w.t.Fatal("the answer has no state: Lambda counts that a failed invocation")
	}
	return resp.State
}

// try is one invoke as Lambda makes it; the error is the function's.
func (w *world) try(j *totals.Job, in invocation) (events.DynamoDBTimeWindowEventResponse, error) {
	w.t.Helper()
	if in.shard == "" {
		in.shard = shard
	}
	if in.window.IsZero() {
		in.window = t0.Truncate(15 * time.Minute)
	}
	ev := events.DynamoDBTimeWindowEvent{
		DynamoDBEvent: events.DynamoDBEvent{Records: in.records},
		TimeWindowProperties: events.TimeWindowProperties{
			State: in.state, ShardID: in.shard, IsFinalInvokeForWindow: in.final, IsWindowTerminatedEarly: in.earlyFinish,
			Window: events.Window{Start: events.RFC3339EpochTime{Time: in.window},
				End: events.RFC3339EpochTime{Time: in.window.Add(15 * time.Minute)}},
		},
	}
	return j.Handle(context.Background(), ev)
}

// total reads a merchant's day total from the sink as a reader would.
func (w *world) total(merchant string) (int64, bool) {
	w.t.Helper()
	return w.totalIn(merchant, "EUR")
}

func (w *world) totalIn(merchant, currency string) (int64, bool) {
	w.t.Helper()
	day := w.day
	if day == "" {
		day = t0.Format("2006-01-02")
	}
	n, found, err := w.sink.DayTotal(context.Background(), totals.Key{Merchant: merchant, Day: day, Currency: currency})
	if err != nil {
		w.t.Fatal(err)
	}
	return n, found
}

func (w *world) wantTotal(merchant string, want int64) {
	w.t.Helper()
	if got, found := w.total(merchant); !found || got != want {
		w.t.Errorf("%s's total = %d (found %v), want %d", merchant, got, found, want)
	}
}

func (w *world) wantNoTotal(merchant string) {
	w.t.Helper()
	if got, found := w.total(merchant); found {
		w.t.Errorf("%s has a total of %d, want none", merchant, got)
	}
}

func (w *world) lates() []totals.Late {
	w.t.Helper()
	var out []totals.Late
	for _, m := range testenv.Messages(w.t, w.sqs, w.recount.URL) {
		var l totals.Late
		if err := json.Unmarshal([]byte(*m.Body), &l); err != nil {
			w.t.Fatalf("recount message %q: %v", *m.Body, err)
		}
		out = append(out, l)
	}
	return out
}

// record is the outbox stream's record of e (INSERT, or MODIFY for a
// re-drive of the same event).
func record(t *testing.T, e event.Event, name events.DynamoDBOperationType, seq int) events.DynamoDBEventRecord {
	t.Helper()
	b, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return events.DynamoDBEventRecord{
		EventName: string(name), EventSource: "aws:dynamodb",
		Change: events.DynamoDBStreamRecord{
			SequenceNumber: fmt.Sprintf("%021d", seq),
			Keys:           map[string]events.DynamoDBAttributeValue{outbox.AttrEventID: events.NewStringAttribute(e.EventID)},
			NewImage: map[string]events.DynamoDBAttributeValue{
				outbox.AttrEventID:    events.NewStringAttribute(e.EventID),
				outbox.AttrMerchantID: events.NewStringAttribute(e.MerchantID),
				outbox.AttrPayload:    events.NewStringAttribute(string(b)),
			},
		},
	}
}

func payment(id, state, merchant string, amount int64, at time.Time) event.Event {
	return event.Event{EventID: id + ":" + state, PaymentID: id, State: state, MerchantID: merchant,
		CallerID: "u1", Amount: amount, Currency: "EUR", OccurredAt: at}
}

var (
	evA = payment("pay_a", event.Succeeded, "m1", 12000, t0)
	evD = payment("pay_d", event.Failed, "m2", 500, t0.Add(5*time.Second))
	ev7 = payment("pay_7", event.Succeeded, "m1", 3000, t0.Add(10*time.Second))
)

// checkpointC is the story's checkpoint c: m1 at 12,000 counted, nothing
// of m2 or pay_7 yet.
func (w *world) checkpointC(j *totals.Job) map[string]string {
	return w.invoke(j, invocation{records: []events.DynamoDBEventRecord{record(w.t, evA, events.DynamoDBOperationTypeInsert, 1)}})
}

func (w *world) afterC() []events.DynamoDBEventRecord {
	return []events.DynamoDBEventRecord{
		record(w.t, evD, events.DynamoDBOperationTypeInsert, 2),
		record(w.t, ev7, events.DynamoDBOperationTypeInsert, 3),
	}
}

// The story's restore (snapshot P5): v1 wrote m2 = 500 and m1 = 15,000 and
// its run was lost; restored to checkpoint c under v2, the flush rewrites
// m1 = 12,000 and deletes m2, and the replay brings m1 to 15,000.
func TestTheRestoreLeavesTheRestoredStatePlusTheReplay(t *testing.T) {
	w := newWorld(t)
	v1 := w.job(totals.Config{Version: totals.V1})
	c := w.checkpointC(v1)
	w.wantTotal("m1", 12000)
	_ = w.invoke(v1, invocation{state: c, records: w.afterC()}) // its answer is lost
	w.wantTotal("m1", 15000)
	w.wantTotal("m2", 500) // v1's bug: the declined payment counted

	var duringFlush map[string]int64
	v2 := w.job(totals.Config{Version: totals.V2, AfterFlush: func(context.Context, string) {
		duringFlush = map[string]int64{}
		for _, m := range []string{"m1", "m2"} {
			if n, found := w.total(m); found {
				duringFlush[m] = n
			}
		}
	}})
	_ = w.invoke(v2, invocation{state: c, records: w.afterC()})
	if duringFlush == nil {
		t.Fatal("v2 handed checkpoint c again ran no flush: the restore went unseen")
	}
	if duringFlush["m1"] != 12000 {
		t.Errorf("during the flush m1 read %d, want 12,000 (the restored state)", duringFlush["m1"])
	}
	if n, found := duringFlush["m2"]; found {
		t.Errorf("during the flush m2 read %d, want it deleted", n)
	}
	w.wantTotal("m1", 15000)
	w.wantNoTotal("m2")
}

// Branch S: the same restore without the flush leaves v1's m2 = 500 for
// good: the replay never touches m2.
func TestBranchS_WithoutTheFlushV1sTotalForADeclinedPaymentStays(t *testing.T) {
	w := newWorld(t)
	v1 := w.job(totals.Config{Version: totals.V1})
	c := w.checkpointC(v1)
	_ = w.invoke(v1, invocation{state: c, records: w.afterC()})
	v2 := w.job(totals.Config{Version: totals.V2, NoFlush: true})
	next := w.invoke(v2, invocation{state: c, records: w.afterC()})
	w.wantTotal("m1", 15000)
	w.wantTotal("m2", 500)
	// And later batches never repair it.
	_ = w.invoke(v2, invocation{state: next, records: []events.DynamoDBEventRecord{
		record(t, payment("pay_e", event.Succeeded, "m1", 10, t0.Add(time.Minute)), events.DynamoDBOperationTypeInsert, 4)}})
	w.wantTotal("m2", 500)
}

// outsideCache is the counterfactual's cache: it survives the restore.
type outsideCache map[string]bool

func (c outsideCache) Has(id string) bool { return c[id] }
func (c outsideCache) Add(id string)      { c[id] = true }

// The story's dedup counterfactual: with the seen ids in an outside cache,
// the cache still holds ev_7 after the restore, its replay is dropped and
// m1 stays at 12,000; with them in the state, 15,000.
func TestSeenIDsOutsideTheStateDropTheReplayAndUnderBill(t *testing.T) {
	for _, outside := range []bool{true, false} {
		t.Run(fmt.Sprintf("outside=%v", outside), func(t *testing.T) {
			w := newWorld(t)
			cfg := totals.Config{Version: totals.V2}
			if outside {
				cfg.OutsideSeen = outsideCache{}
			}
			j := w.job(cfg)
			c := w.checkpointC(j)
			_ = w.invoke(j, invocation{state: c, records: w.afterC()}) // lost
			_ = w.invoke(j, invocation{state: c, records: w.afterC()})
			if outside {
				w.wantTotal("m1", 12000)
			} else {
				w.wantTotal("m1", 15000)
			}
		})
	}
}

// The watermark floor: a copy already too late before the lost run (its
// original's id expired from the state at the checkpoint) is rejected
// after the restore and sent to the recount queue; without the floor the
// restored run's watermark starts from nothing and counts it twice.
func TestACopyTooLateBeforeARestoreIsRejectedAfterIt(t *testing.T) {
	old := payment("pay_old", event.Succeeded, "m1", 100, t0)
	newer := payment("pay_new", event.Succeeded, "m1", 200, t0.Add(totals.DefaultHorizon+time.Second))
	later := payment("pay_x", event.Succeeded, "m1", 50, t0.Add(totals.DefaultHorizon+2*time.Second))
	for _, floor := range []bool{true, false} {
		t.Run(fmt.Sprintf("floor=%v", floor), func(t *testing.T) {
			w := newWorld(t)
			j := w.job(totals.Config{Version: totals.V2, NoFloor: !floor})
			s1 := w.invoke(j, invocation{records: []events.DynamoDBEventRecord{record(t, old, events.DynamoDBOperationTypeInsert, 1)}})
			c := w.invoke(j, invocation{state: s1, records: []events.DynamoDBEventRecord{record(t, newer, events.DynamoDBOperationTypeInsert, 2)}})
			st, _, err := totals.Decode(c)
			if err != nil {
				t.Fatal(err)
			}
			if _, held := st.Seen[old.EventID]; held {
				t.Fatalf("the checkpoint still holds %s: its horizon has passed", old.EventID)
			}
			batch := []events.DynamoDBEventRecord{
				record(t, old, events.DynamoDBOperationTypeInsert, 1), // re-delivered: a mapping restarted from an older position
				record(t, later, events.DynamoDBOperationTypeInsert, 4),
			}
			_ = w.invoke(j, invocation{state: c, records: batch}) // lost
			_ = w.invoke(j, invocation{state: c, records: batch})
			lates := w.lates()
			if floor {
				w.wantTotal("m1", 350)
				if len(lates) == 0 {
					t.Fatal("the late copy reached no recount queue")
				}
				for _, l := range lates {
					if l.EventID != old.EventID || l.MerchantID != "m1" || !l.Watermark.Equal(newer.OccurredAt) {
						t.Errorf("recount message %+v, want %s late against %s", l, old.EventID, newer.OccurredAt)
					}
				}
			} else {
				w.wantTotal("m1", 450)
				if len(lates) != 0 {
					t.Errorf("without the floor %d copies were called late: %+v", len(lates), lates)
				}
			}
		})
	}
}

// A stream record delivered twice (a mapping that restarts from an older
// position) is counted once, in one batch and across batches; the outbox
// re-drive's MODIFY is not counted at all.
func TestADuplicateRecordIsCountedOnce(t *testing.T) {
	w := newWorld(t)
	j := w.job(totals.Config{Version: totals.V2})
	s1 := w.invoke(j, invocation{records: []events.DynamoDBEventRecord{
		record(t, ev7, events.DynamoDBOperationTypeInsert, 1),
		record(t, ev7, events.DynamoDBOperationTypeInsert, 1),
		record(t, ev7, events.DynamoDBOperationTypeModify, 2),
	}})
	_ = w.invoke(j, invocation{state: s1, records: []events.DynamoDBEventRecord{
		record(t, ev7, events.DynamoDBOperationTypeInsert, 1),
		record(t, ev7, events.DynamoDBOperationTypeModify, 3),
	}})
	w.wantTotal("m1", 3000)
}

// A copy of an event in another shard than its original (the shard rolled
// over between the two writes) meets a state that never saw its id. The
// re-drive's MODIFY is not counted there; an item re-created after TTL
// removed it is an INSERT again, and is late by its arrival, though the new
// shard has no floor yet.
func TestACopyInAnotherShardIsNotCountedAgain(t *testing.T) {
	w := newWorld(t)
	j := w.job(totals.Config{Version: totals.V2})
	_ = w.invoke(j, invocation{records: []events.DynamoDBEventRecord{record(t, ev7, events.DynamoDBOperationTypeInsert, 1)}})
	redrive := record(t, ev7, events.DynamoDBOperationTypeModify, 2)
	_ = w.invoke(j, invocation{shard: "shardId-00000002", records: []events.DynamoDBEventRecord{redrive}})
	recreated := record(t, ev7, events.DynamoDBOperationTypeInsert, 3)
	recreated.Change.ApproximateCreationDateTime = events.SecondsEpochTime{Time: ev7.OccurredAt.Add(25 * time.Hour)}
	_ = w.invoke(j, invocation{shard: "shardId-00000003", records: []events.DynamoDBEventRecord{recreated}})
	w.wantTotal("m1", 3000)
	if l := w.lates(); len(l) != 1 || l[0].EventID != ev7.EventID || l[0].Shard != "shardId-00000003" {
		t.Errorf("late copies %+v, want %s once, from the new shard", l, ev7.EventID)
	}
}

// Lambda drops the state when a window closes or is terminated early: the
// final invoke's carry brings totals, seen ids and the floor to the next
// window's fresh state, so a duplicate across the boundary is counted once
// and the totals go on from where they were.
func TestTheCarryHandsTheStateAcrossWindows(t *testing.T) {
	for _, how := range []string{"final", "terminated early"} {
		t.Run(how, func(t *testing.T) {
			w := newWorld(t)
			j := w.job(totals.Config{Version: totals.V2})
			s1 := w.checkpointC(j)
			_ = w.invoke(j, invocation{state: s1, records: []events.DynamoDBEventRecord{record(t, ev7, events.DynamoDBOperationTypeInsert, 2)},
				final: how == "final", earlyFinish: how != "final"})
			// The next window: a fresh state, the same event again and a new one.
			next := []events.DynamoDBEventRecord{
				record(t, ev7, events.DynamoDBOperationTypeInsert, 2), // re-delivered
				record(t, payment("pay_f", event.Succeeded, "m1", 7, t0.Add(20*time.Minute)), events.DynamoDBOperationTypeInsert, 4),
			}
			// That first run of the new window ran v1 and its answer was
			// lost; v2, handed a fresh state again, restores from the carry
			// and the flush takes back v1's total for the declined payment.
			// A window terminated early goes on as the same window.
			var window time.Time
			if how == "final" {
				window = t0.Truncate(15 * time.Minute).Add(15 * time.Minute)
			}
			v1 := w.job(totals.Config{Version: totals.V1})
			_ = w.invoke(v1, invocation{window: window, records: append(next, record(t, evD, events.DynamoDBOperationTypeInsert, 5))})
			w.wantTotal("m2", 500)
			_ = w.invoke(j, invocation{window: window, records: append(next, record(t, evD, events.DynamoDBOperationTypeInsert, 5))})
			w.wantNoTotal("m2")
			w.wantTotal("m1", 15007)
		})
	}
}

// The very first invocation of a shard lost after writing: its retry,
// handed no state and finding no carry, is a restore to nothing.
func TestALostFirstInvocationIsARestoreToNothing(t *testing.T) {
	w := newWorld(t)
	v1 := w.job(totals.Config{Version: totals.V1})
	batch := w.afterC()
	_ = w.invoke(v1, invocation{records: batch})
	w.wantTotal("m2", 500)
	v2 := w.job(totals.Config{Version: totals.V2})
	_ = w.invoke(v2, invocation{records: batch})
	w.wantNoTotal("m2")
	w.wantTotal("m1", 3000)
}

// A state Lambda hands that is older than what committed runs wrote is
// refused: flushing to it would erase totals whose records Lambda will not
// hand over again. The sink is left as it was.
func TestAStateOlderThanCommittedRunsIsRefusedAndChangesNothing(t *testing.T) {
	w := newWorld(t)
	j := w.job(totals.Config{Version: totals.V2})
	c := w.checkpointC(j)
	s2 := w.invoke(j, invocation{state: c, records: w.afterC()})
	_ = w.invoke(j, invocation{state: s2, records: []events.DynamoDBEventRecord{
		record(t, payment("pay_g", event.Succeeded, "m3", 40, t0.Add(time.Minute)), events.DynamoDBOperationTypeInsert, 4)}})
	if _, err := w.try(j, invocation{state: c, records: w.afterC()}); !errors.Is(err, totals.ErrStaleState) {
		t.Errorf("Handle = %v, want ErrStaleState", err)
	}
	w.wantTotal("m1", 15000)
	if n, found := w.totalIn("m3", "EUR"); !found || n != 40 {
		t.Errorf("m3 = %d (found %v) after the refusal, want 40", n, found)
	}
}

// A fresh state whose window state was lost (no carry was ever saved: the
// shard's first window's close discarded, or the mapping re-created) takes
// the lost state's totals from the sink; a mapping re-created at
// TRIM_HORIZON then hands the same records again, up to the last the lost
// state's runs read, and they are not counted twice. A later one is.
func TestARebuiltStateSkipsTheRecordsItsLostStateRead(t *testing.T) {
	w := newWorld(t)
	j := w.job(totals.Config{Version: totals.V2})
	c := w.checkpointC(j)
	s2 := w.invoke(j, invocation{state: c, records: w.afterC()})
	_ = w.invoke(j, invocation{state: s2, records: []events.DynamoDBEventRecord{
		record(t, payment("pay_g", event.Succeeded, "m3", 40, t0.Add(time.Minute)), events.DynamoDBOperationTypeInsert, 4)}})
	replay := append([]events.DynamoDBEventRecord{record(t, evA, events.DynamoDBOperationTypeInsert, 1)}, w.afterC()...)
	replay = append(replay, record(t, payment("pay_h", event.Succeeded, "m1", 5, t0.Add(2*time.Minute)), events.DynamoDBOperationTypeInsert, 5))
	s := w.invoke(j, invocation{window: t0.Add(time.Hour), records: replay})
	w.wantTotal("m1", 15005)
	if n, found := w.totalIn("m3", "EUR"); !found || n != 40 {
		t.Errorf("m3 = %d (found %v), want 40", n, found)
	}
	if st, _, err := totals.Decode(s); err != nil || st.Through != fmt.Sprintf("%021d", 4) {
		t.Errorf("the rebuilt state's Through = %q (%v), want the last sequence number its lost state read", st.Through, err)
	}
	if l := w.lates(); len(l) != 2 {
		t.Errorf("%d keys named for the recount, want m1's and m3's: %+v", len(l), l)
	}
}

// Two currencies of one merchant's day are two totals, and an event time
// below the millisecond is kept as compared: a copy of it at the horizon's
// edge is late, never counted again.
func TestCurrenciesAreApartAndEventTimesAreKeptAsCompared(t *testing.T) {
	w := newWorld(t)
	j := w.job(totals.Config{Version: totals.V2})
	eur := payment("pay_e1", event.Succeeded, "m1", 100, t0.Add(500*time.Microsecond))
	usd := payment("pay_u1", event.Succeeded, "m1", 7, t0.Add(time.Second))
	usd.Currency = "USD"
	s1 := w.invoke(j, invocation{records: []events.DynamoDBEventRecord{record(t, eur, events.DynamoDBOperationTypeInsert, 1), record(t, usd, events.DynamoDBOperationTypeInsert, 2)}})
	w.wantTotal("m1", 100)
	if n, found := w.totalIn("m1", "USD"); !found || n != 7 {
		t.Errorf("m1 in USD = %d (found %v), want 7", n, found)
	}
	// The watermark lands 0.2 ms past the EUR payment's millisecond +
	// horizon: its id has expired, and its copy must be late.
	edge := payment("pay_edge", event.Succeeded, "m1", 1, t0.Add(totals.DefaultHorizon+200*time.Microsecond))
	s2 := w.invoke(j, invocation{state: s1, records: []events.DynamoDBEventRecord{record(t, edge, events.DynamoDBOperationTypeInsert, 3)}})
	_ = w.invoke(j, invocation{state: s2, records: []events.DynamoDBEventRecord{record(t, eur, events.DynamoDBOperationTypeInsert, 1)}}) // re-delivered
	w.wantTotal("m1", 101)
	if l := w.lates(); len(l) != 1 || l[0].EventID != eur.EventID {
		t.Errorf("late copies %+v, want %s once", l, eur.EventID)
	}
}

// A day no accepted event can reach any more leaves the state; the sink
// keeps its total.
func TestADayPastTheHorizonLeavesTheStateNotTheSink(t *testing.T) {
	w := newWorld(t)
	j := w.job(totals.Config{Version: totals.V2})
	s1 := w.checkpointC(j)
	nextDay := payment("pay_n", event.Succeeded, "m9", 1, t0.Truncate(24*time.Hour).Add(24*time.Hour+totals.DefaultHorizon))
	s2 := w.invoke(j, invocation{state: s1, records: []events.DynamoDBEventRecord{record(t, nextDay, events.DynamoDBOperationTypeInsert, 2)}})
	st, _, err := totals.Decode(s2)
	if err != nil {
		t.Fatal(err)
	}
	for k := range st.Totals {
		if k.Day == t0.Format("2006-01-02") {
			t.Errorf("the state still holds %s: its day is past the horizon", k)
		}
	}
	w.wantTotal("m1", 12000)
}
