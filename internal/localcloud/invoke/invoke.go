// Package invoke is the seam between the local cloud's triggers (the front
// door's routes, the event-source mappings, the schedules, the custom
// resource) and what runs a function: the function runner (each function's
// bootstrap under aws-lambda-rie) on the live stack, or handlers called in
// process in tests of the triggers themselves.
//
// A function is named by its logical id in the synthesized template (for
// example "ApiFunction52E267E3"): that is what every route, mapping and rule
// refers to, so no second naming scheme can drift from the template.
package invoke

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Invoker runs one synchronous invocation (Lambda's RequestResponse) and
// returns the function's answer. A handler that returned an error, panicked
// or whose environment died answers *FunctionError (Lambda's
// X-Amz-Function-Error), so a trigger can tell "the function failed" from
// "the invocation never ran" (ErrThrottled, ErrPayloadTooLarge, a runner
// error before the request was sent). A context that ends while the
// invocation runs is NOT "never ran": the invocation goes on in its
// environment (as on Lambda) and its outcome is unknown to the caller, so
// callers that must know pass a context that does not end first (the
// pollers and the front door do).
type Invoker interface {
	Invoke(ctx context.Context, function string, payload []byte) ([]byte, error)
}

// FunctionError is a function's error answer.
type FunctionError struct {
	Function string
	// Type is errorType of Lambda's error payload ("Runtime.ExitError" when
	// the environment died mid-invocation, "Sandbox.Timedout" on timeout).
	Type    string
	Message string
}

func (e *FunctionError) Error() string {
	return fmt.Sprintf("invoke: %s failed: %s: %s", e.Function, e.Type, e.Message)
}

// ErrThrottled is Lambda's 429 TooManyRequestsException: every execution
// environment the function may have is busy. Nothing ran.
var ErrThrottled = errors.New("invoke: throttled: the function is at its concurrency")

// MaxRequestPayload is Lambda's limit on a synchronous invocation's
// request (6 MB). aws-lambda-rie does not enforce it (it does enforce the
// response's), so the local runner does: what Lambda refuses is refused
// locally too.
const MaxRequestPayload = 6 << 20

// ErrPayloadTooLarge is Lambda's 413 RequestEntityTooLargeException: the
// invocation's payload is over MaxRequestPayload. Nothing ran.
var ErrPayloadTooLarge = errors.New("invoke: RequestEntityTooLargeException: the request is larger than a synchronous invocation takes (6291456 bytes)")

// ErrUnknownFunction means the template declares no such function.
var ErrUnknownFunction = errors.New("invoke: no such function in the template")

// Admin is what the local cloud's admin API and `make status` ask of the
// runner.
type Admin interface {
	Status() []FunctionStatus
	// Kill sends SIGKILL to up to n of the function's live execution
	// environments (busy ones first, chosen at random) and reports how many
	// it killed and how many of those were busy (mid-invocation): killing an
	// idle warm environment crashes nothing, so a crash test counts busy.
	// The runner replaces them on demand, as Lambda does.
	Kill(function string, n int) (killed, busy int, err error)
	// KillInFlight waits up to within (or until ctx ends) for the
	// function's next invocation in a warm environment and SIGKILLs that
	// environment a few milliseconds after the request was written to it,
	// while the invocation still runs: a kill aimed from inside the runner,
	// for functions whose invocations are shorter than a status read and a
	// kill. It returns 1 (and busy 1) when it killed one, 0 when no
	// invocation came, or none ran past the kill's delay, within the wait.
	KillInFlight(ctx context.Context, function string, within time.Duration) (killed, busy int, err error)
}

// FunctionStatus describes one function's execution environments.
type FunctionStatus struct {
	Function string `json:"function"`
	// MaxEnvironments is the concurrency it may reach (its reserved
	// concurrency where the template sets one).
	MaxEnvironments int           `json:"max_environments"`
	Environments    []Environment `json:"environments"`
	Invocations     int64         `json:"invocations"`
	Killed          int64         `json:"killed"`
	// KilledBusy is how many of Killed were mid-invocation.
	KilledBusy int64 `json:"killed_busy"`
}

// Environment is one execution environment.
type Environment struct {
	ID      string    `json:"id"`
	PID     int       `json:"pid"`
	Busy    bool      `json:"busy"`
	Started time.Time `json:"started"`
	Served  int64     `json:"served"`
}

// Func adapts in-process handlers to Invoker, for tests of a trigger: the
// map's key is the function's logical id.
type Func map[string]func(ctx context.Context, payload []byte) ([]byte, error)

// Invoke calls the handler named function.
func (f Func) Invoke(ctx context.Context, function string, payload []byte) ([]byte, error) {
	h, ok := f[function]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownFunction, function)
	}
	out, err := h(ctx, payload)
	if err != nil {
		var fe *FunctionError
		if errors.As(err, &fe) {
			return nil, err
		}
		return nil, &FunctionError{Function: function, Type: "Handler", Message: err.Error()}
	}
	return out, nil
}
