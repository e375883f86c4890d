package resolver

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/refund"
)

// Config is the resolver's configuration. Zero fields take the defaults of
// DefaultConfig (New fills them).
type Config struct {
	// PSPRate caps the resolver's own PSP calls, in calls per second
	// (ONCEPAY_RESOLVER_PSP_RATE, default 10). The PSP's rate limit is shared
	// with live charges (docs/mechanism.md#seed-part-12; Stripe: 100/s per
	// account by default): replays after an outage must never starve new
	// payments. The cap is per process; the stack runs the resolver with a
	// reserved concurrency of 1, so it is the cap.
	PSPRate float64
	// Limit bounds the payments one run takes (ONCEPAY_RESOLVER_LIMIT,
	// default 300: 30 s of calls at the default cap, inside the function's
	// 50 s timeout): a run's work is bounded; the next run takes the rest.
	Limit int
	// RefundLimit bounds the refunds one run retries
	// (ONCEPAY_RESOLVER_REFUND_LIMIT, default 50). Refunds run beside the
	// payments and share the PSP rate cap with them.
	RefundLimit int
	// Concurrency is how many payments are worked on at once, and as many
	// refunds beside them (ONCEPAY_RESOLVER_CONCURRENCY, default 8). The
	// rate cap, not this, bounds the PSP calls. 1 means one thing at a
	// time: the phases too run one after the other (for replayable test
	// schedules), so a payments backlog can again hold the others back.
	Concurrency int
	// Lease is how long a run holds the rows it took
	// (ONCEPAY_RESOLVER_LEASE, default 5 min). Another run skips them until
	// then; a run that crashed gives them up when it lapses.
	Lease time.Duration
	// KeyWindow is the PSP's idempotency key window
	// (config.Timing.PSPKeyWindow, which the API's takeovers obey too:
	// ONCEPAY_PSP_KEY_WINDOW, default 24 h), counted from the row's
	// created_at: inside it a charge is replayed with its derived key, after
	// it the payment is looked up by our reference. A replay is sent only
	// while it lands CallTimeout + Margin before the window closes, checked
	// at the call (after the rate cap's wait), not when the row was taken.
	KeyWindow time.Duration
	// Margin is the clock margin (ONCEPAY_CLOCK_MARGIN, default 1 s): a
	// PENDING row is the resolver's once its deadline + Margin has passed.
	Margin time.Duration
	// CallTimeout bounds one PSP call (ONCEPAY_RESOLVER_CALL_TIMEOUT,
	// default 10 s).
	CallTimeout time.Duration
	// Horizon: a payment still open this long after its deadline is money
	// in doubt that replays have not settled; each run reports their count
	// as the gauge UnknownOverHorizon, which the stack alarms on
	// (ONCEPAY_RESOLVER_HORIZON, default 15 min).
	Horizon time.Duration
	// Refund is the open refunds' retry schedule and alert budget
	// (ONCEPAY_REFUND_RETRY_BASE, ONCEPAY_REFUND_RETRY_MAX,
	// ONCEPAY_REFUND_RETRY_BUDGET; default 30 s doubling to 1 h, budget 8).
	Refund refund.Backoff
	// CheckStandby makes a run first ask whether the ledger is read-only (a
	// standby Region before its promotion, docs/regions.md) and do nothing
	// if so. Across Regions only (ONCEPAY_STANDBY_CHECK).
	CheckStandby bool
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		PSPRate:     10,
		Limit:       300,
		RefundLimit: 50,
		Concurrency: 8,
		Lease:       5 * time.Minute,
		KeyWindow:   config.Default().PSPKeyWindow,
		Margin:      config.Default().Margin,
		CallTimeout: 10 * time.Second,
		Horizon:     15 * time.Minute,
		Refund:      refund.DefaultBackoff(),
	}
}

func (c *Config) fill() {
	d := DefaultConfig()
	if c.PSPRate == 0 {
		c.PSPRate = d.PSPRate
	}
	if c.Limit == 0 {
		c.Limit = d.Limit
	}
	if c.RefundLimit == 0 {
		c.RefundLimit = d.RefundLimit
	}
	if c.Concurrency == 0 {
		c.Concurrency = d.Concurrency
	}
	if c.Lease == 0 {
		c.Lease = d.Lease
	}
	if c.KeyWindow == 0 {
		c.KeyWindow = d.KeyWindow
	}
	if c.Margin == 0 {
		c.Margin = d.Margin
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = d.CallTimeout
	}
	if c.Horizon == 0 {
		c.Horizon = d.Horizon
	}
	if c.Refund == (refund.Backoff{}) {
		c.Refund = d.Refund
	}
}

// Validate checks the values, and that a lease outlasts the work a run can
// take on: every taken payment or refund needs up to two PSP calls, and
// both phases draw on the one cap at once.
func (c Config) Validate() error {
	if c.PSPRate <= 0 || c.Limit <= 0 || c.RefundLimit < 0 || c.Concurrency <= 0 || c.Lease <= 0 ||
		c.KeyWindow <= c.Margin || c.Margin < 0 || c.CallTimeout <= 0 || c.Horizon <= 0 {
		return fmt.Errorf("resolver: invalid config %+v", c)
	}
	if err := c.Refund.Validate(); err != nil {
		return err
	}
	rows := c.Limit + c.RefundLimit
	work := time.Duration(float64(2*rows)/(c.PSPRate*headroom)*float64(time.Second)) + c.CallTimeout
	if c.Lease < work {
		return fmt.Errorf("resolver: lease %s is shorter than a run's work (%d rows at %.1f calls/s: %s)",
			c.Lease, rows, c.PSPRate, work)
	}
	return nil
}

// ConfigFromEnv overlays the ONCEPAY_* variables named on Config's fields
// on the defaults, the clock margin from config.FromEnv, and validates.
func ConfigFromEnv() (Config, error) {
	c := DefaultConfig()
	timing, err := config.FromEnv()
	if err != nil {
		return Config{}, err
	}
	c.Margin, c.KeyWindow = timing.Margin, timing.PSPKeyWindow
	c.CheckStandby = os.Getenv(stackenv.StandbyCheck) == "true"
	for name, d := range map[string]*time.Duration{
		"ONCEPAY_RESOLVER_LEASE":        &c.Lease,
		"ONCEPAY_RESOLVER_CALL_TIMEOUT": &c.CallTimeout,
		"ONCEPAY_RESOLVER_HORIZON":      &c.Horizon,
		"ONCEPAY_REFUND_RETRY_BASE":     &c.Refund.Base,
		"ONCEPAY_REFUND_RETRY_MAX":      &c.Refund.Max,
	} {
		if v := os.Getenv(name); v != "" {
			if *d, err = time.ParseDuration(v); err != nil {
				return Config{}, fmt.Errorf("resolver: %s: %w", name, err)
			}
		}
	}
	for name, n := range map[string]*int{
		"ONCEPAY_RESOLVER_LIMIT":        &c.Limit,
		"ONCEPAY_RESOLVER_REFUND_LIMIT": &c.RefundLimit,
		"ONCEPAY_RESOLVER_CONCURRENCY":  &c.Concurrency,
		"ONCEPAY_REFUND_RETRY_BUDGET":   &c.Refund.Budget,
	} {
		if v := os.Getenv(name); v != "" {
			if *n, err = strconv.Atoi(v); err != nil {
				return Config{}, fmt.Errorf("resolver: %s: %w", name, err)
			}
		}
	}
	if v := os.Getenv("ONCEPAY_RESOLVER_PSP_RATE"); v != "" {
		if c.PSPRate, err = strconv.ParseFloat(v, 64); err != nil {
			return Config{}, fmt.Errorf("resolver: ONCEPAY_RESOLVER_PSP_RATE: %w", err)
		}
	}
	return c, c.Validate()
}
