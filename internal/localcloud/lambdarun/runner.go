package lambdarun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http/httptrace"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/invoke"
)

// ErrClosed is returned by an invocation after Close.
var ErrClosed = errors.New("lambdarun: the runner is closed")

// timeoutGrace is how long past a function's timeout the runner waits for
// the emulator's own timeout answer before it ends the invocation itself (a
// loaded machine can be late by a second).
const timeoutGrace = 2 * time.Second

// Runner runs the template's functions as Lambda does: execution
// environments created on demand, reused warm, one invocation at a time
// each, up to the function's concurrency, replaced when they die. It
// implements invoke.Invoker and invoke.Admin and is safe for concurrent use.
type Runner struct {
	pools map[string]*pool
}

var (
	_ invoke.Invoker = (*Runner)(nil)
	_ invoke.Admin   = (*Runner)(nil)
)

// New returns a runner of fns; no environment starts until an invocation
// needs one. Every bootstrap must exist (Build) and aws-lambda-rie must be
// installed (make setup).
func New(fns []Function, cfg Config) (*Runner, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(cfg.RIE); err != nil {
		return nil, fmt.Errorf("lambdarun: aws-lambda-rie missing (make setup): %w", err)
	}
	r := &Runner{pools: map[string]*pool{}}
	for _, f := range fns {
		if _, dup := r.pools[f.LogicalID]; dup {
			r.Close()
			return nil, fmt.Errorf("lambdarun: function %s listed twice", f.LogicalID)
		}
		if _, err := os.Stat(f.Bootstrap); err != nil {
			r.Close()
			return nil, fmt.Errorf("lambdarun: %s: bootstrap missing (Build): %w", f.LogicalID, err)
		}
		if err := os.MkdirAll(filepath.Dir(f.Log), 0o755); err != nil {
			r.Close()
			return nil, fmt.Errorf("lambdarun: %s: logs: %w", f.LogicalID, err)
		}
		// One file per function, appended to by all its environments: each
		// write of a line is atomic under O_APPEND, and the runner's lines
		// say which environment started, died or was killed.
		out, err := os.OpenFile(f.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("lambdarun: %s: logs: %w", f.LogicalID, err)
		}
		r.pools[f.LogicalID] = &pool{
			fn:  f,
			rie: cfg.RIE,
			out: out,
			log: slog.New(slog.NewJSONHandler(out, nil)).With("scope", "lambdarun", "function", f.LogicalID),
			run: cfg.Logger.With("scope", "lambdarun", "function", f.LogicalID),
		}
	}
	return r, nil
}

// Invoke runs one synchronous invocation of function (its logical id) and
// blocks until it answers or ctx ends. When every environment the function
// may have is busy it answers invoke.ErrThrottled at once, as Lambda answers
// 429 to a synchronous invoke; retrying is the caller's decision (the event
// sources retry, a front door answers 429/503). An invocation whose ctx ends
// keeps running in its environment, as on Lambda, and keeps it busy.
func (r *Runner) Invoke(ctx context.Context, function string, payload []byte) ([]byte, error) {
	p, ok := r.pools[function]
	if !ok {
		return nil, fmt.Errorf("%w: %s", invoke.ErrUnknownFunction, function)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lambdarun: invoke %s: %w", function, err)
	}
	if len(payload) > invoke.MaxRequestPayload {
		return nil, fmt.Errorf("lambdarun: invoke %s: %d bytes: %w", function, len(payload), invoke.ErrPayloadTooLarge)
	}
	type answer struct {
		out []byte
		err error
	}
	done := make(chan answer, 1)
	go func() {
		out, err := p.invoke(payload)
		done <- answer{out, err}
	}()
	select {
	case a := <-done:
		return a.out, a.err
	case <-ctx.Done():
		return nil, fmt.Errorf("lambdarun: invoke %s: %w", function, ctx.Err())
	}
}

// Kill sends SIGKILL to the process groups of up to n of function's live
// environments, busy ones first, chosen at random, and returns how many it
// killed and how many of those were busy. Their invocations in flight
// answer Runtime.ExitError; later invocations cold-start new environments.
func (r *Runner) Kill(function string, n int) (killed, busy int, err error) {
	p, ok := r.pools[function]
	if !ok {
		return 0, 0, fmt.Errorf("%w: %s", invoke.ErrUnknownFunction, function)
	}
	killed, busy = p.kill(n)
	return killed, busy, nil
}

// KillInFlight waits up to within (or until ctx ends) for function's next
// invocation in a warm environment and kills that environment while the
// invocation runs (see invoke.Admin). The kill lands a random 0.5-4 ms
// after the request was written to the environment; an invocation that
// ends before it is let go and the aim waits for the next.
func (r *Runner) KillInFlight(ctx context.Context, function string, within time.Duration) (killed, busy int, err error) {
	p, ok := r.pools[function]
	if !ok {
		return 0, 0, fmt.Errorf("%w: %s", invoke.ErrUnknownFunction, function)
	}
	a := &aim{done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return 0, 0, ErrClosed
	}
	p.aims = append(p.aims, a)
	p.mu.Unlock()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-a.done:
		return 1, 1, nil
	case <-t.C:
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if a.hit {
		return 1, 1, nil
	}
	a.cancelled = true
	p.aims = slices.DeleteFunc(p.aims, func(x *aim) bool { return x == a })
	return 0, 0, nil
}

// Status reports every function's environments and counters, sorted by
// logical id.
func (r *Runner) Status() []invoke.FunctionStatus {
	ids := make([]string, 0, len(r.pools))
	for id := range r.pools {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]invoke.FunctionStatus, 0, len(ids))
	for _, id := range ids {
		out = append(out, r.pools[id].status())
	}
	return out
}

// Close stops every environment and waits for them to exit; invocations in
// flight answer Runtime.ExitError, later ones ErrClosed.
func (r *Runner) Close() error {
	var wg sync.WaitGroup
	for _, p := range r.pools {
		wg.Go(p.close)
	}
	wg.Wait()
	return nil
}

// pool is one function's environments.
type pool struct {
	fn  Function
	rie string
	out *os.File     // the function's log
	log *slog.Logger // the runner's lines in the function's log
	run *slog.Logger // the runner's own log

	mu          sync.Mutex
	envs        []*environment // live: not killed, not seen exiting
	starting    int            // cold starts under way (they count toward the cap)
	next        int
	invocations int64
	killed      int64
	killedBusy  int64
	closed      bool
	// aims are KillInFlight requests waiting for an invocation to kill.
	aims []*aim
}

// aim is one KillInFlight request.
type aim struct {
	done      chan struct{} // closed when it killed
	hit       bool
	cancelled bool // its wait ended first
}

type environment struct {
	id     string
	proc   *Process
	busy   bool
	served int64
	gone   bool // no longer in the pool: killed, replaced or exited
}

// acquire returns an idle environment marked busy, starting one when none
// is idle and the cap allows, or ErrThrottled.
func (p *pool) acquire() (*environment, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	for _, e := range p.envs {
		if !e.busy && !exited(e.proc) {
			e.busy = true
			p.invocations++
			p.mu.Unlock()
			return e, nil
		}
	}
	if len(p.envs)+p.starting >= p.fn.MaxEnvironments {
		p.mu.Unlock()
		return nil, fmt.Errorf("%w: %s has %d", invoke.ErrThrottled, p.fn.LogicalID, p.fn.MaxEnvironments)
	}
	p.starting++
	p.next++
	id := fmt.Sprintf("%s-%d", path.Base(p.fn.Package), p.next)
	p.mu.Unlock()

	proc, err := StartProcess(ProcessConfig{
		Function:  p.fn.LogicalID,
		RIE:       p.rie,
		Bootstrap: p.fn.Bootstrap,
		Env:       p.environ(id),
		Output:    p.out,
	})

	p.mu.Lock()
	defer p.mu.Unlock()
	p.starting--
	if err != nil {
		p.log.Error("environment failed to start", "env", id, "err", err)
		return nil, err
	}
	if p.closed {
		go proc.Stop()
		return nil, ErrClosed
	}
	e := &environment{id: id, proc: proc, busy: true}
	p.envs = append(p.envs, e)
	p.invocations++
	p.log.Info("environment started", "env", id, "pid", proc.PID)
	p.run.Info("environment started", "env", id, "pid", proc.PID)
	go p.watch(e)
	return e, nil
}

// environ is the environment's process environment: the function's, the
// runtime's from its configuration, and its own log stream, sorted so the
// same function gets the same list.
func (p *pool) environ(envID string) []string {
	vars := maps.Clone(p.fn.Env)
	if vars == nil {
		vars = map[string]string{}
	}
	maps.Copy(vars, runtimeEnv(p.fn))
	env := make([]string, 0, len(vars)+1)
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	env = append(env, "AWS_LAMBDA_LOG_STREAM_NAME="+time.Now().UTC().Format("2006/01/02")+"/[$LATEST]"+envID)
	slices.Sort(env)
	return env
}

func exited(proc *Process) bool {
	select {
	case <-proc.Done():
		return true
	default:
		return false
	}
}

// watch removes the environment from the pool when its process exits, for
// whatever reason (killed here or from outside, crashed).
func (p *pool) watch(e *environment) {
	<-e.proc.Done()
	// An emulator that died on its own leaves its bootstrap behind.
	e.proc.Kill()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !e.gone {
		p.remove(e)
		p.log.Warn("environment exited", "env", e.id, "pid", e.proc.PID, "busy", e.busy)
		p.run.Warn("environment exited", "env", e.id, "pid", e.proc.PID, "busy", e.busy)
	}
}

// remove takes e out of the pool; the caller holds p.mu.
func (p *pool) remove(e *environment) {
	e.gone = true
	p.envs = slices.DeleteFunc(p.envs, func(x *environment) bool { return x == e })
}

// invoke runs one invocation in an environment of the pool.
func (p *pool) invoke(payload []byte) ([]byte, error) {
	e, err := p.acquire()
	if err != nil {
		return nil, err
	}
	// The function's own timeout bounds the call, not the caller's context:
	// an invocation runs to its end once it has started.
	ctx, cancel := context.WithTimeout(context.Background(), p.fn.Timeout+timeoutGrace)
	p.mu.Lock()
	// An aimed kill takes a warm environment only (a cold one's first
	// invocation would be killed in the runtime's init, before any handler
	// code), and fires once the request is written to it.
	if len(p.aims) > 0 && e.served > 0 {
		a, served := p.aims[0], e.served
		p.aims = p.aims[1:]
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { go p.fire(e, served, a) },
		})
	}
	p.mu.Unlock()
	out, err := e.proc.Invoke(ctx, payload)
	cancel()
	replace := false
	var fe *invoke.FunctionError
	switch {
	case err == nil:
	case errors.As(err, &fe):
		// After a crash or a timeout Lambda starts the runtime afresh; a
		// handler's error leaves the environment warm.
		replace = strings.HasPrefix(fe.Type, "Runtime.") || strings.HasPrefix(fe.Type, "Sandbox.")
	case errors.Is(err, context.DeadlineExceeded):
		err = &invoke.FunctionError{Function: p.fn.LogicalID, Type: "Sandbox.Timedout",
			Message: fmt.Sprintf("Task timed out after %.2f seconds", p.fn.Timeout.Seconds())}
		replace = true
	default:
		// An answer the runner does not understand: do not trust the
		// environment with another invocation.
		replace = true
	}
	p.release(e, replace, err)
	return out, err
}

// release marks e idle again, or stops and drops it when it must be
// replaced.
func (p *pool) release(e *environment, replace bool, cause error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e.busy = false
	e.served++
	if replace && !e.gone {
		p.remove(e)
		p.log.Warn("environment replaced", "env", e.id, "pid", e.proc.PID, "err", cause)
		p.run.Warn("environment replaced", "env", e.id, "pid", e.proc.PID, "err", cause)
		go e.proc.Stop()
	}
}

// fire is an aimed kill: moments after e was sent an invocation (its
// served count then), kill e if that invocation still runs, or hand the aim
// back for the next invocation.
func (p *pool) fire(e *environment, served int64, a *aim) {
	time.Sleep(time.Duration(500+rand.IntN(3500)) * time.Microsecond)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case a.cancelled:
		return
	case e.gone || !e.busy || e.served != served:
		p.aims = append([]*aim{a}, p.aims...)
		return
	}
	p.remove(e)
	e.proc.Kill()
	p.killed++
	p.killedBusy++
	a.hit = true
	close(a.done)
	p.log.Warn("environment killed mid-invocation (aimed)", "env", e.id, "pid", e.proc.PID)
	p.run.Info("environment killed mid-invocation (aimed)", "env", e.id, "pid", e.proc.PID)
}

func (p *pool) kill(n int) (killed, busyKilled int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var busy, idle []*environment
	for _, e := range p.envs {
		if e.busy {
			busy = append(busy, e)
		} else {
			idle = append(idle, e)
		}
	}
	rand.Shuffle(len(busy), func(i, j int) { busy[i], busy[j] = busy[j], busy[i] })
	rand.Shuffle(len(idle), func(i, j int) { idle[i], idle[j] = idle[j], idle[i] })
	victims := append(busy, idle...)
	if n < len(victims) {
		victims = victims[:max(n, 0)]
	}
	for _, e := range victims {
		// Out of the pool first, so no invocation is handed to it while it
		// dies.
		p.remove(e)
		e.proc.Kill()
		p.killed++
		if e.busy {
			p.killedBusy++
			busyKilled++
		}
		p.log.Warn("environment killed", "env", e.id, "pid", e.proc.PID, "busy", e.busy)
		p.run.Info("environment killed", "env", e.id, "pid", e.proc.PID, "busy", e.busy)
	}
	return len(victims), busyKilled
}

func (p *pool) status() invoke.FunctionStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := invoke.FunctionStatus{
		Function:        p.fn.LogicalID,
		MaxEnvironments: p.fn.MaxEnvironments,
		Environments:    []invoke.Environment{},
		Invocations:     p.invocations,
		Killed:          p.killed,
		KilledBusy:      p.killedBusy,
	}
	for _, e := range p.envs {
		s.Environments = append(s.Environments, invoke.Environment{
			ID: e.id, PID: e.proc.PID, Busy: e.busy, Started: e.proc.Started, Served: e.served,
		})
	}
	return s
}

func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	envs := slices.Clone(p.envs)
	for _, e := range envs {
		p.remove(e)
	}
	p.mu.Unlock()
	for _, e := range envs {
		e.proc.Stop()
	}
	p.mu.Lock()
	p.out.Close()
	p.mu.Unlock()
}
