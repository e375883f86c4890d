package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/client"
)

// The device's counter is journaled before the send and only grows, across
// a reopened journal (a restarted app), and its id is made once.
func TestTheDeviceCounterIsJournaledAndOnlyGrows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	j := openJournalAt(t, path)
	id, n1, err := j.NextDeviceCounter()
	if err != nil || n1 != 1 || !strings.HasPrefix(id, "dev-") {
		t.Fatalf("first: %q %d %v", id, n1, err)
	}
	_, n2, _ := j.NextDeviceCounter()
	j.Close()
	j = openJournalAt(t, path)
	defer j.Close()
	id3, n3, err := j.NextDeviceCounter()
	if err != nil || id3 != id || n2 != 2 || n3 != 3 {
		t.Fatalf("after a reopen: %q %d (was %q, %d), %v", id3, n3, id, n2, err)
	}
}

// deviceServer is a stand-in for the devices route, for the client's own
// logic only (the route's ordering is internal/devices' to prove): it keeps
// the highest counter it applied, drops the replies of the first drops
// requests after applying them, and records every counter it was sent.
type deviceServer struct {
	mu    sync.Mutex
	mark  int64
	drops int
	// unavailable answers the first requests 503, applying nothing.
	unavailable int
	sent        []int64
}

func (s *deviceServer) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	n, _ := strconv.ParseInt(r.Header.Get("Device-Counter"), 10, 64)
	s.mu.Lock()
	s.sent = append(s.sent, n)
	if s.unavailable > 0 {
		s.unavailable--
		s.mu.Unlock()
		rw.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	applied := n > s.mark
	if applied {
		s.mark = n
	}
	mark, drop := s.mark, s.drops > 0
	s.drops--
	s.mu.Unlock()
	if drop {
		if c, _, err := rw.(http.Hijacker).Hijack(); err == nil {
			c.Close() // applied, and the reply is lost
		}
		return
	}
	_ = json.NewEncoder(rw).Encode(map[string]any{"device_id": strings.TrimPrefix(r.URL.Path, "/devices/"), "counter": mark,
		"state": "ACTIVE", "platform": "GCM", "applied": applied})
}

// A registration whose reply is lost is sent again with the same counter,
// and the server's "not applied, counter = yours" is the success it is.
func TestALostDeviceReplyIsResentWithTheSameCounter(t *testing.T) {
	srv := &deviceServer{drops: 2}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	j := openJournal(t)
	c := client.New(client.Config{BaseURL: ts.URL, Token: "t", Caller: "u1", Timeout: 2 * time.Second,
		HTTP:  &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
		Sleep: func(context.Context, time.Duration) error { return nil }}, j)
	r, err := c.RegisterDevice(context.Background(), "GCM", "tok")
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent != 1 || r.Counter != 1 || r.Applied || r.Attempts != 3 {
		t.Fatalf("result %+v, want counter 1 applied by an earlier send, third attempt", r)
	}
	if len(srv.sent) != 3 || srv.sent[0] != 1 || srv.sent[1] != 1 || srv.sent[2] != 1 {
		t.Fatalf("counters sent %v, want 1 three times", srv.sent)
	}
	r, err = c.RemoveDevice(context.Background())
	if err != nil || r.Sent != 2 || !r.Applied {
		t.Fatalf("remove: %+v %v, want counter 2 applied", r, err)
	}
}

// A 503 (the ledger down) is sent again with the same counter; a device
// route down past every attempt is an error, with the counter journaled
// and sent, never a success.
func TestAnUnavailableDeviceRouteIsRetriedAndThenAnError(t *testing.T) {
	for _, c := range []struct {
		name        string
		unavailable int
		wantErr     bool
	}{{"one 503", 1, false}, {"down past every attempt", 10, true}} {
		t.Run(c.name, func(t *testing.T) {
			srv := &deviceServer{unavailable: c.unavailable}
			ts := httptest.NewServer(srv)
			defer ts.Close()
			cl := client.New(client.Config{BaseURL: ts.URL, Token: "t", Caller: "u1", Sleep: func(context.Context, time.Duration) error { return nil }}, openJournal(t))
			r, err := cl.RegisterDevice(context.Background(), "GCM", "tok")
			if (err != nil) != c.wantErr || r.Sent != 1 {
				t.Fatalf("result %+v, err %v; want error %v with counter 1 sent", r, err, c.wantErr)
			}
			for _, n := range srv.sent {
				if n != 1 {
					t.Fatalf("counters sent %v, want 1 each time", srv.sent)
				}
			}
			if !c.wantErr && (len(srv.sent) != 2 || !r.Applied) {
				t.Fatalf("sent %v, result %+v; want the second attempt applied", srv.sent, r)
			}
		})
	}
}

// A refusal is final: nothing is resent.
func TestARefusedDeviceRequestIsNotResent(t *testing.T) {
	var calls int
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		calls++
		rw.Header().Set("Content-Type", "application/problem+json")
		rw.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = rw.Write([]byte(`{"type":"https://oncepay.dev/problems/platform-not-configured","title":"Platform not configured","status":422}`))
	}))
	defer ts.Close()
	c := client.New(client.Config{BaseURL: ts.URL, Token: "t", Caller: "u1", Sleep: func(context.Context, time.Duration) error { return nil }}, openJournal(t))
	if _, err := c.RegisterDevice(context.Background(), "APNS", "tok"); !errors.Is(err, client.ErrDeviceRefused) || calls != 1 {
		t.Fatalf("err %v after %d calls, want ErrDeviceRefused after one", err, calls)
	}
}
