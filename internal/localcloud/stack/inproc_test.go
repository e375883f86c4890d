package stack

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/awsclient/sqsclient"
	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/boot/pushboot"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/localcloud/invoke"
	"github.com/oncepay/oncepay/internal/localcloud/provision"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/relay"
	"github.com/oncepay/oncepay/internal/resolver"
)

// handler is one function's entry point over raw JSON.
type handler func(ctx context.Context, payload []byte) ([]byte, error)

// builder makes a function's handler once per environment, as its
// lambdas/<fn>/main.go does: clients from the process environment (the
// local cloud's .local/env), through internal/boot.
type builder func(ctx context.Context, log *slog.Logger) (handler, func(), error)

// inProcessFunctions are the functions the in-process runner can run, by
// short name (ShortName of the logical id): the triggers' targets. The api and the webhook are served by the front
// door; the migration function by the custom resource driver.
var inProcessFunctions = map[string]builder{
	"relay":    buildRelay,
	"worker":   buildWorker,
	"resolver": buildResolver,
}

func buildRelay(ctx context.Context, log *slog.Logger) (handler, func(), error) {
	cfg, err := boot.AWS(ctx)
	if err != nil {
		return nil, nil, err
	}
	queue, err := boot.Require(stackenv.EventsQueueURL)
	if err != nil {
		return nil, nil, err
	}
	r, err := relay.New(sqsclient.New(cfg), relay.Config{QueueURL: queue, Logger: log, Metrics: metrics.New(os.Stdout, "relay")})
	if err != nil {
		return nil, nil, err
	}
	return typed(r.Handle), func() {}, nil
}

func buildWorker(ctx context.Context, log *slog.Logger) (handler, func(), error) {
	cfg, err := boot.AWS(ctx)
	if err != nil {
		return nil, nil, err
	}
	pool, err := boot.Ledger(ctx)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (handler, func(), error) { pool.Close(); return nil, nil, err }
	m := metrics.New(os.Stdout, "worker")
	n, err := pushboot.Notifier(cfg, pool, log, m)
	if err != nil {
		return fail(err)
	}
	w, err := inbox.New(pool, n, inbox.Config{
		MaxReceiveCount:  eventsource.Default().Worker.MaxReceiveCount,
		GroupConcurrency: int(pool.Config().MaxConns),
		Logger:           log,
		Metrics:          m,
	})
	if err != nil {
		return fail(err)
	}
	sw, err := inbox.NewNotifSweeper(pool, n, inbox.SweepConfig{Logger: log, Metrics: m})
	if err != nil {
		return fail(err)
	}
	return raw(inbox.Function{Worker: w, Sweeper: sw}.Invoke), pool.Close, nil
}

func buildResolver(ctx context.Context, log *slog.Logger) (handler, func(), error) {
	s, err := resolver.SetupFromEnv(ctx, log)
	if err != nil {
		return nil, nil, err
	}
	r, err := resolver.New(s.Config, s.Deps)
	if err != nil {
		s.Pool.Close()
		return nil, nil, err
	}
	return typed(r.Handle), s.Pool.Close, nil
}

// typed adapts a handler of Go types the way aws-lambda-go does: the
// payload decoded into E, the answer encoded as JSON.
func typed[E, R any](h func(context.Context, E) (R, error)) handler {
	return func(ctx context.Context, payload []byte) ([]byte, error) {
		var e E
		if err := json.Unmarshal(payload, &e); err != nil {
			return nil, &invoke.FunctionError{Type: "Runtime.UnmarshalError", Message: err.Error()}
		}
		out, err := h(ctx, e)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	}
}

func raw(h func(context.Context, json.RawMessage) (any, error)) handler {
	return func(ctx context.Context, payload []byte) ([]byte, error) {
		out, err := h(ctx, payload)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	}
}

// InProcess is a runner that calls the real handlers of the relay, the
// worker and the resolver inside the local-cloud service, each built on its
// first invocation (a cold start) from the process environment. It stands
// in until the function runner (each bootstrap under aws-lambda-rie) is
// plugged in; it cannot kill an environment, and every function shares
// .local/env instead of its own template environment. A function's
// reserved concurrency is kept (the resolver's 1): an invocation over it is
// invoke.ErrThrottled.
type InProcess struct {
	log     *slog.Logger
	started time.Time
	fns     map[string]*inProcFn
}

type inProcFn struct {
	id       string
	build    builder
	reserved int // 0: unreserved

	mu      sync.Mutex
	h       handler
	closeFn func()
	busy    int
	invoked int64
}

// NewInProcess returns the in-process runner of tpl's functions that it can
// run (see inProcessFunctions); the others answer ErrUnknownFunction.
func NewInProcess(tpl *provision.Template, log *slog.Logger) *InProcess {
	if log == nil {
		log = slog.Default()
	}
	r := &InProcess{log: log, started: time.Now(), fns: map[string]*inProcFn{}}
	for _, id := range tpl.OfType("AWS::Lambda::Function") {
		res := tpl.Resources[id]
		b, ok := inProcessFunctions[ShortName(id)]
		if !ok {
			continue
		}
		reserved := 0
		if v, ok := res.Properties["ReservedConcurrentExecutions"].(float64); ok {
			reserved = int(v)
		}
		r.fns[id] = &inProcFn{id: id, build: b, reserved: reserved}
	}
	return r
}

// Invoke runs function's handler in this process.
func (r *InProcess) Invoke(ctx context.Context, function string, payload []byte) (out []byte, err error) {
	f, ok := r.fns[function]
	if !ok {
		return nil, fmt.Errorf("%w: %s is not run in process (only the relay, the worker and the resolver are)", invoke.ErrUnknownFunction, function)
	}
	h, err := f.acquire(ctx, r.log)
	if err != nil {
		return nil, err
	}
	defer f.release()
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, &invoke.FunctionError{Function: function, Type: "Runtime.Panic", Message: fmt.Sprint(p)}
		}
	}()
	out, err = h(ctx, payload)
	if err != nil {
		if fe, ok := err.(*invoke.FunctionError); ok {
			fe.Function = function
			return nil, fe
		}
		return nil, &invoke.FunctionError{Function: function, Type: "Handler", Message: err.Error()}
	}
	return out, nil
}

func (f *inProcFn) acquire(ctx context.Context, log *slog.Logger) (handler, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reserved > 0 && f.busy >= f.reserved {
		return nil, invoke.ErrThrottled
	}
	if f.h == nil {
		// A failed init is tried again by the next invocation, as Lambda
		// starts a new environment after an init error.
		h, closeFn, err := f.build(ctx, boot.Logger(ShortName(f.id)))
		if err != nil {
			log.Error("in-process init failed", "function", f.id, "error", err.Error())
			return nil, &invoke.FunctionError{Function: f.id, Type: "Runtime.InitError", Message: err.Error()}
		}
		f.h, f.closeFn = h, closeFn
	}
	f.busy++
	f.invoked++
	return f.h, nil
}

func (f *inProcFn) release() {
	f.mu.Lock()
	f.busy--
	f.mu.Unlock()
}

// Status lists each in-process function as one environment: this process.
func (r *InProcess) Status() []invoke.FunctionStatus {
	var out []invoke.FunctionStatus
	for _, f := range r.fns {
		f.mu.Lock()
		st := invoke.FunctionStatus{Function: f.id, MaxEnvironments: f.reserved, Invocations: f.invoked, Environments: []invoke.Environment{}}
		if f.h != nil {
			st.Environments = append(st.Environments, invoke.Environment{ID: "in-process", PID: os.Getpid(), Busy: f.busy > 0, Started: r.started, Served: f.invoked})
		}
		f.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// Kill is refused: the handlers run inside the service itself.
func (r *InProcess) Kill(function string, n int) (killed, busy int, err error) {
	if _, ok := r.fns[function]; !ok {
		return 0, 0, fmt.Errorf("%w: %s", invoke.ErrUnknownFunction, function)
	}
	return 0, 0, fmt.Errorf("the in-process runner cannot kill %s: its handler runs inside the local-cloud service (the function runner kills environments)", function)
}

// KillInFlight is refused as Kill is.
func (r *InProcess) KillInFlight(_ context.Context, function string, _ time.Duration) (killed, busy int, err error) {
	return r.Kill(function, 1)
}

// Close releases the handlers' pools.
func (r *InProcess) Close() error {
	for _, f := range r.fns {
		f.mu.Lock()
		if f.closeFn != nil {
			f.closeFn()
		}
		f.h, f.closeFn = nil, nil
		f.mu.Unlock()
	}
	return nil
}
