package stack_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/invoke"
	"github.com/oncepay/oncepay/internal/localcloud/stack"
	"github.com/oncepay/oncepay/internal/problem"
)

// fakeAdmin records kills and answers a fixed status; it reports the
// first busy of each kill's environments as busy.
type fakeAdmin struct {
	mu    sync.Mutex
	kills []string
	busy  int
	err   error
}

func (f *fakeAdmin) Status() []invoke.FunctionStatus {
	return []invoke.FunctionStatus{{Function: "RelayFunction3833AFCF", MaxEnvironments: 0, Invocations: 7,
		Environments: []invoke.Environment{{ID: "env-1", PID: 4242, Busy: true, Served: 7}}}}
}

func (f *fakeAdmin) Kill(function string, n int) (killed, busy int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return 0, 0, f.err
	}
	f.kills = append(f.kills, fmt.Sprintf("%s x%d", function, n))
	return n, min(f.busy, n), nil
}

func (f *fakeAdmin) KillInFlight(_ context.Context, function string, within time.Duration) (killed, busy int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return 0, 0, f.err
	}
	f.kills = append(f.kills, fmt.Sprintf("%s in flight within %s", function, within))
	return 1, 1, nil
}

var functions = []string{"ApiFunction52E267E3", "RelayFunction3833AFCF", "ResolverFunction8C958500", "WorkerFunction9E8CCBFD"}

func adminServer(t *testing.T, f *fakeAdmin) *httptest.Server {
	mux := http.NewServeMux()
	(&stack.Admin{Functions: functions, Runner: f}).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestAdminStatusListsEveryTemplateFunctionWithTheRunnersEnvironments(t *testing.T) {
	srv := adminServer(t, &fakeAdmin{})
	resp, err := http.Get(srv.URL + "/_local/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st stack.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s: %v", resp.Status, err)
	}
	if len(st.Functions) != len(functions) || st.Mappings == nil || st.Schedules == nil {
		t.Fatalf("status = %+v", st)
	}
	relay := st.Functions[1]
	if relay.Short != "relay" || relay.Invocations != 7 || len(relay.Environments) != 1 || relay.Environments[0].PID != 4242 {
		t.Fatalf("relay = %+v", relay)
	}
	if api := st.Functions[0]; api.Short != "api" || api.Environments == nil || len(api.Environments) != 0 {
		t.Fatalf("api (not started) = %+v", api)
	}
}

func post(t *testing.T, srv *httptest.Server, body string) (int, string, map[string]any) {
	t.Helper()
	resp, err := http.Post(srv.URL+"/_local/kill", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, resp.Header.Get("Content-Type"), m
}

func TestAdminKillTakesALogicalIDOrAShortName(t *testing.T) {
	f := &fakeAdmin{}
	srv := adminServer(t, f)
	if code, _, m := post(t, srv, `{"function":"relay","n":2}`); code != 200 || m["function"] != "RelayFunction3833AFCF" || m["killed"] != 2.0 {
		t.Fatalf("short name: %d %v", code, m)
	}
	if code, _, m := post(t, srv, `{"function":"WorkerFunction9E8CCBFD"}`); code != 200 || m["killed"] != 1.0 {
		t.Fatalf("logical id, default n: %d %v", code, m)
	}
	if strings.Join(f.kills, ";") != "RelayFunction3833AFCF x2;WorkerFunction9E8CCBFD x1" {
		t.Fatalf("kills = %v", f.kills)
	}
}

// A crash test must tell a kill that crashed an invocation from one that
// took an idle warm environment: the answer carries how many were busy.
func TestAdminKillAnswerSaysHowManyKilledEnvironmentsWereBusy(t *testing.T) {
	srv := adminServer(t, &fakeAdmin{busy: 1})
	code, _, m := post(t, srv, `{"function":"relay","n":3}`)
	if code != 200 || m["killed"] != 3.0 || m["busy"] != 1.0 {
		t.Fatalf("kill of 3 with 1 busy: %d %v", code, m)
	}
	srv = adminServer(t, &fakeAdmin{})
	if code, _, m := post(t, srv, `{"function":"worker"}`); code != 200 || m["killed"] != 1.0 || m["busy"] != 0.0 {
		t.Fatalf("kill of an idle one: %d %v; want busy 0 present", code, m)
	}
}

// What a web page could send to the loopback port kills nothing: a Host
// that is not loopback (DNS rebinding) is 403, a POST that is not JSON (a
// form or text/plain needs no preflight) is 415.
func TestAdminRefusesWhatABrowserPageCouldSend(t *testing.T) {
	f := &fakeAdmin{}
	srv := adminServer(t, f)
	for _, c := range []struct {
		host, ctype string
		want        int
	}{
		{"evil.example:8071", "application/json", 403},
		{"", "text/plain", 415},
		{"", "application/x-www-form-urlencoded", 415},
		{"", "", 415},
		{"localhost:8071", "application/json; charset=utf-8", 200},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/_local/kill", strings.NewReader(`{"function":"relay"}`))
		if c.host != "" {
			req.Host = c.host
		}
		if c.ctype != "" {
			req.Header.Set("Content-Type", c.ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("Host %q, Content-Type %q: %d, want %d", c.host, c.ctype, resp.StatusCode, c.want)
		}
	}
	if len(f.kills) != 1 {
		t.Fatalf("kills = %v, want only the JSON one to a loopback host", f.kills)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/_local/status", nil)
	req.Host = "evil.example"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 403 {
		t.Fatalf("status read through a rebound name: %v %v", resp.StatusCode, err)
	}
}

// An in-flight kill is the runner's own aim: the admin API passes the wait
// through (10 s when absent).
func TestAdminInFlightKillAsksTheRunnerToAim(t *testing.T) {
	f := &fakeAdmin{}
	srv := adminServer(t, f)
	if code, _, m := post(t, srv, `{"function":"relay","in_flight":true,"within_ms":2500}`); code != 200 || m["killed"] != 1.0 || m["busy"] != 1.0 {
		t.Fatalf("in-flight kill: %d %v", code, m)
	}
	if code, _, _ := post(t, srv, `{"function":"worker","in_flight":true,"n":1}`); code != 200 {
		t.Fatalf("in-flight kill with n 1: %d", code)
	}
	if got := strings.Join(f.kills, ";"); got != "RelayFunction3833AFCF in flight within 2.5s;WorkerFunction9E8CCBFD in flight within 10s" {
		t.Fatalf("kills = %v", got)
	}
}

func TestAdminKillBadInputIsAProblemAndKillsNothing(t *testing.T) {
	f := &fakeAdmin{}
	srv := adminServer(t, f)
	for body, want := range map[string]int{
		`not json`:                                                400,
		`{"function":"relay","n":0}`:                              400,
		`{"function":"relay","n":-1}`:                             400,
		`{"function":"relay","n":"2"}`:                            400,
		`{"function":"relay","n":100000}`:                         400,
		`{"function":""}`:                                         400,
		`{"function":"relay","extra":true}`:                       400,
		`{"function":"relay"} {"x":1}`:                            400,
		`{"function":"nosuch"}`:                                   404,
		`{"function":"relay","in_flight":true,"n":2}`:             400,
		`{"function":"relay","within_ms":100}`:                    400,
		`{"function":"relay","in_flight":true,"within_ms":0}`:     400,
		`{"function":"relay","in_flight":true,"within_ms":60001}`: 400,
	} {
		code, ct, m := post(t, srv, body)
		if code != want || ct != problem.ContentType || m["status"] != float64(want) || m["title"] == nil {
			t.Errorf("%s: %d %s %v, want %d problem+json", body, code, ct, m, want)
		}
	}
	if len(f.kills) != 0 {
		t.Fatalf("killed %v", f.kills)
	}
	resp, err := http.Get(srv.URL + "/_local/kill")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" || resp.Header.Get("Content-Type") != problem.ContentType {
		t.Fatalf("GET kill: %s allow=%q", resp.Status, resp.Header.Get("Allow"))
	}
}

func TestAdminKillTheRunnerRefusesIsAConflict(t *testing.T) {
	srv := adminServer(t, &fakeAdmin{err: errors.New("the in-process runner cannot kill RelayFunction3833AFCF")})
	if code, ct, m := post(t, srv, `{"function":"relay"}`); code != 409 || ct != problem.ContentType || !strings.Contains(fmt.Sprint(m["detail"]), "cannot kill") {
		t.Fatalf("%d %s %v", code, ct, m)
	}
	srv = adminServer(t, &fakeAdmin{err: fmt.Errorf("%w: RelayFunction3833AFCF", invoke.ErrUnknownFunction)})
	if code, _, _ := post(t, srv, `{"function":"relay"}`); code != 404 {
		t.Fatalf("unknown to the runner: %d", code)
	}
}

func TestShortNamesDropTheCDKsTail(t *testing.T) {
	for id, want := range map[string]string{"RelayFunction3833AFCF": "relay", "ApiFunction52E267E3": "api", "MigrationFunctionC04042BC": "migration", "Odd": "odd"} {
		if got := stack.ShortName(id); got != want {
			t.Errorf("%s -> %s, want %s", id, got, want)
		}
	}
}

// invokerFunc is an invoke.Invoker from a function.
type invokerFunc func(ctx context.Context, function string, payload []byte) ([]byte, error)

func (f invokerFunc) Invoke(ctx context.Context, function string, payload []byte) ([]byte, error) {
	return f(ctx, function, payload)
}

// invokeServer is the admin API over inv, with a reconcile function in
// the template.
func invokeServer(t *testing.T, inv invoke.Invoker) *httptest.Server {
	mux := http.NewServeMux()
	fns := append(append([]string{}, functions...), "ReconcileFunction0F1E2D3C")
	(&stack.Admin{Functions: fns, Runner: &fakeAdmin{}, Invoker: inv}).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func postInvoke(t *testing.T, srv *httptest.Server, body string) (int, string, []byte) {
	t.Helper()
	resp, err := http.Post(srv.URL+"/_local/invoke", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// An operator's on-demand run (make reconcile): the function named by its
// short name gets the payload as sent ({} when absent) and the caller its
// answer as the function gave it.
func TestAdminInvokeRunsTheFunctionAndAnswersItsAnswer(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := invokeServer(t, invoke.Func{"ReconcileFunction0F1E2D3C": func(_ context.Context, p []byte) ([]byte, error) {
		mu.Lock()
		got = append(got, string(p))
		mu.Unlock()
		return []byte(`{"reports":[{"run_id":7,"counts":{"agree":3}}]}`), nil
	}})
	code, ct, b := postInvoke(t, srv, `{"function":"reconcile","payload":{"day":"2026-12-06"}}`)
	if code != 200 || ct != "application/json" || string(b) != `{"reports":[{"run_id":7,"counts":{"agree":3}}]}` {
		t.Fatalf("%d %s %s", code, ct, b)
	}
	if code, _, _ := postInvoke(t, srv, `{"function":"ReconcileFunction0F1E2D3C"}`); code != 200 {
		t.Fatalf("by logical id, no payload: %d", code)
	}
	if strings.Join(got, ";") != `{"day":"2026-12-06"};{}` {
		t.Fatalf("payloads %v", got)
	}
}

// What went wrong is told apart: the function's own error (502, with its
// errorType and message), a throttle (429), a payload Lambda refuses
// (413), bad input (400, nothing invoked), a name the template lacks
// (404), no runner (409).
func TestAdminInvokeFailuresAreProblems(t *testing.T) {
	calls := 0
	// As the runner answers (invoke.Func would wrap every error as the
	// function's own).
	srv := invokeServer(t, invokerFunc(func(_ context.Context, fn string, _ []byte) ([]byte, error) {
		switch fn {
		case "ReconcileFunction0F1E2D3C":
			calls++
			return nil, &invoke.FunctionError{Function: fn, Type: "errorString", Message: "reconcile: list the PSP's payment intents: 500"}
		case "ApiFunction52E267E3":
			return nil, invoke.ErrThrottled
		case "RelayFunction3833AFCF":
			return nil, invoke.ErrPayloadTooLarge
		}
		return nil, fmt.Errorf("%w: %s", invoke.ErrUnknownFunction, fn)
	}))
	code, ct, b := postInvoke(t, srv, `{"function":"reconcile","payload":{}}`)
	if code != 502 || ct != problem.ContentType || !strings.Contains(string(b), "errorString: reconcile: list the PSP") {
		t.Errorf("function error: %d %s %s", code, ct, b)
	}
	for body, want := range map[string]int{
		`{"function":"api"}`:                     429,
		`{"function":"relay"}`:                   413,
		`{"function":"worker"}`:                  404, // in the template, unknown to the runner
		`{"function":"nosuch"}`:                  404,
		`{"function":""}`:                        400,
		`not json`:                               400,
		`{"function":"reconcile","payload":{}`:   400,
		`{"function":"reconcile","extra":1}`:     400,
		`{"function":"reconcile"} {"another":1}`: 400,
	} {
		if code, ct, b := postInvoke(t, srv, body); code != want || ct != problem.ContentType {
			t.Errorf("%s: %d %s %s, want %d problem+json", body, code, ct, b, want)
		}
	}
	if calls != 1 {
		t.Errorf("the function ran %d times, want once (bad input invokes nothing)", calls)
	}
	mux := http.NewServeMux()
	(&stack.Admin{Functions: functions, Runner: &fakeAdmin{}}).Register(mux)
	none := httptest.NewServer(mux)
	defer none.Close()
	if code, _, _ := postInvoke(t, none, `{"function":"relay"}`); code != 409 {
		t.Errorf("no invoker: %d, want 409", code)
	}
	resp, err := http.Get(srv.URL + "/_local/invoke")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET invoke: %s", resp.Status)
	}
	// A page in the user's browser cannot run a function either.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/_local/invoke", strings.NewReader(`{"function":"reconcile"}`))
	req.Header.Set("Content-Type", "text/plain")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 415 {
		t.Errorf("text/plain: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if calls != 1 {
		t.Errorf("the function ran %d times, want once", calls)
	}
}

// The admin API answers only a peer on this machine's loopback: a request
// whose connection comes from any other address is 403 problem+json and
// kills nothing, even with a loopback Host (which is the client's to
// write). The listener is refused off loopback too (loopbackOnly); this is
// the second lock, for a listener a port forward, a container's network or
// a proxy exposes anyway.
func TestAdminRefusesAPeerThatIsNotLoopback(t *testing.T) {
	f := &fakeAdmin{}
	mux := http.NewServeMux()
	(&stack.Admin{Functions: functions, Runner: f}).Register(mux)
	send := func(remote, method, path string) (int, string) {
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"function":"relay"}`)
		}
		req := httptest.NewRequest(method, "http://127.0.0.1:8071"+path, body)
		req.RemoteAddr = remote
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec.Code, rec.Header().Get("Content-Type")
	}
	for _, remote := range []string{"192.0.2.1:40000", "[2001:db8::1]:40000", "10.0.0.7:1", "[::ffff:192.0.2.1]:2", "not-an-address", ""} {
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			path := map[string]string{http.MethodGet: "/_local/status", http.MethodPost: "/_local/kill"}[m]
			if code, ctype := send(remote, m, path); code != http.StatusForbidden || ctype != problem.ContentType {
				t.Errorf("%s %s from %q: %d %s, want 403 problem+json", m, path, remote, code, ctype)
			}
		}
	}
	if len(f.kills) != 0 {
		t.Errorf("kills = %v from peers off loopback", f.kills)
	}
	for _, remote := range []string{"127.0.0.1:40000", "[::1]:40000", "127.0.0.2:1"} {
		if code, _ := send(remote, http.MethodPost, "/_local/kill"); code != http.StatusOK {
			t.Errorf("kill from %q: %d, want 200", remote, code)
		}
	}

	// Over a real socket: a listener on this machine's non-loopback
	// address, reached from it, with the Host a loopback one.
	ip := nonLoopbackIP(t)
	if ip == "" {
		t.Log("this machine has no non-loopback IPv4 address; the socket half is not run")
		return
	}
	srv := httptest.NewUnstartedServer(mux)
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/_local/kill", strings.NewReader(`{"function":"relay"}`))
	req.Host = "127.0.0.1:8071"
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a kill from %s over a socket: %d, want 403", ip, resp.StatusCode)
	}
	if len(f.kills) != 3 {
		t.Errorf("kills = %v, want only the three from loopback peers", f.kills)
	}
}

// nonLoopbackIP is one of this machine's IPv4 unicast addresses off
// loopback, "" if it has none.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}
