package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/oncepay/oncepay/internal/awsclient"
	"github.com/oncepay/oncepay/internal/awsclient/fullconfig"
	"github.com/oncepay/oncepay/internal/awsclient/sqsclient"
	"github.com/oncepay/oncepay/internal/awsclient/streamsclient"
	"github.com/oncepay/oncepay/internal/localcloud/customresource"
	"github.com/oncepay/oncepay/internal/localcloud/frontdoor"
	"github.com/oncepay/oncepay/internal/localcloud/invoke"
	"github.com/oncepay/oncepay/internal/localcloud/lambdarun"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/provision"
	"github.com/oncepay/oncepay/internal/localcloud/secretsgate"
	"github.com/oncepay/oncepay/internal/localcloud/stack"
	"github.com/oncepay/oncepay/internal/localcloud/trigger"
)

// liveRunner runs every template function as its bootstrap under
// aws-lambda-rie (lambdarun), with the environment `up` resolved for it,
// and before any trigger starts it plays the template's custom resources
// through it as CloudFormation would (the ledger migration is one). The
// functions reach Secrets Manager through the gate (localcloud/secretsgate),
// which serves each what its role grants on AWS.
func liveRunner(c provision.Config, awsCfg aws.Config, log *slog.Logger) stack.NewRunner {
	return func(ctx context.Context, tpl *provision.Template, phys map[string]provision.Physical) (stack.Runner, error) {
		root, err := localenv.Root()
		if err != nil {
			return nil, err
		}
		envs, err := provision.ReadFunctionEnvs(c.StateDir)
		if err != nil {
			return nil, err
		}
		sm := secretsmanager.NewFromConfig(awsCfg)
		// Each function's session token names it to the gate, which serves
		// it only what the template's role gives it on AWS.
		callers, err := provision.SecretCallers(tpl, c.Evaluator(tpl, phys, sm), envs)
		if err != nil {
			return nil, err
		}
		gate, gateURL, err := serveSecretsGate(c.Region, sm, callers)
		if err != nil {
			return nil, err
		}
		for _, env := range envs {
			env[awsclient.ServiceEndpointVar("Secrets Manager")] = gateURL
		}
		// Each Region of the two-Region local cloud logs to its own state
		// directory (the default's is .local/logs, as before).
		lc := lambdarun.Config{Root: root, Region: c.Region, Logs: filepath.Join(c.StateDir, "logs")}
		fns, err := lambdarun.FromTemplate(c.Template, envs, lc)
		if err != nil {
			_ = gate.Close()
			return nil, err
		}
		built, err := lambdarun.Build(ctx, root, fns)
		if err != nil {
			_ = gate.Close()
			return nil, err
		}
		log.Info("function bootstraps built for the host", "changed", built)
		r, err := lambdarun.New(fns, lc)
		if err != nil {
			_ = gate.Close()
			return nil, err
		}
		lr := &runnerWithGate{Runner: r, gate: gate}
		d := customresource.Driver{Invoker: r, Evaluator: c.Evaluator(tpl, phys, sm), StateDir: c.StateDir, Log: log}
		outs, err := d.Run(ctx)
		if err != nil {
			_ = lr.Close()
			return nil, err
		}
		for _, o := range outs {
			log.Info("custom resource", "outcome", fmt.Sprintf("%+v", o))
		}
		return lr, nil
	}
}

// runnerWithGate stops the Secrets Manager gate with the runner.
type runnerWithGate struct {
	*lambdarun.Runner
	gate *http.Server
}

func (r *runnerWithGate) Close() error {
	_ = r.gate.Close()
	return r.Runner.Close()
}

// serveSecretsGate starts the Secrets Manager gate for the callers
// provision.SecretCallers found, on a port of its own on 127.0.0.1, and
// returns its URL: the functions' AWS_ENDPOINT_URL_SECRETS_MANAGER.
func serveSecretsGate(region string, sm secretsgate.Secrets, callers map[string]secretsgate.Caller) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("localcloud: the Secrets Manager gate: %w", err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second,
		Handler: &secretsgate.Handler{Secrets: sm, Region: region, Callers: callers}}
	go func() { _ = srv.Serve(ln) }()
	return srv, "http://" + ln.Addr().String(), nil
}

// frontDoor serves the template's HTTP API routes over the runner on the
// front door's address (ONCEPAY_FRONTDOOR_URL's host).
func frontDoor(c provision.Config, log *slog.Logger) stack.Mount {
	return func(ctx context.Context, inv invoke.Invoker, admin *http.ServeMux) ([]*http.Server, error) {
		root, err := localenv.Root()
		if err != nil {
			return nil, err
		}
		secret, err := frontdoor.LoadOrCreateSecret(filepath.Join(root, ".local", "frontdoor.key"))
		if err != nil {
			return nil, err
		}
		door, err := frontdoor.FromTemplate(c.Template, inv, secret, frontdoor.WithLogger(log))
		if err != nil {
			return nil, err
		}
		u, err := url.Parse(c.FrontDoor)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("localcloud: front door URL %q: %v", c.FrontDoor, err)
		}
		return []*http.Server{{Addr: u.Host, Handler: door, ReadHeaderTimeout: 10 * time.Second}}, nil
	}
}

// serve runs the stack from the template and what the last `up`
// provisioned, until SIGTERM or an interrupt.
func serve(ctx context.Context, c provision.Config, admin string) error {
	log := slog.New(slog.NewJSONHandler(os.Stdout, nil)).With("scope", "localcloud")
	slog.SetDefault(log)
	env, err := localenv.Load()
	if err != nil {
		return err
	}
	if err := env.Export(); err != nil {
		return err
	}
	tpl, err := provision.ReadTemplate(c.Template)
	if err != nil {
		return err
	}
	phys, err := provision.ReadResources(c.StateDir)
	if err != nil {
		return err
	}
	scale, err := trigger.TimeScaleFromEnv()
	if err != nil {
		return err
	}
	cfg, err := fullconfig.Load(ctx)
	if err != nil {
		return err
	}
	q := sqsclient.New(cfg)
	svc, err := stack.New(ctx, stack.Config{
		Template: tpl, Resources: phys, Region: c.Region, StateDir: c.StateDir,
		AdminAddr: admin, TimeScale: scale,
		Clients:   trigger.Clients{Streams: streamsclient.New(cfg), Queues: q, Send: q},
		NewRunner: liveRunner(c, cfg, log), Mount: frontDoor(c, log), Logger: log,
	})
	if err != nil {
		return err
	}
	phoneCtx, stopPhone := context.WithCancel(ctx)
	waitPhone := startPhone(phoneCtx, env, c.StateDir, log)
	err = svc.Run(ctx)
	stopPhone()
	waitPhone()
	return err
}

// status prints the running stack's GET /_local/status, one line a part.
func status(ctx context.Context, w io.Writer, admin string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/_local/status", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("localcloud: the stack is not running (admin API %s): %w", admin, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("localcloud: status: %s", resp.Status)
	}
	var st stack.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return fmt.Errorf("localcloud: status: %w", err)
	}
	printStatus(w, st)
	return nil
}

func printStatus(w io.Writer, st stack.Status) {
	for _, f := range st.Functions {
		max := "unreserved"
		if f.MaxEnvironments > 0 {
			max = fmt.Sprintf("max %d", f.MaxEnvironments)
		}
		fmt.Fprintf(w, "function  %-10s %-28s envs=%d (%s) invocations=%d killed=%d (busy %d)\n",
			f.Short, f.Function, len(f.Environments), max, f.Invocations, f.Killed, f.KilledBusy)
		for _, e := range f.Environments {
			state := "idle"
			if e.Busy {
				state = "busy"
			}
			fmt.Fprintf(w, "          env %-12s pid=%d %s served=%d since %s\n", e.ID, e.PID, state, e.Served, e.Started.Format(time.RFC3339))
		}
	}
	for _, m := range st.Mappings {
		b, _ := json.Marshal(m.Stats)
		stats := strings.NewReplacer(`"`, "", ":", "=", ",", " ").Replace(strings.Trim(string(b), "{}"))
		fmt.Fprintf(w, "mapping   %-28s %s -> %s %s %s\n", m.ID, m.Kind, m.Function, m.State, stats)
	}
	for _, s := range st.Schedules {
		next, last := "-", "-"
		if s.NextRun != nil {
			next = s.NextRun.Format(time.RFC3339)
		}
		if s.LastRun != nil {
			last = s.LastRun.Format(time.RFC3339)
		}
		line := fmt.Sprintf("schedule  %-28s %s -> %s %s last=%s next=%s fired=%d failed=%d dead_lettered=%d",
			s.Rule, s.Expression, strings.Join(s.Targets, ","), s.State, last, next, s.Fired, s.Failed, s.DeadLetter)
		if s.TimeScale != 1 {
			line += fmt.Sprintf(" time_scale=%g", s.TimeScale)
		}
		if s.LastError != "" {
			line += " last_error=" + fmt.Sprintf("%q", s.LastError)
		}
		fmt.Fprintln(w, line)
	}
}
