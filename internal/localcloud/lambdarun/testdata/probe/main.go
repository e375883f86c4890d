// Command probe is a test-only Lambda function for the runner's tests: it
// reports its process and environment, sleeps, fails or exits on request.
package main

import (
	"context"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
)

// Event says what the probe does.
type Event struct {
	SleepMS int    `json:"sleep_ms"`
	Fail    string `json:"fail"`
	Exit    bool   `json:"exit"`
	Getenv  string `json:"getenv"`
	// PadBytes makes the answer carry that many bytes more (payload limits).
	PadBytes int `json:"pad_bytes"`
}

// Answer is what it reports.
type Answer struct {
	PID    int    `json:"pid"`
	Getenv string `json:"getenv,omitempty"`
	// DeadlineMS is the time left until the context's deadline, which the
	// runtime takes from the function's timeout.
	DeadlineMS int64  `json:"deadline_ms"`
	Pad        string `json:"pad,omitempty"`
}

// probeError is a handler error: its type name is the errorType Lambda reports.
type probeError struct{ msg string }

func (e *probeError) Error() string { return e.msg }

func handle(ctx context.Context, ev Event) (Answer, error) {
	if ev.SleepMS > 0 {
		time.Sleep(time.Duration(ev.SleepMS) * time.Millisecond)
	}
	if ev.Exit {
		os.Exit(3)
	}
	if ev.Fail != "" {
		return Answer{}, &probeError{msg: ev.Fail}
	}
	a := Answer{PID: os.Getpid(), Getenv: os.Getenv(ev.Getenv), Pad: strings.Repeat("x", ev.PadBytes)}
	if d, ok := ctx.Deadline(); ok {
		a.DeadlineMS = time.Until(d).Milliseconds()
	}
	return a, nil
}

func main() { lambda.Start(handle) }
