package totals

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncepay/oncepay/cdk/oncepay/totalstable"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/outbox"
)

// Version says what the job counts: the story's v1 counts declined payments
// (its bug), v2 skips them.
type Version = totalstable.Version

// The versions (totalstable's, which the construct checks).
const (
	V1 = totalstable.V1
	V2 = totalstable.V2
)

// DefaultHorizon is the acceptance horizon: a copy whose event time +
// horizon is at or before the watermark is late (the story's 7,200 s).
const DefaultHorizon = 2 * time.Hour

// Late is a copy rejected as too late to count, or a key a lost window
// state had counted: the recount queue's message (package recount recounts
// its Key from the ledger once its day is over).
type Late struct {
	// EventID is the late copy's; for a lost state's key it is
	// "lost-state:<shard>:<first>-<last>", the checkpoints whose runs
	// wrote what the lost state counted.
	EventID    string    `json:"event_id"`
	PaymentID  string    `json:"payment_id"`
	MerchantID string    `json:"merchant_id"`
	Day        string    `json:"day"`
	Currency   string    `json:"currency"`
	OccurredAt time.Time `json:"occurred_at"`
	Watermark  time.Time `json:"watermark"` // what it was late against
	Shard      string    `json:"shard"`
}

// Recount receives each late copy; an error fails the invocation, so Lambda
// retries it from the state it was handed (the copy is sent again: the
// recount is a recount, repeating it is harmless).
type Recount func(ctx context.Context, l Late) error

// SeenCache is where seen ids live when they are kept outside the state:
// the story's counterfactual, a test switch only (Config.OutsideSeen).
type SeenCache interface {
	Has(id string) bool
	Add(id string)
}

// Config configures a Job. Zero fields take the defaults.
type Config struct {
	Version Version       // required: V1 or V2
	Sink    Sink          // required
	Recount Recount       // required
	Horizon time.Duration // default DefaultHorizon
	Logger  *slog.Logger
	Metrics *metrics.Emitter

	// The story's counterfactuals, for tests: no full flush after a
	// restore (branch S), the watermark not kept in the state (no floor),
	// seen ids in an outside cache.
	NoFlush     bool
	NoFloor     bool
	OutsideSeen SeenCache

	// AfterFlush, when set, runs between a restore's flush and its replay
	// (tests read the sink there).
	AfterFlush func(ctx context.Context, shard string)
}

// ErrStaleState is a state Lambda handed that is older than what the sink
// holds from committed runs: see Handle.
var ErrStaleState = errors.New("totals: stale state")

// Job is the merchants' daily totals job: a handler for Lambda's tumbling
// window over the outbox table's stream.
type Job struct{ cfg Config }

// New checks cfg and returns a Job.
func New(cfg Config) (*Job, error) {
	if cfg.Version != V1 && cfg.Version != V2 {
		return nil, fmt.Errorf("totals: version %d is not 1 or 2", cfg.Version)
	}
	if cfg.Sink == nil || cfg.Recount == nil {
		return nil, errors.New("totals: Config needs a Sink and a Recount")
	}
	if cfg.Horizon == 0 {
		cfg.Horizon = DefaultHorizon
	}
	if cfg.Horizon < 0 {
		return nil, fmt.Errorf("totals: horizon %s is negative", cfg.Horizon)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Job{cfg: cfg}, nil
}

// Delta is what an event adds to its merchant's total under version v, and
// whether it counts at all: the job's rule, and the recount's (package
// recount), which must count what the job counts.
func Delta(v Version, e event.Event) (int64, bool) {
	switch e.State {
	case event.Succeeded, event.RefundFailed:
		return e.Amount, true
	case event.Refunded:
		return -e.Amount, true
	case event.Failed:
		return e.Amount, v == V1 // v1's bug: a declined payment counted
	}
	return 0, false
}

// Handle processes one invocation of the window. It returns the state
// Lambda checkpoints with the batch's position; an error makes Lambda hand
// the same batch and the same (older) state again.
func (j *Job) Handle(ctx context.Context, ev events.DynamoDBTimeWindowEvent) (events.DynamoDBTimeWindowEventResponse, error) {
	shard := ev.ShardID
	log := j.cfg.Logger.With("scope", "totals", "shard", shard, "version", int(j.cfg.Version))
	handed, ok, err := Decode(ev.State)
	if err != nil {
		return events.DynamoDBTimeWindowEventResponse{}, err
	}
	if !ok {
		// A fresh state: a new window, or one Lambda terminated early. What
		// outlives a window came through the last window's carry.
		carry, found, err := j.cfg.Sink.LoadCarry(ctx, shard)
		if err != nil {
			return events.DynamoDBTimeWindowEventResponse{}, err
		}
		if found {
			handed = carry
		}
	}
	st := handed.clone()

	mark, written, err := j.cfg.Sink.Newest(ctx, shard)
	if err != nil {
		return events.DynamoDBTimeWindowEventResponse{}, err
	}
	window := ev.Window.Start.Time
	switch {
	case !written || mark.Tag < st.Checkpoint:
		// Nothing written from this state or after it.
	case !ok && (mark.Tag > st.Checkpoint || mark.elsewhere(window)):
		// A fresh state, and the sink holds writes its carry never saw
		// that no lost try of this batch left (that one was handed this
		// carry and marked in this window): the window state that counted
		// them was dropped, its final invoke discarded. Lambda will not
		// hand those records again (docs/stream-job.md#lost-state).
		if st, err = j.recoverLost(ctx, shard, st, mark, log); err != nil {
			return events.DynamoDBTimeWindowEventResponse{}, err
		}
	case mark.Tag > st.Checkpoint:
		// A lost run marks the checkpoint it was handed, and only a run
		// marks: a mark past the state Lambda handed means answers Lambda
		// already committed were made from a newer one. Their records will
		// not come again, so flushing to this state would erase them; the
		// shard stops here, loudly (docs/stream-job.md#stale-state).
		j.cfg.Metrics.Count("TotalsStaleStates", 1)
		log.Error("stale state", "checkpoint", st.Checkpoint, "newest_tag", mark.Tag)
		return events.DynamoDBTimeWindowEventResponse{}, fmt.Errorf("%w: %s was handed checkpoint %d, the sink holds writes of checkpoint %d",
			ErrStaleState, shard, st.Checkpoint, mark.Tag)
	default:
		// A restore: a run handed this same checkpoint already wrote to
		// the sink, and its answer was lost with the state it built.
		j.cfg.Metrics.Count("TotalsRestores", 1)
		log.Warn("restore", "checkpoint", st.Checkpoint, "newest_tag", mark.Tag, "flush", !j.cfg.NoFlush)
		if !j.cfg.NoFlush {
			if err := j.flush(ctx, shard, st); err != nil {
				return events.DynamoDBTimeWindowEventResponse{}, err
			}
		}
		if j.cfg.AfterFlush != nil {
			j.cfg.AfterFlush(ctx, shard)
		}
	}

	watermark := st.Floor
	if j.cfg.NoFloor {
		watermark = time.Time{}
	}
	touched := map[Key]bool{}
	var counted, dups, late int
	for _, rec := range ev.Records {
		if seq := rec.Change.SequenceNumber; st.Through != "" && sequenceNumber(seq) && !sequenceAfter(seq, st.Through) {
			dups++ // counted by the lost state this one was rebuilt from
			continue
		}
		e, ok, err := eventOf(rec)
		if err != nil {
			// Poison: failing would stall the shard behind it until the
			// record ages out. The relay reads the same record and
			// reports it; here it is logged and counted.
			j.cfg.Metrics.Count("TotalsUnreadable", 1)
			log.Error("unreadable record", "sequence_number", rec.Change.SequenceNumber, "err", err)
			continue
		}
		if !ok {
			continue
		}
		// To the millisecond, as the state keeps it: the late check and
		// the expiry must compare what the state will hold.
		at := e.OccurredAt.UTC().Truncate(time.Millisecond)
		key := Key{Merchant: e.MerchantID, Day: at.Format(dayLayout), Currency: e.Currency}
		if j.seen(st, e.EventID) {
			dups++
			continue
		}
		// Late against the watermark, or against the record's own arrival:
		// a shard's first state (a child after a split or a roll-over)
		// has no floor, and an item re-created after TTL removed it (a
		// day later at least) must not count again there.
		against := watermark
		if arrived := rec.Change.ApproximateCreationDateTime.Time; !j.cfg.NoFloor && arrived.After(against) {
			against = arrived
		}
		if !at.Add(j.cfg.Horizon).After(against) {
			late++
			log.Warn("late copy", "event_id", e.EventID, "payment_id", e.PaymentID, "occurred_at", at, "watermark", against)
			if err := j.cfg.Recount(ctx, Late{EventID: e.EventID, PaymentID: e.PaymentID, MerchantID: e.MerchantID,
				Day: key.Day, Currency: key.Currency, OccurredAt: at, Watermark: against, Shard: shard}); err != nil {
				return events.DynamoDBTimeWindowEventResponse{}, fmt.Errorf("totals: recount %s: %w", e.EventID, err)
			}
			continue
		}
		j.markSeen(st, e.EventID, at)
		if d, counts := Delta(j.cfg.Version, e); counts {
			st.Totals[key] += d
			touched[key] = true
			counted++
		}
		if at.After(watermark) {
			watermark = at
		}
	}
	j.expire(st, watermark, touched)
	if watermark.After(st.Floor) {
		st.Floor = watermark
	}

	if len(touched) > 0 {
		// The mark goes first: a run that dies between the two leaves a
		// mark with nothing behind it, and a flush that finds nothing to
		// delete is harmless; the other order would hide a write.
		if err := j.cfg.Sink.MarkNewest(ctx, shard, Mark{Tag: st.Checkpoint, Window: window, Through: lastSequence(ev.Records)}); err != nil {
			return events.DynamoDBTimeWindowEventResponse{}, err
		}
		out := make(map[Key]int64, len(touched))
		for k := range touched {
			out[k] = st.Totals[k]
		}
		if err := j.cfg.Sink.Put(ctx, shard, st.Checkpoint, out); err != nil {
			return events.DynamoDBTimeWindowEventResponse{}, err
		}
	}
	next := st
	next.Checkpoint++
	if ev.IsFinalInvokeForWindow || ev.IsWindowTerminatedEarly {
		// Lambda drops the state after this invoke: what must outlive the
		// window goes to the sink, read back by the next fresh state.
		if err := j.cfg.Sink.SaveCarry(ctx, shard, next); err != nil {
			return events.DynamoDBTimeWindowEventResponse{}, err
		}
	}
	j.cfg.Metrics.Count("TotalsLateCopies", late)
	j.cfg.Metrics.Count("TotalsDuplicates", dups)
	// Lambda ends a window early past 1 MB of state: the alarm on this
	// fires well before, while there is time to act (docs/stream-job.md).
	j.cfg.Metrics.Bytes("TotalsStateBytes", next.Size())
	log.Info("window batch", "records", len(ev.Records), "counted", counted, "duplicates", dups, "late", late,
		"checkpoint", st.Checkpoint, "keys_written", len(touched), "final", ev.IsFinalInvokeForWindow,
		"terminated_early", ev.IsWindowTerminatedEarly, "state_bytes", next.Size())
	return events.DynamoDBTimeWindowEventResponse{TimeWindowEventResponseProperties: events.TimeWindowEventResponseProperties{State: next.Encode()}}, nil
}

// elsewhere reports whether m was made in another window than w; a mark or
// an event that does not say is taken as the same window (a restore).
func (m Mark) elsewhere(w time.Time) bool {
	return !m.Window.IsZero() && !w.IsZero() && !m.Window.Equal(w.UTC().Truncate(time.Millisecond))
}

// recoverLost rebuilds, from the sink, a window state Lambda dropped after
// its runs committed: st is the carry the fresh state loaded (checkpoint 0
// and empty without one), mark the sink's newest. Every key tagged at or
// after st's checkpoint was written by a run of the lost chain: the state
// takes its total as the sink holds it (what the last committed run
// counted), and the key goes to the recount queue, which recounts its day
// from the ledger once it is over (the sink may also hold a discarded
// batch's writes, which no run of the chain committed). The rebuilt state
// goes on past every tag written and is saved as the carry before the
// batch is processed, so a retry of this run restores from it instead of
// adopting this run's own writes.
func (j *Job) recoverLost(ctx context.Context, shard string, st State, mark Mark, log *slog.Logger) (State, error) {
	keys, err := j.cfg.Sink.TaggedSince(ctx, shard, st.Checkpoint)
	if err != nil {
		return State{}, err
	}
	held, err := j.cfg.Sink.Read(ctx, shard, keys)
	if err != nil {
		return State{}, err
	}
	id := fmt.Sprintf("lost-state:%s:%d-%d", shard, st.Checkpoint, mark.Tag)
	for _, k := range keys {
		if err := j.cfg.Recount(ctx, Late{EventID: id, MerchantID: k.Merchant, Day: k.Day, Currency: k.Currency,
			Watermark: st.Floor, Shard: shard}); err != nil {
			return State{}, fmt.Errorf("totals: recount %s of %s: %w", k, id, err)
		}
	}
	for k, n := range held {
		st.Totals[k] = n
	}
	if sequenceNumber(mark.Through) && (st.Through == "" || sequenceAfter(mark.Through, st.Through)) {
		st.Through = mark.Through
	}
	from := st.Checkpoint
	st.Checkpoint = mark.Tag + 1
	if err := j.cfg.Sink.SaveCarry(ctx, shard, st); err != nil {
		return State{}, err
	}
	j.cfg.Metrics.Count("TotalsLostStates", 1)
	log.Error("lost window state: its runs' totals kept, their keys sent to the recount", "carry_checkpoint", from,
		"newest_tag", mark.Tag, "newest_window", mark.Window, "keys", len(keys), "checkpoint", st.Checkpoint)
	return st, nil
}

// lastSequence is the highest sequence number of a batch ("" if none).
func lastSequence(recs []events.DynamoDBEventRecord) string {
	var last string
	for _, r := range recs {
		if seq := r.Change.SequenceNumber; sequenceNumber(seq) && (last == "" || sequenceAfter(seq, last)) {
			last = seq
		}
	}
	return last
}

// flush is the full flush after a restore to checkpoint st: every key of
// the restored state rewritten with its tag, then every key written at or
// after that tag which the state does not hold deleted.
func (j *Job) flush(ctx context.Context, shard string, st State) error {
	if err := j.cfg.Sink.Put(ctx, shard, st.Checkpoint, st.Totals); err != nil {
		return err
	}
	since, err := j.cfg.Sink.TaggedSince(ctx, shard, st.Checkpoint)
	if err != nil {
		return err
	}
	var gone []Key
	for _, k := range since {
		if _, held := st.Totals[k]; !held {
			gone = append(gone, k)
		}
	}
	return j.cfg.Sink.Delete(ctx, shard, gone)
}

func (j *Job) seen(st State, id string) bool {
	if j.cfg.OutsideSeen != nil {
		return j.cfg.OutsideSeen.Has(id)
	}
	_, ok := st.Seen[id]
	return ok
}

func (j *Job) markSeen(st State, id string, at time.Time) {
	if j.cfg.OutsideSeen != nil {
		j.cfg.OutsideSeen.Add(id)
		return
	}
	st.Seen[id] = at
}

// expire drops what the watermark has put past the horizon: seen ids whose
// copies would now be rejected as late anyway (the same boundary, so an
// accepted copy always finds its original), and totals of days no accepted
// event can reach any more.
func (j *Job) expire(st State, watermark time.Time, touched map[Key]bool) {
	for id, at := range st.Seen {
		if !at.Add(j.cfg.Horizon).After(watermark) {
			delete(st.Seen, id)
		}
	}
	for k := range st.Totals {
		day, err := time.Parse(dayLayout, k.Day)
		if err != nil || touched[k] {
			continue
		}
		if !day.Add(24 * time.Hour).Add(j.cfg.Horizon).After(watermark) {
			delete(st.Totals, k)
		}
	}
}

// eventOf reads the payment event of an outbox stream record; ok is false
// for what is not one: a MODIFY, a TTL's REMOVE, an item with no payload
// such as the relay's catch-up markers.
//
// Only an INSERT counts. The outbox item is created once per event id (the
// API's put is conditional, a re-drive creates it only when it is gone), so
// its INSERT is the event; a MODIFY is a re-drive's copy for the relay. A
// copy may land in another shard than its original (shards roll over about
// every four hours), whose state has never seen the id: counting INSERTs
// only keeps it out without carrying seen ids along the shard lineage. A
// re-created item is an INSERT again, but a TTL removal comes a day after
// the item's last write, so its copy is late by its arrival (Handle).
func eventOf(rec events.DynamoDBEventRecord) (event.Event, bool, error) {
	if rec.EventName != string(events.DynamoDBOperationTypeInsert) {
		return event.Event{}, false, nil
	}
	p, ok := rec.Change.NewImage[outbox.AttrPayload]
	if !ok || p.DataType() != events.DataTypeString {
		return event.Event{}, false, nil
	}
	e, err := event.Unmarshal([]byte(p.String()))
	if err != nil {
		return event.Event{}, false, err
	}
	if e.OccurredAt.IsZero() {
		return event.Event{}, false, fmt.Errorf("totals: event %s has no occurred_at", e.EventID)
	}
	if !validCurrency(e.Currency) {
		return event.Event{}, false, fmt.Errorf("totals: event %s's currency %q is not three letters A-Z", e.EventID, e.Currency)
	}
	return e, true, nil
}
