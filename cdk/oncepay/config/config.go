// Package config holds the time rules of docs/mechanism.md#design-3 and reads
// them from the environment. The defaults are the source document's: a 5 s
// server deadline counted from the load balancer's arrival stamp, a 10 s
// client timeout, a 1 s clock margin, and a key window of one hour.
package config

import (
	"fmt"
	"os"
	"time"
)

// Timing is every duration the idempotency rules depend on.
type Timing struct {
	// Deadline: a request older than this on arrival is refused, and a
	// running one starts no new side effect once it is reached.
	Deadline time.Duration
	// ClientTimeout is how long the client waits before it asks "did it go
	// through?" (the right-hand side of Formula 2,
	// docs/mechanism.md#seed-part-4).
	ClientTimeout time.Duration
	// PreStampWait bounds the wait before the arrival stamp is taken: with
	// the stamp at the load balancer, only the network trip.
	PreStampWait time.Duration
	// Margin covers the worst offset between the stamping clock and ours,
	// and between two servers' clocks for a takeover.
	Margin time.Duration
	// KeyWindow is how long a key record answers repeats (an accelerator;
	// the ledger's unique key is the durable guard).
	KeyWindow time.Duration
	// PSPKeyWindow is how long the PSP keeps an Idempotency-Key and its
	// saved result (Stripe: at least 24 h). Inside it a charge is replayed
	// with its derived key; after it a replay would be a new charge, so the
	// payment is looked up by our reference instead. The API and the
	// resolver both read it from here (ONCEPAY_PSP_KEY_WINDOW).
	PSPKeyWindow time.Duration
}

// Default returns the story's values.
func Default() Timing {
	return Timing{
		Deadline:      5 * time.Second,
		ClientTimeout: 10 * time.Second,
		PreStampWait:  500 * time.Millisecond,
		Margin:        1 * time.Second,
		KeyWindow:     time.Hour,
		PSPKeyWindow:  24 * time.Hour,
	}
}

// FunctionTimeout is the Lambda timeout for a function bound by the deadline:
// it cannot outlive the deadline by more than the margin.
func (t Timing) FunctionTimeout() time.Duration { return t.Deadline + t.Margin }

// Validate checks Formula 2 (docs/mechanism.md#seed-part-4) — server deadline
// + the wait before the stamp < client timeout — with the clock margin added
// to the left side, because the server reads the stamp on its own clock; and
// that the key window outlasts an in-progress lease.
func (t Timing) Validate() error {
	if t.Deadline <= 0 || t.ClientTimeout <= 0 || t.Margin < 0 || t.PreStampWait < 0 || t.KeyWindow <= 0 {
		return fmt.Errorf("config: every duration must be positive: %+v", t)
	}
	if lhs := t.Deadline + t.Margin + t.PreStampWait; lhs >= t.ClientTimeout {
		return fmt.Errorf("config: deadline %s + margin %s + pre-stamp wait %s = %s must be < client timeout %s (docs/mechanism.md#seed-part-4)",
			t.Deadline, t.Margin, t.PreStampWait, lhs, t.ClientTimeout)
	}
	if t.KeyWindow <= t.FunctionTimeout() {
		return fmt.Errorf("config: key window %s must outlast the function timeout %s", t.KeyWindow, t.FunctionTimeout())
	}
	if t.PSPKeyWindow <= t.FunctionTimeout()+t.Deadline+t.Margin {
		return fmt.Errorf("config: PSP key window %s is too short to replay a charge in", t.PSPKeyWindow)
	}
	return nil
}

// WithDefaults fills the durations left zero with Default's: a Timing
// written as a literal before a field existed keeps working.
func (t Timing) WithDefaults() Timing {
	d := Default()
	if t == (Timing{}) {
		return d
	}
	if t.PSPKeyWindow == 0 {
		t.PSPKeyWindow = d.PSPKeyWindow
	}
	return t
}

// PSPKeyLive reports whether a charge key first sent by a request whose
// deadline was firstDeadline may still be replayed by a call that ends by
// callDeadline. Both are stamps of the API's own clock (a payments row's
// deadline_at is the first request's arrival + Deadline, and its PSP call
// started after that arrival). The replay must reach the PSP before the key
// can have expired there, with the clock margin to spare.
func (t Timing) PSPKeyLive(firstDeadline, callDeadline time.Time) bool {
	firstArrival := firstDeadline.Add(-t.Deadline)
	return callDeadline.Add(t.Margin).Before(firstArrival.Add(t.PSPKeyWindow))
}

// FromEnv overlays ONCEPAY_DEADLINE, ONCEPAY_CLIENT_TIMEOUT, ONCEPAY_PRESTAMP_WAIT,
// ONCEPAY_CLOCK_MARGIN, ONCEPAY_KEY_WINDOW and ONCEPAY_PSP_KEY_WINDOW (Go durations) on the defaults
// and validates the result.
func FromEnv() (Timing, error) {
	t := Default()
	for name, d := range map[string]*time.Duration{
		"ONCEPAY_DEADLINE":       &t.Deadline,
		"ONCEPAY_CLIENT_TIMEOUT": &t.ClientTimeout,
		"ONCEPAY_PRESTAMP_WAIT":  &t.PreStampWait,
		"ONCEPAY_CLOCK_MARGIN":   &t.Margin,
		"ONCEPAY_KEY_WINDOW":     &t.KeyWindow,
		"ONCEPAY_PSP_KEY_WINDOW": &t.PSPKeyWindow,
	} {
		v := os.Getenv(name)
		if v == "" {
			continue
		}
		parsed, err := time.ParseDuration(v)
		if err != nil {
			return Timing{}, fmt.Errorf("config: %s: %w", name, err)
		}
		*d = parsed
	}
	return t, t.Validate()
}
