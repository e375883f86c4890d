package harness_test

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// counter is a window handler that sums the records it has seen into its
// state ("n"), the way a tumbling-window function keeps its aggregate, and
// remembers every invocation.
type counter struct {
	calls []events.DynamoDBTimeWindowEvent
	fn    func(call int, ev events.DynamoDBTimeWindowEvent) (events.DynamoDBTimeWindowEventResponse, error, bool)
}

func (c *counter) handle(_ context.Context, ev events.DynamoDBTimeWindowEvent) (events.DynamoDBTimeWindowEventResponse, error) {
	c.calls = append(c.calls, ev)
	if c.fn != nil {
		if resp, err, done := c.fn(len(c.calls), ev); done {
			return resp, err
		}
	}
	n, _ := strconv.Atoi(ev.State["n"])
	n += len(ev.Records)
	var resp events.DynamoDBTimeWindowEventResponse
	resp.State = map[string]string{"n": strconv.Itoa(n)}
	return resp, nil
}

func windowSettings(size time.Duration) eventsource.Stream {
	s := eventsource.DefaultStream()
	s.TumblingWindow = size
	s.MaxRetryAttempts = 3
	return s
}

func (c *counter) finals() []events.DynamoDBTimeWindowEvent {
	var out []events.DynamoDBTimeWindowEvent
	for _, ev := range c.calls {
		if ev.IsFinalInvokeForWindow || ev.IsWindowTerminatedEarly {
			out = append(out, ev)
		}
	}
	return out
}

// Each invocation of a window is handed the state the previous successful
// one answered; a failed one (an error, or an answer without a state) is
// handed the same committed state again; the final invoke carries the
// window's state and no records.
func TestAWindowHandsStateOnAndAFailedRunGetsTheCommittedStateAgain(t *testing.T) {
	w := newStreamWorld(t)
	c := &counter{}
	var withC []events.DynamoDBTimeWindowEvent
	c.fn = func(_ int, ev events.DynamoDBTimeWindowEvent) (events.DynamoDBTimeWindowEventResponse, error, bool) {
		if len(ev.Records) == 0 || key(ev.Records[0]) != "c" {
			return events.DynamoDBTimeWindowEventResponse{}, nil, false
		}
		withC = append(withC, ev)
		switch len(withC) {
		case 1:
			return events.DynamoDBTimeWindowEventResponse{}, errors.New("crashed"), true
		case 2:
			return events.DynamoDBTimeWindowEventResponse{}, nil, true // no state: a failure
		}
		return events.DynamoDBTimeWindowEventResponse{}, nil, false
	}
	p, err := harness.NewWindowPoller(testenv.DynamoDBStreams(t), c.handle, harness.StreamConfig{
		StreamArn: w.stream, Settings: windowSettings(15 * time.Minute), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w.put(t, "a", "b")
	if _, err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	w.put(t, "c")
	if _, err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if len(withC) != 3 {
		t.Fatalf("the batch with c was invoked %d times, want the crash, the stateless answer and the success", len(withC))
	}
	for i, ev := range withC {
		if ev.State["n"] != "2" {
			t.Errorf("run %d with c was handed n=%q, want the committed 2 of a and b", i+1, ev.State["n"])
		}
	}
	if st := p.Stats(); st.FunctionErrors != 2 || st.Retries != 2 {
		t.Errorf("stats %+v: want the error and the stateless answer counted as failures and retried", st)
	}
}

// Once the window's end has passed the final invoke comes, with the
// window's state and no records, and the state is dropped: the next
// window starts fresh.
func TestAWindowEndsWithAFinalInvokeCarryingItsState(t *testing.T) {
	w := newStreamWorld(t)
	c := &counter{}
	p, err := harness.NewWindowPoller(testenv.DynamoDBStreams(t), c.handle, harness.StreamConfig{
		StreamArn: w.stream, Settings: windowSettings(time.Second), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	w.put(t, "a", "b")
	time.Sleep(time.Second) // the window's end passes
	if _, err := p.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	finals := c.finals()
	if len(finals) != 1 {
		t.Fatalf("%d final invokes in %d calls, want 1", len(finals), len(c.calls))
	}
	f := finals[0]
	if len(f.Records) != 0 || f.State["n"] != "2" || !f.IsFinalInvokeForWindow || f.IsWindowTerminatedEarly || f.ShardID == "" ||
		!f.Window.End.After(f.Window.Start.Time) {
		t.Errorf("final invoke %+v with %d records: want no records, n=2, the final flag, the shard and the window", f.TimeWindowProperties, len(f.Records))
	}
	w.put(t, "c")
	if _, err := p.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, ev := range c.calls {
		if len(ev.Records) > 0 && key(ev.Records[0]) == "c" && ev.State != nil {
			t.Errorf("the batch after the close was handed %v, want a fresh state", ev.State)
		}
	}
	if st := p.Stats(); st.WindowsClosed < 1 {
		t.Errorf("stats %+v count no closed window", st)
	}
}

// A state answered over 1 MB ends the window early: the next invoke is
// flagged isWindowTerminatedEarly with that state, and the window goes on
// with a fresh one.
func TestAStateOverTheLimitEndsTheWindowEarly(t *testing.T) {
	w := newStreamWorld(t)
	big := strings.Repeat("x", harness.MaxWindowState)
	c := &counter{}
	c.fn = func(call int, ev events.DynamoDBTimeWindowEvent) (events.DynamoDBTimeWindowEventResponse, error, bool) {
		if call == 1 {
			var resp events.DynamoDBTimeWindowEventResponse
			resp.State = map[string]string{"n": "1", "pad": big}
			return resp, nil, true
		}
		return events.DynamoDBTimeWindowEventResponse{}, nil, false
	}
	// A window long enough not to close by time within the test.
	p, err := harness.NewWindowPoller(testenv.DynamoDBStreams(t), c.handle, harness.StreamConfig{
		StreamArn: w.stream, Settings: windowSettings(15 * time.Minute), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	w.put(t, "a")
	if _, err := p.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.put(t, "b")
	if _, err := p.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(c.calls) < 3 {
		t.Fatalf("%d calls, want the batch, the early end and the next batch", len(c.calls))
	}
	end := c.calls[1]
	if !end.IsWindowTerminatedEarly || end.IsFinalInvokeForWindow || end.State["pad"] != big || len(end.Records) != 0 {
		t.Errorf("second call: early %v final %v, %d records: want the early end with the big state", end.IsWindowTerminatedEarly, end.IsFinalInvokeForWindow, len(end.Records))
	}
	if next := c.calls[2]; next.State != nil || len(next.Records) != 1 || !next.Window.Start.Equal(end.Window.Start.Time) {
		t.Errorf("third call: state %v, %d records, window %v: want a fresh state in the same window", next.State, len(next.Records), next.Window.Start)
	}
	if st := p.Stats(); st.WindowsTerminatedEarly != 1 {
		t.Errorf("stats %+v: want one early end", st)
	}
}

func TestAWindowPollerRefusesWhatItDoesNotPlay(t *testing.T) {
	api := testenv.DynamoDBStreams(t)
	h := (&counter{}).handle
	for name, s := range map[string]eventsource.Stream{
		"no window": eventsource.DefaultStream(),
		"partial failures": func() eventsource.Stream {
			s := windowSettings(time.Minute)
			s.ReportBatchItemFailures = true
			return s
		}(),
		"window too long": windowSettings(16 * time.Minute),
	} {
		if _, err := harness.NewWindowPoller(api, h, harness.StreamConfig{StreamArn: "arn:aws:dynamodb:us-east-1:000000000000:table/t/stream/x", Settings: s}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Lambda keeps a window's state with the stream position at every
// invocation: a poller restarted from the Position its Committed hook was
// last given goes on with the open window's state (n counts a, b and c), not
// with a fresh one beside a checkpoint past a and b. The hook is called
// before the next invocation, so a host killed between two never pairs a
// newer checkpoint with an older state.
func TestARestartFromTheCommittedPositionKeepsTheWindowsState(t *testing.T) {
	w := newStreamWorld(t)
	var saved []harness.Position
	c1 := &counter{}
	cfg := harness.StreamConfig{StreamArn: w.stream, Settings: windowSettings(15 * time.Minute), Logger: quiet,
		Committed: func(pos harness.Position) error { saved = append(saved, pos); return nil }}
	p1, err := harness.NewWindowPoller(testenv.DynamoDBStreams(t), c1.handle, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w.put(t, "a", "b")
	if _, err := p1.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if len(saved) == 0 {
		t.Fatal("Committed was never called")
	}
	last := saved[len(saved)-1]
	if len(last.Windows) != 1 || len(last.Checkpoints) != 1 {
		t.Fatalf("last committed position %+v, want one shard's checkpoint and its open window", last)
	}
	for id, win := range last.Windows {
		if win.State["n"] != "2" || last.Checkpoints[id] == "" {
			t.Fatalf("shard %s committed window %+v at checkpoint %q, want n=2 with a checkpoint", id, win, last.Checkpoints[id])
		}
	}
	if got := p1.Position(); !reflect.DeepEqual(got, last) {
		t.Errorf("Position() = %+v after the drain, want the last committed %+v", got, last)
	}

	w.put(t, "c")
	c2 := &counter{}
	cfg.Resume, cfg.ResumeWindows = last.Checkpoints, last.Windows
	p2, err := harness.NewWindowPoller(testenv.DynamoDBStreams(t), c2.handle, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if len(c2.calls) != 1 || len(c2.calls[0].Records) != 1 || key(c2.calls[0].Records[0]) != "c" || c2.calls[0].State["n"] != "2" {
		t.Fatalf("the restarted poller's invocations %+v, want c alone, handed n=2", c2.calls)
	}
	if got := saved[len(saved)-1]; len(got.Windows) != 1 {
		t.Fatalf("after the restart the committed position is %+v", got)
	} else {
		for _, win := range got.Windows {
			if win.State["n"] != "3" {
				t.Errorf("the restarted window's state %+v, want n=3", win.State)
			}
		}
	}
}

// A position the host could not save stops the window mapping before its
// next invocation, until a save succeeds: the sink never runs ahead of the
// state a restart would resume with.
func TestAWindowMappingInvokesNothingWhileItsPositionIsUnsaved(t *testing.T) {
	w := newStreamWorld(t)
	c := &counter{}
	failing := true
	var saves int
	cfg := harness.StreamConfig{StreamArn: w.stream, Settings: windowSettings(15 * time.Minute), Logger: quiet,
		Committed: func(harness.Position) error {
			saves++
			if failing {
				return errors.New("disk full")
			}
			return nil
		}}
	p, err := harness.NewWindowPoller(testenv.DynamoDBStreams(t), c.handle, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w.put(t, "a")
	for len(c.calls) == 0 {
		if _, err := p.Step(ctx); err != nil && len(c.calls) == 0 {
			t.Fatalf("before the first invocation: %v", err)
		}
	}
	w.put(t, "b")
	for range 5 {
		if _, err := p.Step(ctx); err == nil {
			t.Fatal("a step with the position unsaved succeeded")
		}
	}
	if len(c.calls) != 1 {
		t.Fatalf("%d invocations while the position was unsaved, want a's alone", len(c.calls))
	}
	failing = false
	if _, err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if len(c.calls) != 2 || key(c.calls[1].Records[0]) != "b" || c.calls[1].State["n"] != "1" {
		t.Fatalf("after the save: invocations %+v, want b handed n=1", c.calls)
	}
	if saves < 7 {
		t.Errorf("%d saves, want one per failed step and more", saves)
	}
}
