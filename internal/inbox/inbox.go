// Package inbox is the worker behind the events queue
// (docs/mechanism.md#seed-part-6, docs/mechanism.md#seed-part-7): the
// consumer's inbox, not the queue, is what stops repeats.
//
// Per event, ONE PostgreSQL transaction:
//
//	INSERT INTO processed (event_id) ... ON CONFLICT DO NOTHING  -- 1 row: first time; 0: a repeat
//	-- only if 1 row was inserted:
//	SUCCEEDED: INSERT credits; upsert merchant_balances (balance + cents)
//	REFUNDED:  INSERT debits;  upsert merchant_balances (balance - cents)
//	REFUND_FAILED: INSERT credits; upsert merchant_balances (balance + cents)
//	all:       INSERT notif (event_id, channel, 'PENDING', replace_id, caller, payload) ON CONFLICT DO NOTHING
//	COMMIT
//
// Across Regions (Config.Adopt) a SUCCEEDED event first checks the
// payment's row: it credits only what the row backs with a charge journal
// (Worker.adopt).
//
// The balance is an increment, which an at-least-once consumer must never
// make unguarded; here the inbox row commits with it, so a repeat never gets
// that far. After the commit, and again on every redelivery whether or not
// the inbox row was new: if the notif row is PENDING, push, then mark it SENT
// ("ready means notified", Branch R of docs/mechanism.md#seed-part-7). A
// crash between the push and SENT is the one case that pushes twice; the
// replace id makes the second copy land on top of the first.
//
// A committed event never waits on its push (docs/mechanism.md#design-10).
// The event is done once its transaction committed: a push that fails is
// logged and counted (PushFailed), its row stays PENDING with the attempt
// recorded, and the message is acknowledged all the same. Failing it instead
// would let one buyer's broken push (an expired APNs certificate, a KMS error
// on the topic) hold back every later event of the merchant's FIFO group and,
// after maxReceiveCount deliveries, dead-letter them all. The PENDING row is
// its own durable trigger: NotifSweeper (run on the worker function's own
// schedule, every minute: Function) sends it again with the same replace id
// and backoff, and flags it STUCK, kept and alarmed,
// after a give-up horizon. A push whose caller has no device to go to yet
// (notify.ErrNoDevice: the first payment came before the app's first
// registration committed, or the token just rotated) stays PENDING, marked
// waiting for a device (awaitDevice): the caller's registration makes it
// due at once, the sweep retries it meanwhile, and one still without a
// device past SweepConfig.DeviceHorizon is recorded UNDELIVERABLE, final. A
// message no channel can ever take (notify.ErrNoTarget: an email with no
// address) is UNDELIVERABLE at once.
//
// Batches follow FIFO semantics: messages of one message group (one
// merchant) are handled in order, and once one fails, the later messages of
// that group in the batch are reported failed without being touched, so they
// come back after it and in order. Groups are independent: they are handled
// concurrently and a failing or slow group does not stop the others.
package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncepay/oncepay/internal/dedup"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/notify"
)

// The event states the worker acts on.
const (
	Succeeded = event.Succeeded
	Failed    = event.Failed
	Refunded  = event.Refunded
	// RefundFailed re-credits what a REFUNDED event debited, once: the
	// PSP failed the refund later.
	RefundFailed = event.RefundFailed
)

// Notification states of a notif row (migration 00005).
const (
	NotifPending       = "PENDING"       // owed: the worker or the sweep sends it (a push may be waiting for a device)
	NotifSent          = "SENT"          // handed to SNS
	NotifUndeliverable = "UNDELIVERABLE" // no channel can take it (notify.ErrNoTarget), or no device came within the horizon: final
	NotifStuck         = "STUCK"         // still failing after the give-up horizon: kept, alarmed, re-armable
	// NotifUnknown: the provider never said whether it sent, and the
	// message type chose a rare loss over a duplicate (notify.Policies):
	// final, counted, never retried.
	NotifUnknown = "UNKNOWN"
	// NotifDropped: a logical message the dedup gate did not let through
	// (a duplicate within its window, or over the cap): final, never sent.
	NotifDropped = "DROPPED"
)

// Channel is a notification channel beside the worker's own (the push):
// the email, say. Each has its notif row per event, written in the inbox
// transaction, and is sent after the commit like the push.
type Channel struct {
	Name   string // the notif rows' channel
	Sender Pusher
	// OnlyWithReceipt writes the channel's row only for a payment with a
	// receipt address (payments.receipt_email): the email's.
	OnlyWithReceipt bool
	// Message is the message type the channel sends, for its policy on an
	// unknown send (notify.Policies); "" is the event's own (notify.TypeOf).
	Message notify.MessageType
	// Raise, when set, makes the channel's message a logical one: not one
	// per event, but raised by events for a reason a later event may raise
	// again (package dedup).
	Raise *Raise
}

// Raise says when a logical message is raised: by an event in States whose
// payment has a receipt address and, for the card reminder, whose decline
// is the card issuer's, not oncepay's own refusal (notify.Raises). Its row is written in the inbox
// transaction, as any channel's, so a worker that dies after the commit
// leaves it PENDING for the redelivery or the sweep. Whichever sends it
// asks the Gate first (its fingerprint is the caller, the Template and the
// payment's card; the owner is the event's id, so asking again is answered
// the same): a message the gate drops is recorded DROPPED, final.
type Raise struct {
	Gate     *dedup.Gate
	Template string
	States   []string
	Now      func() time.Time // default time.Now
}

// ErrPoison marks a message no retry can process: its body is not an event,
// or the ledger refuses its values. It still goes back to the queue; SQS's
// redrive moves it to the DLQ after maxReceiveCount deliveries.
var ErrPoison = errors.New("inbox: poison event")

// DB is the part of a pgx pool the worker uses.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Pusher sends one push (notify.Notifier).
type Pusher interface {
	Send(ctx context.Context, p notify.Push) error
}

// Hooks are crash points for tests; production leaves them nil. A hook that
// returns an error stops the event at that point, as a crash there would: the
// message is not acknowledged and comes back after the visibility timeout.
type Hooks struct {
	// BeforeEvent runs before the transaction.
	BeforeEvent func(ctx context.Context, e event.Event) error
	// AfterCommit runs after the commit, before the push (Branch R,
	// docs/mechanism.md#seed-part-7).
	AfterCommit func(ctx context.Context, e event.Event) error
	// AfterPush runs after the push, before the notif row is marked SENT
	// (the story's snapshot P4, docs/mechanism.md#seed-part-0).
	AfterPush func(ctx context.Context, e event.Event) error
	// AfterSend runs after an extra channel's send (Config.Extra), before
	// its row is marked SENT.
	AfterSend func(ctx context.Context, e event.Event, channel string) error
}

// Config configures a Worker. Zero fields take the defaults.
type Config struct {
	// Channel names the notification channel of the notif row (default "push").
	Channel string
	// MaxReceiveCount is the queue's redrive maxReceiveCount: a failure on
	// that delivery is the message's last and is counted as
	// EventsDeadLettered. 0 when the queue has no DLQ.
	MaxReceiveCount int
	// GroupConcurrency bounds the message groups of one batch handled at
	// once (default 4).
	GroupConcurrency int
	// Logger receives a line per event (default slog.Default()).
	Logger *slog.Logger
	// Metrics receives EventsCredited, EventsDuplicate, PushesSent,
	// PushFailed, PushAwaitingDevice, PushUndeliverable, EventsFailed and
	// EventsDeadLettered counts.
	Metrics *metrics.Emitter
	// RetryAfter is when the sweep may first retry a push the worker could
	// not send (default 30 s; the sweep's backoff takes it from there).
	RetryAfter time.Duration
	// Extra are the channels beside the push (the email), each sent after
	// the push, each with its own row.
	Extra []Channel
	// Hooks: crash points for tests.
	Hooks Hooks
	// WithoutNotifRecord is a test-only switch for Branch N
	// (docs/mechanism.md#seed-part-7): no notif row is written or read, so
	// every delivery pushes.
	WithoutNotifRecord bool
	// Adopt (across Regions, ONCEPAY_ADOPT_LOST_PAYMENTS): a SUCCEEDED
	// payment event whose payment this ledger has no row of writes the row
	// (SUCCEEDED with its charge, and its journal entries) in the same
	// transaction as its credit. Such an event is a failed Region's copy of
	// a payment its last replication lag lost from the home ledger (the
	// copy its relay sends once it is back): without the row the payment
	// could be neither refunded nor resolved. Counted (PaymentAdopted).
	// Such a copy credits only what the home row backs: a PENDING or
	// UNKNOWN row is settled from it (PaymentSettledByCopy), a FAILED or
	// VOID one refuses it (AdoptionRefused); see Worker.adopt.
	Adopt bool
}

// Worker applies events exactly once to the ledger's consumer tables and
// notifies at least once. It is safe for concurrent use.
type Worker struct {
	db     DB
	pusher Pusher
	cfg    Config
}

// New returns a Worker over db that pushes through pusher.
func New(db DB, pusher Pusher, cfg Config) (*Worker, error) {
	if db == nil || pusher == nil {
		return nil, errors.New("inbox: New needs a DB and a Pusher")
	}
	if cfg.Channel == "" {
		cfg.Channel = "push"
	}
	if cfg.GroupConcurrency == 0 {
		cfg.GroupConcurrency = 4
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = 30 * time.Second
	}
	if cfg.GroupConcurrency < 0 || cfg.MaxReceiveCount < 0 || cfg.RetryAfter < 0 {
		return nil, fmt.Errorf("inbox: negative GroupConcurrency %d, MaxReceiveCount %d or RetryAfter %s",
			cfg.GroupConcurrency, cfg.MaxReceiveCount, cfg.RetryAfter)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	names := map[string]bool{cfg.Channel: true}
	for _, ch := range cfg.Extra {
		if ch.Name == "" || names[ch.Name] || ch.Sender == nil {
			return nil, fmt.Errorf("inbox: extra channel %q: a name of its own and a sender", ch.Name)
		}
		names[ch.Name] = true
		if notify.Logical(ch.Message) != (ch.Raise != nil) {
			return nil, fmt.Errorf("inbox: extra channel %q: a logical message (%q) needs its Raise and gate, and only it has one", ch.Name, ch.Message)
		}
	}
	return &Worker{db: db, pusher: pusher, cfg: cfg}, nil
}

// Result says what Process did with one delivery.
type Result struct {
	Credited      bool // the inbox row was new: this delivery applied the event
	Duplicate     bool // the inbox row existed: nothing was applied again
	Pushed        bool // this delivery sent the push
	PushFailed    bool // the push failed: the row stays PENDING for the sweep
	Undeliverable bool // no channel can ever take the push: the row is UNDELIVERABLE
	// AwaitingDevice: the caller has no device to push to yet; the row
	// stays PENDING, waiting for one (see the package comment).
	AwaitingDevice bool
	// Refused (Config.Adopt): the inbox row was new, and the event, a copy
	// the ledger contradicts, was recorded and not applied: no credit, no
	// notification (AdoptionRefused).
	Refused bool
	// Extra is what this delivery did on each extra channel that owed a
	// message, "<channel>=<outcome>" in Config.Extra's order, space
	// separated: sent, failed (PENDING for the sweep), undeliverable,
	// unknown (the provider's answer never came and the message type does
	// not repeat it) or superseded.
	Extra string
}

func (r *Result) extra(channel, outcome string) {
	if r.Extra != "" {
		r.Extra += " "
	}
	r.Extra += channel + "=" + outcome
}

// Process handles one delivery of e: the inbox transaction, then the push
// if the notif row is still PENDING. It blocks until both are done. Once the
// transaction committed, a failed push is not an error (see the package
// comment); only without the notif record (a test switch) is it one, since
// the redelivery is then the only retry.
func (w *Worker) Process(ctx context.Context, e event.Event) (Result, error) {
	var res Result
	if e.State != Succeeded && e.State != Failed && e.State != Refunded && e.State != RefundFailed && e.State != event.Reversed {
		return res, fmt.Errorf("%w: event %s has state %q", ErrPoison, e.EventID, e.State)
	}
	if err := hook(ctx, w.cfg.Hooks.BeforeEvent, e, "before the transaction"); err != nil {
		return res, err
	}
	how, err := w.apply(ctx, e)
	if err != nil {
		return res, err
	}
	if how == refused {
		res.Refused = true
		return res, nil // nothing owed: no notification was recorded
	}
	inserted := how == done
	res.Credited, res.Duplicate = inserted, !inserted
	if err := hook(ctx, w.cfg.Hooks.AfterCommit, e, "after the commit"); err != nil {
		return res, err
	}
	if err := w.deliver(ctx, e, inserted, &res); err != nil {
		return res, err
	}
	if w.cfg.WithoutNotifRecord {
		return res, nil
	}
	for _, ch := range w.cfg.Extra {
		if err := w.deliverExtra(ctx, e, ch, &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// notRaised is admit's verdict on a message its payment does not raise
// (notify.Raises): a reminder to update a card the issuer never declined.
// Not the gate's: nothing is asked of it or held.
const notRaised = "not-raised"

// rowQuerier is a pool or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// message is e's logical message as the gate names it, and the payment's
// decline code. The card is the payment's method, read from the ledger (no
// event carries it, nor the decline code).
func (r *Raise) message(ctx context.Context, db rowQuerier, e event.Event) (dedup.Message, string, error) {
	var card, decline string
	if err := db.QueryRow(ctx, `SELECT COALESCE(payment_method, ''), COALESCE(decline_code, '') FROM payments WHERE payment_id = $1`,
		e.PaymentID).Scan(&card, &decline); err != nil {
		return dedup.Message{}, "", fmt.Errorf("inbox: read the card of %s: %w", e.PaymentID, err)
	}
	return dedup.Message{Recipient: e.CallerID, Template: r.Template, Key: card}, decline, nil
}

// admit asks r's gate whether e's logical message typ goes out. A message
// the payment does not raise (a row written before the decline code was
// checked in the inbox transaction, see apply) is notRaised, and the gate
// is not asked.
func (r *Raise) admit(ctx context.Context, db rowQuerier, e event.Event, typ notify.MessageType) (string, error) {
	m, decline, err := r.message(ctx, db, e)
	if err != nil {
		return "", err
	}
	if !notify.Raises(typ, decline) {
		return notRaised, nil
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	return r.Gate.Accept(ctx, m, e.EventID, now()), nil
}

// giveBack releases the gate's hold on e's message after a send that
// definitely did not go out (refused, no address; retried later or given
// up): kept, it would drop the card's next decline for the rest of the
// window while the buyer got nothing. A send that may have gone out
// (notify.ErrOutcomeUnknown) keeps it: that reminder may be in the inbox.
// A failure is only logged: the hold then lapses with its window.
func (r *Raise) giveBack(ctx context.Context, db rowQuerier, e event.Event, sendErr error, log *slog.Logger) {
	if r == nil || sendErr == nil || errors.Is(sendErr, notify.ErrOutcomeUnknown) {
		return
	}
	ctx, cancel := recordCtx(ctx)
	defer cancel()
	m, _, err := r.message(ctx, db, e)
	if err == nil {
		err = r.Gate.Release(ctx, m, e.EventID)
	}
	if err != nil {
		log.LogAttrs(ctx, slog.LevelWarn, "the gate's hold on a message not sent was not released; it lapses with its window",
			slog.String("event_id", e.EventID), slog.String("payment_id", e.PaymentID), slog.String("error", err.Error()))
	}
}

// recordUnknown records a send that may have gone and is not made again:
// UNKNOWN, final.
func recordUnknown(ctx context.Context, db execer, eventID, channel, why string) error {
	return finalize(ctx, db, eventID, channel, NotifUnknown, why)
}

// drop records a logical message the gate did not let through, or its
// payment does not raise (notRaised): DROPPED, final. Recording it can
// fail harmlessly: the next asker is answered the same.
func drop(ctx context.Context, db execer, eventID, channel, verdict string) error {
	why := "dedup: " + verdict
	if verdict == notRaised {
		why = "not raised: the payment's decline is not the card issuer's"
	}
	return finalize(ctx, db, eventID, channel, NotifDropped, why)
}

// finalize ends a PENDING row in a final state with its reason, releasing
// its lease and its send under way; the outcome is recorded even as the
// invocation's deadline passes.
func finalize(ctx context.Context, db execer, eventID, channel, state, why string) error {
	ctx, cancel := recordCtx(ctx)
	defer cancel()
	if _, err := db.Exec(ctx, `
		UPDATE notif SET state = $3, last_error = $4, lease_until = NULL, sending_at = NULL
		WHERE event_id = $1 AND channel = $2 AND state = 'PENDING'`, eventID, channel, state, why); err != nil {
		return fmt.Errorf("inbox: record %s's %s %s: %w", eventID, channel, state, err)
	}
	return nil
}

// deliver sends the push if its row is PENDING (a row this delivery
// inserted is) and records the outcome.
func (w *Worker) deliver(ctx context.Context, e event.Event, inserted bool, res *Result) error {
	pending := true // a row inserted by this delivery is PENDING
	if !inserted && !w.cfg.WithoutNotifRecord {
		var err error
		if pending, err = w.notifPending(ctx, e, w.cfg.Channel); err != nil {
			return err
		}
	}
	if !pending {
		return nil
	}
	if !w.cfg.WithoutNotifRecord {
		if gone, err := retireSuperseded(ctx, w.db, e.EventID, w.cfg.Channel); err != nil || gone {
			if gone {
				w.cfg.Metrics.Count("NotifSuperseded", 1)
			}
			return err
		}
	}
	if err := w.pusher.Send(ctx, notify.FromEvent(e)); err != nil {
		if w.cfg.WithoutNotifRecord {
			return fmt.Errorf("inbox: push %s: %w", e.EventID, err)
		}
		w.pushNotSent(ctx, e, err, res)
		return nil
	}
	res.Pushed = true
	if err := hook(ctx, w.cfg.Hooks.AfterPush, e, "after the push"); err != nil {
		return err
	}
	if w.cfg.WithoutNotifRecord {
		return nil
	}
	w.markSent(ctx, e, w.cfg.Channel)
	return nil
}

// deliverExtra sends ch's message if its row is PENDING and no sweep holds
// it. An email is never retired as superseded: it has no replace id, so a
// later one does not hide it, and each says something that happened.
func (w *Worker) deliverExtra(ctx context.Context, e event.Event, ch Channel, res *Result) error {
	// The event is committed: nothing here fails it. What cannot be done
	// now is left PENDING for the sweep (or the next delivery).
	leave := func(what string, err error) error {
		w.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "notification left to the sweep: "+what,
			slog.String("event_id", e.EventID), slog.String("payment_id", e.PaymentID), slog.String("channel", ch.Name), slog.String("error", err.Error()))
		res.extra(ch.Name, "left")
		return nil
	}
	pending, err := w.notifPending(ctx, e, ch.Name)
	if err != nil {
		return leave("its row could not be read", err)
	}
	if !pending {
		return nil
	}
	if !timeToSend(ctx) {
		return leave("too little of the invocation left to send", context.DeadlineExceeded)
	}
	if ch.Raise != nil {
		verdict, err := ch.Raise.admit(ctx, w.db, e, ch.Message)
		if err != nil {
			return leave("the gate could not be asked", err)
		}
		if !dedup.Goes(verdict) {
			res.extra(ch.Name, verdict)
			if err := drop(ctx, w.db, e.EventID, ch.Name, verdict); err != nil {
				return leave("the gate's no could not be recorded", err)
			}
			return nil
		}
	}
	// The send is recorded as under way before it is made (sending_at), and
	// the row leased so the sweep keeps off it meanwhile. Finding it set,
	// this attempt follows one that died between its send and recording it.
	var resend bool
	var resends int
	err = w.db.QueryRow(ctx, `
		UPDATE notif n SET attempts = n.attempts + 1, sending_at = now(), lease_until = now() + interval '1 minute',
		                   resends = n.resends + CASE WHEN prior.resend THEN 1 ELSE 0 END
		FROM (SELECT sending_at IS NOT NULL AS resend, resends FROM notif
		      WHERE event_id = $1 AND channel = $2 AND state = 'PENDING' FOR UPDATE) prior
		WHERE n.event_id = $1 AND n.channel = $2 AND n.state = 'PENDING'
		  AND (n.lease_until IS NULL OR n.lease_until < now())
		RETURNING prior.resend, prior.resends`, e.EventID, ch.Name).Scan(&resend, &resends)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // finished, or held by the sweep, since the check above
	}
	if err != nil {
		return leave("the attempt could not be recorded", err)
	}
	if resend {
		if why, stop := noRepeat(e, ch.Message, resends); stop {
			if err := recordUnknown(ctx, w.db, e.EventID, ch.Name, why); err != nil {
				return leave("the unknown send could not be recorded", err)
			}
			w.cfg.Metrics.Count("NotifUnknownDropped", 1)
			w.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "an earlier attempt may have sent this message and it is not sent again (a rare loss accepted); recorded UNKNOWN",
				slog.String("event_id", e.EventID), slog.String("payment_id", e.PaymentID), slog.String("channel", ch.Name), slog.String("why", why))
			res.extra(ch.Name, "unknown")
			return nil
		}
		w.cfg.Metrics.Count("NotifResent", 1)
		w.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "sending again a notification an earlier delivery may have sent (it died before SENT): a possible duplicate",
			slog.String("event_id", e.EventID), slog.String("payment_id", e.PaymentID), slog.String("channel", ch.Name))
	}
	if err := ch.Sender.Send(ctx, notify.FromEvent(e)); err != nil {
		ch.Raise.giveBack(ctx, w.db, e, err, w.cfg.Logger)
		res.extra(ch.Name, w.notSent(ctx, e, ch, err))
		return nil
	}
	res.extra(ch.Name, "sent")
	if h := w.cfg.Hooks.AfterSend; h != nil {
		if err := h(ctx, e, ch.Name); err != nil {
			return fmt.Errorf("inbox: %s stopped after its %s send: %w", e.EventID, ch.Name, err)
		}
	}
	w.markSent(ctx, e, ch.Name)
	return nil
}

// noRepeat says whether a send found under way (an earlier attempt died
// between its send and recording it) is recorded UNKNOWN instead of made
// again: always for a type that chose loss over a duplicate, and for any
// type once it was repeated already (one repeat is the duplicate an email
// accepts; a third copy is not).
func noRepeat(e event.Event, typ notify.MessageType, resends int) (string, bool) {
	switch {
	case dropsUnknown(e, typ, notify.ErrOutcomeUnknown):
		return "an earlier attempt died before recording its send, and this message is not repeated", true
	case resends > 0:
		return "an earlier repeat died before recording its send too: no third copy", true
	}
	return "", false
}

// SendWindow is the least time an invocation must have left to start an
// email: its timeout and the record of its outcome. Less, and the row is
// left to a run with time, so no send is cut off before it is recorded.
const SendWindow = notify.DefaultEmailTimeout + 5*time.Second

func timeToSend(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) >= SendWindow
}

// recordCtx is the context an outcome is recorded under: a send that was
// made must be recorded even as the invocation's deadline passes.
func recordCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
}

// markSent records a send. A failure is only logged: the row stays
// PENDING and the sweep sends it once more (the push lands on top of this
// one, the replace id; an email is the accepted duplicate).
func (w *Worker) markSent(ctx context.Context, e event.Event, channel string) {
	ctx, cancel := recordCtx(ctx)
	defer cancel()
	if _, err := w.db.Exec(ctx, `
		UPDATE notif SET state = 'SENT', sent_at = now(), last_error = NULL, sending_at = NULL, lease_until = NULL, awaiting_device_since = NULL
		WHERE event_id = $1 AND channel = $2 AND state = 'PENDING'`, e.EventID, channel); err != nil {
		w.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "notification sent but not marked SENT; the sweep will send it again",
			slog.String("event_id", e.EventID), slog.String("payment_id", e.PaymentID), slog.String("channel", channel), slog.String("error", err.Error()))
	}
}

// dropsUnknown reports whether a send that failed with err is recorded
// UNKNOWN instead of retried: the provider never answered, and the
// message's type (typ, else e's own) chose a rare loss over a duplicate
// (notify.Policies).
func dropsUnknown(e event.Event, typ notify.MessageType, err error) bool {
	if !errors.Is(err, notify.ErrOutcomeUnknown) {
		return false
	}
	if typ == "" {
		var ok bool
		if typ, ok = notify.TypeOf(e.State); !ok {
			return false
		}
	}
	return !notify.Policies[typ].RetryUnknown
}

// notSent records an extra channel's send that did not go out, or whose
// outcome is unknown, and returns the outcome's name (Result.Extra).
func (w *Worker) notSent(ctx context.Context, e event.Event, ch Channel, sendErr error) string {
	channel := ch.Name
	attrs := []slog.Attr{slog.String("event_id", e.EventID), slog.String("payment_id", e.PaymentID),
		slog.String("channel", channel), slog.String("error", sendErr.Error())}
	var outcome, state string
	switch {
	case errors.Is(sendErr, notify.ErrNoTarget):
		outcome, state = "undeliverable", NotifUndeliverable
		w.cfg.Metrics.Count("NotifUndeliverable", 1)
		w.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "no target for the notification; recorded UNDELIVERABLE", attrs...)
	case dropsUnknown(e, ch.Message, sendErr):
		outcome, state = "unknown", NotifUnknown
		w.cfg.Metrics.Count("NotifUnknownDropped", 1)
		w.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "the provider's answer is unknown and this message is not repeated (a rare loss accepted); recorded UNKNOWN", attrs...)
	default:
		outcome = "failed"
		if errors.Is(sendErr, notify.ErrOutcomeUnknown) {
			w.cfg.Metrics.Count("NotifUnknownRetried", 1) // a duplicate, if it did go out
		}
		w.cfg.Metrics.Count("NotifFailed", 1)
		w.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "notification not sent; the event is done and the sweep retries it", attrs...)
	}
	var err error
	// The attempt was counted before the send (deliverExtra); this is its
	// outcome, so the send is no longer under way.
	ctx, cancel := recordCtx(ctx)
	defer cancel()
	if state != "" {
		_, err = w.db.Exec(ctx, `
			UPDATE notif SET state = $3, last_error = $4, sending_at = NULL, lease_until = NULL
			WHERE event_id = $1 AND channel = $2 AND state = 'PENDING'`, e.EventID, channel, state, sendErr.Error())
	} else {
		_, err = w.db.Exec(ctx, `
			UPDATE notif SET last_error = $3, next_attempt_at = now() + make_interval(secs => $4), sending_at = NULL, lease_until = NULL
			WHERE event_id = $1 AND channel = $2 AND state = 'PENDING'`, e.EventID, channel, sendErr.Error(), w.cfg.RetryAfter.Seconds())
	}
	if err != nil {
		w.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "could not record the send; the row stays PENDING for the sweep",
			append(attrs, slog.String("record_error", err.Error()))...)
	}
	return outcome
}

// pushNotSent records a push that did not go out: waiting for a device
// when the caller has none yet, UNDELIVERABLE when no channel can ever take
// it, otherwise the attempt and when the sweep may retry. A failure to
// record it is only logged: the row is PENDING either way, and the sweep
// picks it up after its grace.
func (w *Worker) pushNotSent(ctx context.Context, e event.Event, pushErr error, res *Result) {
	attrs := []slog.Attr{slog.String("event_id", e.EventID), slog.String("payment_id", e.PaymentID), slog.String("error", pushErr.Error())}
	var err error
	switch {
	case errors.Is(pushErr, notify.ErrNoDevice):
		res.AwaitingDevice = true
		w.cfg.Metrics.Count("PushAwaitingDevice", 1)
		w.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "the caller has no device to push to yet; the push waits for one", attrs...)
		err = awaitDevice(ctx, w.db, e.EventID, w.cfg.Channel, pushErr.Error(), w.cfg.RetryAfter, 1)
	case errors.Is(pushErr, notify.ErrNoTarget):
		res.Undeliverable = true
		w.cfg.Metrics.Count("PushUndeliverable", 1)
		w.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "no channel can take the push; recorded UNDELIVERABLE", attrs...)
		_, err = w.db.Exec(ctx, `
			UPDATE notif SET state = 'UNDELIVERABLE', attempts = attempts + 1, last_error = $3
			WHERE event_id = $1 AND channel = $2 AND state = 'PENDING'`, e.EventID, w.cfg.Channel, pushErr.Error())
	default:
		res.PushFailed = true
		w.cfg.Metrics.Count("PushFailed", 1)
		w.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "push failed; the event is done and the sweep retries the push", attrs...)
		// A device was found (or none was looked for): no longer waiting.
		_, err = w.db.Exec(ctx, `
			UPDATE notif SET attempts = attempts + 1, last_error = $3, awaiting_device_since = NULL,
			                 next_attempt_at = now() + make_interval(secs => $4)
			WHERE event_id = $1 AND channel = $2 AND state = 'PENDING'`,
			e.EventID, w.cfg.Channel, pushErr.Error(), w.cfg.RetryAfter.Seconds())
	}
	if err != nil {
		w.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "could not record the push attempt; the row stays PENDING for the sweep",
			append(attrs, slog.String("record_error", err.Error()))...)
	}
}

func hook(ctx context.Context, h func(context.Context, event.Event) error, e event.Event, where string) error {
	if h == nil {
		return nil
	}
	if err := h(ctx, e); err != nil {
		return fmt.Errorf("inbox: %s stopped %s: %w", e.EventID, where, err)
	}
	return nil
}

// applied is what the inbox transaction did with an event.
type applied int

const (
	repeat  applied = iota // the inbox row existed: nothing written
	done                   // the inbox row was new: the event applied
	refused                // Adopt: the inbox row was new, the event recorded and not applied (see adopt)
)

// apply runs the inbox transaction and reports what it did.
func (w *Worker) apply(ctx context.Context, e event.Event) (applied, error) {
	tx, err := w.db.Begin(ctx)
	if err != nil {
		return repeat, fmt.Errorf("inbox: begin %s: %w", e.EventID, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after commit
	tag, err := tx.Exec(ctx, `INSERT INTO processed (event_id) VALUES ($1) ON CONFLICT (event_id) DO NOTHING`, e.EventID)
	if err != nil {
		return repeat, classify(fmt.Errorf("inbox: inbox row %s: %w", e.EventID, err))
	}
	if tag.RowsAffected() == 0 {
		return repeat, nil // a repeat: nothing to write, the deferred rollback ends the transaction
	}
	var home adoption
	if w.cfg.Adopt && e.State == Succeeded {
		if home, err = w.adopt(ctx, tx, e); err != nil {
			return repeat, err
		}
		if home.refusal != "" {
			// Recorded, so its redeliveries stop; no credit and no
			// notification (a "payment confirmed" would replace the
			// decline the buyer was told of).
			if err := tx.Commit(ctx); err != nil {
				return repeat, fmt.Errorf("inbox: commit %s: %w", e.EventID, err)
			}
			w.cfg.Metrics.Count("AdoptionRefused", 1)
			w.cfg.Logger.LogAttrs(ctx, slog.LevelError, "a SUCCEEDED copy the ledger contradicts: not credited; the PSP charge is reconciliation's to find and refund",
				slog.String("alert", "AdoptionRefused"), slog.String("event_id", e.EventID), slog.String("payment_id", e.PaymentID),
				slog.String("psp_charge", e.PSPCharge), slog.String("home_state", home.state), slog.String("why", home.refusal))
			return refused, nil
		}
	}
	b := &pgx.Batch{}
	balance := func(delta int64) {
		b.Queue(`
			INSERT INTO merchant_balances (merchant_id, currency, balance) VALUES ($1, $2, $3)
			ON CONFLICT (merchant_id, currency)
			DO UPDATE SET balance = merchant_balances.balance + EXCLUDED.balance, updated_at = now()`,
			e.MerchantID, e.Currency, delta)
	}
	switch e.State {
	case Succeeded, RefundFailed:
		// A failed refund's money is the merchant's again: a credit under
		// its own event id (<payment_id>:REFUND_FAILED), so once.
		b.Queue(`INSERT INTO credits (merchant_id, cents, currency, event_id) VALUES ($1, $2, $3, $4)`,
			e.MerchantID, e.Amount, e.Currency, e.EventID)
		balance(e.Amount)
	case Refunded:
		// The debit row's CHECK (cents > 0) refuses a non-positive amount
		// before the balance could rise: poison, as for a credit.
		b.Queue(`INSERT INTO debits (merchant_id, cents, currency, event_id) VALUES ($1, $2, $3, $4)`,
			e.MerchantID, e.Amount, e.Currency, e.EventID)
		balance(-e.Amount)
	}
	if !w.cfg.WithoutNotifRecord {
		// The row carries the event, so the sweep can finish it alone.
		payload, err := e.Marshal()
		if err != nil {
			return repeat, fmt.Errorf("%w: %w", ErrPoison, err)
		}
		b.Queue(`
			INSERT INTO notif (event_id, channel, state, replace_id, caller_id, payload) VALUES ($1, $2, 'PENDING', $3, $4, $5)
			ON CONFLICT (event_id, channel) DO NOTHING`,
			e.EventID, w.cfg.Channel, notify.FromEvent(e).ReplaceID, e.CallerID, payload)
		decline, declineRead := "", false
		for _, ch := range w.cfg.Extra {
			if ch.Raise != nil && !slices.Contains(ch.Raise.States, e.State) {
				continue
			}
			if ch.Raise != nil {
				// Only the issuer's decline raises the card reminder, not
				// oncepay's own refusal (notify.Raises): read in this
				// transaction, from the row the FAILED settle wrote.
				if !declineRead {
					if decline, err = declineCode(ctx, tx, e.PaymentID); err != nil {
						return repeat, err
					}
					declineRead = true
				}
				if !notify.Raises(ch.Message, decline) {
					continue
				}
			}
			b.Queue(`
				INSERT INTO notif (event_id, channel, state, replace_id, caller_id, payload)
				SELECT $1, $2, 'PENDING', $3, $4, $5
				WHERE NOT $6 OR EXISTS (SELECT 1 FROM payments WHERE payment_id = $7 AND receipt_email IS NOT NULL)
				ON CONFLICT (event_id, channel) DO NOTHING`,
				e.EventID, ch.Name, notify.FromEvent(e).ReplaceID, e.CallerID, payload, ch.OnlyWithReceipt || ch.Raise != nil, e.PaymentID)
		}
	}
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return repeat, classify(fmt.Errorf("inbox: apply %s: %w", e.EventID, err))
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return repeat, fmt.Errorf("inbox: commit %s: %w", e.EventID, err)
	}
	home.report(ctx, w.cfg, e)
	return done, nil
}

// classify marks the ledger's refusals of the event's values (data
// exceptions, constraint violations) as poison.
func classify(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && len(pgErr.Code) == 5 && (pgErr.Code[:2] == "22" || pgErr.Code[:2] == "23") {
		return fmt.Errorf("%w: %w", ErrPoison, err)
	}
	return err
}

func (w *Worker) notifPending(ctx context.Context, e event.Event, channel string) (bool, error) {
	var state string
	err := w.db.QueryRow(ctx, `SELECT state FROM notif WHERE event_id = $1 AND channel = $2`, e.EventID, channel).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // processed before notifications were recorded: nothing owed
	}
	if err != nil {
		return false, fmt.Errorf("inbox: read notif %s: %w", e.EventID, err)
	}
	return state == NotifPending, nil
}

// Handle processes an SQS batch with FIFO semantics and blocks until every
// group is done. It reports each message that failed, or that follows a
// failed message of its group, as a batch item failure; the others are
// acknowledged by the event source deleting them. It never returns an error
// for a message: a failure of one message is not a failure of the batch.
func (w *Worker) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	groups := map[string][]int{}
	var order []string
	for i, m := range ev.Records {
		g, ok := m.Attributes["MessageGroupId"]
		if !ok {
			g = "\x00" + m.MessageId // not FIFO: every message stands alone
		}
		if _, seen := groups[g]; !seen {
			order = append(order, g)
		}
		groups[g] = append(groups[g], i)
	}
	failed := make([]bool, len(ev.Records))
	sem := make(chan struct{}, w.cfg.GroupConcurrency)
	var wg sync.WaitGroup
	for _, g := range order {
		sem <- struct{}{}
		wg.Add(1)
		go func(idx []int) {
			defer func() { <-sem; wg.Done() }()
			for k, i := range idx {
				if err := w.handleMessage(ctx, ev.Records[i]); err != nil {
					for _, j := range idx[k:] {
						failed[j] = true
					}
					w.heldBack(ctx, ev, idx[k+1:])
					return
				}
			}
		}(groups[g])
	}
	wg.Wait()
	var resp events.SQSEventResponse
	for i, f := range failed {
		if f {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: ev.Records[i].MessageId})
		}
	}
	return resp, nil
}

// handleMessage decodes and processes one message, logging and counting the
// outcome.
func (w *Worker) handleMessage(ctx context.Context, m events.SQSMessage) error {
	receives, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	e, err := event.Unmarshal([]byte(m.Body))
	if err != nil {
		err = fmt.Errorf("%w: message %s: %w", ErrPoison, m.MessageId, err)
	} else {
		var res Result
		res, err = w.Process(ctx, e)
		if err == nil {
			w.done(ctx, m, e, res, receives)
			return nil
		}
	}
	w.cfg.Metrics.Count("EventsFailed", 1)
	attrs := []slog.Attr{
		slog.String("event_id", e.EventID), slog.String("payment_id", e.PaymentID),
		slog.String("message_id", m.MessageId), slog.Int("receive_count", receives),
		slog.Bool("poison", errors.Is(err, ErrPoison)), slog.String("error", err.Error()),
	}
	if w.cfg.MaxReceiveCount > 0 && receives >= w.cfg.MaxReceiveCount {
		w.cfg.Metrics.Count("EventsDeadLettered", 1)
		w.cfg.Logger.LogAttrs(ctx, slog.LevelError, "event failed on its last delivery: SQS moves it to the DLQ", attrs...)
		return err
	}
	w.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "event failed; it will be delivered again", attrs...)
	return err
}

func (w *Worker) done(ctx context.Context, m events.SQSMessage, e event.Event, res Result, receives int) {
	switch {
	case res.Credited:
		w.cfg.Metrics.Count("EventsCredited", 1)
	case res.Duplicate:
		w.cfg.Metrics.Count("EventsDuplicate", 1)
	}
	if res.Pushed {
		w.cfg.Metrics.Count("PushesSent", 1)
	}
	w.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "event processed",
		slog.String("event_id", e.EventID), slog.String("payment_id", e.PaymentID),
		slog.String("message_id", m.MessageId), slog.Int("receive_count", receives),
		slog.Bool("duplicate", res.Duplicate), slog.Bool("refused", res.Refused), slog.Bool("pushed", res.Pushed),
		slog.Bool("push_failed", res.PushFailed), slog.Bool("awaiting_device", res.AwaitingDevice), slog.Bool("undeliverable", res.Undeliverable),
		slog.String("channels", res.Extra))
}

// heldBack logs the messages reported failed only because an earlier message
// of their group failed. They were received too, so their receive counts
// rose with it: on their last delivery they go to the DLQ behind it, and are
// counted so.
func (w *Worker) heldBack(ctx context.Context, ev events.SQSEvent, idx []int) {
	for _, i := range idx {
		m := ev.Records[i]
		receives, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
		attrs := []slog.Attr{slog.String("message_id", m.MessageId), slog.Int("receive_count", receives)}
		if w.cfg.MaxReceiveCount > 0 && receives >= w.cfg.MaxReceiveCount {
			w.cfg.Metrics.Count("EventsDeadLettered", 1)
			w.cfg.Logger.LogAttrs(ctx, slog.LevelError, "event held back on its last delivery: SQS moves it to the DLQ behind the failed event of its group", attrs...)
			continue
		}
		w.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "event held back behind a failed event of its group", attrs...)
	}
}
