// Package api is the payment API: POST /payments per HANDLE
// (docs/mechanism.md#seed-part-3) — deadline, claim, durable guard, derived
// PSP key, one settle transaction, owner-conditional completion — and every
// answer to a repeat (docs/mechanism.md#design-2). It is transport-neutral
// (Serve takes a Request) with adapters for the two front doors: API Gateway
// HTTP APIs and an Application Load Balancer.
package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/oncepay/oncepay/internal/albauth"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/internal/clock"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/home"
	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/psp"
)

// Claims is the key record store (internal/idem.Store).
type Claims interface {
	Claim(ctx context.Context, c idem.Claim) error
	Takeover(ctx context.Context, scope, readOwner, newOwner, fingerprint string, until, expires time.Time) error
	Complete(ctx context.Context, scope, owner string, a *idem.Answer, expires time.Time) error
	MarkVoid(ctx context.Context, scope, owner string, expires time.Time) error
	Release(ctx context.Context, scope, owner string) error
	Get(ctx context.Context, scope string, now time.Time) (idem.Record, bool, error)
}

// Ledger is the durable guard and the payment's state (internal/ledger.Store).
type Ledger interface {
	InsertPending(ctx context.Context, p ledger.Payment, receiptEmail string) (ledger.Payment, bool, error)
	Get(ctx context.Context, paymentID string) (ledger.Payment, error)
	MarkUnknown(ctx context.Context, paymentID string) (ledger.Payment, bool, error)
	Settle(ctx context.Context, paymentID string, o ledger.Outcome, now time.Time, hooks ...ledger.Hook) (ledger.Payment, *event.Event, bool, error)
}

// PSP charges cards (internal/psp.Client).
type PSP interface {
	Charge(ctx context.Context, req psp.ChargeRequest) (psp.Result, error)
}

// Publisher puts a committed event's outbox item (internal/outbox). A
// failure is logged, not answered: the resolver's sweep re-puts the intent.
type Publisher interface {
	Publish(ctx context.Context, e event.Event) error
}

// ErrCrash, returned by a Hook, makes the handler stop where it stands and
// write nothing more, as a process that died there would. Tests only.
var ErrCrash = errors.New("api: injected crash")

// Hooks are crash and pause points for failure-injection tests; nil in
// production. A hook may block (a paused owner) or return ErrCrash.
type Hooks struct {
	AfterClaim         func(ctx context.Context) error
	AfterPendingInsert func(ctx context.Context) error
	AfterPSPReply      func(ctx context.Context) error
	BeforeComplete     func(ctx context.Context) error
}

// Homes places a caller in its home Region (internal/home.Router).
type Homes interface {
	Decide(ctx context.Context, caller string) (home.Decision, error)
}

// Deps are the Handler's collaborators.
type Deps struct {
	Claims    Claims
	Ledger    Ledger
	PSP       PSP
	Publisher Publisher   // nil: no outbox item is put (the sweep will)
	Clock     clock.Clock // nil: the system clock
	Timing    config.Timing
	Log       *slog.Logger     // nil: slog.Default()
	Metrics   *metrics.Emitter // nil: none
	Hooks     Hooks
	// NewOwner names a request's claim; nil: 16 random bytes.
	NewOwner func() string
	// ALB verifies the load balancer's signed claims (x-amzn-oidc-data) of
	// an ALB event; nil: this function sits behind no load balancer, and
	// an ALB event is refused 401.
	ALB *albauth.Verifier
	// Homes routes each caller to its home Region (docs/regions.md); nil:
	// one Region, every caller served here.
	Homes Homes
}

// Handler serves the payment API.
type Handler struct {
	d Deps
}

// New returns a Handler; it fills the defaults of Deps.
func New(d Deps) *Handler {
	if d.Clock == nil {
		d.Clock = clock.System{}
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	d.Timing = d.Timing.WithDefaults()
	if d.NewOwner == nil {
		d.NewOwner = func() string {
			b := make([]byte, 16)
			_, _ = rand.Read(b)
			return hex.EncodeToString(b)
		}
	}
	return &Handler{d: d}
}

// Request is one HTTP request as the front door delivered it.
type Request struct {
	Method  string
	Path    string
	Headers http.Header
	Body    []byte
	// Caller is the authenticated caller (the JWT's sub); empty when the
	// front door authenticated nobody.
	Caller string
	// Arrival is the front door's arrival stamp.
	Arrival time.Time

	// home is what the home router decided for this request (set by Serve).
	home home.Decision
}

// Response is the answer.
type Response struct {
	Status  int
	Headers http.Header
	Body    []byte
}

// NewJSONLogger returns the JSON logger handlers use.
func NewJSONLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, nil))
}
