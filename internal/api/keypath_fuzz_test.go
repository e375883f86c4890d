package api

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/httpevent"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/payment"
)

// gatewayPath is what the HTTP API hands the function for a path the client
// sent: decoded once and cut at a decoded "?" (ok false: the gateway itself
// refuses a malformed escape).
func gatewayPath(raw string) (string, bool) {
	p, err := url.PathUnescape(raw)
	if err != nil {
		return "", false
	}
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	return p, true
}

// albPath is what HandleALB routes on for a path the load balancer passed.
func albPath(raw string) (string, bool) {
	p, err := httpevent.ALBPath(raw)
	return p, err == nil
}

// spell percent-encodes the bytes of the key segment of a Location whose
// index bit is set in mask: one of the spellings a client may send.
func spell(key string, mask uint64) string {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		if mask&(1<<(uint(i)%64)) != 0 {
			fmt.Fprintf(&b, "%%%02X", key[i])
		} else {
			b.WriteByte(key[i])
		}
	}
	return b.String()
}

// FuzzKeyPath: a key accepted in the header, rendered into the Location of
// a 202 (payment and refund), and parsed back from either door's path — as
// rendered or with any of its bytes percent-encoded — is the same key and
// the same action. A key the header refuses, put in a path the way a
// client would (url.PathEscape), never reads back as some other valid key.
func FuzzKeyPath(f *testing.F) {
	for _, k := range []string{"K1", "a b", "a/b", "a?b", "a%20b", "a/resolve", ".", "..", "", `"K1"`, "K~1", payment.KeyAlphabet} {
		f.Add(k, uint64(0))
		f.Add(k, ^uint64(0))
		f.Add(k, uint64(0x5555555555555555))
	}
	doors := map[string]func(string) (string, bool){"HTTP API": gatewayPath, "ALB": albPath}
	f.Fuzz(func(t *testing.T, key string, mask uint64) {
		if payment.ValidateKey(key) != nil {
			for name, door := range doors {
				p, ok := door("/payments/" + url.PathEscape(key) + "/resolve")
				if !ok {
					continue
				}
				if k, _, ok := splitKeyPath(p); ok && k != key && payment.ValidateKey(k) == nil {
					t.Fatalf("%s: the refused key %q reads back from its path as the valid key %q", name, key, k)
				}
			}
			return
		}
		locations := map[string]string{
			actionResolve: processingHeaders(key).Get("Location"),
			actionRefund:  renderRefund(ledger.Refund{State: ledger.RefundUnknown}, key, time.Unix(0, 0)).Headers.Get("Location"),
		}
		for action, loc := range locations {
			if want := "/payments/" + key + "/" + action; loc != want {
				t.Fatalf("Location %q for key %q, want %q (the key verbatim)", loc, key, want)
			}
			for _, sent := range []string{loc, "/payments/" + spell(key, mask) + "/" + action} {
				for name, door := range doors {
					p, ok := door(sent)
					if !ok {
						t.Fatalf("%s refuses %q", name, sent)
					}
					k, a, ok := splitKeyPath(p)
					if !ok || k != key || a != action {
						t.Fatalf("%s: %q (for key %q) reads as key %q action %q ok=%v", name, sent, key, k, a, ok)
					}
				}
			}
		}
	})
}

// FuzzDoorPaths: whatever path a client sends, the two doors never read two
// different valid keys from it, and a valid key read from it renders back
// to the same decoded path (so the key has one path form, up to spelling).
func FuzzDoorPaths(f *testing.F) {
	for _, p := range []string{"/payments/K1/resolve", "/payments/K%7E1/refund", "/payments/a%2Fb/resolve", "/payments/K1%2Fresolve",
		"/payments/K1/resolve%3Fx", "/payments/%2E%2E/resolve", "/payments//resolve", "/payments/K%2541/resolve", "/payments/K%zz/resolve"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		gp, gok := gatewayPath(raw)
		ap, aok := albPath(raw)
		var gk, ak string
		if gok {
			if k, a, ok := splitKeyPath(gp); ok && payment.ValidateKey(k) == nil {
				gk = k
				if keyPath(k, a) != gp {
					t.Fatalf("HTTP API: %q reads as key %q action %q, which renders as %q", gp, k, a, keyPath(k, a))
				}
			}
		}
		if aok {
			if k, a, ok := splitKeyPath(ap); ok && payment.ValidateKey(k) == nil {
				ak = k
				if keyPath(k, a) != ap {
					t.Fatalf("ALB: %q reads as key %q action %q, which renders as %q", ap, k, a, keyPath(k, a))
				}
			}
		}
		if gk != "" && ak != "" && gk != ak {
			t.Fatalf("%q: the HTTP API reads key %q, the ALB key %q", raw, gk, ak)
		}
	})
}
