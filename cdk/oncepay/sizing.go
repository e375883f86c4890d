package oncepay

import (
	"fmt"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
)

// Function names: lambdas/<name> is the main package, build/<name>/bootstrap
// the binary `make lambdas` builds for it.
const (
	FnAPI      = "api"
	FnRelay    = "relay"
	FnWorker   = "worker"
	FnResolver = "resolver"
	FnWebhook  = "webhook"
	FnMigrate  = "migrate"
	FnTotals   = "totals"
	FnRecount  = "recount"
	FnDevices  = "devices"
	// FnReconcile is the reconciliation against the PSP's records.
	FnReconcile = "reconcile"
)

// Functions lists every function the stack deploys, by name.
var Functions = []string{FnAPI, FnRelay, FnWorker, FnResolver, FnWebhook, FnMigrate, FnTotals, FnRecount, FnDevices, FnReconcile}

// Sizing is one function's timeout and memory.
type Sizing struct {
	Timeout  time.Duration
	MemoryMB float64
}

// Sizings holds every function's numbers, in one place. The two functions
// on a caller's request path (api, webhook) are bound by the payment
// deadline: their timeout is config.Timing.FunctionTimeout() (deadline +
// clock margin, 6 s with the defaults), so a function can never outlive the
// deadline by more than the margin (docs/mechanism.md#design-3).
type Sizings struct {
	API, Webhook, Relay, Worker, Resolver, Migrate, Totals, Recount, Devices, Reconcile Sizing
}

// ResolverRate is how often EventBridge runs the resolver's sweep.
const ResolverRate = time.Minute

// ResolverReservedConcurrency: one sweep at a time. The resolver replays PSP
// calls; two overlapping sweeps would only double the PSP traffic, and a
// burst of replays is what a PSP rate-limits first.
const ResolverReservedConcurrency = 1

// SizingsFor derives the sizings from t (config.Default() for the defaults).
//
// Memory buys CPU on Lambda: 512 MB for the api keeps TLS handshakes and
// JSON work off the deadline; the background functions need less.
func SizingsFor(t config.Timing) Sizings {
	return Sizings{
		API:     Sizing{Timeout: t.FunctionTimeout(), MemoryMB: 512},
		Webhook: Sizing{Timeout: t.FunctionTimeout(), MemoryMB: 256},
		// A relay batch is at most 100 records sent 10 per SendMessageBatch.
		Relay: Sizing{Timeout: 30 * time.Second, MemoryMB: 256},
		// The events queue's visibility timeout is six times this.
		Worker: Sizing{Timeout: eventsource.WorkerTimeout, MemoryMB: 256},
		// A sweep ends before the next tick starts one.
		Resolver: Sizing{Timeout: ResolverRate - 10*time.Second, MemoryMB: 256},
		// Migrations hold an advisory lock; a slow DDL must not time out
		// half-way through a deploy.
		Migrate: Sizing{Timeout: 5 * time.Minute, MemoryMB: 256},
		// A restore's flush rewrites every key of the shard's state, 25 to
		// a BatchWriteItem: a minute covers tens of thousands.
		Totals: Sizing{Timeout: time.Minute, MemoryMB: 256},
		// A recount reads a day's intents of a few merchants and writes a
		// row per key; its queues' visibility timeout is six times this.
		Recount: Sizing{Timeout: time.Minute, MemoryMB: 256},
		// A registration is two SNS calls and one ledger transaction.
		Devices: Sizing{Timeout: 10 * time.Second, MemoryMB: 256},
		// A run reads two days of the PSP's lists page by page and may
		// send refunds, each call up to 10 s: Lambda's maximum, 15 min. A
		// run cut off there is not lost: it checkpoints as it goes and the
		// next invocation (Lambda's async retry, tomorrow's run, an
		// operator's) resumes it. 512 MB: the span's lists are held in
		// memory for the join.
		Reconcile: Sizing{Timeout: 15 * time.Minute, MemoryMB: 512},
	}
}

// timingOrDefault validates t (nil: config.Default()).
func timingOrDefault(t *config.Timing) config.Timing {
	if t == nil {
		return config.Default()
	}
	if err := t.Validate(); err != nil {
		panic(fmt.Errorf("oncepay: %w", err))
	}
	return *t
}

// timingEnv is the environment that gives a handler the same Timing the
// stack derived its timeouts from (cdk/oncepay/config.FromEnv reads it).
func timingEnv(t config.Timing) map[string]string {
	return map[string]string{
		"ONCEPAY_DEADLINE":       t.Deadline.String(),
		"ONCEPAY_CLIENT_TIMEOUT": t.ClientTimeout.String(),
		"ONCEPAY_PRESTAMP_WAIT":  t.PreStampWait.String(),
		"ONCEPAY_CLOCK_MARGIN":   t.Margin.String(),
		"ONCEPAY_KEY_WINDOW":     t.KeyWindow.String(),
	}
}
