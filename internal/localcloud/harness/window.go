package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// WindowHandler is a Lambda handler for DynamoDB stream batches of a
// mapping with a tumbling window.
type WindowHandler func(ctx context.Context, ev events.DynamoDBTimeWindowEvent) (events.DynamoDBTimeWindowEventResponse, error)

// MaxWindowState is Lambda's limit on a window's state per shard: past it
// Lambda terminates the window early.
const MaxWindowState = 1 << 20

// window is a shard's open tumbling window.
type window struct {
	open      bool
	start     time.Time
	state     map[string]string // what the last successful invocation answered
	terminate bool              // that state passed MaxWindowState
}

// NewWindowPoller returns a poller that plays a tumbling-window mapping
// (Settings.TumblingWindow > 0), the way Lambda documents it:
//
//   - windows are fixed intervals of the records' stream arrival time; a
//     batch holds records of one window;
//   - each invocation of a window is handed the state the previous
//     successful one answered (none for the first); an answer without a
//     state is a failed invocation;
//   - a failed invocation is retried (bisected, discarded) as the settings
//     say, handed the same committed state again;
//   - once the window's end has passed, or records of a later window are
//     waiting, the final invoke (no records, isFinalInvokeForWindow) is
//     made with the window's state; it is retried until it succeeds, and
//     the state is then dropped;
//   - an answered state over MaxWindowState ends the window early: the
//     next invoke is flagged isWindowTerminatedEarly with that state, and
//     the window goes on with a fresh one.
//
// Partial batch failures are refused: the harness does not play them with
// a window's state.
func NewWindowPoller(api StreamAPI, handler WindowHandler, cfg StreamConfig) (*StreamPoller, error) {
	if handler == nil {
		return nil, errors.New("harness: NewWindowPoller needs a handler")
	}
	if cfg.Settings.TumblingWindow <= 0 {
		return nil, errors.New("harness: NewWindowPoller needs Settings.TumblingWindow")
	}
	if cfg.Settings.ReportBatchItemFailures {
		return nil, errors.New("harness: a tumbling window with partial batch failures is not played")
	}
	p, err := NewStreamPoller(api, func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		return events.DynamoDBEventResponse{}, errors.New("harness: a window poller invokes its window handler")
	}, cfg)
	if err != nil {
		return nil, err
	}
	p.window = handler
	return p, nil
}

func windowOf(r types.Record, size time.Duration) time.Time {
	t := time.Now()
	if at := r.Dynamodb.ApproximateCreationDateTime; at != nil {
		t = *at
	}
	return t.UTC().Truncate(size)
}

// stateSize is the state as the answer carries it: its JSON.
func stateSize(m map[string]string) int {
	b, err := json.Marshal(m)
	if err != nil {
		return 0
	}
	return len(b)
}

// stepWindow is stepShard for a tumbling window. A window's close counts
// as one record handed over, so Drain and Run see it as work.
func (p *StreamPoller) stepWindow(ctx context.Context, sh *shard) (int, error) {
	size := p.cfg.Settings.TumblingWindow
	// A window closes after its records: not while a failed batch of it
	// waits for its retry (Lambda holds the shard until that succeeds).
	retrying := sh.attempts > 0 || len(sh.limits) > 0
	if sh.win.open && !retrying && (sh.win.terminate || !time.Now().Before(sh.win.start.Add(size))) {
		return p.closeWindow(ctx, sh)
	}
	recs, closed, err := p.fetch(ctx, sh, sh.batchLimit(p.cfg.Settings.BatchSize))
	if err != nil {
		return 0, err
	}
	if len(recs) == 0 {
		sh.limits = nil
		// A shard that ends closes its window first.
		if closed && sh.win.open {
			return p.closeWindow(ctx, sh)
		}
		sh.done = closed
		return 0, nil
	}
	if old := p.tooOld(recs); old > 0 {
		return 0, p.discard(ctx, sh, recs[:old], "RecordAgeExceeded", "")
	}
	start := windowOf(recs[0], size)
	if sh.win.open && !start.Equal(sh.win.start) {
		return p.closeWindow(ctx, sh)
	}
	n := 1
	for n < len(recs) && windowOf(recs[n], size).Equal(start) {
		n++
	}
	recs = recs[:n]
	ev, err := lambdaEvent(recs, p.cfg.StreamArn, p.cfg.Region)
	if err != nil {
		return 0, err
	}
	wev := events.DynamoDBTimeWindowEvent{DynamoDBEvent: ev, TimeWindowProperties: events.TimeWindowProperties{
		Window:  events.Window{Start: events.RFC3339EpochTime{Time: start}, End: events.RFC3339EpochTime{Time: start.Add(size)}},
		State:   maps.Clone(sh.win.state), // nil at the window's start: a fresh state
		ShardID: sh.id, EventSourceARN: p.cfg.StreamArn,
	}}
	resp, herr := invokeWindow(ctx, p.window, wev)
	if errors.Is(herr, ErrNotInvoked) {
		return p.notInvoked(ctx, sh, len(recs), herr)
	}
	sh.invokes++
	p.stats.Invocations++
	p.stats.Records += len(recs)
	if herr == nil && resp.State == nil {
		herr = errors.New("harness: the window's answer has no state: Lambda counts that a failed invocation")
	}
	log := func(outcome string, attrs ...slog.Attr) {
		attrs = append([]slog.Attr{slog.String("shard", sh.id), slog.Int("records", len(recs)),
			slog.String("first_sequence_number", aws.ToString(recs[0].Dynamodb.SequenceNumber)),
			slog.Time("window", start), slog.String("outcome", outcome)}, attrs...)
		p.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "stream batch", attrs...)
	}
	if herr != nil {
		return p.failed(ctx, sh, recs, herr, log)
	}
	log("ok", slog.Int("state_bytes", stateSize(resp.State)))
	p.succeeded(sh, recs)
	sh.win = window{open: true, start: start, state: resp.State, terminate: stateSize(resp.State) > MaxWindowState}
	return len(recs), nil
}

// closeWindow makes the window's final invoke (or its early end's). Lambda
// retries it until it succeeds, holding the shard; so does this.
func (p *StreamPoller) closeWindow(ctx context.Context, sh *shard) (int, error) {
	size := p.cfg.Settings.TumblingWindow
	early := sh.win.terminate
	wev := events.DynamoDBTimeWindowEvent{
		DynamoDBEvent: events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{}},
		TimeWindowProperties: events.TimeWindowProperties{
			Window: events.Window{Start: events.RFC3339EpochTime{Time: sh.win.start}, End: events.RFC3339EpochTime{Time: sh.win.start.Add(size)}},
			State:  maps.Clone(sh.win.state), ShardID: sh.id, EventSourceARN: p.cfg.StreamArn,
			IsFinalInvokeForWindow: !early, IsWindowTerminatedEarly: early,
		},
	}
	resp, err := invokeWindow(ctx, p.window, wev)
	if errors.Is(err, ErrNotInvoked) {
		return p.notInvoked(ctx, sh, 0, err)
	}
	p.stats.Invocations++
	if err == nil && resp.State == nil {
		err = errors.New("harness: the window's answer has no state: Lambda counts that a failed invocation")
	}
	attrs := []slog.Attr{slog.String("shard", sh.id), slog.Time("window", sh.win.start), slog.Bool("early", early)}
	if err != nil {
		p.stats.FunctionErrors++
		p.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "window close failed", append(attrs, slog.String("error", err.Error()))...)
		return 0, nil // Run pauses before the retry, as Lambda backs off
	}
	p.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "window closed", attrs...)
	sh.commits++
	if early {
		p.stats.WindowsTerminatedEarly++
		sh.win = window{open: true, start: sh.win.start} // the same window, a fresh state
	} else {
		p.stats.WindowsClosed++
		sh.win = window{}
	}
	return 1, nil
}

func invokeWindow(ctx context.Context, h WindowHandler, ev events.DynamoDBTimeWindowEvent) (resp events.DynamoDBTimeWindowEventResponse, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("harness: window handler panicked: %v", r)
		}
	}()
	return h(ctx, ev)
}
