// Package pspsim is oncepay's PSP simulator: an http.Handler that speaks the
// subset of Stripe's API that internal/psp uses, with Stripe's documented
// semantics, plus fault injection for the failures the story is made
// of (a slow PSP, a reply lost after charging, a 5xx, a dropped request, a
// webhook duplicated, late or lost).
//
// The API (form-encoded, as stripe-go sends it):
//
//	POST /v1/payment_intents          create + confirm (confirm=true only)
//	GET  /v1/payment_intents          list: created[gte|gt|lte|lt]=, limit, starting_after
//	GET  /v1/payment_intents/{id}
//	GET  /v1/payment_intents/search   query: metadata['k']:'v' [AND ...]
//	POST /v1/refunds
//	GET  /v1/refunds/{id}
//	GET  /v1/refunds                  list: charge=, payment_intent=, created[...]=, limit, starting_after
//
// Idempotency follows Stripe: a POST's Idempotency-Key is kept for the key
// window (24 h by default, measured by the injected clock) with the first
// result, status and body, whatever it was, 500s included. A repeat with
// identical parameters replays it with Idempotent-Replayed: true; different
// parameters (or another endpoint) get 400 idempotency_error; a repeat while
// the first is still running gets 409 and nothing is saved for it; a request
// that fails validation saves nothing. After the window the key is forgotten.
//
// The admin API (JSON; errors are RFC 9457 problem+json). Each operation is
// also a Go method, for in-process tests:
//
//	GET    /_sim/charges         Charges(): the charges made, a JSON array (stable interface)
//	GET    /_sim/refunds         Refunds(): the refunds made, a JSON array
//	POST   /_sim/faults          AddFault(Fault): add a rule; 201 with the rule
//	GET    /_sim/faults          Faults(): the armed rules
//	DELETE /_sim/faults          ClearFaults(); 204
//	POST   /_sim/reset           Reset(): forget everything; 204
//	GET    /_sim/clock           Now(): {"now": RFC 3339}
//	POST   /_sim/clock           Advance(d): {"advance_ms": N}, forward only
//	POST   /_sim/webhooks/flush  FlushWebhooks(ctx): deliver pending events now,
//	                             {"delivered": N, "pending": M, "error": "..."}
//	GET    /_sim/search_lag      SearchLag(): {"lag_ms": N}
//	POST   /_sim/search_lag      SetSearchLag(d): {"lag_ms": N}
//	POST   /_sim/payment_methods/attach  AttachPaymentMethod(pm):
//	                             {"payment_method": "pm_..."}; 204
//	GET    /_sim/stats           Stats(): what the Stripe behaviours did
//	                             (searches the lag hid, 3-D Secure confirms,
//	                             payment methods refused)
//
// Where Stripe differs from a tidy PSP, the simulator differs too: keys are
// kept at least 24 h and pruned at a jittered time after; search lags
// (SearchLag); a 500 can be saved after the charge was made
// (error_5xx_after_charge); refunds can be pending and settle or fail later;
// a payment method other than a test token (pm_card_...) is single-use
// unless attached; one charge raises two events (payment_intent.* and
// charge.*) for an endpoint subscribed to both; a refused event is retried
// for three days.
//
// Payment methods are Stripe's test PaymentMethods (intents.go lists them):
// pm_card_visa and the other brands succeed; pm_card_chargeDeclined and its
// kin (InsufficientFunds, ExpiredCard, ...) are declined with a 402
// card_error; pm_card_threeDSecure2Required and pm_card_authenticationRequired
// wait in requires_action, or with error_on_requires_action=true are
// declined with authentication_required; pm_usBankAccount_success is
// processing until, four days on by the simulator's clock, it succeeds (on
// the next read); capture_method=manual stops at requires_capture. An unknown
// pm_ id is refused as Stripe refuses it: 400 resource_missing.
package pspsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config configures a Sim. The zero value is usable: no webhooks, a 24 h key
// window, the real clock.
type Config struct {
	// KeyWindow is how long an idempotency key and its saved result are
	// kept at least. Default 24 h; Validate refuses less, because Stripe
	// promises "at least 24 hours" and the resolver replays keys for that
	// long: a shorter window here would let a replay charge anew where
	// Stripe never would.
	KeyWindow time.Duration
	// KeyPruneJitter: Stripe prunes a key some time after the window, not
	// on the second, so each key is forgotten at KeyWindow plus a jitter in
	// [0, KeyPruneJitter), fixed per key (a hash of it, so runs repeat).
	// Default 1 h; negative means none (forgotten exactly at the window).
	KeyPruneJitter time.Duration
	// Clock is the simulator's time: key windows, created stamps, search
	// lag. Default time.Now. Tests inject one (or call Advance) so they never
	// sleep for a window. Webhook retry timing and signature timestamps use
	// the real clock, because they concern real HTTP on the wire.
	Clock func() time.Time
	// SearchLag hides PaymentIntents younger than this from search, as
	// Stripe's search index lags behind writes ("eventually consistent";
	// under a minute normally, no stated bound). Default 0; set it in worlds
	// that look payments up, or at run time with SetSearchLag
	// (POST /_sim/search_lag).
	SearchLag time.Duration

	// WebhookURL receives the events named in WebhookEvents; empty means
	// no webhooks.
	WebhookURL string
	// WebhookEvents are the event types the endpoint is subscribed to, as
	// a Stripe webhook endpoint's enabled_events: "*" for all. Default
	// payment_intent.succeeded and payment_intent.payment_failed. The
	// simulator also raises charge.succeeded, charge.failed,
	// charge.refunded, refund.created, refund.updated, refund.failed and
	// charge.refund.updated, as Stripe does, so one charge can reach an
	// endpoint subscribed to both as two events with two ids.
	WebhookEvents []string
	// WebhookSecret signs them (Stripe-Signature, v1 scheme).
	WebhookSecret string
	// WebhookAttempts bounds the deliveries of one event copy; 0 (the
	// default) bounds them by WebhookRetryFor alone.
	WebhookAttempts int
	// WebhookRetryFor is how long a refused event keeps being retried,
	// counted from its first attempt. Default 72 h: Stripe retries live-mode
	// events for up to three days.
	WebhookRetryFor time.Duration
	// WebhookBackoff is the wait before the first retry; it doubles per
	// attempt, up to WebhookBackoffMax. Default 500 ms.
	WebhookBackoff time.Duration
	// WebhookBackoffMax caps the wait between retries. Default 1 min, so a
	// local endpoint back from an outage is reached within a minute
	// (Stripe's own spacing grows to hours).
	WebhookBackoffMax time.Duration
	// WebhookTimeout bounds one delivery. Default 10 s.
	WebhookTimeout time.Duration
	// ManualWebhooks turns off background delivery: events wait until
	// FlushWebhooks (or POST /_sim/webhooks/flush). For deterministic tests.
	ManualWebhooks bool

	// StateFile keeps the simulator's state across its restarts (state.go):
	// keys and saved results, PaymentIntents, charges, refunds and pending
	// webhook deliveries. Empty: memory only, forgotten on exit. A Sim with
	// a state file is made with Open.
	StateFile string

	// InstanceID goes into every id (pi_<instance>_<n>), so a restarted
	// simulator never reuses an event id that a persistent webhook inbox
	// has already seen. Default: derived from the start time.
	InstanceID string
	// Logger receives JSON lines; default slog.Default().
	Logger *slog.Logger
}

func (c *Config) fill() {
	if c.KeyWindow == 0 {
		c.KeyWindow = MinKeyWindow
	}
	if c.KeyPruneJitter == 0 {
		c.KeyPruneJitter = time.Hour
	}
	if len(c.WebhookEvents) == 0 {
		c.WebhookEvents = []string{"payment_intent.succeeded", "payment_intent.payment_failed"}
	}
	if c.WebhookRetryFor <= 0 {
		c.WebhookRetryFor = 72 * time.Hour
	}
	if c.WebhookBackoffMax <= 0 {
		c.WebhookBackoffMax = time.Minute
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.WebhookBackoff <= 0 {
		c.WebhookBackoff = 500 * time.Millisecond
	}
	if c.WebhookTimeout <= 0 {
		c.WebhookTimeout = 10 * time.Second
	}
	if c.InstanceID == "" {
		c.InstanceID = strconv.FormatInt(time.Now().UnixMilli(), 36)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// MinKeyWindow is the shortest key window Stripe promises ("keys are kept
// for at least 24 hours"), and so the shortest a Sim accepts.
const MinKeyWindow = 24 * time.Hour

// Validate reports a configuration that would make the simulator kinder or
// harsher than Stripe in a way the payment path relies on.
func (c Config) Validate() error {
	switch {
	case c.KeyWindow != 0 && c.KeyWindow < MinKeyWindow:
		return fmt.Errorf("pspsim: key window %s is under Stripe's 24 h: the resolver replays a charge's key "+
			"for 24 h (ONCEPAY_PSP_KEY_WINDOW) and a shorter window would turn those replays into new charges", c.KeyWindow)
	case c.SearchLag < 0:
		return fmt.Errorf("pspsim: search lag %s is negative", c.SearchLag)
	case c.WebhookAttempts < 0 || c.WebhookRetryFor < 0 || c.WebhookBackoff < 0 || c.WebhookBackoffMax < 0:
		return errors.New("pspsim: negative webhook attempts, retry horizon or backoff")
	}
	return nil
}

// Sim is the simulator. It implements http.Handler and is safe for
// concurrent use. Call Close when done to stop webhook delivery.
type Sim struct {
	cfg   Config
	log   *slog.Logger
	httpc *http.Client

	mu      sync.Mutex // guards everything below
	offset  time.Duration
	seq     uint64 // id counter; never reset, so ids stay unique
	gen     uint64 // bumped by Reset; stale webhook retries are dropped
	keys    map[string]*keyEntry
	swept   time.Time
	intents map[string]*paymentIntent
	order   []*paymentIntent // creation order, for search
	charges []*Charge
	refunds []*Refund
	faults  []*Fault
	pending []*delivery
	gaveUp  int

	journal     *journal      // nil: no state file
	dirty       dirty         // changes not yet in the journal
	deliverySeq uint64        // numbers each delivery copy, for the journal
	baseLag     time.Duration // the configured search lag, which Reset restores (SetSearchLag changes cfg.SearchLag)

	refundsByID map[string]*refundState // refunds.go: status and settlement
	pmUsed      map[string]string       // paymentmethods.go: pm -> the PaymentIntent that used it
	pmAttached  map[string]bool         // paymentmethods.go: reusable payment methods
	pmCreated   map[string]bool         // paymentmethods.go: PaymentMethods made by the API (cards that pay)
	stats       Stats                   // stats.go: what the behaviours did; Reset leaves it

	deliverMu sync.Mutex // one delivery round at a time
	kick      chan struct{}
	ctx       context.Context
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

// New builds a simulator and, when a webhook URL is configured and
// ManualWebhooks is false, starts its background webhook delivery. It
// panics on a configuration Validate refuses (a programming error in a
// test; cmd/pspsim validates first and reports it) and on a state file Open
// cannot load.
func New(cfg Config) *Sim {
	s, err := Open(cfg)
	if err != nil {
		panic(err.Error())
	}
	return s
}

// Open is New that reports a configuration or state file it cannot use:
// with Config.StateFile set it loads the state the file holds (a missing
// file is a fresh start; a corrupt one is an error, never amnesia), and
// keeps the file up to date from then on.
func Open(cfg Config) (*Sim, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.fill()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sim{
		cfg:    cfg,
		log:    cfg.Logger.With("component", "pspsim"),
		httpc:  &http.Client{Timeout: cfg.WebhookTimeout},
		kick:   make(chan struct{}, 1),
		ctx:    ctx,
		cancel: cancel,
		done:   make(chan struct{}),
	}
	s.baseLag = cfg.SearchLag
	s.resetLocked()
	if cfg.StateFile != "" {
		if err := s.openState(cfg.StateFile); err != nil {
			cancel()
			return nil, err
		}
		s.log.Info("state loaded", "path", cfg.StateFile, "keys", len(s.keys), "payment_intents", len(s.intents),
			"charges", len(s.charges), "refunds", len(s.refunds), "pending_webhooks", len(s.pending))
	}
	if cfg.WebhookURL != "" && !cfg.ManualWebhooks {
		go s.runDeliveries()
	} else {
		close(s.done)
	}
	return s, nil
}

// Close stops webhook delivery and waits for the delivery goroutine to
// end; pending events are dropped, or kept in the state file for the next
// start when there is one (which Close writes and releases). Requests
// already running finish.
func (s *Sim) Close() {
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.done
		s.closeState()
	})
}

// ServeHTTP routes the Stripe API (/v1/) and the admin API (/_sim/).
func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasPrefix(r.URL.Path, "/v1/"):
		s.serveAPI(w, r)
	case strings.HasPrefix(r.URL.Path, "/_sim/"):
		s.serveAdmin(w, r)
	default:
		writeReply(w, errorReply(http.StatusNotFound, apiError{
			Type:    typeInvalidRequest,
			Message: fmt.Sprintf("Unrecognized request URL (%s: %s).", r.Method, r.URL.Path),
		}))
	}
}

// Now is the simulator's current time: the clock plus any Advance.
func (s *Sim) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nowLocked()
}

func (s *Sim) nowLocked() time.Time { return s.cfg.Clock().Add(s.offset) }

// Advance moves the simulator's clock forward by d, for example past the
// key window. It never sleeps.
func (s *Sim) Advance(d time.Duration) {
	s.mu.Lock()
	s.offset += d
	s.touchClock()
	s.settleRefundsLocked(s.nowLocked())
	s.mu.Unlock()
	s.syncOrLog()
}

// SetSearchLag changes the search lag (Config.SearchLag) from now on; Reset
// restores the configured one.
func (s *Sim) SetSearchLag(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("pspsim: search lag %s is negative", d)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg.SearchLag = d
	return nil
}

// SearchLag is the current search lag.
func (s *Sim) SearchLag() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.SearchLag
}

// Reset forgets everything: keys, payment intents, charges, refunds, faults,
// undelivered webhooks and the clock offset. Ids keep counting up, so none
// is ever reused.
func (s *Sim) Reset() {
	s.mu.Lock()
	s.resetLocked()
	s.mu.Unlock()
	if err := s.compactNow(); err != nil {
		s.log.Error("state not reset", "error", err.Error())
	}
}

func (s *Sim) resetLocked() {
	s.offset = 0
	s.gen++
	s.keys = map[string]*keyEntry{}
	s.swept = time.Time{}
	s.intents = map[string]*paymentIntent{}
	s.order = nil
	s.charges = nil
	s.refunds = nil
	s.faults = nil
	s.pending = nil
	s.gaveUp = 0
	s.cfg.SearchLag = s.baseLag
	s.refundsByID = map[string]*refundState{}
	s.pmUsed = map[string]string{}
	s.pmAttached = map[string]bool{}
	s.pmCreated = map[string]bool{}
}

// newIDLocked returns the next id with the given Stripe prefix (pi, ch, re,
// evt, req).
func (s *Sim) newIDLocked(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s_%s_%d", prefix, s.cfg.InstanceID, s.seq)
}
