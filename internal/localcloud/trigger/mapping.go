package trigger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/localcloud/invoke"
)

// Clients are the emulator APIs the mappings read and write.
type Clients struct {
	Streams harness.StreamAPI
	Queues  harness.QueueAPI
	// Send writes on-failure records and dead-letter messages.
	Send SendAPI
}

// Mapping plays one event-source mapping: its poller invokes the mapping's
// function through an Invoker.
type Mapping struct {
	Spec   MappingSpec
	stream *harness.StreamPoller
	queue  *harness.QueuePoller
	log    *slog.Logger

	mu    sync.Mutex
	state string
}

// Mapping states in Status.
const (
	StateCreated  = "Created"
	StateEnabled  = "Enabled" // polling
	StateDisabled = "Disabled"
	StateStopped  = "Stopped"
)

// MappingOptions tunes a mapping for its host (zero: the harness defaults).
type MappingOptions struct {
	Region string
	// Resume is a stream mapping's position from a previous run
	// (Mapping.Position): its checkpoints and, for a tumbling window, its
	// open windows' state.
	Resume harness.Position
	// Committed, when set, is called with a tumbling window mapping's
	// position each time it commits a step (harness.StreamConfig.Committed):
	// the host saves it there, so a restart never pairs a checkpoint with
	// a window's state of another moment.
	Committed func(harness.Position) error
	Logger    *slog.Logger
}

// NewMapping builds the poller of spec over inv.
func NewMapping(spec MappingSpec, c Clients, inv invoke.Invoker, o MappingOptions) (*Mapping, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	log := o.Logger.With("mapping", spec.ID, "function", spec.Function)
	m := &Mapping{Spec: spec, log: log, state: StateCreated}
	var err error
	switch spec.Kind {
	case KindStream:
		cfg := harness.StreamConfig{
			StreamArn: spec.SourceArn, Settings: spec.Stream, FunctionArn: spec.FunctionArn,
			Region: o.Region, Logger: log, Resume: o.Resume.Checkpoints, ResumeWindows: o.Resume.Windows,
			Committed: o.Committed,
		}
		if spec.OnFailureURL != "" {
			cfg.OnFailure = harness.SQSDestination(c.Send, spec.OnFailureURL)
		}
		if spec.Stream.TumblingWindow > 0 {
			m.stream, err = harness.NewWindowPoller(c.Streams, WindowHandler(inv, spec.Function), cfg)
		} else {
			m.stream, err = harness.NewStreamPoller(c.Streams, StreamHandler(inv, spec.Function), cfg)
		}
	case KindQueue:
		m.queue, err = harness.NewQueuePoller(c.Queues, QueueHandler(inv, spec.Function), harness.QueueConfig{
			QueueURL: spec.QueueURL, QueueArn: spec.SourceArn, Settings: spec.Queue, Region: o.Region, Logger: log,
		})
	default:
		err = fmt.Errorf("unknown kind %q", spec.Kind)
	}
	if err != nil {
		return nil, fmt.Errorf("trigger: mapping %s: %w", spec.ID, err)
	}
	return m, nil
}

// Run polls until ctx ends (a disabled mapping only waits) and returns nil
// then. An invocation under way when ctx ends is left to finish: Lambda does
// not cancel a running function either.
func (m *Mapping) Run(ctx context.Context) error {
	if !m.Spec.Enabled {
		m.setState(StateDisabled)
		<-ctx.Done()
		return nil
	}
	m.setState(StateEnabled)
	defer m.setState(StateStopped)
	if m.stream != nil {
		return m.stream.Run(ctx)
	}
	return m.queue.Run(ctx)
}

func (m *Mapping) setState(s string) {
	m.mu.Lock()
	m.state = s
	m.mu.Unlock()
}

// Position returns a stream mapping's position; ok is false for a queue.
func (m *Mapping) Position() (pos harness.Position, ok bool) {
	if m.stream == nil {
		return harness.Position{}, false
	}
	return m.stream.Position(), true
}

// Windowed reports whether the mapping plays a tumbling window: its
// position is saved at each commit (MappingOptions.Committed), not polled.
func (m *Mapping) Windowed() bool {
	return m.Spec.Kind == KindStream && m.Spec.Stream.TumblingWindow > 0
}

// MappingStatus is a mapping's line in the local cloud's status.
type MappingStatus struct {
	ID       string `json:"id"`
	Kind     string `json:"kind"`
	Source   string `json:"source"`
	Function string `json:"function"`
	State    string `json:"state"`
	// Stats are the poller's counters (harness.StreamStats without the
	// failure records, or harness.QueueStats).
	Stats any `json:"stats"`
}

// StreamStats is harness.StreamStats with the discarded batches counted, not listed.
type StreamStats struct {
	Invocations       int `json:"invocations"`
	Records           int `json:"records"`
	FunctionErrors    int `json:"function_errors"`
	PartialFailures   int `json:"partial_failures"`
	Bisections        int `json:"bisections"`
	Retries           int `json:"retries"`
	Throttles         int `json:"throttles"`
	Discarded         int `json:"discarded"`
	WindowsClosed     int `json:"windows_closed,omitempty"`
	WindowsEndedEarly int `json:"windows_terminated_early,omitempty"`
}

// QueueStats is harness.QueueStats.
type QueueStats struct {
	Invocations    int `json:"invocations"`
	Received       int `json:"received"`
	Deleted        int `json:"deleted"`
	ItemFailures   int `json:"item_failures"`
	FunctionErrors int `json:"function_errors"`
	Throttles      int `json:"throttles"`
}

// Status reports the mapping's state and counters.
func (m *Mapping) Status() MappingStatus {
	m.mu.Lock()
	st := MappingStatus{ID: m.Spec.ID, Kind: m.Spec.Kind, Source: m.Spec.SourceArn, Function: m.Spec.Function, State: m.state}
	m.mu.Unlock()
	if m.stream != nil {
		s := m.stream.Stats()
		st.Stats = StreamStats{s.Invocations, s.Records, s.FunctionErrors, s.PartialFailures, s.Bisections, s.Retries, s.Throttles, s.Discarded,
			s.WindowsClosed, s.WindowsTerminatedEarly}
	} else {
		s := m.queue.Stats()
		st.Stats = QueueStats{s.Invocations, s.Received, s.Deleted, s.ItemFailures, s.FunctionErrors, s.Throttles}
	}
	return st
}

// WindowHandler invokes function with each batch of a tumbling-window
// mapping, as Lambda sends it (the window, the state, the flags), and reads
// its answer's state.
func WindowHandler(inv invoke.Invoker, function string) harness.WindowHandler {
	return func(ctx context.Context, ev events.DynamoDBTimeWindowEvent) (events.DynamoDBTimeWindowEventResponse, error) {
		var resp events.DynamoDBTimeWindowEventResponse
		err := call(ctx, inv, function, ev, &resp)
		return resp, err
	}
}

// StreamHandler adapts an Invoker to the harness: the batch goes to function
// as the JSON Lambda sends, and its answer is read as Lambda reads it. A
// *FunctionError fails the batch (retried, bisected, discarded per the
// mapping); an invocation that never ran (throttled, runner error) is
// harness.ErrNotInvoked, retried without counting an attempt.
func StreamHandler(inv invoke.Invoker, function string) harness.StreamHandler {
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		var resp events.DynamoDBEventResponse
		err := call(ctx, inv, function, ev, &resp)
		return resp, err
	}
}

// QueueHandler is StreamHandler for an SQS mapping.
func QueueHandler(inv invoke.Invoker, function string) harness.QueueHandler {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		var resp events.SQSEventResponse
		err := call(ctx, inv, function, ev, &resp)
		return resp, err
	}
}

func call(ctx context.Context, inv invoke.Invoker, function string, ev, resp any) error {
	payload, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("trigger: encode event for %s: %w", function, err)
	}
	// The poller's stop must not cut a running invocation short (Lambda
	// lets it finish); the runner bounds it with the function's timeout.
	out, err := inv.Invoke(context.WithoutCancel(ctx), function, payload)
	var fe *invoke.FunctionError
	switch {
	case errors.As(err, &fe):
		return err
	case errors.Is(err, invoke.ErrPayloadTooLarge):
		// Lambda's mappings never build a batch over the invocation's
		// limit; a local batch that is fails as a batch (split where the
		// mapping bisects, then discarded to its destination), instead of
		// being retried in place forever as one that never ran.
		return &invoke.FunctionError{Function: function, Type: "RequestEntityTooLargeException", Message: err.Error()}
	case err != nil:
		return fmt.Errorf("%w: %w", harness.ErrNotInvoked, err)
	}
	// No answer is a success; one that is not JSON of the response's
	// shape fails the whole batch, as Lambda reads it.
	if len(out) > 0 && string(out) != "null" {
		if err := json.Unmarshal(out, resp); err != nil {
			return &invoke.FunctionError{Function: function, Type: "Runtime.InvalidResponse", Message: err.Error()}
		}
	}
	return nil
}
