package lambdarun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/invoke"
)

// Process is one execution environment: an aws-lambda-rie process on its own
// 127.0.0.1 port, in its own process group, that starts the bootstrap on its
// first invocation (a cold start, as on Lambda) and keeps it for the next.
// It serves one invocation at a time; Process does not enforce that (the
// Runner does).
type Process struct {
	// Started is when the emulator's process was started.
	Started time.Time
	// PID is the emulator's pid, the group id of it and its bootstrap.
	PID int

	function string
	url      string
	cmd      *exec.Cmd
	done     chan struct{}
	// Its own connections: a port freed by a dead environment may be given
	// to a new one, and a kept-alive connection to the old must never carry
	// an invocation (a POST is not retried on a stale connection).
	transport *http.Transport
}

// ProcessConfig says what a Process runs.
type ProcessConfig struct {
	// Function names the function in its errors.
	Function string
	// RIE is the aws-lambda-rie binary.
	RIE string
	// Bootstrap is the function's binary; it runs in its directory.
	Bootstrap string
	// Env is the whole environment of the emulator, which passes it on to
	// the bootstrap (KEY=VALUE).
	Env []string
	// Output gets the emulator's and the bootstrap's stdout and stderr.
	Output io.Writer
}

// startPatience bounds how long a new emulator may take to listen.
const startPatience = 10 * time.Second

// startAttempts is how many times a start is tried with fresh ports.
const startAttempts = 3

// StartProcess starts an execution environment and returns once its
// emulator listens on both of its ports (about 50 ms; it blocks until then).
// The ports are picked free (the invoke API and the runtime API, whose
// default 9001 another environment holds), so another process may take one
// before the emulator binds it: the emulator then exits and the start is
// tried again on fresh ports, and the listener is only trusted once it is
// the emulator's own socket, never another process's that took the port.
func StartProcess(c ProcessConfig) (*Process, error) {
	if _, err := os.Stat(c.RIE); err != nil {
		return nil, fmt.Errorf("lambdarun: aws-lambda-rie missing (make setup): %w", err)
	}
	var err error
	for range startAttempts {
		var p *Process
		if p, err = startOnce(c); err == nil {
			return p, nil
		}
	}
	return nil, err
}

func startOnce(c ProcessConfig) (*Process, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	runtimePort, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(c.RIE, "--runtime-interface-emulator-address", addr,
		"--runtime-api-address", fmt.Sprintf("127.0.0.1:%d", runtimePort), c.Bootstrap)
	cmd.Env = c.Env
	cmd.Dir = filepath.Dir(c.Bootstrap)
	out := c.Output
	if out == nil {
		out = io.Discard
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own session: aws-lambda-rie starts the bootstrap in a process
	// group of its own, so the emulator's group alone would leave the
	// bootstrap running after a kill; the session holds both and survives
	// the bootstrap's reparenting. Pdeathsig, so a runner that dies takes
	// its emulators with it instead of leaving them holding ports.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	// A bootstrap that outlives its emulator could hold the output pipe open.
	cmd.WaitDelay = time.Second
	p := &Process{
		function:  c.Function,
		url:       "http://" + addr + "/2015-03-31/functions/function/invocations",
		cmd:       cmd,
		done:      make(chan struct{}),
		transport: &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute},
	}
	p.Started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("lambdarun: start aws-lambda-rie for %s: %w", c.Function, err)
	}
	p.PID = cmd.Process.Pid
	go func() {
		_ = cmd.Wait()
		p.transport.CloseIdleConnections()
		close(p.done)
	}()
	deadline := time.Now().Add(startPatience)
	for {
		if listensOn(p.PID, port, runtimePort) {
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("lambdarun: aws-lambda-rie for %s exited before listening on %s and %d (%s)", c.Function, addr, runtimePort, cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("lambdarun: aws-lambda-rie for %s not listening on %s and %d after %s", c.Function, addr, runtimePort, startPatience)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// listensOn reports whether process pid owns a listening TCP socket on each
// of ports (read from /proc: the socket's inode among the process's file
// descriptors).
func listensOn(pid int, ports ...int) bool {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return false
	}
	inodes := map[string]string{} // local address -> socket inode
	for l := range strings.Lines(string(b)) {
		// sl local_address rem_address st ... uid timeout inode
		f := strings.Fields(l)
		if len(f) < 10 || f[3] != "0A" { // 0A: LISTEN
			continue
		}
		inodes[f[1]] = f[9]
	}
	want := map[string]bool{}
	for _, port := range ports {
		// 127.0.0.1 as the kernel prints it (little-endian), then the port.
		inode, ok := inodes[fmt.Sprintf("0100007F:%04X", port)]
		if !ok {
			return false
		}
		want["socket:["+inode+"]"] = true
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil {
			delete(want, link)
		}
	}
	return len(want) == 0
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("lambdarun: pick a port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Done is closed when the emulator's process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Kill sends SIGKILL to every process of the environment (the emulator's
// session: its group, and the bootstrap's, which the emulator makes apart)
// and returns without waiting; Done says when the emulator is gone.
func (p *Process) Kill() {
	// The emulator first, so it cannot start another bootstrap meanwhile.
	_ = syscall.Kill(-p.PID, syscall.SIGKILL)
	for _, pid := range sessionMembers(p.PID) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// sessionMembers lists the live processes whose session id is sid.
func sessionMembers(sid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid pgrp session ...": comm may hold spaces
		// and parentheses; the fields after its last ')' do not.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 4 || f[0] == "Z" {
			continue
		}
		if session, err := strconv.Atoi(f[3]); err == nil && session == sid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Stop kills the environment and waits for it to exit.
func (p *Process) Stop() {
	p.Kill()
	<-p.done
}

// timedOutPrefix is how aws-lambda-rie answers an invocation that ran past
// AWS_LAMBDA_FUNCTION_TIMEOUT: status 200 and this text (not JSON), after it
// has killed the runtime.
const timedOutPrefix = "Task timed out after "

// exitPatience is how long an invocation whose connection broke waits for
// the process to be seen dead before calling its outcome unknown.
const exitPatience = 2 * time.Second

// Invoke sends one synchronous invocation and returns the function's
// answer; it blocks until the function answers, the process dies or ctx
// ends. Errors:
//   - *invoke.FunctionError with the handler's errorType and errorMessage
//     when the handler returned an error;
//   - Runtime.ExitError when the bootstrap or the whole environment died,
//     under the invocation or before its request reached it;
//   - Sandbox.Timedout when the emulator reports the timeout;
//   - Runtime.Unknown when the invocation was sent and its answer is lost
//     or not understood while the environment lives on (the handler may
//     have run, so it counts as an attempt);
//   - anything else (ctx's error, a connection refused by an environment
//     that lives on: nothing ran) is a runner error.
//
// aws-lambda-rie sets no X-Amz-Function-Error header: a handler's error
// comes back as status 200 with Lambda's error document as the body, so a
// body of exactly that shape is read as an error (a handler that returns
// such a document as its result would be misread; none of ours does).
func (p *Process) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(payload))
	if err != nil {
		return nil, fmt.Errorf("lambdarun: invoke %s: %w", p.function, err)
	}
	req.Header.Set("Content-Type", "application/json")
	// No client timeout: the invocation's context bounds it.
	resp, err := p.transport.RoundTrip(req)
	var body []byte
	if err == nil {
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("lambdarun: invoke %s: %w", p.function, ctx.Err())
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			// Refused before anything was sent. An environment killed
			// between being handed this invocation and its request (a kill
			// in its cold start) is Lambda's environment dying under the
			// invocation, as Kill counts it (so is one that crashed on its
			// own in that instant: an attempt counted, never "nothing ran"
			// for something that might have); a live one refusing means
			// nothing ran.
			select {
			case <-p.done:
				return nil, &invoke.FunctionError{Function: p.function, Type: "Runtime.ExitError",
					Message: fmt.Sprintf("the execution environment exited before the invocation reached it: %s", p.cmd.ProcessState)}
			case <-time.After(exitPatience):
			}
			return nil, fmt.Errorf("lambdarun: invoke %s: %w", p.function, err)
		}
		// A broken connection is the environment dying under the call
		// (killed, or its emulator crashed): Lambda's Runtime.ExitError.
		select {
		case <-p.done:
			return nil, &invoke.FunctionError{Function: p.function, Type: "Runtime.ExitError",
				Message: fmt.Sprintf("the execution environment exited during the invocation: %s", p.cmd.ProcessState)}
		case <-time.After(exitPatience):
		}
		// Sent, and the answer never came back from a process still alive:
		// the handler may have run. An unknown outcome is never "not
		// invoked" (that is retried without counting an attempt); it
		// fails the invocation as a function error, and the environment
		// is not trusted again.
		return nil, &invoke.FunctionError{Function: p.function, Type: "Runtime.Unknown",
			Message: fmt.Sprintf("the invocation's outcome is unknown: its connection broke while the environment lived on: %v", err)}
	}
	if resp.StatusCode == http.StatusOK && bytes.HasPrefix(body, []byte(timedOutPrefix)) {
		return nil, &invoke.FunctionError{Function: p.function, Type: "Sandbox.Timedout", Message: string(body)}
	}
	if fe := errorDocument(p.function, body); fe != nil && (resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusBadGateway) {
		// 502 carries the runtime's own failures (Runtime.ExitError when the
		// bootstrap exited, an init error); 200 the handler's.
		return nil, fe
	}
	if resp.StatusCode != http.StatusOK {
		// Sent and answered with what the runner does not understand: as
		// unknown as a broken connection.
		return nil, &invoke.FunctionError{Function: p.function, Type: "Runtime.Unknown",
			Message: fmt.Sprintf("the invocation's outcome is unknown: aws-lambda-rie answered %d: %.200s", resp.StatusCode, body)}
	}
	return body, nil
}

// errorDocument reads Lambda's error payload ({"errorType", "errorMessage",
// optionally "stackTrace" and "cause"}, nothing else), or returns nil.
func errorDocument(function string, body []byte) *invoke.FunctionError {
	var doc map[string]json.RawMessage
	if json.Unmarshal(body, &doc) != nil {
		return nil
	}
	var typ, msg string
	if json.Unmarshal(doc["errorType"], &typ) != nil || typ == "" {
		return nil
	}
	if _, ok := doc["errorMessage"]; !ok || json.Unmarshal(doc["errorMessage"], &msg) != nil {
		return nil
	}
	for k := range doc {
		switch k {
		case "errorType", "errorMessage", "stackTrace", "cause":
		default:
			return nil
		}
	}
	return &invoke.FunctionError{Function: function, Type: typ, Message: msg}
}
