package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncepay/oncepay/internal/metrics"
)

// DB is the part of a pgx pool (or connection) the Sweeper uses.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Metrics the Sweeper emits.
const (
	// MetricRedriven counts the re-drives of one sweep: events not consumed
	// a grace period after their commit. On a healthy path it stays 0.
	MetricRedriven = "OutboxRedriven"
	// MetricRedriveFailed counts re-drives whose UpdateItem failed.
	MetricRedriveFailed = "OutboxRedriveFailed"
)

// SweepConfig configures a Sweeper. Zero fields take the defaults.
type SweepConfig struct {
	// Grace: an intent younger than this is left alone, because the API that
	// recorded it is probably about to put it and the relay and the worker
	// about to deliver it (default 30 s). Measured on the database's clock,
	// the one clock that stamped created_at.
	Grace time.Duration
	// RedriveAfter is the wait after an intent's first re-drive before the
	// next one (default 5 min: SQS FIFO drops a re-send with the same dedup
	// id inside its 5-minute window anyway). It doubles with each re-drive,
	// up to RedriveMax (default 1 h), so a long consumer outage costs a few
	// stream records per event, not one a minute.
	RedriveAfter time.Duration
	RedriveMax   time.Duration
	// Limit bounds the intents one Sweep re-drives (default 100); MarkLimit
	// is the batch it marks published in (default 10 x Limit), batch after
	// batch until one comes back short.
	Limit     int
	MarkLimit int
	// Logger receives one line per re-drive and one per sweep that found
	// work (default slog.Default()).
	Logger *slog.Logger
	// Metrics receives MetricRedriven and MetricRedriveFailed (default: none).
	Metrics *metrics.Emitter
}

func (c *SweepConfig) setDefaults() error {
	if c.Grace == 0 {
		c.Grace = 30 * time.Second
	}
	if c.RedriveAfter == 0 {
		c.RedriveAfter = 5 * time.Minute
	}
	if c.RedriveMax == 0 {
		c.RedriveMax = time.Hour
	}
	if c.Limit == 0 {
		c.Limit = 100
	}
	if c.MarkLimit == 0 {
		c.MarkLimit = 10 * c.Limit
	}
	if c.Grace < 0 || c.RedriveAfter < 0 || c.RedriveMax < c.RedriveAfter || c.Limit < 0 || c.MarkLimit < 0 {
		return fmt.Errorf("outbox: sweep grace %s, redrive after %s (max %s) and limits %d, %d must not be negative, nor the max below the first wait",
			c.Grace, c.RedriveAfter, c.RedriveMax, c.Limit, c.MarkLimit)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Sweeper marks the intents whose events the consumer has processed, and
// re-drives the others once they are older than the grace period. The
// resolver runs it on its schedule.
type Sweeper struct {
	pub *Publisher
	db  DB
	cfg SweepConfig
}

// NewSweeper returns a Sweeper that reads intents (and the consumer's
// inbox) from db and re-drives them through pub.
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
	Marked   int `json:"marked"`   // intents marked published: the consumer's inbox holds their events
	Found    int `json:"found"`    // intents due for a re-drive (at most Limit)
	Redriven int `json:"redriven"` // re-drives written: a new stream record each
	Created  int `json:"created"`  // of those, items that were missing (the API's put was lost, or TTL removed it)
	Failed   int `json:"failed"`   // re-drives that failed: due again at the next sweep
}

// Sweep marks, in UPDATEs of MarkLimit, every unpublished intent whose
// event id the consumer's inbox holds, then re-drives at most Limit intents that are
// older than the grace period, not consumed and not re-driven too recently,
// oldest first, and records the re-drives in one UPDATE. It blocks for that
// UPDATE, one query, one DynamoDB call per re-drive and the second UPDATE.
// Failed re-drives are left due (taken after intents that failed fewer
// times); their errors are joined into the returned error, alongside a
// result that counts what succeeded.
func (s *Sweeper) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	var errs []error
	// Published means consumed. Any age: a consumed intent needs nothing
	// more. Batches of MarkLimit until one comes back short, so marking keeps
	// up with any payment rate (one batch a run capped it at MarkLimit a
	// minute, and the unpublished set the re-drive scan reads grew without
	// bound); ctx's deadline bounds the loop.
	for ctx.Err() == nil {
		tag, err := s.db.Exec(ctx, `
			UPDATE outbox_intents o SET published_at = now()
			WHERE o.event_id IN (
				SELECT i.event_id FROM outbox_intents i JOIN processed p ON p.event_id = i.event_id
				WHERE i.published_at IS NULL
				ORDER BY i.created_at
				LIMIT $1)`, s.cfg.MarkLimit)
		if err != nil {
			errs = append(errs, fmt.Errorf("outbox: mark consumed intents published: %w", err))
			break
		}
		n := int(tag.RowsAffected())
		res.Marked += n
		if n < s.cfg.MarkLimit {
			break
		}
	}

	due, err := s.due(ctx)
	if err != nil {
		return res, errors.Join(append(errs, err)...)
	}
	res.Found = len(due)
	done := make([]string, 0, len(due))
	var failed []string
	for _, in := range due {
		e, err := EventFromIntent(in.Intent)
		if err == nil {
			var created bool
			if created, err = s.pub.Redrive(ctx, e); err == nil {
				if created {
					res.Created++
				}
				done = append(done, in.EventID)
				s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "outbox: event not consumed after the grace period; re-driven",
					slog.String("event_id", in.EventID), slog.String("payment_id", in.PaymentID),
					slog.Int("redrive", in.Redrives+1), slog.Bool("item_created", created),
					slog.Duration("age", in.Age))
				continue
			}
		}
		res.Failed++
		failed = append(failed, in.EventID)
		errs = append(errs, err)
		s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "outbox: re-drive failed; due again at the next sweep",
			slog.String("event_id", in.EventID), slog.String("payment_id", in.PaymentID), slog.String("error", err.Error()))
	}
	if len(done) > 0 {
		_, err := s.db.Exec(ctx, `
			UPDATE outbox_intents SET redriven_at = now(), redrives = redrives + 1
			WHERE event_id = ANY($1)`, done)
		if err != nil {
			// The re-drives happened; only their throttle is lost, so the
			// next sweep re-drives them once more. Harmless.
			errs = append(errs, fmt.Errorf("outbox: record %d re-drives: %w", len(done), err))
		}
		res.Redriven = len(done)
	}
	if len(failed) > 0 {
		// Due again at the next sweep, behind the intents that have not
		// failed as often: a re-drive that always fails never starves them.
		if _, err := s.db.Exec(ctx, `
			UPDATE outbox_intents SET redrive_failures = redrive_failures + 1
			WHERE event_id = ANY($1)`, failed); err != nil {
			errs = append(errs, fmt.Errorf("outbox: count %d failed re-drives: %w", len(failed), err))
		}
	}
	s.cfg.Metrics.Count(MetricRedriven, res.Redriven)
	s.cfg.Metrics.Count(MetricRedriveFailed, res.Failed)
	if res.Marked > 0 || res.Found > 0 {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "outbox sweep",
			slog.Int("marked", res.Marked), slog.Int("found", res.Found), slog.Int("redriven", res.Redriven),
			slog.Int("created", res.Created), slog.Int("failed", res.Failed))
	}
	return res, errors.Join(errs...)
}

// dueIntent is an intent due for a re-drive.
type dueIntent struct {
	Intent
	Redrives int
	Age      time.Duration
}

// due reads the intents to re-drive: unpublished, older than the grace, not
// in the consumer's inbox, and past their back-off (RedriveAfter doubled per
// earlier re-drive, at most RedriveMax).
func (s *Sweeper) due(ctx context.Context) ([]dueIntent, error) {
	rows, err := s.db.Query(ctx, `
		SELECT i.event_id, i.payment_id, i.merchant_id, i.payload::text, i.created_at, i.redrives,
		       extract(epoch FROM now() - i.created_at)::float8
		FROM outbox_intents i
		WHERE i.published_at IS NULL
		  AND i.created_at < now() - make_interval(secs => $1)
		  AND NOT EXISTS (SELECT 1 FROM processed p WHERE p.event_id = i.event_id)
		  AND (i.redriven_at IS NULL OR i.redriven_at <= now() - make_interval(secs =>
		        least($2 * power(2, greatest(i.redrives - 1, 0)), $3)))
		ORDER BY i.redrive_failures, i.created_at
		LIMIT $4`, s.cfg.Grace.Seconds(), s.cfg.RedriveAfter.Seconds(), s.cfg.RedriveMax.Seconds(), s.cfg.Limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: read intents due for a re-drive: %w", err)
	}
	due, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (dueIntent, error) {
		var in dueIntent
		var payload string
		var age float64
		err := r.Scan(&in.EventID, &in.PaymentID, &in.MerchantID, &payload, &in.CreatedAt, &in.Redrives, &age)
		in.Payload = []byte(payload)
		in.Age = time.Duration(age * float64(time.Second))
		return in, err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: read intents due for a re-drive: %w", err)
	}
	return due, nil
}
