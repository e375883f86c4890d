package blackbox

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// functionStatus is one element of GET /_local/status' functions
// (docs/localcloud.md, "The admin API").
type functionStatus struct {
	Short           string `json:"short"`
	Function        string `json:"function"`
	MaxEnvironments int    `json:"max_environments"`
	Environments    []struct {
		ID     string `json:"id"`
		PID    int    `json:"pid"`
		Busy   bool   `json:"busy"`
		Served int64  `json:"served"`
	} `json:"environments"`
	Invocations int64 `json:"invocations"`
	Killed      int64 `json:"killed"`
	KilledBusy  int64 `json:"killed_busy"`
}

// status reads the local cloud's functions, by short name.
func (s *surface) status(ctx context.Context) (map[string]functionStatus, error) {
	var st struct {
		Functions []functionStatus `json:"functions"`
	}
	if _, err := get(ctx, s.httpc, s.adminURL+"/_local/status", &st); err != nil {
		return nil, err
	}
	out := map[string]functionStatus{}
	for _, f := range st.Functions {
		out[strings.ToLower(f.Short)] = f
	}
	return out, nil
}

// kill asks the local cloud to SIGKILL up to n of function's execution
// environments and returns how many it killed and how many of those were
// busy (mid-invocation: an idle one's kill crashes nothing). The
// in-process runner refuses (409): then the stack is not running the real
// binaries.
func (s *surface) kill(ctx context.Context, function string, n int) (killed, busy int, err error) {
	var out struct {
		Function string `json:"function"`
		Killed   int    `json:"killed"`
		Busy     *int   `json:"busy"`
	}
	if _, err := post(ctx, s.httpc, s.adminURL+"/_local/kill", map[string]any{"function": function, "n": n}, &out); err != nil {
		return 0, 0, fmt.Errorf("kill %s: %w", function, err)
	}
	if out.Busy == nil {
		return 0, 0, fmt.Errorf("kill %s: the answer has no busy count: the local cloud predates it (restart it)", function)
	}
	return out.Killed, *out.Busy, nil
}

// killInFlight asks the local cloud's runner to kill function's next
// invocation (within the wait) while it runs: killed and busy are 1 when it
// did, 0 when no invocation came.
func (s *surface) killInFlight(ctx context.Context, function string, within time.Duration) (killed, busy int, err error) {
	var out struct {
		Killed int  `json:"killed"`
		Busy   *int `json:"busy"`
	}
	body := map[string]any{"function": function, "in_flight": true, "within_ms": within.Milliseconds()}
	if _, err := post(ctx, s.httpc, s.adminURL+"/_local/kill", body, &out); err != nil {
		return 0, 0, fmt.Errorf("in-flight kill %s: %w", function, err)
	}
	if out.Busy == nil {
		return 0, 0, fmt.Errorf("in-flight kill %s: the answer has no busy count: the local cloud predates it (restart it)", function)
	}
	return out.Killed, *out.Busy, nil
}
