package resolver

import (
	"context"
	"net/http"

	"golang.org/x/time/rate"
)

// headroom: the token bucket runs at this share of the configured cap. A
// cap is kept on our side of the wire, and the PSP counts requests as they
// arrive on its side: a request delayed on the way (a busy scheduler, a
// slow connection) followed by one on time would otherwise put more than
// the cap into one of the PSP's one-second windows. At 0.9, N+1 requests
// span at least 1.11 s when sent, so up to ~110 ms of delay variance still
// lands at most N in any second.
const headroom = 0.9

// Cap is the resolver's own cap on PSP requests (docs/mechanism.md#seed-part-12,
// shared limits): a token bucket with a burst of one, so that replays after an
// outage never take the share of the PSP's rate limit that live payments
// need. It is safe for concurrent use.
type Cap struct {
	lim *rate.Limiter
}

// NewCap returns a cap of perSecond requests per second.
func NewCap(perSecond float64) *Cap {
	return &Cap{lim: rate.NewLimiter(rate.Limit(perSecond*headroom), 1)}
}

// Wait blocks until the next request may go, or ctx ends.
func (c *Cap) Wait(ctx context.Context) error { return c.lim.Wait(ctx) }

// Transport returns base (nil: http.DefaultTransport) with every request
// first waiting for the cap, under the request's own context. A PSP client
// built with it applies the cap where the PSP counts: to each HTTP request
// as it leaves, after the SDK has built it. Hand the same Cap to the
// resolver (Deps.Cap) so it does not wait twice.
func (c *Cap) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return capTransport{c: c, base: base}
}

type capTransport struct {
	c    *Cap
	base http.RoundTripper
}

func (t capTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := t.c.Wait(r.Context()); err != nil {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return nil, err
	}
	return t.base.RoundTrip(r)
}
