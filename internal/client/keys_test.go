package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"

	"github.com/oncepay/oncepay/internal/client"
	"github.com/oncepay/oncepay/internal/payment"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// The keys the client makes are random UUIDs: RFC 3986 unreserved
// characters only (the alphabet the API narrows Idempotency-Key to), valid
// Idempotency-Keys today, and never repeated.
func TestNewKeysAreUUIDsOfUnreservedCharacters(t *testing.T) {
	seen := map[string]bool{}
	for range 10000 {
		k := client.NewKey()
		if !uuidV4.MatchString(k) {
			t.Fatalf("key %q is not a version 4 UUID", k)
		}
		if err := payment.ValidateKey(k); err != nil {
			t.Fatalf("key %q: %v", k, err)
		}
		if seen[k] {
			t.Fatalf("key %q made twice", k)
		}
		seen[k] = true
	}
}

// The resolve call names the key verbatim: the path the server sees is
// /payments/<the Idempotency-Key sent>/resolve, byte for byte.
func TestTheResolvePathIsTheKeyVerbatim(t *testing.T) {
	var mu sync.Mutex
	var sentKey, resolvePath string
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path == "/payments" {
			sentKey = r.Header.Get("Idempotency-Key")
			rw.WriteHeader(http.StatusAccepted)
			fmt.Fprint(rw, `{"payment_id":"pay_1","state":"PROCESSING"}`)
			return
		}
		resolvePath = r.URL.EscapedPath()
		rw.WriteHeader(http.StatusCreated)
		fmt.Fprint(rw, `{"payment_id":"pay_1","state":"SUCCEEDED"}`)
	}))
	defer srv.Close()
	c, _ := recordingClient(t, srv.URL, 1)
	if r, err := c.Pay(context.Background(), order42); err != nil || r.State != client.Succeeded {
		t.Fatalf("%+v %v", r, err)
	}
	if want := "/payments/" + sentKey + "/resolve"; sentKey == "" || resolvePath != want {
		t.Fatalf("resolve path %q, want %q", resolvePath, want)
	}
}
