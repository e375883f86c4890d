// Package recount is the stream job's batch recount: what the job could
// not count (a copy later than its horizon, a batch its mapping gave up on)
// is counted again from the ledger once its day is over
// (docs/stream-job.md#recount, the source document's "sent to a batch
// recount").
//
// The truth is the ledger's outbox intents: the very events the outbox
// stream carried, written in the transactions that made each payment final.
// A day's events all exist once the day is over and the last transaction
// that could have stamped an event with it has committed (Config.Settle
// after midnight UTC): an event's time is its settling function's clock,
// never a time a client sent. From then on the day's total is final, and
// the recount writes it as the key's recount row, which supersedes the
// stream's partials (totals.RecountShard). Recounting is absolute, so a
// message handled twice writes the same row twice.
package recount

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/totals"
)

// DefaultSettle is how long after a day's end an event of that day may
// still commit: Lambda's longest run (15 min), so the settling function
// that read its clock before midnight has ended, plus a margin for the
// offset between its clock and the database's.
const DefaultSettle = 15*time.Minute + time.Minute

// Ledger is where the truth is read (ledger.Store).
type Ledger interface {
	IntentsCreated(ctx context.Context, from, to time.Time, merchants ...string) ([]event.Event, error)
}

// Sink is where recounted totals go (totals.Table).
type Sink interface {
	PutRecount(ctx context.Context, k totals.Key, total int64, at time.Time) error
	// PutPending says a key waits for its recount until a time: a reader
	// must not take the partials for the day's total meanwhile.
	PutPending(ctx context.Context, k totals.Key, until time.Time) error
}

// Config configures a Recounter. Zero fields take the defaults.
type Config struct {
	Version totals.Version // required: what the job counts
	Ledger  Ledger         // required
	Sink    Sink           // required
	// Settle: see DefaultSettle.
	Settle time.Duration
	// Horizon is the job's acceptance horizon (default
	// totals.DefaultHorizon): a batch's events are no older than its first
	// record's arrival minus the horizon, or the job would have found them
	// late.
	Horizon time.Duration
	Now     func() time.Time
	Logger  *slog.Logger
	Metrics *metrics.Emitter
}

// Recounter recounts merchants' days from the ledger.
type Recounter struct{ cfg Config }

// New checks cfg and returns a Recounter.
func New(cfg Config) (*Recounter, error) {
	if cfg.Version != totals.V1 && cfg.Version != totals.V2 {
		return nil, fmt.Errorf("recount: version %d is not 1 or 2", cfg.Version)
	}
	if cfg.Ledger == nil || cfg.Sink == nil {
		return nil, errors.New("recount: Config needs a Ledger and a Sink")
	}
	if cfg.Settle == 0 {
		cfg.Settle = DefaultSettle
	}
	if cfg.Horizon == 0 {
		cfg.Horizon = totals.DefaultHorizon
	}
	if cfg.Settle < 0 || cfg.Horizon < 0 {
		return nil, errors.New("recount: Settle and Horizon must not be negative")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Recounter{cfg: cfg}, nil
}

const dayLayout = "2006-01-02"

// ClosesAt is when k's day is over for the recount: its end (UTC) plus
// Settle.
func (r *Recounter) ClosesAt(k totals.Key) (time.Time, error) {
	day, err := time.Parse(dayLayout, k.Day)
	if err != nil {
		return time.Time{}, fmt.Errorf("recount: key %s: %w", k, err)
	}
	return day.Add(24 * time.Hour).Add(r.cfg.Settle), nil
}

// Now is the recounter's clock.
func (r *Recounter) Now() time.Time { return r.cfg.Now() }

// Keys recounts every key whose day is over, marks each of the others
// pending until its day closes, and returns those others with the first
// close (none and zero when every key was recounted). A key of a day with
// no counted event is recounted to 0, which takes back what a lost run
// wrote for it.
func (r *Recounter) Keys(ctx context.Context, keys []totals.Key) (open []totals.Key, wait time.Time, err error) {
	now := r.cfg.Now()
	byDay := map[string][]totals.Key{}
	for _, k := range keys {
		closes, err := r.ClosesAt(k)
		if err != nil {
			return nil, time.Time{}, err
		}
		if now.Before(closes) {
			if slices.Contains(open, k) {
				continue
			}
			if err := r.cfg.Sink.PutPending(ctx, k, closes); err != nil {
				return nil, time.Time{}, err
			}
			open = append(open, k)
			if wait.IsZero() || closes.Before(wait) {
				wait = closes
			}
			continue
		}
		if !slices.Contains(byDay[k.Day], k) {
			byDay[k.Day] = append(byDay[k.Day], k)
		}
	}
	for day, ks := range byDay {
		if err := r.day(ctx, day, ks, now); err != nil {
			return nil, time.Time{}, err
		}
	}
	return open, wait, nil
}

// day recounts ks, all of one day, with one read of the ledger.
func (r *Recounter) day(ctx context.Context, day string, ks []totals.Key, now time.Time) error {
	start, _ := time.Parse(dayLayout, day)
	var merchants []string
	want := map[totals.Key]int64{}
	for _, k := range ks {
		want[k] = 0
		if !slices.Contains(merchants, k.Merchant) {
			merchants = append(merchants, k.Merchant)
		}
	}
	evs, err := r.cfg.Ledger.IntentsCreated(ctx, start.Add(-r.cfg.Settle), start.Add(24*time.Hour).Add(r.cfg.Settle), merchants...)
	if err != nil {
		return fmt.Errorf("recount: read %s: %w", day, err)
	}
	for _, e := range evs {
		k := keyOf(e)
		if _, asked := want[k]; !asked {
			continue
		}
		if d, counts := totals.Delta(r.cfg.Version, e); counts {
			want[k] += d
		}
	}
	for _, k := range ks {
		if err := r.cfg.Sink.PutRecount(ctx, k, want[k], now); err != nil {
			return err
		}
		r.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "recounted", slog.String("scope", "recount"),
			slog.String("merchant_id", k.Merchant), slog.String("day", k.Day), slog.String("currency", k.Currency), slog.Int64("total", want[k]))
	}
	r.cfg.Metrics.Count("TotalsRecounted", len(ks))
	return nil
}

// Range returns every key with an event that occurred from from to to, as
// the ledger has them.
func (r *Recounter) Range(ctx context.Context, from, to time.Time) ([]totals.Key, error) {
	evs, err := r.cfg.Ledger.IntentsCreated(ctx, from.Add(-r.cfg.Settle), to.Add(r.cfg.Settle))
	if err != nil {
		return nil, fmt.Errorf("recount: read %s to %s: %w", from, to, err)
	}
	var keys []totals.Key
	for _, e := range evs {
		if e.OccurredAt.Before(from) || e.OccurredAt.After(to) {
			continue
		}
		if k := keyOf(e); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// BatchRange is the event times a stream batch whose records arrived from
// first to last may have counted: a batch's events occurred before they
// arrived, and a counted one no more than the horizon before (the job
// finds older ones late). last is widened to the minute, the coarsest a
// stream's arrival time is rounded to here (DynamoDB Local).
func (r *Recounter) BatchRange(first, last time.Time) (from, to time.Time) {
	return first.Add(-r.cfg.Horizon), last.Add(time.Minute)
}

// keyOf is the key the job counts e under.
func keyOf(e event.Event) totals.Key {
	return totals.Key{Merchant: e.MerchantID, Day: e.OccurredAt.UTC().Format(dayLayout), Currency: e.Currency}
}
