package pspsim_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/psp"
)

const whsec = "whsec_sim_test"

// clock is an injectable clock: tests move it instead of sleeping.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// env is a simulator behind a real HTTP server, the real PSP client, and a
// webhook receiver.
type env struct {
	sim   *pspsim.Sim
	url   string
	psp   *psp.Client
	clock *clock
	hooks *receiver
}

// setup starts a simulator with manual webhooks (tests flush them) unless
// configure says otherwise.
func setup(t *testing.T, configure ...func(*pspsim.Config)) *env {
	t.Helper()
	e := &env{clock: &clock{now: time.Now()}, hooks: newReceiver(t)}
	cfg := pspsim.Config{
		Clock:          e.clock.Now,
		WebhookURL:     e.hooks.url,
		WebhookSecret:  whsec,
		ManualWebhooks: true,
		InstanceID:     "t",
		Logger:         quiet(),
	}
	for _, f := range configure {
		f(&cfg)
	}
	e.sim = pspsim.New(cfg)
	srv := httptest.NewServer(e.sim)
	t.Cleanup(func() {
		srv.Close()
		e.sim.Close()
	})
	e.url = srv.URL
	e.psp = e.client(t)
	return e
}

// client builds a PSP client with its own connection pool, so a test that
// drops a connection starts on a fresh one (see pspsim.Fault).
func (e *env) client(t *testing.T) *psp.Client {
	t.Helper()
	c, err := psp.New(psp.Config{
		APIKey:     "sk_test_sim",
		BaseURL:    e.url,
		HTTPClient: &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second},
		Logger:     quiet(),
	})
	if err != nil {
		t.Fatalf("psp.New: %v", err)
	}
	return c
}

func quiet() *slog.Logger { return slog.New(slog.NewJSONHandler(io.Discard, nil)) }

func chargeReq(paymentID string) psp.ChargeRequest {
	return psp.ChargeRequest{
		IdempotencyKey: paymentID + ":charge",
		PaymentID:      paymentID,
		MerchantID:     "m1",
		Amount:         3000,
		Currency:       "usd",
		PaymentMethod:  "pm_card_visa",
	}
}

func mustCharge(t *testing.T, e *env, req psp.ChargeRequest) psp.Result {
	t.Helper()
	res, err := e.psp.Charge(context.Background(), req)
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	return res
}

func wantCharges(t *testing.T, e *env, n int) []pspsim.Charge {
	t.Helper()
	got := e.sim.Charges()
	if len(got) != n {
		t.Fatalf("the simulator made %d charges, want %d: %+v", len(got), n, got)
	}
	return got
}

func mustAddFault(t *testing.T, e *env, f pspsim.Fault) {
	t.Helper()
	if err := e.sim.AddFault(f); err != nil {
		t.Fatalf("AddFault: %v", err)
	}
}

// delivery is one webhook POST the receiver got.
type delivery struct {
	body []byte
	sig  string
}

// receiver is a webhook endpoint that records deliveries and can refuse
// the first few.
type receiver struct {
	url    string
	mu     sync.Mutex
	got    []delivery
	refuse int // answer 500 to this many deliveries first
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got = append(r.got, delivery{body: body, sig: req.Header.Get("Stripe-Signature")})
		if r.refuse > 0 {
			r.refuse--
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

// reset forgets the deliveries so far.
func (r *receiver) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = nil
}

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// events verifies every delivery with the production parser.
func (r *receiver) events(t *testing.T) []psp.Event {
	t.Helper()
	var out []psp.Event
	for _, d := range r.deliveries() {
		ev, err := psp.ParseWebhook(d.body, d.sig, whsec, 5*time.Minute)
		if err != nil {
			t.Fatalf("a delivery failed verification: %v", err)
		}
		out = append(out, ev)
	}
	return out
}

func flush(t *testing.T, e *env) int {
	t.Helper()
	n, err := e.sim.FlushWebhooks(context.Background())
	if err != nil {
		t.Fatalf("FlushWebhooks: %v", err)
	}
	return n
}
