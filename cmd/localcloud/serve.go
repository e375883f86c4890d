package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/awsclient/fullconfig"
	"github.com/oncepay/oncepay/internal/awsclient/sqsclient"
	"github.com/oncepay/oncepay/internal/awsclient/streamsclient"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/provision"
	"github.com/oncepay/oncepay/internal/localcloud/stack"
	"github.com/oncepay/oncepay/internal/localcloud/trigger"
)

// newRunner is the function runner the stack runs its functions with. The
// lead plugs the aws-lambda-rie runner (internal/localcloud/lambdarun) in
// here; until then the relay, worker and resolver run in process.
var newRunner stack.NewRunner = func(_ context.Context, tpl *provision.Template, _ map[string]provision.Physical) (stack.Runner, error) {
	return stack.NewInProcess(tpl, slog.Default()), nil
}

// mount wires the front door's routes onto the stack (nil: none yet; the
// front door still runs as its own process). The phone's reader needs no
// route: serve runs it beside the stack (startPhone).
var mount stack.Mount

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
		NewRunner: newRunner, Mount: mount, Logger: log,
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
		fmt.Fprintf(w, "function  %-10s %-28s envs=%d (%s) invocations=%d killed=%d\n",
			f.Short, f.Function, len(f.Environments), max, f.Invocations, f.Killed)
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
