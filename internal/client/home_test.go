package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/client"
	"github.com/oncepay/oncepay/internal/localcloud/frontdoor"
)

// regionalClient is a client of base whose 421s may send it to homes.
func regionalClient(t *testing.T, base string, attempts int, homes ...string) *client.Client {
	t.Helper()
	tok, err := frontdoor.Mint([]byte("k"), "u1", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return client.New(client.Config{BaseURL: base, Token: tok, Attempts: attempts, Timeout: 2 * time.Second, HomeURLs: homes,
		Sleep: func(context.Context, time.Duration) error { return nil }}, openJournal(t))
}

// misdirecting answers every request 421 with home as the caller's home.
func misdirecting(t *testing.T, home *string, seen *atomic.Int32) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		rw.Header().Set("Content-Type", "application/problem+json")
		rw.WriteHeader(http.StatusMisdirectedRequest)
		fmt.Fprintf(rw, `{"type":"https://oncepay.dev/problems/misdirected","title":"Misdirected Request","status":421,"home_region":"us-east-1","home_url":%q,"home_version":1}`, *home)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A 421 is followed at once, with the same key and body, to the home the
// problem names; the client then sends there first.
func TestA421IsFollowedToTheHomeWithTheSameKey(t *testing.T) {
	var keys []string
	var homeSeen atomic.Int32
	homeSrv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		homeSeen.Add(1)
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		rw.WriteHeader(http.StatusCreated)
		fmt.Fprint(rw, `{"payment_id":"pay_1","state":"SUCCEEDED"}`)
	}))
	t.Cleanup(homeSrv.Close)
	var awaySeen atomic.Int32
	away := misdirecting(t, &homeSrv.URL, &awaySeen)
	c := regionalClient(t, away.URL, 4, away.URL, homeSrv.URL)
	r, err := c.Pay(context.Background(), order42)
	if err != nil || r.State != client.Succeeded {
		t.Fatalf("result %+v %v", r, err)
	}
	if awaySeen.Load() != 1 || homeSeen.Load() != 1 {
		t.Errorf("away %d, home %d; want 1, 1", awaySeen.Load(), homeSeen.Load())
	}
	o2 := order42
	o2.OrderID = "43"
	if _, err := c.Pay(context.Background(), o2); err != nil {
		t.Fatal(err)
	}
	if awaySeen.Load() != 1 || homeSeen.Load() != 2 {
		t.Errorf("the next payment went away again: away %d, home %d", awaySeen.Load(), homeSeen.Load())
	}
	if keys[0] == "" || keys[0] != r.Key {
		t.Errorf("home saw key %q, the intent's is %q", keys[0], r.Key)
	}
}

// A 421 loop (each Region naming the other) ends after maxFollows, and the
// intent stays open: nothing ran anywhere, so it is not "failed".
func TestA421LoopEndsWithTheIntentOpen(t *testing.T) {
	var aURL, bURL string
	var seen atomic.Int32
	a := misdirecting(t, &bURL, &seen)
	b := misdirecting(t, &aURL, &seen)
	aURL, bURL = a.URL, b.URL
	c := regionalClient(t, a.URL, 2, a.URL, b.URL)
	r, err := c.Pay(context.Background(), order42)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != client.Unknown {
		t.Errorf("state %q, want the intent kept open (%q)", r.State, client.Unknown)
	}
	if n := seen.Load(); n != 3 {
		t.Errorf("%d sends, want 3 (the first and two follows)", n)
	}
}

// The bearer token is never sent to a home the client was not configured
// with, whatever a 421 names: another host, another scheme, a relative
// URL; and with no homes configured a 421 is never followed.
func TestA421ToAnUnknownHomeIsNotFollowed(t *testing.T) {
	for _, home := range []string{"https://r1.example.test", "http://evil.example.test", "/relative", ""} {
		var seen atomic.Int32
		h := home
		away := misdirecting(t, &h, &seen)
		for _, c := range []*client.Client{
			regionalClient(t, away.URL, 1, away.URL, "https://r2.example.test"),
			regionalClient(t, away.URL, 1),
		} {
			seen.Store(0)
			r, err := c.Pay(context.Background(), order42)
			if err != nil {
				t.Fatal(err)
			}
			if seen.Load() != 1 || r.State != client.Unknown {
				t.Errorf("home %q: %d sends, state %q; want 1 send and the intent open", home, seen.Load(), r.State)
			}
		}
	}
}

// A home that stops answering is forgotten: the next send goes to the
// entry point, which names the home as it is then.
func TestAHomeThatStopsAnsweringIsForgotten(t *testing.T) {
	var homeSeen, awaySeen atomic.Int32
	homeSrv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		homeSeen.Add(1)
		rw.WriteHeader(http.StatusCreated)
		fmt.Fprint(rw, `{"payment_id":"pay_1","state":"SUCCEEDED"}`)
	}))
	homeURL := homeSrv.URL
	away := misdirecting(t, &homeURL, &awaySeen)
	c := regionalClient(t, away.URL, 3, away.URL, homeURL)
	if r, err := c.Pay(context.Background(), order42); err != nil || r.State != client.Succeeded {
		t.Fatalf("first payment: %+v %v", r, err)
	}
	homeSrv.Close() // the home's Region fails
	o2 := order42
	o2.OrderID = "43"
	if _, err := c.Pay(context.Background(), o2); err != nil {
		t.Fatal(err)
	}
	if awaySeen.Load() < 2 {
		t.Errorf("after the home stopped answering, the entry point saw %d sends; want the client back at it", awaySeen.Load())
	}
}

// A fenced home (its stage throttled to 0 answers 429) is forgotten too:
// the next send goes to the entry point again.
func TestAFencedHomeIsForgotten(t *testing.T) {
	var homeSeen, awaySeen atomic.Int32
	homeSrv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if homeSeen.Add(1) == 1 {
			rw.WriteHeader(http.StatusCreated)
			fmt.Fprint(rw, `{"payment_id":"pay_1","state":"SUCCEEDED"}`)
			return
		}
		rw.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(rw, `{"message":"Too Many Requests"}`)
	}))
	t.Cleanup(homeSrv.Close)
	homeURL := homeSrv.URL
	away := misdirecting(t, &homeURL, &awaySeen)
	c := regionalClient(t, away.URL, 3, away.URL, homeURL)
	if r, err := c.Pay(context.Background(), order42); err != nil || r.State != client.Succeeded {
		t.Fatalf("first payment: %+v %v", r, err)
	}
	o2 := order42
	o2.OrderID = "43"
	if _, err := c.Pay(context.Background(), o2); err != nil {
		t.Fatal(err)
	}
	if awaySeen.Load() < 2 {
		t.Errorf("after the home answered 429, the entry point saw %d sends; want the client back at it", awaySeen.Load())
	}
}
