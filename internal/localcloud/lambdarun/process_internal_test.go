package lambdarun

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"

	"github.com/oncepay/oncepay/internal/localcloud/invoke"
)

// aws-lambda-rie marks a handler's error by nothing but the body: Lambda's
// error document. Only that exact shape is an error; a result that merely
// carries an errorType field is a result.
func TestErrorDocumentIsReadOnlyFromLambdasErrorShape(t *testing.T) {
	for _, c := range []struct {
		body, typ, msg string
	}{
		{`{"errorMessage":"boom","errorType":"probeError"}`, "probeError", "boom"},
		{`{"errorType":"Runtime.ExitError","errorMessage":"RequestId: x Error: exit status 3"}`, "Runtime.ExitError", "RequestId: x Error: exit status 3"},
		{`{"errorMessage":"m","errorType":"T","stackTrace":[{"path":"a.go","line":1}]}`, "T", "m"},
		{`{"errorType":"T","errorMessage":"m","statusCode":200}`, "", ""},
		{`{"errorType":"","errorMessage":"m"}`, "", ""},
		{`{"errorType":"T"}`, "", ""},
		{`{"statusCode":201,"body":"{\"errorType\":\"T\",\"errorMessage\":\"m\"}"}`, "", ""},
		{`"errorType"`, "", ""},
		{`Task timed out after 2.00 seconds`, "", ""},
	} {
		fe := errorDocument("F", []byte(c.body))
		switch {
		case c.typ == "" && fe != nil:
			t.Errorf("%s read as error %+v", c.body, fe)
		case c.typ != "" && (fe == nil || fe.Type != c.typ || fe.Message != c.msg || fe.Function != "F"):
			t.Errorf("%s read as %+v, want %s: %s", c.body, fe, c.typ, c.msg)
		}
	}
}

// A start trusts a listener only when it is the emulator's own socket: a
// port another process took between the pick and the emulator's bind is
// not the environment.
func TestListensOnIsTrueOnlyForTheOwnersSocket(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if !listensOn(os.Getpid(), port) {
		t.Errorf("this process's listener on %d is not seen as its own", port)
	}
	if listensOn(os.Getppid(), port) {
		t.Errorf("the parent is seen listening on this process's port %d", port)
	}
	free, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	if listensOn(os.Getpid(), port, free) {
		t.Errorf("a port nobody listens on (%d) is seen listening", free)
	}
}

// An invocation that was sent and whose answer never came back, from an
// environment still alive, may have run: it is a function error (counted as
// an attempt by the event sources), never "not invoked". A refused
// connection is: nothing was sent.
func TestABrokenAnswerIsAnUnknownOutcomeAndARefusalIsNotAnInvocation(t *testing.T) {
	ran := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran <- struct{}{}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close() // the handler ran; its answer is lost
		}
	}))
	defer srv.Close()
	p := &Process{function: "F", url: srv.URL, done: make(chan struct{}), transport: &http.Transport{}}
	_, err := p.Invoke(context.Background(), []byte(`{}`))
	var fe *invoke.FunctionError
	if !errors.As(err, &fe) || fe.Type != "Runtime.Unknown" || len(ran) != 1 {
		t.Fatalf("broken answer: err = %v (ran %d), want a Runtime.Unknown function error", err, len(ran))
	}

	free, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	p = &Process{function: "F", url: "http://127.0.0.1:" + strconv.Itoa(free), done: make(chan struct{}), transport: &http.Transport{}}
	_, err = p.Invoke(context.Background(), []byte(`{}`))
	if err == nil || errors.As(err, &fe) {
		t.Fatalf("refused connection: err = %v, want a runner error (not invoked)", err)
	}
}
