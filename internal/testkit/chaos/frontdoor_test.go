package chaos

import (
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/arrival"
)

// The events are the ones each front door delivers: the HTTP API's decoded
// path, JWT sub and millisecond arrival; the ALB's path as sent (some key
// bytes percent-encoded, decoding to the key), its Self= arrival and OIDC
// identity.
func TestTheFrontDoorsDeliverTheirOwnEventShapes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	at := time.Date(2026, 12, 1, 10, 0, 0, 123e6, time.UTC)
	for range 200 {
		key := newKey(rng)
		if key == "." || key == ".." || strings.Trim(key, keyAlphabet) != "" {
			t.Fatalf("drew key %q", key)
		}
		r := hreq{path: "/payments/" + key + "/resolve", caller: "c1", key: key, arrival: at}
		v2 := frontDoor{}.httpAPIEvent(r, "", false)
		if v2.RawPath != r.path || v2.RequestContext.Authorizer.JWT.Claims["sub"] != "c1" ||
			v2.RequestContext.TimeEpoch != at.UnixMilli() || v2.PathParameters["key"] != key {
			t.Fatalf("HTTP API event %+v", v2)
		}
		sent := percentEncodeSome(rng, r.path)
		if got, err := url.PathUnescape(sent); err != nil || got != r.path {
			t.Fatalf("%q decodes to %q, %v", sent, got, err)
		}
		for _, mv := range []bool{false, true} {
			e := frontDoor{alb: true, multiValue: mv}.albEvent(rng, r, sent, "", false)
			trace, who := e.Headers["x-amzn-trace-id"], e.Headers["x-amzn-oidc-identity"]
			if mv {
				trace, who = e.MultiValueHeaders["x-amzn-trace-id"][0], e.MultiValueHeaders["x-amzn-oidc-identity"][0]
			}
			got, err := arrival.FromALBTraceHeader(trace)
			if err != nil || !got.Equal(at.Truncate(time.Second)) || who != "c1" || e.Path != sent {
				t.Fatalf("ALB event %+v: arrival %v, %v", e, got, err)
			}
		}
	}
}
