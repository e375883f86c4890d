package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/invoke"
	"github.com/oncepay/oncepay/internal/localcloud/stack"
	"github.com/oncepay/oncepay/internal/localcloud/trigger"
)

type oneEnv struct{}

func (oneEnv) Status() []invoke.FunctionStatus {
	return []invoke.FunctionStatus{{Function: "ResolverFunction8C958500", MaxEnvironments: 1, Invocations: 3, Killed: 2, KilledBusy: 1,
		Environments: []invoke.Environment{{ID: "env-1", PID: 77, Busy: true, Started: time.Unix(0, 0), Served: 3}}}}
}
func (oneEnv) Kill(string, int) (int, int, error) { return 0, 0, nil }
func (oneEnv) KillInFlight(context.Context, string, time.Duration) (int, int, error) {
	return 0, 0, nil
}

// `make status` prints each function with its environments and each
// trigger with its state, from the running stack's admin API.
func TestStatusPrintsEachFunctionWithItsEnvironmentsAndEachTriggerWithItsState(t *testing.T) {
	mux := http.NewServeMux()
	sched := trigger.NewSchedule(trigger.RuleSpec{ID: "ResolverSchedule0D6F1F8B", Expression: "rate(1 minute)", Period: time.Minute, Enabled: true,
		Targets: []trigger.TargetSpec{{Function: "ResolverFunction8C958500"}}}, nil, nil, trigger.ScheduleOptions{TimeScale: 10})
	(&stack.Admin{Functions: []string{"ApiFunction52E267E3", "ResolverFunction8C958500"}, Runner: oneEnv{}, Schedules: []*trigger.Schedule{sched}}).Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	var out strings.Builder
	if err := status(context.Background(), &out, strings.TrimPrefix(srv.URL, "http://")); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"function  api        ApiFunction52E267E3          envs=0 (unreserved)",
		"function  resolver   ResolverFunction8C958500     envs=1 (max 1) invocations=3 killed=2 (busy 1)",
		"env env-1        pid=77 busy served=3",
		"schedule  ResolverSchedule0D6F1F8B     rate(1 minute) -> ResolverFunction8C958500 Created",
		"time_scale=10",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("status lacks %q:\n%s", want, got)
		}
	}
	if err := status(context.Background(), &out, "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("no stack: %v", err)
	}
}
