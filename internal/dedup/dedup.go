// Package dedup drops logical duplicates: the same message raised by
// different requests for the same reason (docs/mechanism.md#seed-part-7,
// "Logical duplicates and windows"), such as "your card was declined,
// update your payment method" raised by each decline of the same card.
// They are not repeats of one request, so no inbox catches them: the
// producer names what makes two of them the same (a fingerprint of the
// recipient, the template and a business key) and a shared cache keeps
// that name for a window, holding the id of the event that raised it:
//
//	dedup:<fingerprint> = <event id>, EX <window>, set only if absent
//	  absent, or holding this event's id: the first, it goes out
//	  holding another event's id: a duplicate, dropped
//
// Then, and only for a message that was not a duplicate, the recipient's
// cap for the template is counted (each event once, expiring with its
// period): a dropped duplicate never uses up the allowance. Past the cap
// the message is dropped too, and its fingerprint released, so the next
// decline after the cap's period is not taken for its duplicate.
//
// Asking again for the same event gets the same answer: a worker that died
// between the gate and the send, or the sweep finishing its row, asks
// again and is let through, not dropped as its own duplicate. The steps
// run as one script on the server: atomic, one round trip.
//
// A message let through whose send then definitely did not go out (the
// provider refused it, no address) gives its fingerprint back (Release):
// kept, it would drop the card's next decline for the rest of the window
// while the buyer got nothing. Only the owner's own hold is released; a
// send that may have gone out keeps it.
//
// The cache is Valkey (ElastiCache; locally a Redis-protocol server), run
// with eviction off: an evicted key turns into a silent duplicate, so a full
// cache refuses writes instead, and an alarm watches its memory. When the
// cache cannot be reached, the gate fails open: the message goes out (a
// duplicate reminder is better than a lost one), counted in DedupFailOpen.
package dedup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/oncepay/oncepay/internal/metrics"
)

// Cache is what the gate asks of the cache (Redis, over any
// Redis-protocol server).
type Cache interface {
	// Admit decides one Admission atomically and returns Send, Duplicate
	// or Capped.
	Admit(ctx context.Context, a Admission) (string, error)
	// Release deletes key only while it holds owner, and reports whether
	// it did.
	Release(ctx context.Context, key, owner string) (bool, error)
}

// Admission is one question to the cache: may Owner's message, named by
// Key, go out? Cap 0 counts nothing.
type Admission struct {
	Key, CapKey, Owner string
	Window, Period     time.Duration
	Cap                int
}

// Config configures a Gate. Zero fields take the defaults.
type Config struct {
	// Window is how long a message's fingerprint is kept (default 24 h).
	Window time.Duration
	// Cap is how many messages of one template a recipient may get per
	// CapPeriod (default 3 a day); 0 after the defaults means none.
	Cap       int
	CapPeriod time.Duration
	// Timeout bounds the cache call (default 500 ms, room for a cold
	// environment's TLS dial): past it the gate fails open rather than
	// hold the worker.
	Timeout time.Duration
	Logger  *slog.Logger
	Metrics *metrics.Emitter
}

// Gate decides whether a logical message goes out. It is safe for
// concurrent use.
type Gate struct {
	cache Cache
	cfg   Config
}

// New returns a Gate over cache.
func New(cache Cache, cfg Config) (*Gate, error) {
	if cache == nil {
		return nil, errors.New("dedup: New needs a cache")
	}
	if cfg.Window == 0 {
		cfg.Window = 24 * time.Hour
	}
	if cfg.Cap == 0 {
		cfg.Cap = 3
	}
	if cfg.CapPeriod == 0 {
		cfg.CapPeriod = 24 * time.Hour
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 500 * time.Millisecond
	}
	if cfg.Window < time.Second || cfg.CapPeriod < time.Second || cfg.Cap < 0 || cfg.Timeout < 0 {
		return nil, fmt.Errorf("dedup: window %s, cap %d per %s, timeout %s", cfg.Window, cfg.Cap, cfg.CapPeriod, cfg.Timeout)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Gate{cache: cache, cfg: cfg}, nil
}

// Message is what names a logical message: who gets it, what it says, and
// the business fact that makes two of them the same (the card, say). None
// of it is stored as given: the cache holds its fingerprint.
type Message struct {
	Recipient string // an opaque id (the caller), never an address
	Template  string
	Key       string
}

// Fingerprint is the cache's name for m: a hash, so neither the recipient
// nor the business key is readable in the cache.
func (m Message) Fingerprint() string {
	h := sha256.New()
	for _, part := range []string{"oncepay/dedup/v1", m.Recipient, m.Template, m.Key} {
		fmt.Fprintf(h, "%d:%s", len(part), part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// The gate's verdicts.
const (
	Send      = "send"      // the first in its window, within the cap
	Duplicate = "duplicate" // another with its fingerprint went out in the window
	Capped    = "capped"    // the recipient's allowance for the template is spent
	FailOpen  = "fail-open" // the cache could not be reached: sent anyway
)

// Accept decides m, raised by the event owner (its id): Send (and
// FailOpen) mean it goes out. The same owner asking again gets the same
// answer. It blocks for at most one cache call.
func (g *Gate) Accept(ctx context.Context, m Message, owner string, now time.Time) string {
	log := g.cfg.Logger.With("scope", "dedup", "template", m.Template, "event_id", owner)
	fp := m.Fingerprint()
	period := now.UTC().Truncate(g.cfg.CapPeriod).Unix()
	cctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	verdict, err := g.cache.Admit(cctx, Admission{
		Key:    "dedup:" + fp,
		CapKey: "cap:" + Message{Recipient: m.Recipient, Template: m.Template}.Fingerprint() + ":" + fmt.Sprint(period),
		Owner:  owner, Window: g.cfg.Window, Period: g.cfg.CapPeriod, Cap: g.cfg.Cap,
	})
	switch {
	case err != nil:
		g.cfg.Metrics.Count("DedupFailOpen", 1)
		log.Warn("the dedup cache cannot be reached: the message goes out (fail open)", "err", err)
		return FailOpen
	case verdict == Duplicate:
		g.cfg.Metrics.Count("DedupDropped", 1)
		log.Info("a logical duplicate within the window: dropped", "fingerprint", fp[:12])
	case verdict == Capped:
		g.cfg.Metrics.Count("DedupCapped", 1)
		log.Info("the recipient's cap for the template is spent: dropped", "cap", g.cfg.Cap)
	case verdict != Send:
		g.cfg.Metrics.Count("DedupFailOpen", 1)
		log.Warn("the dedup cache answered what the gate does not know: the message goes out (fail open)", "verdict", verdict)
		return FailOpen
	}
	return verdict
}

// Release gives back the fingerprint owner holds for m: its message was let
// through and did not go out, so the next message raised for the same
// reason is not dropped as its duplicate. A fingerprint held by another
// owner, or already gone, is left alone. The cap's count is kept: the
// owner asking again (a retry of the same row) is not counted twice. It
// blocks for at most one cache call; an error is logged and counted
// (DedupReleaseFailed) and returned: the fingerprint then lapses with its
// window.
func (g *Gate) Release(ctx context.Context, m Message, owner string) error {
	cctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	released, err := g.cache.Release(cctx, "dedup:"+m.Fingerprint(), owner)
	if err != nil {
		g.cfg.Metrics.Count("DedupReleaseFailed", 1)
		g.cfg.Logger.Warn("the dedup cache did not release a fingerprint: it lapses with its window",
			"scope", "dedup", "template", m.Template, "event_id", owner, "err", err)
		return fmt.Errorf("dedup: release %s: %w", owner, err)
	}
	if released {
		g.cfg.Metrics.Count("DedupReleased", 1)
	}
	return nil
}

// Goes reports whether a verdict sends the message.
func Goes(verdict string) bool { return verdict == Send || verdict == FailOpen }
