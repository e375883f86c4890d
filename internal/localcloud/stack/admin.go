package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/invoke"
	"github.com/oncepay/oncepay/internal/localcloud/trigger"
	"github.com/oncepay/oncepay/internal/problem"
)

// Status is the answer of GET /_local/status: every function of the template
// with its execution environments, every mapping and every schedule.
type Status struct {
	Functions []FunctionStatus         `json:"functions"`
	Mappings  []trigger.MappingStatus  `json:"mappings"`
	Schedules []trigger.ScheduleStatus `json:"schedules"`
}

// FunctionStatus is the runner's invoke.FunctionStatus with the function's
// short name (what POST /_local/kill also accepts).
type FunctionStatus struct {
	Short string `json:"short"`
	invoke.FunctionStatus
}

// KillRequest is the body of POST /_local/kill.
type KillRequest struct {
	// Function is a logical id ("RelayFunction3833AFCF") or a short name
	// ("relay").
	Function string `json:"function"`
	// N is how many environments to kill (1 when absent).
	N *int `json:"n"`
	// InFlight aims the kill from inside the runner: wait up to WithinMS
	// (default 10 s) for the function's next invocation and kill its
	// environment while it runs (invoke.Admin.KillInFlight). N must then be
	// absent or 1. For functions whose invocations take milliseconds (the
	// relay), which a status read and a kill never catch mid-run.
	InFlight bool `json:"in_flight"`
	WithinMS *int `json:"within_ms"`
}

// KillResponse answers POST /_local/kill.
type KillResponse struct {
	Function string `json:"function"`
	Killed   int    `json:"killed"`
	// Busy is how many of Killed were mid-invocation (the others were idle
	// warm environments: their kill crashed nothing).
	Busy int `json:"busy"`
}

// maxKill bounds a kill request: more environments than any function has.
const maxKill = 1000

// An in-flight kill waits 10 s for an invocation unless told otherwise,
// and a minute at most (the request holds its connection meanwhile).
const (
	defaultInFlightWait = 10 * time.Second
	maxInFlightWaitMS   = 60_000
)

// Admin serves the local cloud's admin API:
//
//	GET  /_local/status  Status as JSON
//	POST /_local/kill    {"function":"relay","n":1} -> KillResponse
//	POST /_local/kill    {"function":"relay","in_flight":true,"within_ms":5000} -> KillResponse
//	POST /_local/invoke  {"function":"reconcile","payload":{...}} -> the function's answer
//
// Bad input gets an RFC 9457 problem+json answer and changes nothing.
type Admin struct {
	// Functions are the template's function logical ids.
	Functions []string
	Runner    invoke.Admin
	// Invoker runs POST /_local/invoke's invocations (the stack's runner);
	// nil refuses them.
	Invoker   invoke.Invoker
	Mappings  []*trigger.Mapping
	Schedules []*trigger.Schedule

	// Stopping, when set, ends pending in-flight kills (the stack's stop).
	Stopping context.Context
}

func (a *Admin) stopping() context.Context {
	if a.Stopping == nil {
		return context.Background()
	}
	return a.Stopping
}

// Register adds the admin routes to mux.
func (a *Admin) Register(mux *http.ServeMux) {
	mux.HandleFunc("/_local/status", localOnly(a.status))
	mux.HandleFunc("/_local/kill", localOnly(a.kill))
	mux.HandleFunc("/_local/invoke", localOnly(a.invoke))
}

// localOnly refuses a request from anywhere but this machine's loopback
// (its peer address: the Host is the client's to write, and a listener can
// be exposed past loopbackOnly by a port forward, a container's network or
// a proxy), and what a web page in the user's browser could send to a
// loopback port: a request whose Host is not a loopback address (DNS
// rebinding: a page's own name resolved to 127.0.0.1), and a POST that is
// not JSON (a form or a text/plain post needs no CORS preflight).
func localOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !loopbackPeer(r.RemoteAddr) {
			writeProblem(w, problem.Problem{Type: problem.TypeBase + "local-only", Title: "Forbidden", Status: http.StatusForbidden,
				Detail: "The local cloud's admin API answers requests from this machine's loopback (127.0.0.0/8 or ::1) only."})
			return
		}
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.Trim(host, "[]")
		if !isLoopbackHost(host) {
			writeProblem(w, problem.Problem{Type: problem.TypeBase + "local-only", Title: "Forbidden", Status: http.StatusForbidden,
				Detail: "The local cloud's admin API answers requests addressed to a loopback address (Host 127.0.0.1, ::1 or localhost) only."})
			return
		}
		if r.Method == http.MethodPost {
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				writeProblem(w, problem.Problem{Type: problem.TypeBase + "unsupported-media-type", Title: "Unsupported Media Type", Status: http.StatusUnsupportedMediaType,
					Detail: "The body must be JSON, sent with Content-Type: application/json."})
				return
			}
		}
		h(w, r)
	}
}

// loopbackPeer says whether remote (a request's RemoteAddr, ip:port) is a
// loopback address; anything unparsable is not.
func loopbackPeer(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Status gathers the status of every part.
func (a *Admin) Status() Status {
	st := Status{Functions: []FunctionStatus{}, Mappings: []trigger.MappingStatus{}, Schedules: []trigger.ScheduleStatus{}}
	byID := map[string]invoke.FunctionStatus{}
	if a.Runner != nil {
		for _, f := range a.Runner.Status() {
			byID[f.Function] = f
		}
	}
	ids := slices.Clone(a.Functions)
	for id := range byID {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		f, ok := byID[id]
		if !ok {
			f = invoke.FunctionStatus{Function: id}
		}
		if f.Environments == nil {
			f.Environments = []invoke.Environment{}
		}
		st.Functions = append(st.Functions, FunctionStatus{Short: ShortName(id), FunctionStatus: f})
	}
	for _, m := range a.Mappings {
		st.Mappings = append(st.Mappings, m.Status())
	}
	for _, s := range a.Schedules {
		st.Schedules = append(st.Schedules, s.Status())
	}
	return st
}

func (a *Admin) status(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeProblem(w, problem.MethodNotAllowed())
		return
	}
	writeJSON(w, http.StatusOK, a.Status())
}

func (a *Admin) kill(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeProblem(w, problem.MethodNotAllowed())
		return
	}
	var req KillRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeProblem(w, problem.BadRequest("body", "The body must be a JSON object {\"function\": \"<logical id or short name>\", \"n\": <count>}."))
		return
	}
	if dec.More() {
		writeProblem(w, problem.BadRequest("body", "The body must hold one JSON object."))
		return
	}
	n := 1
	if req.N != nil {
		n = *req.N
	}
	if n < 1 || n > maxKill {
		writeProblem(w, problem.BadRequest("n", fmt.Sprintf("n must be an integer in 1..%d.", maxKill)))
		return
	}
	within := defaultInFlightWait
	switch {
	case req.InFlight && n != 1:
		writeProblem(w, problem.BadRequest("n", "An in-flight kill kills one environment: n must be absent or 1."))
		return
	case req.WithinMS != nil && !req.InFlight:
		writeProblem(w, problem.BadRequest("within_ms", "within_ms is the wait of an in-flight kill: set in_flight too."))
		return
	case req.WithinMS != nil && (*req.WithinMS < 1 || *req.WithinMS > maxInFlightWaitMS):
		writeProblem(w, problem.BadRequest("within_ms", fmt.Sprintf("within_ms must be an integer in 1..%d.", maxInFlightWaitMS)))
		return
	case req.WithinMS != nil:
		within = time.Duration(*req.WithinMS) * time.Millisecond
	}
	if strings.TrimSpace(req.Function) == "" {
		writeProblem(w, problem.BadRequest("function", "function must name a function of the template (its logical id or short name)."))
		return
	}
	id, err := a.resolve(req.Function)
	if err != nil {
		p := problem.NotFound()
		if errors.Is(err, errAmbiguous) {
			p = problem.BadRequest("function", err.Error())
		} else {
			p.Detail = err.Error()
		}
		writeProblem(w, p)
		return
	}
	if a.Runner == nil {
		writeProblem(w, refused(fmt.Sprintf("no function runner: %s cannot be killed", id)))
		return
	}
	var killed, busy int
	if req.InFlight {
		// The aim ends with its request (a client that stopped waiting
		// must not leave a kill armed) or with the stack's stop.
		ctx, cancel := context.WithCancel(r.Context())
		stop := context.AfterFunc(a.stopping(), cancel)
		killed, busy, err = a.Runner.KillInFlight(ctx, id, within)
		stop()
		cancel()
	} else {
		killed, busy, err = a.Runner.Kill(id, n)
	}
	switch {
	case errors.Is(err, invoke.ErrUnknownFunction):
		p := problem.NotFound()
		p.Detail = err.Error()
		writeProblem(w, p)
		return
	case err != nil:
		writeProblem(w, refused(err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, KillResponse{Function: id, Killed: killed, Busy: busy})
}

// InvokeRequest is the body of POST /_local/invoke: one synchronous
// invocation (Lambda's RequestResponse) of a function of the running
// stack, for what an operator runs on demand (make reconcile).
type InvokeRequest struct {
	// Function is a logical id or a short name, as for a kill.
	Function string `json:"function"`
	// Payload is the event, any JSON value; absent is {}.
	Payload json.RawMessage `json:"payload"`
}

// invoke answers the function's own answer, 200 application/json; a
// function error is 502 with Lambda's errorType and message in the
// problem's detail; a throttle 429, an oversized payload 413.
func (a *Admin) invoke(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeProblem(w, problem.MethodNotAllowed())
		return
	}
	var req InvokeRequest
	// Room for Lambda's largest request and the envelope around it; a
	// payload over Lambda's limit is the runner's to refuse (413), as
	// Lambda refuses it.
	dec := json.NewDecoder(io.LimitReader(r.Body, invoke.MaxRequestPayload+1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeProblem(w, problem.BadRequest("body", "The body must be a JSON object {\"function\": \"<logical id or short name>\", \"payload\": <the event>}."))
		return
	}
	if dec.More() {
		writeProblem(w, problem.BadRequest("body", "The body must hold one JSON object."))
		return
	}
	if strings.TrimSpace(req.Function) == "" {
		writeProblem(w, problem.BadRequest("function", "function must name a function of the template (its logical id or short name)."))
		return
	}
	id, err := a.resolve(req.Function)
	if err != nil {
		p := problem.NotFound()
		if errors.Is(err, errAmbiguous) {
			p = problem.BadRequest("function", err.Error())
		} else {
			p.Detail = err.Error()
		}
		writeProblem(w, p)
		return
	}
	if a.Invoker == nil {
		writeProblem(w, problem.Problem{Type: problem.TypeBase + "local-invoke-refused", Title: "Invoke refused", Status: http.StatusConflict,
			Detail: fmt.Sprintf("no function runner: %s cannot be invoked", id)})
		return
	}
	payload := []byte(req.Payload)
	if len(payload) == 0 || string(payload) == "null" {
		payload = []byte("{}")
	}
	// The request's context: a caller that stops waiting leaves the
	// invocation running in its environment, as on Lambda.
	out, err := a.Invoker.Invoke(r.Context(), id, payload)
	var fe *invoke.FunctionError
	switch {
	case errors.As(err, &fe):
		writeProblem(w, problem.Problem{Type: problem.TypeBase + "local-function-error", Title: "Function error", Status: http.StatusBadGateway,
			Detail: fmt.Sprintf("%s failed: %s: %s", id, fe.Type, fe.Message)})
		return
	case errors.Is(err, invoke.ErrThrottled):
		writeProblem(w, problem.Problem{Type: problem.TypeBase + "local-throttled", Title: "Too Many Requests", Status: http.StatusTooManyRequests, Detail: err.Error()})
		return
	case errors.Is(err, invoke.ErrPayloadTooLarge):
		writeProblem(w, problem.Problem{Type: problem.TypeBase + "local-payload-too-large", Title: "Payload Too Large", Status: http.StatusRequestEntityTooLarge, Detail: err.Error()})
		return
	case errors.Is(err, invoke.ErrUnknownFunction):
		p := problem.NotFound()
		p.Detail = err.Error()
		writeProblem(w, p)
		return
	case err != nil:
		writeProblem(w, problem.Problem{Type: problem.TypeBase + "local-invoke-failed", Title: "Invoke failed", Status: http.StatusBadGateway,
			Detail: fmt.Sprintf("%s was not invoked: %v", id, err)})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

var errAmbiguous = errors.New("ambiguous function name")

// resolve finds the logical id name stands for: itself, or the one
// function whose short name it is (case-insensitive).
func (a *Admin) resolve(name string) (string, error) {
	var found []string
	for _, id := range a.Functions {
		if id == name {
			return id, nil
		}
		if strings.EqualFold(ShortName(id), name) {
			found = append(found, id)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", fmt.Errorf("no function %q in the template; functions: %s", name, strings.Join(a.Functions, ", "))
	}
	return "", fmt.Errorf("%w: %q names %s", errAmbiguous, name, strings.Join(found, ", "))
}

// ShortName is a function's name without the CDK's "Function<hash>" tail:
// "RelayFunction3833AFCF" -> "relay".
func ShortName(logicalID string) string {
	if i := strings.Index(logicalID, "Function"); i > 0 {
		return strings.ToLower(logicalID[:i])
	}
	return strings.ToLower(logicalID)
}

func refused(detail string) problem.Problem {
	return problem.Problem{Type: problem.TypeBase + "local-kill-refused", Title: "Kill refused", Status: http.StatusConflict, Detail: detail}
}

func writeProblem(w http.ResponseWriter, p problem.Problem) {
	b, err := json.Marshal(p)
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", problem.ContentType)
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		writeProblem(w, problem.Internal())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
