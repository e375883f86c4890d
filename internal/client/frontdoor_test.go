package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/client"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/localcloud/frontdoor"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// liveStack is the running local cloud's public surface: the front door at
// :8080 (the api function under the Lambda emulator) and the PSP
// simulator's admin API, which lists what was charged.
type liveStack struct {
	door, psp string
	secret    []byte
}

func live(t *testing.T) liveStack {
	t.Helper()
	env := testenv.Load(t)
	s := liveStack{door: env.Get(stackenv.FrontDoorURL), psp: env.Get(stackenv.PSPURL)}
	if s.door == "" || s.psp == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI: %s or %s not set", stackenv.FrontDoorURL, stackenv.PSPURL)
		}
		t.Skipf("%s or %s not set (run `make up`)", stackenv.FrontDoorURL, stackenv.PSPURL)
	}
	testenv.Reachable(t, "front door", s.door)
	testenv.Reachable(t, "PSP simulator", s.psp)
	root, err := localenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	// The key the running front door verifies with; read, never created.
	if s.secret, err = os.ReadFile(filepath.Join(root, ".local", "frontdoor.key")); err != nil {
		t.Fatalf("the front door's key: %v", err)
	}
	s.secret = bytes.TrimSpace(s.secret)
	return s
}

// token mints a token for a caller of the test's own, as
// `go run ./cmd/frontdoor token --caller` does.
func (s liveStack) token(t *testing.T, caller string) string {
	t.Helper()
	tok, err := frontdoor.Mint(s.secret, caller, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// charges counts what the simulator charged under the derived PSP keys of
// caller's client keys.
func (s liveStack) charges(t *testing.T, caller string, keys ...string) int {
	t.Helper()
	resp, err := http.Get(s.psp + "/_sim/charges")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var all []pspsim.Charge
	if err := json.NewDecoder(resp.Body).Decode(&all); err != nil {
		t.Fatalf("GET /_sim/charges: %v", err)
	}
	want := map[string]bool{}
	for _, k := range keys {
		want[ids.ChargeKey(ids.PaymentID(ids.Scope(caller, k)))] = true
	}
	n := 0
	for _, c := range all {
		if want[c.IdempotencyKey] {
			n++
		}
	}
	return n
}

// refuseTheRetry forwards to the front door, but loses the reply of the
// first POST /payments (the payment is made; the client hears nothing) and
// answers the second with status itself, without forwarding it: what a
// proxy, a WAF, a gateway or a deploy can say to a retry.
func refuseTheRetry(t *testing.T, upstream string, status int) *httptest.Server {
	t.Helper()
	var posts atomic.Int32
	fwd := &http.Client{Timeout: 10 * time.Second}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		n := int32(0)
		if r.Method == http.MethodPost && r.URL.Path == "/payments" {
			n = posts.Add(1)
		}
		if n == 2 {
			if status >= 300 && status < 400 {
				rw.Header().Set("Location", "/moved")
			}
			rw.Header().Set("Content-Type", "application/problem+json")
			rw.WriteHeader(status)
			fmt.Fprintf(rw, `{"type":"about:blank","title":%q,"status":%d}`, http.StatusText(status), status)
			return
		}
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, upstream+r.URL.RequestURI(), bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := fwd.Do(req)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if n == 1 { // the work happened; the reply is lost
			if hj, ok := rw.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close()
					return
				}
			}
		}
		for k, v := range resp.Header {
			rw.Header()[k] = v
		}
		rw.WriteHeader(resp.StatusCode)
		_, _ = rw.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The probe's double charge, through the real front door: the first send's
// reply is lost, the retry hears a refusal (4xx, or a 2xx/3xx the API never
// sends), and the app took that refusal for an answer, marked the intent
// REJECTED, and the next tap made a new key: the order was charged twice. An
// error on a retry is a question, not an answer
// (docs/mechanism.md#seed-part-1): the client resolves the key before
// deciding, finds the payment, and the next tap is answered from the journal.
// One charge, one key, for every status.
func TestARefusalOnARetryAfterALostReplyIsResolvedNotBelievedThroughTheFrontDoor(t *testing.T) {
	s := live(t)
	for _, status := range []int{400, 403, 404, 405, 408, 413, 422, 200, 204, 302, 307} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			caller := "client-refused-" + testenv.RandomID(6)
			proxy := refuseTheRetry(t, s.door, status)
			j := openJournal(t)
			c := client.New(client.Config{BaseURL: proxy.URL, Token: s.token(t, caller), Timeout: 8 * time.Second,
				HTTP:  &http.Client{Timeout: 8 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
				Sleep: func(context.Context, time.Duration) error { return nil }}, j)
			p := order42
			p.OrderID = "refused-" + testenv.RandomID(6)

			first, err := c.Pay(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			second, err := c.Pay(context.Background(), p) // the buyer taps again
			if err != nil {
				t.Fatal(err)
			}
			if got := s.charges(t, caller, first.Key, second.Key); got != 1 {
				t.Fatalf("the order was charged %d times (first %+v, second %+v)", got, first, second)
			}
			if first.State != client.Succeeded || second.State != client.Succeeded || second.Key != first.Key {
				t.Fatalf("first %+v, second %+v: want SUCCEEDED twice under one key", first, second)
			}
			if !strings.HasPrefix(first.PaymentID, "pay_") {
				t.Fatalf("no payment id in %+v", first)
			}
		})
	}
}
