// Package stack is the local cloud's long-running service: the synthesized
// template running as a stack. It composes the function runner (behind
// invoke.Invoker and invoke.Admin), the template's event-source mappings and
// schedules (package trigger), the admin API (GET /_local/status, POST
// /_local/kill, POST /_local/invoke) and a hook where the front door's
// routes and the phone are mounted, and runs them until its context ends
// (SIGTERM in `localcloud serve`), then stops each cleanly.
//
// The live pollers read only the stack's own resources (the outbox table's
// stream and the events queue the provisioner recorded): the test worlds
// that create their own tables and queues are never touched.
package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/localcloud/invoke"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/provision"
	"github.com/oncepay/oncepay/internal/localcloud/trigger"
)

// Runner runs the template's functions: the function runner on the live
// stack; InProcess (the handlers in this process) and invoke.Func-based
// fakes in tests.
type Runner interface {
	invoke.Invoker
	invoke.Admin
	Close() error
}

// NewRunner builds the runner for a template and its physical resources.
type NewRunner func(ctx context.Context, tpl *provision.Template, phys map[string]provision.Physical) (Runner, error)

// Mount is where the lead wires the parts that serve HTTP over the same
// runner: it may add routes to the admin mux (the phone's) and return
// servers the service starts with the rest and shuts down at the stop (the
// front door's routes). Each returned server must have its Addr set.
type Mount func(ctx context.Context, inv invoke.Invoker, admin *http.ServeMux) ([]*http.Server, error)

// AdminAddrVar names the admin API's listen address (default DefaultAdminAddr).
const AdminAddrVar = "ONCEPAY_ADMIN_ADDR"

// DefaultAdminAddr is the admin API's address.
const DefaultAdminAddr = "127.0.0.1:8071"

// Config is what the service runs.
type Config struct {
	Template  *provision.Template
	Resources map[string]provision.Physical // provision.ReadResources
	Region    string
	// StateDir (.local) keeps the stream mappings' checkpoints across
	// restarts, as Lambda keeps a mapping's position; "" keeps none.
	StateDir  string
	AdminAddr string // "" : DefaultAdminAddr; "127.0.0.1:0" picks a port
	TimeScale float64
	Clients   trigger.Clients
	NewRunner NewRunner
	Mount     Mount // nil: nothing more
	Logger    *slog.Logger
}

// Service is the running stack.
type Service struct {
	cfg       Config
	runner    Runner
	mappings  []*trigger.Mapping
	schedules []*trigger.Schedule
	admin     *Admin
	listener  net.Listener
	servers   []*http.Server
	savingMu  sync.Mutex         // one writer of the position files at a time
	saved     map[string]string  // mapping id -> the position last written
	stopAims  context.CancelFunc // ends the admin API's pending in-flight kills
}

// New builds every part from the template (nothing runs yet) and binds the
// admin API's address, so a taken port fails here.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Template == nil || cfg.NewRunner == nil {
		return nil, errors.New("stack: Config needs a Template and a NewRunner")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.AdminAddr == "" {
		cfg.AdminAddr = DefaultAdminAddr
	}
	if err := loopbackOnly(cfg.AdminAddr); err != nil {
		return nil, err
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	mspecs, err := trigger.Mappings(cfg.Template, cfg.Resources, cfg.Region)
	if err != nil {
		return nil, err
	}
	rspecs, err := trigger.Rules(cfg.Template, cfg.Resources, cfg.Region)
	if err != nil {
		return nil, err
	}
	runner, err := cfg.NewRunner(ctx, cfg.Template, cfg.Resources)
	if err != nil {
		return nil, fmt.Errorf("stack: function runner: %w", err)
	}
	s := &Service{cfg: cfg, runner: runner, saved: map[string]string{}}
	fail := func(err error) (*Service, error) { _ = runner.Close(); return nil, err }
	for _, spec := range mspecs {
		resume, err := s.loadCheckpoints(spec)
		if err != nil {
			return fail(err)
		}
		o := trigger.MappingOptions{Region: cfg.Region, Resume: resume, Logger: cfg.Logger}
		if spec.Kind == trigger.KindStream && spec.Stream.TumblingWindow > 0 {
			// Lambda checkpoints a window's state with the position at
			// every invocation: saved here at each commit, both at once
			// (docs/stream-job.md#the-converse).
			o.Committed = func(pos harness.Position) error { return s.savePosition(spec, pos) }
		}
		m, err := trigger.NewMapping(spec, cfg.Clients, runner, o)
		if err != nil {
			return fail(err)
		}
		s.mappings = append(s.mappings, m)
	}
	for _, spec := range rspecs {
		s.schedules = append(s.schedules, trigger.NewSchedule(spec, runner, cfg.Clients.Send, trigger.ScheduleOptions{TimeScale: cfg.TimeScale, Logger: cfg.Logger}))
	}
	stopping, stopAims := context.WithCancel(context.Background())
	s.stopAims = stopAims
	s.admin = &Admin{Functions: cfg.Template.OfType("AWS::Lambda::Function"), Runner: runner, Invoker: runner, Mappings: s.mappings, Schedules: s.schedules, Stopping: stopping}
	mux := http.NewServeMux()
	s.admin.Register(mux)
	if cfg.Mount != nil {
		if s.servers, err = cfg.Mount(ctx, runner, mux); err != nil {
			return fail(fmt.Errorf("stack: mount: %w", err))
		}
	}
	if s.listener, err = net.Listen("tcp", cfg.AdminAddr); err != nil {
		return fail(fmt.Errorf("stack: admin API: %w", err))
	}
	s.servers = append([]*http.Server{{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}, s.servers...)
	return s, nil
}

// AdminAddr is the address the admin API listens on.
func (s *Service) AdminAddr() string { return s.listener.Addr().String() }

// Admin returns the admin API's parts (for a status printed in process).
func (s *Service) Admin() *Admin { return s.admin }

// Run serves and polls until ctx ends, then stops the schedules and the
// pollers (an invocation under way finishes), saves the stream checkpoints,
// shuts the servers down and closes the runner. It blocks; it returns nil
// after a clean stop, or the first server error.
func (s *Service) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(s.servers))
	var serving sync.WaitGroup
	for i, srv := range s.servers {
		serving.Go(func() {
			var err error
			if i == 0 {
				err = srv.Serve(s.listener)
			} else {
				err = srv.ListenAndServe()
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("stack: serve %s: %w", srv.Addr, err)
				cancel()
			}
		})
	}
	var polling sync.WaitGroup
	for _, m := range s.mappings {
		polling.Go(func() { _ = m.Run(ctx) })
	}
	for _, sc := range s.schedules {
		polling.Go(func() { _ = sc.Run(ctx) })
	}
	polling.Go(func() { s.saveCheckpointsEvery(ctx, 2*time.Second) })
	s.cfg.Logger.Info("local cloud stack running", "admin", s.AdminAddr(), "mappings", len(s.mappings), "schedules", len(s.schedules))
	<-ctx.Done()
	// A stop drains: from the signal on no new work is taken (the pollers
	// and schedules stop, every server stops accepting at once, pending
	// aimed kills end), and what is in flight runs to its end, up to
	// drainTimeout from the signal, before the environments are stopped. A
	// stop is not a crash (the admin API's kill is the crash).
	shut, done := context.WithTimeout(context.Background(), drainTimeout)
	defer done()
	s.stopAims()
	var shutting sync.WaitGroup
	for _, srv := range s.servers {
		shutting.Go(func() { _ = srv.Shutdown(shut) })
	}
	polling.Wait()
	s.saveCheckpoints()
	shutting.Wait()
	serving.Wait()
	if busy := s.drain(shut); busy > 0 {
		s.cfg.Logger.Warn("stopping with invocations still in flight", "busy_environments", busy)
	}
	err := s.runner.Close()
	s.cfg.Logger.Info("local cloud stack stopped")
	select {
	case e := <-errs:
		return e
	default:
	}
	if err != nil {
		return fmt.Errorf("stack: close runner: %w", err)
	}
	return nil
}

// checkpointFile is a stream mapping's saved position: valid only for the
// stream it was read from (a recreated table has a new stream).
type checkpointFile struct {
	StreamArn string `json:"stream_arn"`
	harness.Position
}

func (s *Service) checkpointPath(id string) string {
	return filepath.Join(s.cfg.StateDir, "mappings", id+".json")
}

func (s *Service) loadCheckpoints(spec trigger.MappingSpec) (harness.Position, error) {
	if s.cfg.StateDir == "" || spec.Kind != trigger.KindStream {
		return harness.Position{}, nil
	}
	b, err := os.ReadFile(s.checkpointPath(spec.ID))
	if errors.Is(err, os.ErrNotExist) {
		return harness.Position{}, nil
	}
	if err != nil {
		return harness.Position{}, fmt.Errorf("stack: checkpoints of %s: %w", spec.ID, err)
	}
	var f checkpointFile
	if err := json.Unmarshal(b, &f); err != nil {
		return harness.Position{}, fmt.Errorf("stack: checkpoints of %s: %w", spec.ID, err)
	}
	if f.StreamArn != spec.SourceArn {
		return harness.Position{}, nil
	}
	return f.Position, nil
}

func (s *Service) saveCheckpointsEvery(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.saveCheckpoints()
		}
	}
}

// saveCheckpoints saves the positions of the mappings without a window:
// theirs is polled, and a restart from an older one only hands records
// again (at least once, as Lambda does). A window mapping saves its own at
// each commit.
func (s *Service) saveCheckpoints() {
	for _, m := range s.mappings {
		if m.Windowed() {
			continue
		}
		if pos, ok := m.Position(); ok {
			if err := s.savePosition(m.Spec, pos); err != nil {
				s.cfg.Logger.Warn("stream position not saved", "mapping", m.Spec.ID, "error", err.Error())
			}
		}
	}
}

func (s *Service) savePosition(spec trigger.MappingSpec, pos harness.Position) error {
	if s.cfg.StateDir == "" {
		return nil
	}
	s.savingMu.Lock()
	defer s.savingMu.Unlock()
	b, err := json.Marshal(checkpointFile{StreamArn: spec.SourceArn, Position: pos})
	if err != nil {
		return fmt.Errorf("stack: position of %s: %w", spec.ID, err)
	}
	if s.saved[spec.ID] == string(b) {
		return nil
	}
	if err := localenv.WriteFile(s.checkpointPath(spec.ID), b); err != nil {
		return fmt.Errorf("stack: position of %s: %w", spec.ID, err)
	}
	s.saved[spec.ID] = string(b)
	return nil
}

// loopbackOnly refuses an admin address another machine could reach: the
// admin API has no authentication (it kills environments and shows every
// function's state), so it is the local user's only.
func loopbackOnly(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("stack: admin address %q: %w", addr, err)
	}
	if !isLoopbackHost(host) {
		return fmt.Errorf("stack: admin address %q is not a loopback address: the admin API has no authentication, so it listens on 127.0.0.1 or ::1 only (%s)", addr, AdminAddrVar)
	}
	return nil
}

// drainTimeout bounds a stop's wait for invocations in flight: past every
// function's timeout in the template (the api's 6 s, the relay's and the
// worker's 30 s, the resolver's 50 s) but the migration's, which runs only
// while the stack starts, and the reconciliation's 15 min, which runs only
// when asked (make reconcile) and resumes a run a stop cut off.
const drainTimeout = 55 * time.Second

// drain waits until no environment is busy or ctx ends, and returns how
// many were still busy.
func (s *Service) drain(ctx context.Context) int {
	for {
		busy := 0
		for _, f := range s.runner.Status() {
			for _, e := range f.Environments {
				if e.Busy {
					busy++
				}
			}
		}
		if busy == 0 {
			return 0
		}
		select {
		case <-ctx.Done():
			return busy
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// isLoopbackHost says whether host (a name or an address, no port) is this
// machine's loopback.
func isLoopbackHost(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}
