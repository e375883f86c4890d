package totals_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/totals"
)

// carryDown is the real sink with its carry writes failing while down is
// set: a final invoke that fails on every retry (the table throttled, its
// key disabled, a bad deploy).
type carryDown struct {
	totals.Sink
	down atomic.Bool
}

func (c *carryDown) SaveCarry(ctx context.Context, shard string, st totals.State) error {
	if c.down.Load() {
		return errors.New("ProvisionedThroughputExceededException: the carry's write was throttled")
	}
	return c.Sink.SaveCarry(ctx, shard, st)
}

// A window's final invoke that fails past its retries is discarded: Lambda
// drops the state it was handed, and the stream position already stands
// past the window's records, which never come again. The next window's
// fresh state finds the carry of the window before (or none), older than
// the runs the sink holds. Those runs committed: their totals stay, the
// shard goes on from them, and their keys go to the recount queue; no
// window after it stops on ErrStaleState, and a lost try of the run that
// rebuilt the state is a restore like any other. Before, a mark equal to
// the carry's checkpoint read as a restore and flushed the committed run
// away, and a mark past it refused every later window.
func TestADiscardedFinalInvokeKeepsTheWindowsRunsAndNamesThemForTheRecount(t *testing.T) {
	w0 := t0.Truncate(time.Minute) // the stack's windows are a minute
	w1, w2, w3 := w0.Add(time.Minute), w0.Add(2*time.Minute), w0.Add(3*time.Minute)
	evG := payment("pay_g", event.Succeeded, "m3", 40, t0.Add(70*time.Second))
	evH := payment("pay_h", event.Succeeded, "m1", 5, t0.Add(130*time.Second))
	evI := payment("pay_i", event.Succeeded, "m1", 1, t0.Add(190*time.Second))
	for _, carried := range []bool{true, false} {
		for _, batches := range []int{1, 2} {
			t.Run(fmt.Sprintf("carried=%v/batches=%d", carried, batches), func(t *testing.T) {
				w := newWorld(t)
				sink := &carryDown{Sink: w.sink}
				j, err1 := totals.New(totals.Config{Version: totals.V2, Sink: sink, Recount: w.send})
				v1, err2 := totals.New(totals.Config{Version: totals.V1, Sink: sink, Recount: w.send})
				if err := errors.Join(err1, err2); err != nil {
					t.Fatal(err)
				}
				seq := 0
				recs := func(evs ...event.Event) []events.DynamoDBEventRecord {
					var out []events.DynamoDBEventRecord
					for _, e := range evs {
						seq++
						out = append(out, record(t, e, events.DynamoDBOperationTypeInsert, seq))
					}
					return out
				}
				// Window 0 counts pay_a and closes: its carry holds
				// m1 = 12,000. Without it, window 1 is the shard's first
				// and counts pay_a itself.
				first := []event.Event{ev7}
				if carried {
					s := w.invoke(j, invocation{window: w0, records: recs(evA)})
					_ = w.invoke(j, invocation{window: w0, state: s, final: true})
				} else {
					first = []event.Event{evA, ev7}
				}
				// Window 1: each answer committed by Lambda.
				s := w.invoke(j, invocation{window: w1, records: recs(first...)})
				if batches == 2 {
					s = w.invoke(j, invocation{window: w1, state: s, records: recs(evG)})
				}
				w.wantTotal("m1", 15000)
				// Its final invoke fails on every retry and is discarded.
				sink.down.Store(true)
				for range 3 {
					if _, err := w.try(j, invocation{window: w1, state: s, final: true}); err == nil {
						t.Fatal("the final invoke succeeded with its carry's writes failing")
					}
				}
				sink.down.Store(false)

				// Window 2, a fresh state: its first run (v1, which counts
				// the declined pay_d) writes and its answer is lost; the
				// retry (v2, a fresh state again) restores from what the
				// first rebuilt, and the flush takes m2 back.
				var s2 map[string]string
				for try, job := range []*totals.Job{v1, j} {
					resp, err := w.try(job, invocation{window: w2, records: recs(evH, evD)})
					seq -= 2 // the retry is the same batch
					if err != nil {
						t.Errorf("window 2, try %d: %v", try+1, err)
						continue
					}
					s2 = resp.State
				}
				seq += 2
				if s2 != nil {
					if _, err := w.try(j, invocation{window: w2, state: s2, final: true}); err != nil {
						t.Errorf("window 2's final invoke: %v", err)
					}
				}
				// And the windows after it run on.
				if _, err := w.try(j, invocation{window: w3, records: recs(evI)}); err != nil {
					t.Errorf("window 3: %v", err)
				}

				w.wantTotal("m1", 15006)
				w.wantNoTotal("m2")
				wantKeys := []string{"m1"}
				if batches == 2 {
					w.wantTotal("m3", 40)
					wantKeys = append(wantKeys, "m3")
				}
				// What the lost state counted, the recount counts again
				// from the ledger once its day is over: each key window 1
				// wrote is named (as often as the run naming it was tried).
				var named []string
				for _, l := range w.lates() {
					if l.Day != t0.Format("2006-01-02") || l.Currency != "EUR" || l.Shard != shard || l.EventID == "" {
						t.Errorf("recount message %+v, want a key of %s's EUR day from %s", l, l.MerchantID, shard)
					}
					if !slices.Contains(named, l.MerchantID) {
						named = append(named, l.MerchantID)
					}
				}
				slices.Sort(named)
				if !slices.Equal(named, wantKeys) {
					t.Errorf("keys named for the recount %v, want %v", named, wantKeys)
				}
			})
		}
	}
}
