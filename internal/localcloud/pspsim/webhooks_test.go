package pspsim_test

import (
	"errors"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/psp"
)

// The simulator signs the way Stripe does, and the production verifier
// (stripe-go's webhook package behind psp.ParseWebhook) accepts it.
func TestWebhookSignatureVerifies(t *testing.T) {
	e := setup(t)
	paid := mustCharge(t, e, chargeReq("pay_s"))
	if n := flush(t, e); n != 1 {
		t.Fatalf("flushed %d deliveries, want 1", n)
	}
	evs := e.hooks.events(t) // fails the test if a signature does not verify
	want := psp.Event{
		ID:              evs[0].ID,
		Type:            "payment_intent.succeeded",
		PaymentIntentID: paid.PaymentIntentID,
		PaymentID:       "pay_s",
		ChargeID:        paid.ChargeID,
		Amount:          3000,
		Currency:        "usd",
	}
	if len(evs) != 1 || evs[0] != want || evs[0].ID == "" {
		t.Fatalf("events: %+v, want %+v", evs, want)
	}
	d := e.hooks.deliveries()[0]
	if _, err := psp.ParseWebhook(d.body, d.sig, "whsec_wrong", 5*time.Minute); !errors.Is(err, psp.ErrInvalidWebhook) {
		t.Errorf("wrong secret: %v, want ErrInvalidWebhook", err)
	}
	if _, err := psp.ParseWebhook(d.body, pspsim.Sign(d.body, whsec, time.Now().Add(-time.Hour)), whsec, 5*time.Minute); !errors.Is(err, psp.ErrInvalidWebhook) {
		t.Errorf("stale signature: %v, want ErrInvalidWebhook", err)
	}
}

// webhook_duplicate: the same event (same id) arrives twice, which is what
// the webhook handler's inbox must absorb.
func TestWebhookDuplicate(t *testing.T) {
	e := setup(t)
	req := chargeReq("pay_dup")
	mustAddFault(t, e, pspsim.Fault{Match: pspsim.Match{IdempotencyKey: req.IdempotencyKey}, Kind: pspsim.FaultWebhookDuplicate})
	mustCharge(t, e, req)
	if n := flush(t, e); n != 2 {
		t.Fatalf("flushed %d deliveries, want 2", n)
	}
	evs := e.hooks.events(t)
	if len(evs) != 2 || evs[0].ID != evs[1].ID || evs[0].PaymentID != "pay_dup" {
		t.Fatalf("events: %+v, want the same event twice", evs)
	}
}

// Delivery is at least once: refused deliveries are retried in the
// background with backoff until accepted, always with the same event id.
func TestWebhookRetriedUntilAccepted(t *testing.T) {
	e := setup(t, func(c *pspsim.Config) {
		c.ManualWebhooks = false
		c.WebhookBackoff = 5 * time.Millisecond
	})
	e.hooks.mu.Lock()
	e.hooks.refuse = 2
	e.hooks.mu.Unlock()
	mustCharge(t, e, chargeReq("pay_retry"))

	waitFor(t, func() bool { return len(e.hooks.deliveries()) == 3 && e.sim.PendingWebhooks() == 0 })
	evs := e.hooks.events(t)
	if evs[0].ID != evs[1].ID || evs[1].ID != evs[2].ID {
		t.Errorf("retries changed the event id: %+v", evs)
	}
}

// Attempts are bounded: an endpoint that never accepts is given up on.
func TestWebhookAttemptsAreBounded(t *testing.T) {
	e := setup(t, func(c *pspsim.Config) { c.WebhookAttempts = 3 })
	e.hooks.mu.Lock()
	e.hooks.refuse = 100
	e.hooks.mu.Unlock()
	mustCharge(t, e, chargeReq("pay_bounded"))
	for range 5 {
		_, _ = e.sim.FlushWebhooks(t.Context())
	}
	if n := len(e.hooks.deliveries()); n != 3 {
		t.Errorf("%d attempts, want 3", n)
	}
	if n := e.sim.PendingWebhooks(); n != 0 {
		t.Errorf("%d still pending after the last attempt", n)
	}
}

func TestWebhookDropAndDelay(t *testing.T) {
	e := setup(t, func(c *pspsim.Config) { c.ManualWebhooks = false })
	mustAddFault(t, e, pspsim.Fault{Match: pspsim.Match{IdempotencyKey: "pay_drop:charge"}, Kind: pspsim.FaultWebhookDrop})
	mustAddFault(t, e, pspsim.Fault{Match: pspsim.Match{IdempotencyKey: "pay_late:charge"}, Kind: pspsim.FaultWebhookDelay, DelayMS: time.Hour.Milliseconds()})

	mustCharge(t, e, chargeReq("pay_drop"))
	mustCharge(t, e, chargeReq("pay_late"))
	if n := e.sim.PendingWebhooks(); n != 1 {
		t.Fatalf("%d pending, want 1 (the late one; the dropped one never queues)", n)
	}
	if n := len(e.hooks.deliveries()); n != 0 {
		t.Fatalf("%d delivered before the delay, want 0", n)
	}
	flush(t, e) // the test decides when "late" is
	evs := e.hooks.events(t)
	if len(evs) != 1 || evs[0].PaymentID != "pay_late" {
		t.Errorf("events: %+v, want only pay_late's", evs)
	}
	wantCharges(t, e, 2) // a lost webhook loses no money
}
