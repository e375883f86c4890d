// Package webhook receives the PSP's webhooks: POST /webhooks/psp, in a
// Lambda function of its own behind the HTTP API, with no JWT (the PSP signs
// instead). See docs/mechanism.md#design-2 and docs/mechanism.md#seed-part-5.
//
// Every event is verified the way Stripe signs (stripe-go's webhook package
// through psp.ParseWebhook: the Stripe-Signature HMAC and a timestamp
// tolerance, 300 s by default). A forged or stale signature, or a body that
// is not an event, gets 400 problem+json and changes nothing.
//
// A verified event is applied in ONE PostgreSQL transaction
// (ledger.ApplyWebhook): INSERT INTO webhook_inbox ... ON CONFLICT DO
// NOTHING, keyed by the PSP's event id and, only if that inserted a row, the
// allowed state move by compare-and-set (payment_intent.succeeded ->
// SUCCEEDED with the charge id, payment_intent.payment_failed -> FAILED)
// with the journal entries and the outbox intent, written exactly as
// ledger.Settle writes them. The PSP delivers at least once (Stripe retries
// for up to three days): a repeat is acknowledged with 200 and changes
// nothing. A move that is no longer allowed (the API or the resolver settled
// first) is acknowledged too. After the commit, the event is published.
//
// The event's payment is found by our own reference, the PaymentIntent's
// metadata payment_id. A metadata key is anyone's to write (another
// integration of the same PSP account may use payment_id for its own ids),
// so the reference only finds the row: the object must also carry the
// row's amount and currency, and once the row names a PSP reference, be
// that PaymentIntent or charge. An event that does not is refused in the
// same transaction (ledger.ApplyWebhook): nothing moves, the inbox keeps
// it, the PSP is answered 200 (a redelivery cannot match better), and an
// error line with the ids and the metric WebhookMismatch say so.
package webhook

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncepay/oncepay/internal/clock"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/httpevent"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/psp"
)

// Path is the route the handler serves.
const Path = "/webhooks/psp"

// MaxBodyBytes bounds a webhook body (Stripe's events are a few KiB).
const MaxBodyBytes = 256 << 10

// The event types that move a payment.
const (
	TypeSucceeded = "payment_intent.succeeded"
	TypeFailed    = "payment_intent.payment_failed"
	// A refund that settles after its answer (pending, then succeeded or
	// failed) or fails after it succeeded raises these, each carrying the
	// refund; any of them settles the payment's refund row.
	TypeRefundUpdated       = "refund.updated"
	TypeRefundFailed        = "refund.failed"
	TypeChargeRefundUpdated = "charge.refund.updated"
)

// Subscribed is the event types the endpoint must be subscribed to at the
// PSP (Stripe Dashboard or the simulator's -webhook-events).
var Subscribed = []string{TypeSucceeded, TypeFailed, TypeRefundUpdated, TypeRefundFailed, TypeChargeRefundUpdated}

// MetricSucceededOnFailed counts payment_intent.succeeded events that met a
// FAILED or VOID payment: an incident the stack alarms on.
const MetricSucceededOnFailed = "WebhookSucceededOnFailed"

// MetricSucceededUnknown counts payment_intent.succeeded events carrying our
// payment id that no ledger row holds: a charge the ledger does not know
// (across Regions, a payment lost with a failed Region's last replication
// lag, docs/regions.md). The event is acknowledged and recorded, so a
// redelivery is a duplicate: the alarm on this count is its only signal.
const MetricSucceededUnknown = "WebhookSucceededUnknown"

// MetricMismatch counts payment events refused because the PSP's object
// does not match the ledger row its payment_id names (amount, currency, or
// the PSP reference the row holds): a PaymentIntent that is not this
// payment's, or a bug; either way a person looks.
const MetricMismatch = "WebhookMismatch"

// Ledger applies a verified event (internal/ledger.Store).
type Ledger interface {
	ApplyWebhook(ctx context.Context, in ledger.InboxEvent, o *ledger.Outcome, now time.Time) (ledger.WebhookResult, error)
	ApplyRefundWebhook(ctx context.Context, in ledger.InboxEvent, o *ledger.RefundOutcome) (ledger.RefundWebhookResult, error)
}

// Publisher puts a committed event's outbox item (internal/outbox.Publisher).
type Publisher interface {
	Publish(ctx context.Context, e event.Event) error
}

// Config configures a Handler.
type Config struct {
	// Secret is the endpoint's signing secret (whsec_...). Exactly one of
	// Secret and SecretFrom is set.
	Secret string
	// SecretFrom reads the signing secret for each delivery: the function
	// reads the PSP secret's webhook_secret from Secrets Manager through a
	// short cache (boot.Secret), so a rolled secret needs no deploy. A
	// delivery it cannot read the secret for is answered 500, and the PSP
	// delivers it again.
	SecretFrom func(ctx context.Context) (string, error)
	// Tolerance is how old a signature's timestamp may be (default 300 s):
	// an older one is a replay and is refused.
	Tolerance time.Duration
}

// Deps are the Handler's collaborators. Publisher may be nil: the
// resolver's outbox sweep puts the event later.
type Deps struct {
	Ledger    Ledger
	Publisher Publisher
	Clock     clock.Clock      // nil: the system clock
	Log       *slog.Logger     // nil: slog.Default()
	Metrics   *metrics.Emitter // nil: none
}

// Handler serves POST /webhooks/psp. It is safe for concurrent use.
type Handler struct {
	cfg Config
	d   Deps
}

// New returns a Handler.
func New(cfg Config, d Deps) (*Handler, error) {
	if (cfg.Secret == "") == (cfg.SecretFrom == nil) {
		return nil, errors.New("webhook: exactly one of Config.Secret and Config.SecretFrom is required")
	}
	if cfg.Tolerance == 0 {
		cfg.Tolerance = 300 * time.Second
	}
	if cfg.Tolerance < 0 {
		return nil, fmt.Errorf("webhook: tolerance %s is negative", cfg.Tolerance)
	}
	if d.Ledger == nil {
		return nil, errors.New("webhook: Deps.Ledger is required")
	}
	if d.Clock == nil {
		d.Clock = clock.System{}
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return &Handler{cfg: cfg, d: d}, nil
}

// Response is the answer to one delivery.
type Response struct {
	Status  int
	Headers http.Header
	Body    []byte
}

// Serve answers one delivery. It blocks for one ledger transaction and, after
// a move, one outbox put.
func (h *Handler) Serve(ctx context.Context, method, path string, hdr http.Header, body []byte) Response {
	switch {
	case path != Path:
		return problemResponse(problem.NotFound())
	case method != http.MethodPost:
		r := problemResponse(problem.MethodNotAllowed())
		r.Headers.Set("Allow", http.MethodPost)
		return r
	case len(body) > MaxBodyBytes:
		return problemResponse(problem.TooLarge(MaxBodyBytes))
	}
	secret := h.cfg.Secret
	if h.cfg.SecretFrom != nil {
		var err error
		if secret, err = h.cfg.SecretFrom(ctx); err != nil {
			h.d.Log.Error("webhook secret not read; nothing verified or changed, the PSP will deliver it again", "err", err)
			h.d.Metrics.Count("WebhookErrors", 1)
			return problemResponse(problem.Internal())
		}
	}
	ev, err := psp.ParseWebhook(body, hdr.Get("Stripe-Signature"), secret, h.cfg.Tolerance)
	if err != nil {
		// The reason goes to the log, not to whoever sent it.
		h.d.Log.Warn("webhook refused", "err", err)
		h.d.Metrics.Count("WebhookRejected", 1)
		return problemResponse(problem.BadRequest("Stripe-Signature", "The signature, its timestamp or the event does not verify. Nothing was changed."))
	}
	log := h.d.Log.With("psp_event_id", ev.ID, "event_type", ev.Type, "payment_id", ev.PaymentID, "payment_intent", ev.PaymentIntentID,
		"psp_charge", ev.ChargeID)
	if isRefundEvent(ev.Type) {
		return h.serveRefund(ctx, ev, log)
	}
	o := outcomeOf(ev)
	res, err := h.d.Ledger.ApplyWebhook(ctx, ledger.InboxEvent{ID: ev.ID, Type: ev.Type, PaymentID: ev.PaymentID,
		Amount: ev.Amount, Currency: ev.Currency, PaymentIntentID: ev.PaymentIntentID, ChargeID: ev.ChargeID}, o, h.d.Clock.Now())
	if err != nil {
		return h.notApplied(log, err)
	}
	switch {
	case res.Duplicate:
		return h.duplicate(log)
	case len(res.Mismatch) > 0:
		// Ids and field names only: the amounts are in the row and at the PSP.
		log.Error("webhook: refused to settle: the PSP's object is not this payment's; nothing moved",
			"alert", MetricMismatch, "mismatch", strings.Join(res.Mismatch, ","), "state", res.Payment.State)
		h.d.Metrics.Count(MetricMismatch, 1)
	case res.Moved:
		log.Info("webhook: payment settled", "state", res.Payment.State, "psp_charge", res.Payment.PSPCharge)
		h.d.Metrics.Count("WebhookSettled", 1)
		h.publish(ctx, res.Event, log)
	case o == nil:
		log.Info("webhook: recorded; this event type moves nothing")
	case !res.Found && ev.PaymentID != "" && o.State == ledger.Succeeded:
		log.Error("webhook: INCIDENT: the PSP charged a payment the ledger does not know (lost in a failover?); reconcile it",
			"alert", MetricSucceededUnknown, "psp_charge", o.PSPCharge)
		h.d.Metrics.Count(MetricSucceededUnknown, 1)
	case !res.Found:
		log.Warn("webhook: recorded; no payment carries this reference")
	case o.State == ledger.Succeeded && (res.Payment.State == ledger.Failed || res.Payment.State == ledger.Void):
		// The PSP says it charged a payment we closed as not charged (a
		// FAILED answer was given, a "not charged" push sent, or the key
		// was voided and the client paid again): money taken with no
		// payment behind it. No allowed move fixes it; a person must
		// (refund, or settle by hand).
		log.Error("webhook: INCIDENT: the PSP charged a payment the ledger holds as not charged",
			"alert", MetricSucceededOnFailed, "state", res.Payment.State, "decline_code", res.Payment.DeclineCode,
			"psp_charge", o.PSPCharge)
		h.d.Metrics.Count(MetricSucceededOnFailed, 1)
	default:
		log.Info("webhook: recorded; the payment had already left an open state", "state", res.Payment.State)
		h.d.Metrics.Count("WebhookLate", 1)
	}
	return ack(false)
}

// notApplied answers an event the ledger could not apply: not
// acknowledged, so the PSP delivers it again, and the inbox makes that
// harmless.
func (h *Handler) notApplied(log *slog.Logger, err error) Response {
	log.Error("webhook not applied; the PSP will deliver it again", "err", err)
	h.d.Metrics.Count("WebhookErrors", 1)
	return problemResponse(problem.LedgerUnavailable())
}

// duplicate acknowledges a repeat the inbox already holds.
func (h *Handler) duplicate(log *slog.Logger) Response {
	log.Info("webhook: a repeat of an event already received; nothing changed")
	h.d.Metrics.Count("WebhookDuplicate", 1)
	return ack(true)
}

// publish puts a committed move's event into the outbox; a failure is the
// sweep's to repair (the intent committed with the move).
func (h *Handler) publish(ctx context.Context, e *event.Event, log *slog.Logger) {
	if e == nil || h.d.Publisher == nil {
		return
	}
	if err := h.d.Publisher.Publish(ctx, *e); err != nil {
		log.Warn("outbox put failed; the sweep will re-put it", "event_id", e.EventID, "err", err)
	}
}

func isRefundEvent(t string) bool {
	return t == TypeRefundUpdated || t == TypeRefundFailed || t == TypeChargeRefundUpdated
}

// serveRefund applies a refund event: a final status settles the payment's
// refund row (SUCCEEDED or FAILED, or FAILED after SUCCEEDED: the refund
// failed later), with the event to publish; pending only records it.
func (h *Handler) serveRefund(ctx context.Context, ev psp.Event, log *slog.Logger) Response {
	log = log.With("psp_refund", ev.RefundID, "refund_status", ev.RefundStatus)
	var o *ledger.RefundOutcome
	switch ev.RefundStatus {
	case "succeeded":
		o = &ledger.RefundOutcome{State: ledger.RefundSucceeded, PSPRefund: ev.RefundID, PSPPaymentIntent: ev.PaymentIntentID}
	case "failed", "canceled":
		o = &ledger.RefundOutcome{State: ledger.RefundFailed, PSPRefund: ev.RefundID, FailureReason: ev.RefundFailure,
			PSPPaymentIntent: ev.PaymentIntentID}
	}
	if ev.RefundID == "" {
		o = nil // not a refund object: nothing to settle
	}
	res, err := h.d.Ledger.ApplyRefundWebhook(ctx, ledger.InboxEvent{ID: ev.ID, Type: ev.Type, PaymentID: ev.PaymentID}, o)
	if err != nil {
		return h.notApplied(log, err)
	}
	switch {
	case res.Duplicate:
		return h.duplicate(log)
	case res.Moved:
		log.Info("webhook: refund settled", "state", res.Refund.State)
		h.d.Metrics.Count("WebhookRefundSettled", 1)
		h.publish(ctx, res.Event, log)
	case o == nil:
		log.Info("webhook: recorded; the refund is not final yet")
	case !res.Found:
		log.Warn("webhook: recorded; no refund of ours carries this reference")
	case res.Refund.PSPRefund != "" && res.Refund.PSPRefund != ev.RefundID:
		log.Error("webhook: a refund the ledger does not hold for this payment", "ledger_psp_refund", res.Refund.PSPRefund)
	default:
		log.Info("webhook: recorded; the refund had already reached this state", "state", res.Refund.State)
		h.d.Metrics.Count("WebhookLate", 1)
	}
	return ack(false)
}

// outcomeOf is the state move an event type allows; nil: none.
func outcomeOf(ev psp.Event) *ledger.Outcome {
	switch ev.Type {
	case TypeSucceeded:
		charge := ev.ChargeID
		if charge == "" {
			charge = ev.PaymentIntentID
		}
		return &ledger.Outcome{State: ledger.Succeeded, PSPCharge: charge}
	case TypeFailed:
		return &ledger.Outcome{State: ledger.Failed, PSPCharge: ev.PaymentIntentID, DeclineCode: ev.DeclineCode}
	}
	return nil
}

// Handle serves an HTTP API (payload format 2.0) event.
func (h *Handler) Handle(ctx context.Context, e events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	hdr := http.Header{}
	for k, v := range e.Headers {
		hdr.Set(k, v)
	}
	resp := h.serveEvent(ctx, e.RequestContext.HTTP.Method, e.RawPath, hdr, e.Body, e.IsBase64Encoded)
	return httpevent.HTTPAPIResponse(resp.Status, resp.Headers, resp.Body), nil
}

// HandleALB serves an Application Load Balancer event (the stack's
// alternative front door forwards /webhooks/psp here).
func (h *Handler) HandleALB(ctx context.Context, e events.ALBTargetGroupRequest) (events.ALBTargetGroupResponse, error) {
	hdr := http.Header{}
	for k, v := range e.Headers {
		hdr.Set(k, v)
	}
	for k, vs := range e.MultiValueHeaders {
		hdr.Del(k)
		for _, v := range vs {
			hdr.Add(k, v)
		}
	}
	resp := h.serveEvent(ctx, e.HTTPMethod, e.Path, hdr, e.Body, e.IsBase64Encoded)
	return httpevent.ALBResponse(resp.Status, resp.Headers, resp.Body), nil
}

// Invoke is the Lambda entry point: it accepts either event shape.
func (h *Handler) Invoke(ctx context.Context, raw json.RawMessage) (any, error) {
	return httpevent.Handlers{HTTPAPI: h.Handle, ALB: h.HandleALB}.Dispatch(ctx, raw)
}

func (h *Handler) serveEvent(ctx context.Context, method, path string, hdr http.Header, body string, b64 bool) Response {
	if len(body) > 2*MaxBodyBytes {
		return problemResponse(problem.TooLarge(MaxBodyBytes))
	}
	raw := []byte(body)
	if b64 {
		b, err := base64.StdEncoding.DecodeString(body)
		if err != nil {
			return problemResponse(problem.BadRequest("body", "invalid base64 body"))
		}
		raw = b
	}
	return h.Serve(ctx, method, path, hdr, raw)
}

// ServeHTTP serves a plain HTTP request by building the event the HTTP API
// would send and passing it to Handle: the local front door and the tests
// reach the Lambda's own entry point this way.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	e := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: r.Method + " " + r.URL.Path, RawPath: r.URL.Path,
		Headers: map[string]string{}, Body: base64.StdEncoding.EncodeToString(body), IsBase64Encoded: true,
	}
	e.RequestContext.HTTP.Method = r.Method
	e.RequestContext.HTTP.Path = r.URL.Path
	for k, v := range r.Header {
		e.Headers[strings.ToLower(k)] = strings.Join(v, ",")
	}
	resp, _ := h.Handle(r.Context(), e)
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.WriteString(w, resp.Body)
}

func ack(duplicate bool) Response {
	b, _ := json.Marshal(struct {
		Received  bool `json:"received"`
		Duplicate bool `json:"duplicate,omitempty"`
	}{true, duplicate})
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return Response{Status: http.StatusOK, Headers: h, Body: b}
}

func problemResponse(p problem.Problem) Response {
	b, err := json.Marshal(p)
	if err != nil {
		b = []byte(`{"title":"internal error","status":500}`)
	}
	h := http.Header{}
	h.Set("Content-Type", problem.ContentType)
	return Response{Status: p.Status, Headers: h, Body: b}
}
