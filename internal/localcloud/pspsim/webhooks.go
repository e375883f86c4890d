package pspsim

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// apiVersion is the Stripe API version the simulator's events claim to be
// rendered with: the one stripe-go v82 pins.
const apiVersion = "2025-08-27.basil"

// delivery is one copy of an event on its way to the webhook URL.
type delivery struct {
	n         uint64 // this copy's number (the journal's key; copies share the event id)
	eventID   string
	eventType string
	paymentID string
	payload   []byte
	attempts  int
	first     time.Time // real time of the first attempt; retries stop WebhookRetryFor after it
	due       time.Time // real time
	gen       uint64
}

// emitLocked raises an event about pi and, as Stripe does for the same
// change, the matching charge event (charge.succeeded with
// payment_intent.succeeded, charge.failed with
// payment_intent.payment_failed): two events, two ids, for one charge.
// Each goes out only if the endpoint is subscribed to its type.
func (s *Sim) emitLocked(eventType string, pi *paymentIntent, key, path string) {
	s.emitObjectLocked(eventType, pi, pi.Metadata["payment_id"], key, path)
	switch eventType {
	case "payment_intent.succeeded":
		s.emitObjectLocked("charge.succeeded", s.chargeViewLocked(pi), pi.Metadata["payment_id"], key, path)
	case "payment_intent.payment_failed":
		s.emitObjectLocked("charge.failed", s.chargeViewLocked(pi), pi.Metadata["payment_id"], key, path)
	}
}

// subscribed reports whether the endpoint takes events of this type.
func (s *Sim) subscribed(eventType string) bool {
	for _, t := range s.cfg.WebhookEvents {
		if t == "*" || t == eventType {
			return true
		}
	}
	return false
}

// emitObjectLocked creates an event with obj as data.object and queues it
// for delivery, unless a webhook fault says otherwise. The event id is
// fixed here, so every copy and every retry carries the same id, as
// Stripe's do.
func (s *Sim) emitObjectLocked(eventType string, obj any, paymentID, key, path string) {
	if s.cfg.WebhookURL == "" || !s.subscribed(eventType) {
		return
	}
	id := s.newIDLocked("evt")
	var idemKey any
	if key != "" {
		idemKey = key
	}
	payload, err := json.Marshal(map[string]any{
		"id":               id,
		"object":           "event",
		"api_version":      apiVersion,
		"created":          s.nowLocked().Unix(),
		"data":             map[string]any{"object": obj},
		"livemode":         false,
		"pending_webhooks": 1,
		"request":          map[string]any{"id": nil, "idempotency_key": idemKey},
		"type":             eventType,
	})
	if err != nil {
		panic("pspsim: marshal event: " + err.Error())
	}
	d := delivery{eventID: id, eventType: eventType, paymentID: paymentID,
		payload: payload, due: time.Now(), gen: s.gen}
	copies := 1
	if f, ok := s.takeFaultLocked(FaultKind.webhook, key, path); ok {
		s.log.Info("fault: webhook", "fault", f.Kind, "event_id", id, "payment_id", d.paymentID, "delay_ms", f.DelayMS)
		switch f.Kind {
		case FaultWebhookDrop:
			return
		case FaultWebhookDuplicate:
			copies = 2
		case FaultWebhookDelay:
			d.due = d.due.Add(f.delay())
		}
	}
	for range copies {
		cp := d
		s.deliverySeq++
		cp.n = s.deliverySeq
		s.pending = append(s.pending, &cp)
		s.touchDelivery(&cp)
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// PendingWebhooks is the number of event copies not yet delivered (and not
// given up on).
func (s *Sim) PendingWebhooks() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// FlushWebhooks attempts every pending delivery now, delayed ones included,
// and blocks until each attempt is done. It returns how many were
// delivered; failed ones stay pending (with their retry backoff) until
// their attempts run out, and their errors are joined into err.
func (s *Sim) FlushWebhooks(ctx context.Context) (int, error) {
	s.mu.Lock()
	s.settleRefundsLocked(s.nowLocked())
	s.mu.Unlock()
	return s.deliverRound(ctx, true)
}

// DeliverDueWebhooks attempts the pending deliveries that are due now,
// leaving delayed ones (webhook_delay) and retries still backing off: what
// the background sender does on each wake-up, for manual-webhook tests.
func (s *Sim) DeliverDueWebhooks(ctx context.Context) (int, error) {
	s.mu.Lock()
	s.settleRefundsLocked(s.nowLocked())
	s.mu.Unlock()
	return s.deliverRound(ctx, false)
}

// runDeliveries is the background sender: it wakes when an event is queued
// or a retry falls due.
func (s *Sim) runDeliveries() {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	// Pending refunds settle by the simulator's clock; with nobody calling,
	// a tick settles them so their events still go out.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if wait, ok := s.nextDue(); ok {
			timer.Reset(wait)
		}
		select {
		case <-s.ctx.Done():
			timer.Stop()
			return
		case <-s.kick:
			timer.Stop()
		case <-tick.C:
			s.mu.Lock()
			s.settleRefundsLocked(s.nowLocked())
			s.mu.Unlock()
			s.syncOrLog()
		case <-timer.C:
			_, _ = s.deliverRound(s.ctx, false)
		}
	}
}

// nextDue is how long until the earliest pending delivery is due.
func (s *Sim) nextDue() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return 0, false
	}
	first := s.pending[0].due
	for _, d := range s.pending[1:] {
		if d.due.Before(first) {
			first = d.due
		}
	}
	return max(time.Until(first), 0), true
}

// deliverRound sends the deliveries that are due (all of them when all is
// true), one at a time, in queue order.
func (s *Sim) deliverRound(ctx context.Context, all bool) (int, error) {
	if s.cfg.WebhookURL == "" {
		return 0, nil
	}
	s.deliverMu.Lock()
	defer s.deliverMu.Unlock()

	s.mu.Lock()
	now := time.Now()
	var batch, keep []*delivery
	for _, d := range s.pending {
		if all || !d.due.After(now) {
			batch = append(batch, d)
		} else {
			keep = append(keep, d)
		}
	}
	s.pending = keep
	s.mu.Unlock()

	delivered := 0
	var errs []error
	for _, d := range batch {
		if d.attempts == 0 {
			d.first = time.Now()
		}
		err := s.deliver(ctx, d)
		d.attempts++
		log := s.log.With("event_id", d.eventID, "event_type", d.eventType, "payment_id", d.paymentID, "attempt", d.attempts)
		if err == nil {
			delivered++
			log.Info("webhook delivered")
			s.mu.Lock()
			s.dropDelivery(d)
			s.mu.Unlock()
			continue
		}
		errs = append(errs, fmt.Errorf("deliver %s (attempt %d): %w", d.eventID, d.attempts, err))
		s.mu.Lock()
		switch {
		case d.gen != s.gen: // Reset ran meanwhile: forget it
		case s.cfg.WebhookAttempts > 0 && d.attempts >= s.cfg.WebhookAttempts,
			time.Since(d.first) >= s.cfg.WebhookRetryFor:
			s.gaveUp++
			s.dropDelivery(d)
			log.Error("webhook given up", "error", err.Error())
		default:
			d.due = time.Now().Add(s.backoff(d.attempts))
			s.pending = append(s.pending, d)
			s.touchDelivery(d)
			log.Warn("webhook delivery failed, will retry", "error", err.Error(), "retry_at", d.due)
		}
		s.mu.Unlock()
	}
	s.syncOrLog() // a delivery the journal forgets is delivered again: allowed
	return delivered, errors.Join(errs...)
}

// backoff is the wait after the n-th failed attempt: doubling, capped at
// WebhookBackoffMax.
func (s *Sim) backoff(n int) time.Duration {
	d := s.cfg.WebhookBackoff
	for i := 1; i < n && d < s.cfg.WebhookBackoffMax; i++ {
		d *= 2
	}
	return min(d, s.cfg.WebhookBackoffMax)
}

// deliver POSTs one event copy, signed the way Stripe signs: Stripe-Signature
// t=<unix>,v1=hex(HMAC-SHA256(secret, "<t>.<payload>")), with t the time of
// sending. Any 2xx is success.
func (s *Sim) deliver(ctx context.Context, d *delivery) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.WebhookURL, bytes.NewReader(d.payload))
	if err != nil {
		return fmt.Errorf("build webhook request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks; pspsim)")
	req.Header.Set("Stripe-Signature", Sign(d.payload, s.cfg.WebhookSecret, time.Now()))
	resp, err := s.httpc.Do(req)
	if err != nil {
		return fmt.Errorf("post webhook: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook endpoint answered %d", resp.StatusCode)
	}
	return nil
}

// Sign returns a Stripe-Signature header value for payload, made at time t
// with secret: what Stripe sends, and what tests use to forge a valid or
// stale webhook.
func Sign(payload []byte, secret string, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts))
	mac.Write([]byte("."))
	mac.Write(payload)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}
