package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncepay/oncepay/internal/dedup"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/notify"
)

// SweepDB is the part of a pgx pool the NotifSweeper uses.
type SweepDB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// SweepConfig configures a NotifSweeper. Zero fields take the defaults.
type SweepConfig struct {
	// Channel is the notif rows' channel (default "push").
	Channel string
	// Message is the channel's message type, for its policy on an unknown
	// send; "" is each event's own (Channel.Message).
	Message notify.MessageType
	// Repeats: a second send of this channel's message reaches the person
	// twice (an email; a push lands on top of the first by its replace id).
	// Such a send is recorded as under way before it is made; finding it
	// so, a run knows an earlier one died between its send and recording
	// it, and repeats it (NotifResent) or, for a type that chose loss over
	// a duplicate, records it UNKNOWN. Nor is such a row retired as
	// superseded: a later message does not hide it.
	Repeats bool
	// Raise, for a logical message's channel, is the gate each row asks
	// before its send (Channel.Raise).
	Raise *Raise
	// Grace: a PENDING row younger than this is left to the worker that
	// wrote it, which is about to push it (default 1 min, twice the
	// worker's timeout). Measured on the database's clock.
	Grace time.Duration
	// Base is the wait after a row's first failed attempt; it doubles per
	// attempt up to Max (defaults 30 s and 1 h).
	Base, Max time.Duration
	// Horizon is how long a row is retried, from when it was armed (written,
	// or re-armed by an operator), before it is flagged STUCK (default 24 h:
	// a payment's push a day late is noise, and a human should look).
	Horizon time.Duration
	// DeviceHorizon is how long a push whose caller has no device waits for
	// one, from its row's creation, before it is recorded UNDELIVERABLE
	// (default 24 h). Most devices come within seconds (a first
	// registration committing after the first payment, a rotated token); a
	// buyer who installs the app a day later finds the payment in it, and
	// an alert about day-old news reads as a new charge. It counts from the
	// creation, not from a re-arm, because what ages is the news; and it
	// bounds how long rows wait, and the sweep's work on callers who never
	// install the app. Such a row never goes STUCK: no human can give the
	// buyer a device.
	DeviceHorizon time.Duration
	// Lease is how long a run holds the rows it took (default 1 min), so two
	// runs at once rarely send the same row (and the replace id makes it
	// harmless when they do).
	Lease time.Duration
	// Logger receives a line per row that did not go out (default slog.Default()).
	Logger *slog.Logger
	// Metrics receives NotifSwept, NotifSweepFailed, PushAwaitingDevice,
	// PushUndeliverable, NotifStuckFlagged and, on every run, the
	// NotifStuck gauge (rows STUCK now) that the NotifStuck alarm watches.
	Metrics *metrics.Emitter
	// CheckStandby makes FinishPending first ask whether the ledger is
	// read-only (a standby Region before its promotion: the rows it shows
	// are the home's to send) and do nothing if so. Across Regions only.
	CheckStandby bool
	// IsHome, with CheckStandby, reports whether this Region homes the
	// callers: elsewhere a ledger host that does not resolve is a
	// standby's too (a global database's secondary serves nothing at its
	// writer endpoint until the promotion), and the run waits without an
	// error (ledger.EndpointNotFound). nil: it is always an error.
	IsHome func(ctx context.Context) (bool, error)
}

func (c *SweepConfig) setDefaults() error {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Channel == "" {
		c.Channel = "push"
	}
	def(&c.Grace, time.Minute)
	def(&c.Base, 30*time.Second)
	def(&c.Max, time.Hour)
	def(&c.Horizon, 24*time.Hour)
	def(&c.DeviceHorizon, 24*time.Hour)
	def(&c.Lease, time.Minute)
	if c.Grace < 0 || c.Base < 0 || c.Max < c.Base || c.Horizon < 0 || c.DeviceHorizon < 0 || c.Lease <= 0 {
		return fmt.Errorf("inbox: sweep grace %s, base %s, max %s, horizon %s, device horizon %s, lease %s: want non-negative, max >= base, a lease",
			c.Grace, c.Base, c.Max, c.Horizon, c.DeviceHorizon, c.Lease)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Delay is the wait after the attempts-th failed attempt (1-based): Base,
// 2 Base, 4 Base, ..., never more than Max.
func (c SweepConfig) Delay(attempts int) time.Duration {
	d := c.Base
	for i := 1; i < attempts && d < c.Max; i++ {
		d *= 2
	}
	return min(d, c.Max)
}

// NotifSweeper finishes PENDING notifications the worker could not send:
// it is their own durable trigger, so a committed credit never waits on a
// push. The worker function runs it on its own schedule (Function, every
// minute). It is safe for concurrent use,
// and runs at once skip each other's rows.
type NotifSweeper struct {
	db     SweepDB
	pusher Pusher
	cfg    SweepConfig
}

// NewNotifSweeper returns a NotifSweeper over db that sends through pusher
// (a notify.Notifier configured as the worker's).
func NewNotifSweeper(db SweepDB, pusher Pusher, cfg SweepConfig) (*NotifSweeper, error) {
	if db == nil || pusher == nil {
		return nil, errors.New("inbox: NewNotifSweeper needs a DB and a Pusher")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if notify.Logical(cfg.Message) != (cfg.Raise != nil) {
		return nil, fmt.Errorf("inbox: sweep of %q: a logical message (%q) needs its Raise and gate, and only it has one", cfg.Channel, cfg.Message)
	}
	return &NotifSweeper{db: db, pusher: pusher, cfg: cfg}, nil
}

type dueNotif struct {
	eventID, replaceID, callerID string
	payload                      []byte
	attempts                     int
	overHorizon                  bool
	// pastDeviceHorizon: created longer ago than SweepConfig.DeviceHorizon.
	pastDeviceHorizon bool
	// resend: an earlier attempt died with its send under way; resends:
	// how many such repeats were made.
	resend  bool
	resends int
}

// FinishPending takes up to limit PENDING rows that are older than the
// grace (or waiting for a device: their worker is done with them) and due
// (their backoff has passed or a registration woke them, no other run
// holds them), sends each with its replace id, and records the outcome:
// SENT; still waiting when the caller has no device yet, UNDELIVERABLE
// once that is past the device horizon, or at once when no channel can
// ever take it; otherwise the attempt and the next one's time, or STUCK
// once the row has been failing past the give-up horizon (kept, counted,
// alarmed; Rearm puts it back). It returns how many rows left PENDING
// (SENT, UNDELIVERABLE, SUPERSEDED, ...). It blocks for one claim, one send
// and one update per row, and one count; the error joins what failed.
func (s *NotifSweeper) FinishPending(ctx context.Context, limit int) (int, error) {
	var errs []error
	finished := 0
	// A standby Region's ledger is read-only until its promotion
	// (docs/regions.md): the rows it shows are the home's to send.
	if s.cfg.CheckStandby {
		ro, err := ledger.ReadOnly(ctx, s.db)
		if err != nil {
			wait, werr := ledger.StandbyWait(ctx, err, s.cfg.IsHome)
			if wait {
				s.cfg.Logger.Info("standby: the ledger's writer does not answer until this Region is promoted", "channel", s.cfg.Channel, "err", err)
			}
			return 0, werr
		}
		if ro {
			return 0, nil
		}
	}
	if limit > 0 {
		due, err := s.claim(ctx, limit)
		if err != nil {
			return 0, err
		}
		for _, n := range due {
			ok, err := s.finish(ctx, n)
			if ok {
				finished++
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	// The gauge keeps the alarm on for as long as a row is STUCK.
	var stuck int
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM notif WHERE state = 'STUCK' AND channel = $1`, s.cfg.Channel).Scan(&stuck); err != nil {
		errs = append(errs, fmt.Errorf("inbox: count stuck notifications: %w", err))
	} else {
		s.cfg.Metrics.Count("NotifStuck", stuck)
	}
	return finished, errors.Join(errs...)
}

// claim leases up to limit due rows. A row waiting for a device and due
// only by its back-off (not woken by a registration) comes after the
// others: the callers who never install the app must not crowd a run's
// rows out.
func (s *NotifSweeper) claim(ctx context.Context, limit int) ([]dueNotif, error) {
	rows, err := s.db.Query(ctx, `
		UPDATE notif n SET lease_until = now() + make_interval(secs => $3), attempts = n.attempts + 1
		FROM (
		  SELECT event_id, channel FROM notif
		  WHERE state = 'PENDING' AND channel = $1
		    AND (created_at < now() - make_interval(secs => $2) OR awaiting_device_since IS NOT NULL)
		    AND (next_attempt_at IS NULL OR next_attempt_at <= now())
		    AND (lease_until IS NULL OR lease_until < now())
		  ORDER BY (awaiting_device_since IS NOT NULL AND next_attempt_at IS NOT NULL), created_at
		  LIMIT $4
		  FOR UPDATE SKIP LOCKED
		) pick
		WHERE n.event_id = pick.event_id AND n.channel = pick.channel
		RETURNING n.event_id, n.replace_id, n.caller_id, COALESCE(n.payload::text, ''), n.attempts,
		          n.armed_at < now() - make_interval(secs => $5), n.sending_at IS NOT NULL, n.resends,
		          n.created_at < now() - make_interval(secs => $6)`,
		s.cfg.Channel, s.cfg.Grace.Seconds(), s.cfg.Lease.Seconds(), limit, s.cfg.Horizon.Seconds(), s.cfg.DeviceHorizon.Seconds())
	if err != nil {
		return nil, fmt.Errorf("inbox: take pending notifications: %w", err)
	}
	due, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (dueNotif, error) {
		var n dueNotif
		var payload string
		err := r.Scan(&n.eventID, &n.replaceID, &n.callerID, &payload, &n.attempts, &n.overHorizon, &n.resend, &n.resends, &n.pastDeviceHorizon)
		n.payload = []byte(payload)
		return n, err
	})
	if err != nil {
		return nil, fmt.Errorf("inbox: take pending notifications: %w", err)
	}
	return due, nil
}

// finish sends one claimed row and records the outcome. ok: it left PENDING
// for SENT or UNDELIVERABLE.
func (s *NotifSweeper) finish(ctx context.Context, n dueNotif) (ok bool, err error) {
	log := s.cfg.Logger.With("event_id", n.eventID, "attempts", n.attempts)
	e, err := event.Unmarshal(n.payload)
	if err != nil {
		// Nothing to send from: no retry helps, a human must.
		return false, s.stuck(ctx, n, fmt.Errorf("inbox: notification %s carries no event: %w", n.eventID, err), log)
	}
	p := notify.FromEvent(e)
	p.ReplaceID, p.CallerID = n.replaceID, n.callerID // as recorded with the intent
	log = log.With("payment_id", e.PaymentID)
	if !s.cfg.Repeats {
		if gone, err := retireSuperseded(ctx, s.db, n.eventID, s.cfg.Channel); err != nil || gone {
			if gone {
				s.cfg.Metrics.Count("NotifSuperseded", 1)
				log.Info("pending notification superseded by a later one about the payment; not sent")
			}
			return gone, err
		}
	}
	if s.cfg.Repeats && !timeToSend(ctx) {
		// Too little left to send and record it: the row goes back for a
		// run with time (its lease released, nothing counted).
		_, err := s.db.Exec(ctx, `UPDATE notif SET lease_until = NULL, attempts = attempts - 1 WHERE event_id = $1 AND channel = $2 AND state = 'PENDING'`,
			n.eventID, s.cfg.Channel)
		return false, err
	}
	if s.cfg.Raise != nil {
		verdict, err := s.cfg.Raise.admit(ctx, s.db, e, s.cfg.Message)
		if err != nil {
			return false, err
		}
		if !dedup.Goes(verdict) {
			if err := drop(ctx, s.db, n.eventID, s.cfg.Channel, verdict); err != nil {
				return false, err
			}
			return true, nil
		}
	}
	if s.cfg.Repeats {
		if n.resend {
			if why, stop := noRepeat(e, s.cfg.Message, n.resends); stop {
				if err := recordUnknown(ctx, s.db, n.eventID, s.cfg.Channel, why); err != nil {
					return false, err
				}
				s.cfg.Metrics.Count("NotifUnknownDropped", 1)
				log.Warn("an earlier attempt may have sent this message and it is not sent again (a rare loss accepted); recorded UNKNOWN", "why", why)
				return true, nil
			}
			s.cfg.Metrics.Count("NotifResent", 1)
			log.Warn("sending again a notification an earlier attempt may have sent (it died before SENT): a possible duplicate")
		}
		if _, err := s.db.Exec(ctx, `
			UPDATE notif SET sending_at = now(), resends = resends + $3 WHERE event_id = $1 AND channel = $2 AND state = 'PENDING'`,
			n.eventID, s.cfg.Channel, boolInt(n.resend)); err != nil {
			return false, fmt.Errorf("inbox: record the send of %s under way: %w", n.eventID, err)
		}
	}
	sendErr := s.pusher.Send(ctx, p)
	s.cfg.Raise.giveBack(ctx, s.db, e, sendErr, log)
	// The send was made or tried: its outcome is recorded even as the
	// invocation's deadline passes.
	ctx, cancel := recordCtx(ctx)
	defer cancel()
	switch {
	case sendErr == nil:
		if _, err := s.db.Exec(ctx, `
			UPDATE notif SET state = 'SENT', sent_at = now(), lease_until = NULL, last_error = NULL, sending_at = NULL, awaiting_device_since = NULL
			WHERE event_id = $1 AND channel = $2 AND state = 'PENDING'`, n.eventID, s.cfg.Channel); err != nil {
			// Sent; the lease lapses and a later run sends it once more (same replace id).
			return false, fmt.Errorf("inbox: mark %s SENT: %w", n.eventID, err)
		}
		s.cfg.Metrics.Count("NotifSwept", 1)
		log.Info("pending notification sent by the sweep", "replace_id", p.ReplaceID)
		return true, nil
	case errors.Is(sendErr, notify.ErrNoDevice) && n.pastDeviceHorizon:
		if err := finalize(ctx, s.db, n.eventID, s.cfg.Channel, NotifUndeliverable, sendErr.Error()); err != nil {
			return false, err
		}
		s.cfg.Metrics.Count("PushUndeliverable", 1)
		log.Warn("no device came within the device horizon; recorded UNDELIVERABLE", "device_horizon", s.cfg.DeviceHorizon.String())
		return true, nil
	case errors.Is(sendErr, notify.ErrNoDevice):
		next := s.cfg.Delay(n.attempts)
		if err := awaitDevice(ctx, s.db, n.eventID, s.cfg.Channel, sendErr.Error(), next, 0); err != nil {
			return false, err
		}
		s.cfg.Metrics.Count("PushAwaitingDevice", 1)
		log.Info("the caller still has no device to push to; the push waits for one", "retry_in", next.String())
		return false, nil
	case errors.Is(sendErr, notify.ErrNoTarget):
		if err := finalize(ctx, s.db, n.eventID, s.cfg.Channel, NotifUndeliverable, sendErr.Error()); err != nil {
			return false, err
		}
		s.cfg.Metrics.Count("PushUndeliverable", 1)
		log.Warn("no channel can take the pending notification; recorded UNDELIVERABLE")
		return true, nil
	case dropsUnknown(e, s.cfg.Message, sendErr):
		if err := recordUnknown(ctx, s.db, n.eventID, s.cfg.Channel, sendErr.Error()); err != nil {
			return false, err
		}
		s.cfg.Metrics.Count("NotifUnknownDropped", 1)
		log.Warn("the provider's answer is unknown and this message is not repeated (a rare loss accepted); recorded UNKNOWN")
		return true, nil
	case n.overHorizon:
		return false, s.stuck(ctx, n, sendErr, log)
	}
	if errors.Is(sendErr, notify.ErrOutcomeUnknown) {
		s.cfg.Metrics.Count("NotifUnknownRetried", 1) // a duplicate, if it did go out
	}
	next := s.cfg.Delay(n.attempts)
	s.cfg.Metrics.Count("NotifSweepFailed", 1)
	log.Warn("pending notification not sent; retried after the backoff", "error", sendErr.Error(), "retry_in", next.String())
	if _, err := s.db.Exec(ctx, `
		UPDATE notif SET lease_until = NULL, sending_at = NULL, last_error = $3, next_attempt_at = now() + make_interval(secs => $4),
		                 awaiting_device_since = NULL
		WHERE event_id = $1 AND channel = $2 AND state = 'PENDING'`, n.eventID, s.cfg.Channel, sendErr.Error(), next.Seconds()); err != nil {
		return false, fmt.Errorf("inbox: record the attempt on %s: %w", n.eventID, err)
	}
	return false, nil
}

// stuck flags a row that gave up: kept (never deleted), alerted on once here
// and by the NotifStuck gauge on every run until it is re-armed.
func (s *NotifSweeper) stuck(ctx context.Context, n dueNotif, cause error, log *slog.Logger) error {
	s.cfg.Metrics.Count("NotifStuckFlagged", 1)
	log.Error("notification still not sent after the give-up horizon; flagged STUCK for a human (re-arm: inbox.NotifSweeper.Rearm)",
		"alert", "NotifStuck", "error", cause.Error(), "horizon", s.cfg.Horizon.String())
	if _, err := s.db.Exec(ctx, `
		UPDATE notif SET state = 'STUCK', stuck_at = now(), lease_until = NULL, sending_at = NULL, last_error = $3, awaiting_device_since = NULL
		WHERE event_id = $1 AND channel = $2 AND state = 'PENDING'`, n.eventID, s.cfg.Channel, cause.Error()); err != nil {
		return fmt.Errorf("inbox: flag %s STUCK: %w", n.eventID, err)
	}
	return nil
}

// Rearm puts STUCK rows back to PENDING, due at once and with a fresh
// horizon: the named events', or every STUCK row when none is named. It
// returns how many it re-armed. The same by hand:
//
//	UPDATE notif SET state = 'PENDING', attempts = 0, next_attempt_at = NULL, lease_until = NULL,
//	                 stuck_at = NULL, armed_at = now()
//	WHERE state = 'STUCK' AND channel = 'push' [AND event_id = '<payment_id>:<state>'];
func (s *NotifSweeper) Rearm(ctx context.Context, eventIDs ...string) (int, error) {
	if eventIDs == nil {
		eventIDs = []string{} // an empty array, not NULL: "every STUCK row"
	}
	tag, err := s.db.Exec(ctx, `
		UPDATE notif SET state = 'PENDING', attempts = 0, next_attempt_at = NULL, lease_until = NULL,
		                 stuck_at = NULL, armed_at = now()
		WHERE state = 'STUCK' AND channel = $1 AND (cardinality($2::text[]) = 0 OR event_id = ANY($2))`,
		s.cfg.Channel, eventIDs)
	if err != nil {
		return 0, fmt.Errorf("inbox: re-arm stuck notifications: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
