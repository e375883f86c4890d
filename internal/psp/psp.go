// Package psp is oncepay's client for the payment service provider: Stripe's
// API through Stripe's own Go SDK (stripe-go v82).
//
// The base URL is configuration, so one client talks to Stripe, to
// stripe-mock (the contract tests) or to the project's simulator
// (internal/pspsim). Every call reduces the PSP's answer to one of three
// outcomes (docs/mechanism.md#seed-part-1): done (Succeeded), definitely not
// done (Declined, or an error such as ErrInvalidRequest), or Unknown. A
// timeout, a dropped connection, a 5xx, a 429 and a 409 "request in flight"
// are Unknown, never a failure: the charge may exist, so the caller resolves
// it by replaying the same Idempotency-Key inside the PSP's key window, or by
// Lookup after it.
package psp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/stripe/stripe-go/v82"
)

// Outcome is what a PSP answer says about the money. The zero value is
// Unknown, so a Result nobody filled in can never read as paid or unpaid.
type Outcome int

const (
	// Unknown: the PSP may or may not have acted (timeout, lost reply, 5xx,
	// 429, 409 in flight). Resolve it; never treat it as a failure.
	Unknown Outcome = iota
	// Succeeded: the charge (or refund) is done.
	Succeeded
	// Declined: definitely not charged (a card decline, a canceled or
	// unpaid PaymentIntent, a failed refund).
	Declined
	// Pending: the PSP holds the payment but it is not final yet
	// (processing, requires_action, requires_capture, a pending refund). Ask again later with
	// Retrieve or Lookup; replaying the key would only replay this answer.
	Pending
	// NotFound: Lookup found no PaymentIntent carrying our reference.
	NotFound
)

// String names the outcome for logs and messages.
func (o Outcome) String() string {
	switch o {
	case Succeeded:
		return "succeeded"
	case Declined:
		return "declined"
	case Pending:
		return "pending"
	case NotFound:
		return "not_found"
	default:
		return "unknown"
	}
}

// Result is the PSP's answer reduced to what oncepay records.
type Result struct {
	// Outcome is the classification of the answer.
	Outcome Outcome
	// PaymentIntentID is the PSP's id for the payment (pi_...), when known.
	PaymentIntentID string
	// ChargeID is the PaymentIntent's latest charge (ch_...), when known:
	// the id the ledger stores as psp_charge.
	ChargeID string
	// RefundID is the refund's id (re_...), set by Refund.
	RefundID string
	// DeclineCode is the issuer's reason on a Declined outcome
	// (generic_decline, insufficient_funds, ...).
	DeclineCode string
	// Replayed is true when the PSP answered from its idempotency store
	// (Stripe's Idempotent-Replayed header): this answer is the saved
	// result of an earlier request with the same key, not a new action.
	Replayed bool
	// HTTPStatus is the PSP's status code; 0 when no reply arrived.
	HTTPStatus int
	// Cause says why the outcome is Unknown (a timeout, a 500, a 409...);
	// nil otherwise. It carries no personal data.
	Cause error
}

// Errors for requests the PSP definitely did not act on. Test with errors.Is.
var (
	// ErrInvalidRequest: the request was refused as invalid (a 4xx other
	// than 402/409/429), or it was never sent because it failed our own
	// checks. Nothing was charged.
	ErrInvalidRequest = errors.New("psp: invalid request")
	// ErrKeyReuse: the Idempotency-Key was first used with other parameters
	// (Stripe's idempotency_error). Nothing ran; it is a bug upstream.
	ErrKeyReuse = errors.New("psp: idempotency key reused with different parameters")
	// ErrNotSent: the call was not made, because its API key could not be
	// read. Nothing ran at the PSP, yet it is no refusal of the payment:
	// the same call may be made again (it is not ErrInvalidRequest, which
	// would settle a payment as failed).
	ErrNotSent = errors.New("psp: not sent")
	// ErrInvalidWebhook: a webhook whose signature, timestamp or body does
	// not check out.
	ErrInvalidWebhook = errors.New("psp: invalid webhook")
)

// MetricKeyUnreadable is the count the callers emit for a call not sent
// because the API key could not be read (ErrNotSent): every payment then
// waits UNKNOWN for the resolver, so the stack alarms on it.
const MetricKeyUnreadable = "PSPKeyUnreadable"

// APIError is an error answer from the PSP, reduced to the fields oncepay
// acts on. The raw stripe.Error can carry the card holder's billing details
// (its payment_method object), so it is never logged or wrapped as is.
type APIError struct {
	HTTPStatus  int    // the reply's status code
	Type        string // api_error, card_error, idempotency_error, invalid_request_error
	Code        string // e.g. card_declined, idempotency_key_in_use, parameter_missing
	DeclineCode string // the issuer's reason on a card_error
	Param       string // the parameter at fault, if any
	Message     string // Stripe's message about our request (we send no personal data)
	RequestID   string // Stripe's Request-Id, for support
}

// Error describes the answer without any personal data.
func (e *APIError) Error() string {
	s := fmt.Sprintf("psp answered %d %s", e.HTTPStatus, e.Type)
	if e.Code != "" {
		s += " (" + e.Code + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.RequestID != "" {
		s += " [" + e.RequestID + "]"
	}
	return s
}

// Config configures a Client.
type Config struct {
	// APIKey is a fixed PSP secret key (any non-empty value for
	// stripe-mock and the simulator).
	APIKey string
	// Key, instead of APIKey, gives the key for each call: a deployment's
	// functions read it from Secrets Manager with a short cache
	// (boot.PSP), so a rolled key is used without a deploy. When it fails
	// the call is not sent: ErrNotSent.
	Key func(ctx context.Context) (string, error)
	// KeyRefresh reads the key past any cache; with it, a call the PSP
	// answers 401 is made once more when the key read afresh differs (a
	// key rolled while the old one was cached). Optional, with Key only.
	KeyRefresh func(ctx context.Context) (string, error)
	// BaseURL is the API's base URL; empty means Stripe's
	// (https://api.stripe.com).
	BaseURL string
	// HTTPClient makes the calls; nil means one with a 30 s backstop
	// timeout. The caller's context is the real deadline.
	HTTPClient *http.Client
	// Logger receives one JSON line per call; nil means slog.Default().
	Logger *slog.Logger
}

// Client calls the PSP. It is safe for concurrent use; build it once per
// process (Lambda reuse) and share it.
type Client struct {
	// api is stripe-go's API backend, called the way each service of
	// stripe.Client calls it (its methods are one Backend.Call each).
	// stripe.Client itself is left out: building it builds all of its ~200
	// services, which cost the api's bootstrap ~130 KB of code and type
	// data, over the 10 MiB budget (issue 9).
	api     stripe.Backend
	key     func(ctx context.Context) (string, error)
	refresh func(ctx context.Context) (string, error)
	log     *slog.Logger
	// listPage is the page size of the list calls (list.go); 0 means
	// Stripe's largest, 100. Tests set it to page small spans.
	listPage int64
}

// New builds a Client from cfg.
func New(cfg Config) (*Client, error) {
	key := cfg.Key
	switch {
	case key != nil && cfg.APIKey != "":
		return nil, fmt.Errorf("%w: psp.Config has both APIKey and Key", ErrInvalidRequest)
	case key == nil && cfg.APIKey == "":
		return nil, fmt.Errorf("%w: psp.Config.APIKey is empty", ErrInvalidRequest)
	case key == nil:
		fixed := cfg.APIKey
		key = func(context.Context) (string, error) { return fixed, nil }
	}
	backendCfg := &stripe.BackendConfig{
		HTTPClient: cfg.HTTPClient,
		// No automatic retries inside the SDK: a retry is a decision about
		// money. The resolver owns it (same key, its own rate cap,
		// docs/mechanism.md#seed-part-12), and a hidden retry would turn a
		// timeout we must report as Unknown into a longer wait past the API's
		// deadline.
		MaxNetworkRetries: stripe.Int64(0),
		// The SDK's logger prints whole error objects, which can include the
		// card holder's billing details; we log ids ourselves instead.
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	}
	if backendCfg.HTTPClient == nil {
		backendCfg.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.BaseURL != "" {
		u, err := url.Parse(cfg.BaseURL)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return nil, fmt.Errorf("%w: psp.Config.BaseURL %q is not an absolute URL", ErrInvalidRequest, cfg.BaseURL)
		}
		backendCfg.URL = stripe.String(cfg.BaseURL)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	api := stripe.GetBackendWithConfig(stripe.APIBackend, backendCfg)
	return &Client{api: api, key: key, refresh: cfg.KeyRefresh, log: log.With("component", "psp")}, nil
}
