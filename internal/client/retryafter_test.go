package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/client"
	"github.com/oncepay/oncepay/internal/localcloud/frontdoor"
)

// busyThenPaid answers 409 with retryAfter for the first n requests, then
// 201 SUCCEEDED: a server (or a proxy) that keeps saying "later".
func busyThenPaid(t *testing.T, n int32, retryAfter func(i int32) string) *httptest.Server {
	t.Helper()
	var seen atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if i := seen.Add(1); i <= n {
			rw.Header().Set("Retry-After", retryAfter(i))
			rw.Header().Set("Content-Type", "application/problem+json")
			rw.WriteHeader(http.StatusConflict)
			fmt.Fprint(rw, `{"type":"https://oncepay.dev/problems/in-progress","title":"in progress","status":409}`)
			return
		}
		rw.WriteHeader(http.StatusCreated)
		fmt.Fprint(rw, `{"payment_id":"pay_1","state":"SUCCEEDED"}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func recordingClient(t *testing.T, url string, attempts int) (*client.Client, func() []time.Duration) {
	t.Helper()
	tok, err := frontdoor.Mint([]byte("k"), "u1", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sleeps []time.Duration
	c := client.New(client.Config{BaseURL: url, Token: tok, Attempts: attempts, Timeout: 2 * time.Second,
		Sleep: func(_ context.Context, d time.Duration) error {
			mu.Lock()
			sleeps = append(sleeps, d)
			mu.Unlock()
			return nil
		},
	}, openJournal(t))
	return c, func() []time.Duration { mu.Lock(); defer mu.Unlock(); return append([]time.Duration(nil), sleeps...) }
}

// A Retry-After of a day (the probe slept 24 h) is capped: no wait is
// longer than 1.5 × the cap, none shorter than the cap the server's value
// was cut to, and the waits are not all the same (jitter), so clients told
// the same value do not come back in step. Both forms of the header count.
func TestAHugeRetryAfterIsCappedAndJittered(t *testing.T) {
	tomorrow := time.Now().Add(24 * time.Hour).UTC().Format(http.TimeFormat)
	srv := busyThenPaid(t, 20, func(i int32) string {
		if i%2 == 0 {
			return tomorrow
		}
		return "86400"
	})
	c, sleeps := recordingClient(t, srv.URL, 21)
	r, err := c.Pay(context.Background(), order42)
	if err != nil || r.State != client.Succeeded {
		t.Fatalf("result %+v %v", r, err)
	}
	const limit = 20 * time.Second // Config.RetryAfterCap's default
	got := sleeps()
	if len(got) != 20 {
		t.Fatalf("%d waits, want 20: %v", len(got), got)
	}
	distinct := map[time.Duration]bool{}
	for i, d := range got {
		if d < limit || d > limit*3/2 {
			t.Fatalf("wait %d was %s: want within [%s, %s]", i, d, limit, limit*3/2)
		}
		distinct[d] = true
	}
	if len(distinct) < 10 {
		t.Fatalf("only %d distinct waits of 20: no jitter (%v)", len(distinct), got)
	}
}

// A small Retry-After is honoured (never earlier than asked) and jittered.
func TestASmallRetryAfterIsHonouredWithJitter(t *testing.T) {
	srv := busyThenPaid(t, 20, func(int32) string { return "2" })
	c, sleeps := recordingClient(t, srv.URL, 21)
	if r, err := c.Pay(context.Background(), order42); err != nil || r.State != client.Succeeded {
		t.Fatalf("result %+v %v", r, err)
	}
	distinct := map[time.Duration]bool{}
	for i, d := range sleeps() {
		if d < 2*time.Second || d >= 5*time.Second { // the backoff's own cap is 5 s
			t.Fatalf("wait %d was %s: want at least the 2 s asked, under 5 s", i, d)
		}
		distinct[d] = true
	}
	if len(distinct) < 10 {
		t.Fatalf("only %d distinct waits: no jitter", len(distinct))
	}
}

// The PSP refused a payment's request itself (a rotated key on a first
// call): the API answers 502 psp-rejected with state FAILED, and renders the
// same bytes on every repeat and resolve. That is a final answer, not "try
// later": the client stops at once and reports it FAILED (not charged),
// instead of retrying and resolving into "still being confirmed" forever.
func TestAPSPRejectedAnswerIsFinalNotRetried(t *testing.T) {
	var seen atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		rw.Header().Set("Content-Type", "application/problem+json")
		rw.WriteHeader(http.StatusBadGateway)
		fmt.Fprint(rw, `{"type":"https://oncepay.dev/problems/psp-rejected","title":"refused","status":502,"payment_id":"pay_1","state":"FAILED","decline_code":"psp_invalid_request"}`)
	}))
	t.Cleanup(srv.Close)
	c, sleeps := recordingClient(t, srv.URL, 5)
	r, err := c.Pay(context.Background(), order42)
	if err != nil || r.State != client.FailedPay {
		t.Fatalf("result %+v %v, want FAILED", r, err)
	}
	if n := seen.Load(); n != 1 || len(sleeps()) != 0 {
		t.Fatalf("%d requests and %d waits, want one request and no retry", n, len(sleeps()))
	}
}
