package pspsim

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// FaultKind names a fault.
type FaultKind string

// Request faults act on calls to the Stripe API (/v1/...).
const (
	// FaultSlow waits delay_ms, holding the key in flight (so a repeat
	// meanwhile gets 409), then processes the request normally, even if the
	// client has given up.
	FaultSlow FaultKind = "slow"
	// FaultLoseReply processes the request (charging, and saving the reply
	// under the key), then holds the reply for delay_ms or until the client
	// disconnects, and closes the connection without answering.
	FaultLoseReply FaultKind = "lose_reply"
	// FaultError5xx answers 500 api_error without doing anything; like
	// Stripe, that 500 is saved under the key and replayed to repeats.
	FaultError5xx FaultKind = "error_5xx"
	// FaultDropBefore closes the connection before doing anything; nothing
	// is saved, so a repeat runs as a new request.
	FaultDropBefore FaultKind = "drop_before"
)

// Credential faults answer as Stripe does when the API key stops working
// (rotated, revoked, or stripped of a permission): before the idempotency
// layer, so nothing is saved under the key and nothing is charged, and a
// repeat after the fault has run out is a new request. Times says for how
// many matching requests the key stays broken.
const (
	// FaultUnauthorized answers 401 authentication_error ("Invalid API Key
	// provided").
	FaultUnauthorized FaultKind = "unauthorized"
	// FaultForbidden answers 403 permission_error (a restricted key that
	// lacks the permission).
	FaultForbidden FaultKind = "forbidden"
)

// Webhook faults act on the events a matching request causes.
const (
	// FaultWebhookDuplicate delivers the event twice (same event id).
	FaultWebhookDuplicate FaultKind = "webhook_duplicate"
	// FaultWebhookDelay holds the event for delay_ms before its first
	// delivery (FlushWebhooks delivers it at once).
	FaultWebhookDelay FaultKind = "webhook_delay"
	// FaultWebhookDrop never delivers the event.
	FaultWebhookDrop FaultKind = "webhook_drop"
)

// Match selects the requests a fault applies to. Empty fields match
// anything; a fault with an empty Match applies to every request.
type Match struct {
	// IdempotencyKey matches a POST's Idempotency-Key exactly.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// PathPrefix matches the request path, e.g. "/v1/refunds".
	PathPrefix string `json:"path_prefix,omitempty"`
}

func (m Match) matches(key, path string) bool {
	return (m.IdempotencyKey == "" || m.IdempotencyKey == key) &&
		(m.PathPrefix == "" || strings.HasPrefix(path, m.PathPrefix))
}

// Fault is one fault rule: the body of POST /_sim/faults. Rules are tried in
// the order they were added; the first matching rule of the right sort
// fires and uses up one of its Times.
//
// When rules fire: unauthorized and forbidden first, on any authenticated
// request; drop_before, slow and lose_reply when the request
// arrives (at most one of them per request); error_5xx when the request
// would run (not for a replay, a 409 or a 400); error_5xx_after_charge once
// it has run; refund_pending and refund_fail when it makes a refund;
// webhook faults when the request causes an event.
//
// Note for Go clients: net/http resends a request that carries an
// Idempotency-Key by itself when a reused keep-alive connection closes
// before any reply byte, so drop_before (or lose_reply with delay 0) on a
// reused connection may be retried transparently; the same happens against
// Stripe. Use a fresh connection or Times: 2 to see the failure.
type Fault struct {
	Match Match     `json:"match"`
	Kind  FaultKind `json:"kind"`
	// DelayMS is the delay for slow, lose_reply and webhook_delay.
	DelayMS int64 `json:"delay_ms,omitempty"`
	// Times is how many requests (or events) the rule hits; default 1.
	Times int `json:"times,omitempty"`
}

func (f Fault) delay() time.Duration { return time.Duration(f.DelayMS) * time.Millisecond }

func (k FaultKind) atArrival() bool {
	return k == FaultSlow || k == FaultLoseReply || k == FaultDropBefore
}

func (k FaultKind) credential() bool {
	return k == FaultUnauthorized || k == FaultForbidden
}

func (k FaultKind) webhook() bool {
	return k == FaultWebhookDuplicate || k == FaultWebhookDelay || k == FaultWebhookDrop
}

// AddFault adds a fault rule. It fails on an unknown kind or a negative
// delay or count.
func (s *Sim) AddFault(f Fault) error {
	if !f.Kind.atArrival() && !f.Kind.webhook() && !f.Kind.credential() && f.Kind != FaultError5xx && !f.Kind.knownEffect() {
		return fmt.Errorf("pspsim: unknown fault kind %q", f.Kind)
	}
	if f.DelayMS < 0 || f.Times < 0 {
		return fmt.Errorf("pspsim: fault %q: negative delay_ms or times", f.Kind)
	}
	if f.Times == 0 {
		f.Times = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &f)
	return nil
}

// ClearFaults removes every fault rule.
func (s *Sim) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// Faults returns the rules still armed, with their remaining Times.
func (s *Sim) Faults() []Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Fault, 0, len(s.faults))
	for _, f := range s.faults {
		out = append(out, *f)
	}
	return out
}

// takeFault fires the first armed rule accepted by sort that matches the
// request, using up one of its Times.
func (s *Sim) takeFault(sort func(FaultKind) bool, key, path string) (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.takeFaultLocked(sort, key, path)
}

func (s *Sim) takeFaultLocked(sort func(FaultKind) bool, key, path string) (Fault, bool) {
	for i, f := range s.faults {
		if !sort(f.Kind) || !f.Match.matches(key, path) {
			continue
		}
		fired := *f
		f.Times--
		if f.Times <= 0 {
			s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
		}
		return fired, true
	}
	return Fault{}, false
}

func isError5xx(k FaultKind) bool { return k == FaultError5xx }

// credentialFault answers a request that a credential fault refuses, as
// Stripe answers a bad or under-privileged key; ok is false when none fires.
func (s *Sim) credentialFault(key, path string) (reply, bool) {
	f, ok := s.takeFault(FaultKind.credential, key, path)
	if !ok {
		return reply{}, false
	}
	s.log.Info("fault: API key refused", "fault", f.Kind, "path", path, "idempotency_key", key)
	if f.Kind == FaultForbidden {
		return errorReply(http.StatusForbidden, apiError{
			Type:    "invalid_request_error",
			Code:    "secret_key_required",
			Message: "The provided key does not have the required permissions for this endpoint (injected by pspsim).",
		}), true
	}
	return errorReply(http.StatusUnauthorized, apiError{
		Type:    "invalid_request_error",
		Message: "Invalid API Key provided (injected by pspsim).",
	}), true
}
