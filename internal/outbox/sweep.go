package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is the part of a pgx pool (or connection) the Sweeper uses.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// SweepConfig configures a Sweeper. Zero fields take the defaults.
type SweepConfig struct {
	// Grace: an intent younger than this is left alone, because the API that
	// recorded it is probably about to put it (default 30 s). Measured on
	// the database's clock, the one clock that stamped created_at.
	Grace time.Duration
	// Limit bounds the intents one Sweep handles (default 100).
	Limit int
	// Logger receives one line per sweep that found work (default slog.Default()).
	Logger *slog.Logger
}

func (c *SweepConfig) setDefaults() error {
	if c.Grace == 0 {
		c.Grace = 30 * time.Second
	}
	if c.Limit == 0 {
		c.Limit = 100
	}
	if c.Grace < 0 || c.Limit < 0 {
		return fmt.Errorf("outbox: sweep grace %s and limit %d must not be negative", c.Grace, c.Limit)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Sweeper re-puts outbox items whose intents were never marked published,
// and marks them. The resolver runs it on its schedule.
type Sweeper struct {
	pub *Publisher
	db  DB
	cfg SweepConfig
}

// NewSweeper returns a Sweeper that reads intents from db and puts them
// through pub.
func NewSweeper(pub *Publisher, db DB, cfg SweepConfig) (*Sweeper, error) {
	if pub == nil || db == nil {
		return nil, errors.New("outbox: NewSweeper needs a Publisher and a DB")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &Sweeper{pub: pub, db: db, cfg: cfg}, nil
}

// SweepResult says what one Sweep did.
type SweepResult struct {
	Found   int // unpublished intents older than the grace period (at most Limit)
	Created int // items that were missing and were put now
	Marked  int // intents marked published
	Failed  int // intents whose put failed: left unpublished for the next sweep
}

// Sweep handles at most Limit intents that are unpublished and older than
// the grace period, oldest first: it puts each one's outbox item
// (conditionally) and then marks every intent whose item is known to exist in
// one UPDATE. It blocks for one query, one DynamoDB call per intent and one
// UPDATE. Intents whose put failed stay unpublished; their errors are joined
// into the returned error, alongside a result that counts what succeeded.
func (s *Sweeper) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	intents, err := s.unpublished(ctx)
	if err != nil {
		return res, err
	}
	res.Found = len(intents)
	done := make([]string, 0, len(intents))
	var errs []error
	for _, in := range intents {
		e, err := EventFromIntent(in)
		if err != nil {
			res.Failed++
			errs = append(errs, err)
			continue
		}
		created, err := s.pub.put(ctx, e)
		if err != nil {
			res.Failed++
			errs = append(errs, err)
			continue
		}
		if created {
			res.Created++
		}
		done = append(done, in.EventID)
	}
	if len(done) > 0 {
		tag, err := s.db.Exec(ctx, `
			UPDATE outbox_intents SET published_at = now()
			WHERE event_id = ANY($1) AND published_at IS NULL`, done)
		if err != nil {
			errs = append(errs, fmt.Errorf("outbox: mark %d intents published: %w", len(done), err))
		} else {
			res.Marked = int(tag.RowsAffected())
		}
	}
	if res.Found > 0 {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "outbox sweep",
			slog.Int("found", res.Found), slog.Int("created", res.Created),
			slog.Int("marked", res.Marked), slog.Int("failed", res.Failed))
	}
	return res, errors.Join(errs...)
}

func (s *Sweeper) unpublished(ctx context.Context) ([]Intent, error) {
	rows, err := s.db.Query(ctx, `
		SELECT event_id, payment_id, merchant_id, payload::text, created_at
		FROM outbox_intents
		WHERE published_at IS NULL AND created_at < now() - make_interval(secs => $1)
		ORDER BY created_at
		LIMIT $2`, s.cfg.Grace.Seconds(), s.cfg.Limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: read unpublished intents: %w", err)
	}
	intents, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Intent, error) {
		var in Intent
		var payload string
		err := r.Scan(&in.EventID, &in.PaymentID, &in.MerchantID, &payload, &in.CreatedAt)
		in.Payload = []byte(payload)
		return in, err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: read unpublished intents: %w", err)
	}
	return intents, nil
}
