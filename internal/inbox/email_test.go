package inbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sesv2"

	"github.com/oncepay/oncepay/internal/awsclient/sesclient"
	"github.com/oncepay/oncepay/internal/dedup"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/phone"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// loseReplies passes sends to moto's SES and, while armed, throws the
// answer away after SES took the message: the provider's timeout, the
// send made and unknown.
type loseReplies struct {
	notify.SESAPI
	mu   sync.Mutex
	skip int // sends let through before the first lost answer
	left int
	// hold, when set, stops each send on its way in: it says so on
	// entered and waits for hold to close (a send in progress).
	hold, entered chan struct{}
	// failed counts the sends moto itself failed (a connection the loaded
	// emulator cut, as seen once under -race): each may have been sent and
	// then sent again, so a test counting emails adds them.
	failed int
}

func (l *loseReplies) SendEmail(ctx context.Context, in *sesv2.SendEmailInput, opts ...func(*sesv2.Options)) (*sesv2.SendEmailOutput, error) {
	l.mu.Lock()
	hold, entered := l.hold, l.entered
	l.mu.Unlock()
	if hold != nil {
		entered <- struct{}{}
		<-hold
	}
	out, err := l.SESAPI.SendEmail(ctx, in, opts...)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.failed++
	}
	if err == nil && l.skip > 0 {
		l.skip--
		return out, err
	}
	if err == nil && l.left > 0 {
		l.left--
		return nil, errors.New("operation error SESv2: SendEmail, https response error: context deadline exceeded")
	}
	return out, err
}

func (l *loseReplies) arm(n int) { l.mu.Lock(); l.left = n; l.mu.Unlock() }

// emailWorld is a worker with the email channel beside the push, on a
// ledger of its own and moto's SES.
type emailWorld struct {
	world
	ses      *loseReplies
	from, to string
	caller   string // a caller of the test's own: the dedup cache is shared
	sweeper  *inbox.NotifSweeper
	// reminders is the reminder channel's sweep.
	reminders *inbox.NotifSweeper
	crash     *string // AfterSend fails once for this channel when set
	// crashCommit makes AfterCommit fail once: the worker dies after the
	// inbox transaction, before any send.
	crashCommit *bool
	// reminder is the reminder's sender, the worker's and its sweep's: a
	// test may change its From.
	reminder *notify.EmailSender
}

func newEmailWorld(t *testing.T, reminders ...*dedup.Gate) *emailWorld {
	t.Helper()
	ses := testenv.SES(t)
	// The worker sends with one attempt, as lambdas/worker does
	// (sesclient.NewSender): with the SDK's retries a send whose answer
	// moto lost would go out twice inside one call, unseen by the count
	// of lost answers (loseReplies.failed).
	ew := &emailWorld{ses: &loseReplies{SESAPI: sesclient.NewSender(testenv.AWSConfig(t))}, from: testenv.NewEmailIdentity(t, ses), to: "buyer-" + testenv.RandomID(4) + "@example.com",
		crash: new(string), crashCommit: new(bool), caller: "u-" + testenv.RandomID(6)}
	var sender, reminder notify.EmailSender
	var raise *inbox.Raise // the worker's and the reminder sweep's, as in lambdas/worker
	for _, g := range reminders {
		// A fixed noon: the cap's day never turns mid-test.
		raise = &inbox.Raise{Gate: g, Template: string(notify.CardDeclinedReminder), States: []string{event.Failed},
			Now: func() time.Time { return time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC) }}
	}
	ew.world = newWorld(t, func(c *inbox.Config) {
		c.Extra = []inbox.Channel{{Name: notify.ChannelEmail, Sender: &sender, OnlyWithReceipt: true}}
		if raise != nil {
			c.Extra = append(c.Extra, inbox.Channel{Name: notify.ChannelReminder, Sender: &reminder, Message: notify.CardDeclinedReminder, Raise: raise})
		}
		c.Hooks.AfterCommit = func(context.Context, event.Event) error {
			if *ew.crashCommit {
				*ew.crashCommit = false
				return errors.New("the worker died after the commit")
			}
			return nil
		}
		c.Hooks.AfterSend = func(_ context.Context, _ event.Event, channel string) error {
			if *ew.crash == channel {
				*ew.crash = ""
				return errors.New("the worker died after the send")
			}
			return nil
		}
	})
	sender = notify.EmailSender{SES: ew.ses, DB: ew.pool, From: ew.from}
	reminder = sender
	reminder.Type = notify.CardDeclinedReminder
	ew.reminder = &reminder
	if raise != nil {
		rs, err := inbox.NewNotifSweeper(ew.pool, &reminder, inbox.SweepConfig{Channel: notify.ChannelReminder, Message: notify.CardDeclinedReminder,
			Repeats: true, Raise: raise, Grace: time.Nanosecond, Logger: quiet, Metrics: metrics.New(ew.emf, "worker")})
		if err != nil {
			t.Fatal(err)
		}
		ew.reminders = rs
	}
	sw, err := inbox.NewNotifSweeper(ew.pool, sender, inbox.SweepConfig{Channel: notify.ChannelEmail, Repeats: true, Grace: time.Nanosecond, Logger: quiet,
		Metrics: metrics.New(ew.emf, "worker")})
	if err != nil {
		t.Fatal(err)
	}
	ew.sweeper = sw
	return ew
}

// dieAfterSend delivers e with the worker dying after channel's send,
// before it is recorded; then time passes past the dead worker's lease, as
// before the redelivery (180 s on).
func (w *emailWorld) dieAfterSend(t *testing.T, e event.Event, channel string) {
	t.Helper()
	*w.crash = channel
	if _, err := w.w.Process(context.Background(), e); err == nil {
		t.Fatal("the crash after the send did not stop the delivery")
	}
	w.lapse(t, e.EventID)
}

// counted is the sum of the worker's and the sweeps' metric name so far.
func (w *emailWorld) counted(name string) float64 { return metrics.Sum(w.emf.Bytes(), name) }

// lapse ends the leases on eventID's rows: time passes (a redelivery comes
// 180 s after the worker took the message, past its 1 min lease).
func (w *emailWorld) lapse(t *testing.T, eventID string) {
	t.Helper()
	if _, err := w.pool.Exec(context.Background(), `UPDATE notif SET lease_until = now() - interval '1 second' WHERE event_id = $1 AND lease_until IS NOT NULL`, eventID); err != nil {
		t.Fatal(err)
	}
}

// paid writes the payment's ledger row with a receipt address (or none),
// as the api does, and returns its SUCCEEDED event.
func (w *emailWorld) paid(t *testing.T, pid, to string) event.Event {
	t.Helper()
	return w.settled(t, pid, to, "pm_1", event.Succeeded)
}

// settled writes the payment's row (card method) and returns its event in
// state; a FAILED payment is settled so, declined by the card's issuer.
func (w *emailWorld) settled(t *testing.T, pid, to, method, state string) event.Event {
	t.Helper()
	if state == event.Failed {
		return w.declined(t, pid, to, method, "generic_decline")
	}
	w.pending(t, pid, to, method)
	e := payment(pid, "m1", state, 3000)
	e.CallerID = w.caller
	return e
}

// declined writes the payment's row, settles it FAILED with decline code
// as the api or the resolver does, and returns its FAILED event.
func (w *emailWorld) declined(t *testing.T, pid, to, method, code string) event.Event {
	t.Helper()
	w.pending(t, pid, to, method)
	_, ev, moved, err := ledger.New(w.pool).Settle(context.Background(), pid, ledger.Outcome{State: ledger.Failed, PSPCharge: "pi_" + pid, DeclineCode: code}, time.Now())
	if err != nil || !moved || ev == nil {
		t.Fatalf("settle %s FAILED: moved %v, %v", pid, moved, err)
	}
	return *ev
}

func (w *emailWorld) pending(t *testing.T, pid, to, method string) {
	t.Helper()
	_, _, err := ledger.New(w.pool).InsertPending(context.Background(), ledger.Payment{ID: pid, CallerID: w.caller, ClientKey: "K-" + pid,
		Fingerprint: "H", Amount: 3000, Currency: "USD", MerchantID: "m1", OrderID: pid, PaymentMethod: method,
		DeadlineAt: time.Now().Add(5 * time.Second)}, to)
	if err != nil {
		t.Fatal(err)
	}
}

// subjects counts the emails to the buyer by subject's first words.
func (w *emailWorld) reminded(t *testing.T) (reminders, declines int) {
	t.Helper()
	for _, e := range w.emails(t) {
		switch {
		case strings.HasPrefix(e.Subject, "Your card was declined"):
			reminders++
		case strings.Contains(e.Subject, "was declined"):
			declines++
		}
	}
	return reminders, declines
}

func (w *emailWorld) emails(t *testing.T) []phone.Email {
	t.Helper()
	return testenv.SentEmails(t, w.to)
}

func (w *emailWorld) emailState(t *testing.T, eventID string) string {
	t.Helper()
	return w.rowState(t, eventID, notify.ChannelEmail)
}

// rowState is eventID's row of channel ("none" without one).
func (w *emailWorld) rowState(t *testing.T, eventID, channel string) string {
	t.Helper()
	var s string
	if err := w.pool.QueryRow(context.Background(), `SELECT COALESCE((SELECT state FROM notif WHERE event_id = $1 AND channel = $2), 'none')`, eventID, channel).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// dieAfterCommit delivers e with the worker dying after the inbox
// transaction, before the gate and any send.
func (w *emailWorld) dieAfterCommit(t *testing.T, e event.Event) {
	t.Helper()
	*w.crashCommit = true
	if _, err := w.w.Process(context.Background(), e); err == nil {
		t.Fatal("the crash after the commit did not stop the delivery")
	}
}

// One payment: one push and one email, each once, however often the event
// is delivered; a payment with no receipt address owes no email.
func TestAPaymentIsPushedAndEmailedOnceEach(t *testing.T) {
	w := newEmailWorld(t)
	e := w.paid(t, "pay_e1", w.to)
	for range 3 {
		if _, err := w.w.Process(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	got := w.emails(t)
	if len(got) != 1 || !strings.Contains(got[0].Subject, "went through") || !strings.Contains(got[0].Body, "pay_e1") || got[0].From != w.from {
		t.Fatalf("emails %+v, want the one receipt", got)
	}
	if w.pusher.count() != 1 || w.emailState(t, e.EventID) != inbox.NotifSent {
		t.Fatalf("%d pushes, email row %s", w.pusher.count(), w.emailState(t, e.EventID))
	}
	none := w.paid(t, "pay_e2", "")
	res, err := w.w.Process(context.Background(), none)
	if err != nil || res.Extra != "" || w.emailState(t, none.EventID) != "none" || w.pusher.count() != 2 {
		t.Fatalf("no address: %+v %v, email row %s, %d pushes", res, err, w.emailState(t, none.EventID), w.pusher.count())
	}
}

// The worker dies between the email's send and SENT and the sweep, not a
// redelivery, finds the row: it sends the repeat, counted, and a later
// delivery of the event sends nothing.
func TestTheSweepCountsTheRepeatOfAnEmailWhoseWorkerDied(t *testing.T) {
	w := newEmailWorld(t)
	e := w.paid(t, "pay_e5", w.to)
	w.dieAfterSend(t, e, notify.ChannelEmail)
	if n, err := w.sweeper.FinishPending(context.Background(), 10); err != nil || n != 1 {
		t.Fatalf("the sweep finished %d: %v", n, err)
	}
	if _, err := w.w.Process(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	if n := len(w.emails(t)); n != 2 || w.emailState(t, e.EventID) != inbox.NotifSent {
		t.Fatalf("%d emails (row %s), want 2", n, w.emailState(t, e.EventID))
	}
	if w.counted("NotifResent") != 1 {
		t.Errorf("the sweep's repeat was not counted once: %s", w.emf.String())
	}
}

// An email SES keeps failing past the give-up horizon is flagged STUCK,
// counted and kept; re-armed (the operator's fix), the sweep sends it.
func TestAnEmailFailingPastTheHorizonIsStuckUntilRearmed(t *testing.T) {
	w := newEmailWorld(t)
	ctx := context.Background()
	e := w.paid(t, "pay_e9", w.to)
	w.ses.arm(1)
	if res, err := w.w.Process(ctx, e); err != nil || res.Extra != "email=failed" {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := w.pool.Exec(ctx, `UPDATE notif SET armed_at = now() - interval '2 days', next_attempt_at = now() WHERE event_id = $1 AND channel = 'email'`, e.EventID); err != nil {
		t.Fatal(err)
	}
	w.ses.arm(1)
	if _, err := w.sweeper.FinishPending(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if s := w.emailState(t, e.EventID); s != inbox.NotifStuck || w.counted("NotifStuckFlagged") != 1 {
		t.Fatalf("row %s, NotifStuckFlagged %v; want STUCK, flagged once", s, w.counted("NotifStuckFlagged"))
	}
	if n, err := w.sweeper.Rearm(ctx, e.EventID); err != nil || n != 1 {
		t.Fatalf("re-armed %d: %v", n, err)
	}
	if _, err := w.sweeper.FinishPending(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if s := w.emailState(t, e.EventID); s != inbox.NotifSent {
		t.Fatalf("row %s after the re-arm, want SENT", s)
	}
}

// Failures the sweep saw answered are not repeats: an email that failed at
// the worker and again at the sweep, then went, was sent once, and nothing
// counts it as a possible duplicate.
func TestAnEmailThatFailedTwiceIsNotCountedARepeat(t *testing.T) {
	w := newEmailWorld(t)
	ctx := context.Background()
	e := w.paid(t, "pay_e12", w.to)
	failed := func() error {
		_, err := w.pool.Exec(ctx, `UPDATE notif SET next_attempt_at = now() WHERE event_id = $1 AND channel = 'email'`, e.EventID)
		return err
	}
	w.ses.arm(1)
	if res, err := w.w.Process(ctx, e); err != nil || res.Extra != "email=failed" {
		t.Fatalf("%+v %v", res, err)
	}
	for _, lose := range []int{1, 0} {
		if err := failed(); err != nil {
			t.Fatal(err)
		}
		w.ses.arm(lose)
		if _, err := w.sweeper.FinishPending(ctx, 10); err != nil {
			t.Fatal(err)
		}
	}
	if w.emailState(t, e.EventID) != inbox.NotifSent || w.counted("NotifResent") != 0 {
		t.Fatalf("row %s, NotifResent %v; want SENT and no repeat counted", w.emailState(t, e.EventID), w.counted("NotifResent"))
	}
}

// A send that failed, then a retry that died after its send: the third
// attempt knows the second may have gone out.
func TestARepeatAfterAFailedAttemptIsStillCounted(t *testing.T) {
	w := newEmailWorld(t)
	e := w.paid(t, "pay_e6", w.to)
	w.ses.arm(1)
	if res, err := w.w.Process(context.Background(), e); err != nil || res.Extra != "email=failed" {
		t.Fatalf("%+v %v", res, err)
	}
	*w.crash = notify.ChannelEmail
	if _, err := w.pool.Exec(context.Background(), `UPDATE notif SET next_attempt_at = now() WHERE event_id = $1`, e.EventID); err != nil {
		t.Fatal(err)
	}
	if _, err := w.w.Process(context.Background(), e); err == nil {
		t.Fatal("the crash after the send did not stop the delivery")
	}
	w.lapse(t, e.EventID) // the redelivery comes after the dead worker's lease
	if _, err := w.w.Process(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	w.ses.mu.Lock()
	extra := w.ses.failed // answers the emulator lost, each a send made and retried
	w.ses.mu.Unlock()
	if n := len(w.emails(t)); n < 3 || n > 3+extra || w.emailState(t, e.EventID) != inbox.NotifSent {
		t.Fatalf("%d emails (row %s), want 3: the lost answer's, the crashed retry's, the repeat (+ up to %d the emulator's own lost answers)", n, w.emailState(t, e.EventID), extra)
	}
	if n := w.counted("NotifResent"); n < 1 || n > float64(1+extra) {
		t.Errorf("want one counted repeat (the first retry followed a recorded failure), + up to %d: %s", extra, w.emf.String())
	}
}

// The worker dies between the email's send and SENT: the redelivery sends
// it again (the accepted duplicate: the email has no replace id), and then
// never a third.
func TestAWorkerCrashAfterTheEmailSendsASecondCopyAndNotAThird(t *testing.T) {
	w := newEmailWorld(t)
	e := w.paid(t, "pay_e3", w.to)
	w.dieAfterSend(t, e, notify.ChannelEmail)
	for range 2 {
		if _, err := w.w.Process(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	w.ses.mu.Lock()
	extra := w.ses.failed // answers the emulator lost, each a send made and retried (CI saw one)
	w.ses.mu.Unlock()
	if n := len(w.emails(t)); n < 2 || n > 2+extra || w.emailState(t, e.EventID) != inbox.NotifSent {
		t.Fatalf("%d emails (row %s), want 2: the one before the crash and its one repeat (+ up to %d the emulator's own lost answers)", n, w.emailState(t, e.EventID), extra)
	}
	if n := w.counted("NotifResent"); n < 1 || n > float64(1+extra) {
		t.Errorf("the repeat was not counted once (+ up to %d): %s", extra, w.emf.String())
	}
	if w.pusher.count() != 1 {
		t.Errorf("%d pushes", w.pusher.count())
	}
}

// A provider timeout on a receipt is an unknown, not a failure: the row
// stays PENDING and the sweep sends it again, a duplicate accepted (and
// counted) over a lost receipt (notify.Policies).
func TestAReceiptWhoseSendTimedOutIsSentAgain(t *testing.T) {
	w := newEmailWorld(t)
	e := w.paid(t, "pay_e4", w.to)
	w.ses.arm(1)
	res, err := w.w.Process(context.Background(), e)
	if err != nil || res.Extra != "email=failed" || w.emailState(t, e.EventID) != inbox.NotifPending {
		t.Fatalf("%+v %v, row %s", res, err, w.emailState(t, e.EventID))
	}
	if w.counted("NotifUnknownRetried") < 1 {
		t.Errorf("the unknown send was not counted: %s", w.emf.String())
	}
	// The sweep picks it up once its backoff has passed.
	if _, err := w.pool.Exec(context.Background(), `UPDATE notif SET next_attempt_at = now() WHERE event_id = $1`, e.EventID); err != nil {
		t.Fatal(err)
	}
	if n, err := w.sweeper.FinishPending(context.Background(), 10); err != nil || n != 1 {
		t.Fatalf("the sweep finished %d: %v", n, err)
	}
	if n := len(w.emails(t)); n != 2 || w.emailState(t, e.EventID) != inbox.NotifSent {
		t.Fatalf("%d emails (row %s), want the timed-out one and its repeat", n, w.emailState(t, e.EventID))
	}
}

// Every message type has a choice and a reason.
func TestEveryMessageTypeChoosesWhatAnUnknownSendCosts(t *testing.T) {
	for _, typ := range []notify.MessageType{notify.PaymentReceipt, notify.PaymentFailed, notify.RefundIssued, notify.RefundReversed, notify.CardDeclinedReminder} {
		if p, ok := notify.Policies[typ]; !ok || p.Why == "" {
			t.Errorf("%s: no policy", typ)
		}
	}
	if notify.Policies[notify.CardDeclinedReminder].RetryUnknown || !notify.Policies[notify.PaymentReceipt].RetryUnknown {
		t.Error("the reminder accepts a loss, the receipt a duplicate")
	}
}

func reminderGate(t *testing.T, c dedup.Cache, cap int) (*dedup.Gate, *bytes.Buffer) {
	t.Helper()
	emf := &bytes.Buffer{}
	// A generous timeout: a loaded CI machine must not make these tests of
	// the gate's decisions fail open (TestWithTheCacheDownBothRemindersGoOut
	// fails open by a cache that refuses, at once).
	g, err := dedup.New(c, dedup.Config{Cap: cap, Timeout: 5 * time.Second, Logger: quiet, Metrics: metrics.New(emf, "worker")})
	if err != nil {
		t.Fatal(err)
	}
	return g, emf
}

// Two declines of the same card within the window: two decline emails (one
// per payment) and one reminder to update the card (a logical duplicate
// dropped); a redelivery raises nothing again.
func TestTwoDeclinesOfTheSameCardRaiseOneReminder(t *testing.T) {
	g, _ := reminderGate(t, testenv.Cache(t), 0)
	w := newEmailWorld(t, g)
	var ids []string
	for _, pid := range []string{"pay_d1", "pay_d2"} {
		e := w.settled(t, pid, w.to, "pm_card_chargeDeclined", event.Failed)
		ids = append(ids, e.EventID)
		for range 2 {
			if _, err := w.w.Process(context.Background(), e); err != nil {
				t.Fatal(err)
			}
		}
	}
	// At least two decline emails: a send whose reply the transport lost
	// (moto closing a connection on a loaded machine) is sent again, the
	// decline email's policy (a duplicate over a loss). The reminder is
	// the logical duplicate under test: exactly one.
	if r, d := w.reminded(t); r != 1 || d < 2 {
		t.Fatalf("%d reminders and %d decline emails, want 1 and at least 2", r, d)
	}
	if first, second := w.rowState(t, ids[0], notify.ChannelReminder), w.rowState(t, ids[1], notify.ChannelReminder); first != inbox.NotifSent || second != inbox.NotifDropped {
		t.Fatalf("the reminders' rows: %s and %s, want SENT and the duplicate DROPPED", first, second)
	}
}

// The cache down: the reminder goes out anyway (fail open), counted.
func TestWithTheCacheDownBothRemindersGoOut(t *testing.T) {
	up := testenv.Cache(t)
	down, err := dedup.NewRedis("redis://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	flaky := &switchable{Cache: up}
	g, emf := reminderGate(t, flaky, 0)
	w := newEmailWorld(t, g)
	e1 := w.settled(t, "pay_d1", w.to, "pm_card_chargeDeclined", event.Failed)
	if _, err := w.w.Process(context.Background(), e1); err != nil {
		t.Fatal(err)
	}
	flaky.Cache = down
	e2 := w.settled(t, "pay_d2", w.to, "pm_card_chargeDeclined", event.Failed)
	if _, err := w.w.Process(context.Background(), e2); err != nil {
		t.Fatal(err)
	}
	if r, _ := w.reminded(t); r != 2 || metrics.Sum(emf.Bytes(), "DedupFailOpen") != 1 {
		t.Fatalf("%d reminders (want both), fail-open counted: %s", r, emf.String())
	}
}

// switchable is a cache that can be swapped for a down one mid-test.
type switchable struct{ dedup.Cache }

// A user at their cap gets no more reminders, and a dropped duplicate did
// not use up the allowance: with a cap of 2, card A, card A again (dropped)
// and card B are two reminders, and card C none.
func TestADroppedDuplicateDoesNotCountAgainstTheCap(t *testing.T) {
	g, _ := reminderGate(t, testenv.Cache(t), 2)
	w := newEmailWorld(t, g)
	for i, card := range []string{"pm_a", "pm_a", "pm_b", "pm_c"} {
		e := w.settled(t, fmt.Sprintf("pay_c%d", i), w.to, card, event.Failed)
		if _, err := w.w.Process(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	if r, _ := w.reminded(t); r != 2 {
		t.Fatalf("%d reminders, want 2 (A and B; A's duplicate dropped, C over the cap)", r)
	}
}

// A reminder whose send timed out is not sent again: the rare loss its
// message type accepts over a duplicate nag (notify.Policies). The row is
// UNKNOWN, counted, and the sweep leaves it.
func TestAReminderWhoseSendTimedOutIsNotRepeated(t *testing.T) {
	g, _ := reminderGate(t, testenv.Cache(t), 0)
	w := newEmailWorld(t, g)
	e := w.settled(t, "pay_r1", w.to, "pm_card_chargeDeclined", event.Failed)
	// The decline email goes first, then the reminder: lose the second.
	w.ses.skip, w.ses.left = 1, 1
	res, err := w.w.Process(context.Background(), e)
	if err != nil || res.Extra != "email=sent reminder=unknown" {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := w.pool.Exec(context.Background(), `UPDATE notif SET next_attempt_at = now() WHERE event_id = $1`, e.EventID); err != nil {
		t.Fatal(err)
	}
	if n, err := w.reminders.FinishPending(context.Background(), 10); err != nil || n != 0 {
		t.Fatalf("the sweep took %d: %v", n, err)
	}
	if state := w.rowState(t, e.EventID, notify.ChannelReminder); state != inbox.NotifUnknown {
		t.Fatalf("the reminder's row: %s", state)
	}
	if r, _ := w.reminded(t); r != 1 || w.counted("NotifUnknownDropped") < 1 {
		t.Fatalf("%d reminders taken by SES (want the one whose answer was lost); metrics %s", r, w.emf.String())
	}
}

// The worker dies after the inbox transaction, before the gate and any
// send: the reminder's row committed with the credit, so the redelivery
// sends it (the gate, asked for the first time, lets it through), once.
func TestAWorkerThatDiesBeforeTheReminderLeavesItToTheRedelivery(t *testing.T) {
	g, _ := reminderGate(t, testenv.Cache(t), 0)
	w := newEmailWorld(t, g)
	e := w.settled(t, "pay_rc1", w.to, "pm_card_chargeDeclined", event.Failed)
	w.dieAfterCommit(t, e)
	for range 2 {
		if _, err := w.w.Process(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	if r, d := w.reminded(t); r != 1 || d != 1 {
		t.Fatalf("%d reminders and %d decline emails, want 1 and 1", r, d)
	}
}

// The sweep finds a reminder no worker sent (the worker died, and no
// redelivery came): it asks the gate, which answers the same event the
// same, and sends it once.
func TestTheSweepSendsAReminderTheWorkerNeverSent(t *testing.T) {
	g, _ := reminderGate(t, testenv.Cache(t), 0)
	w := newEmailWorld(t, g)
	e := w.settled(t, "pay_rc2", w.to, "pm_card_chargeDeclined", event.Failed)
	w.dieAfterCommit(t, e)
	for range 2 {
		if _, err := w.reminders.FinishPending(context.Background(), 10); err != nil {
			t.Fatal(err)
		}
	}
	if r, _ := w.reminded(t); r != 1 {
		t.Fatalf("%d reminders, want 1", r)
	}
}

// The sweep's own send of a reminder loses its answer (the worker died
// before sending it): the sweep, like the worker, records it UNKNOWN,
// counted, and neither it nor a redelivery sends it again.
func TestTheSweepRecordsAReminderWhoseAnswerItLostUnknown(t *testing.T) {
	g, _ := reminderGate(t, testenv.Cache(t), 0)
	w := newEmailWorld(t, g)
	e := w.settled(t, "pay_rc4", w.to, "pm_card_chargeDeclined", event.Failed)
	w.dieAfterCommit(t, e)
	w.ses.arm(1)
	if _, err := w.reminders.FinishPending(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	if state := w.rowState(t, e.EventID, notify.ChannelReminder); state != inbox.NotifUnknown {
		t.Fatalf("the reminder's row: %s", state)
	}
	if _, err := w.reminders.FinishPending(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	if _, err := w.w.Process(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	if r, _ := w.reminded(t); r != 1 || w.counted("NotifUnknownDropped") != 1 || w.counted("NotifResent") != 0 {
		t.Fatalf("%d reminders (want the one whose answer was lost); metrics %s", r, w.emf.String())
	}
}

// The sweep, not a redelivery, finds a reminder whose worker died between
// its send and SENT: it records it UNKNOWN, counted, and sends nothing.
func TestTheSweepDoesNotRepeatAReminderWhoseWorkerDied(t *testing.T) {
	g, _ := reminderGate(t, testenv.Cache(t), 0)
	w := newEmailWorld(t, g)
	e := w.settled(t, "pay_rc5", w.to, "pm_card_chargeDeclined", event.Failed)
	w.dieAfterSend(t, e, notify.ChannelReminder)
	if _, err := w.reminders.FinishPending(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	if state := w.rowState(t, e.EventID, notify.ChannelReminder); state != inbox.NotifUnknown {
		t.Fatalf("the reminder's row: %s", state)
	}
	if r, _ := w.reminded(t); r != 1 || w.counted("NotifUnknownDropped") != 1 || w.counted("NotifResent") != 0 {
		t.Fatalf("%d reminders (want the one before the crash); metrics %s", r, w.emf.String())
	}
}

// A reminder whose worker died between its send and SENT is not sent again:
// it may have gone, and the reminder chose a rare loss over a duplicate
// nag. The redelivery records it UNKNOWN, counted.
func TestARemindersRepeatAfterACrashIsNotSent(t *testing.T) {
	g, _ := reminderGate(t, testenv.Cache(t), 0)
	w := newEmailWorld(t, g)
	e := w.settled(t, "pay_rc3", w.to, "pm_card_chargeDeclined", event.Failed)
	w.dieAfterSend(t, e, notify.ChannelReminder)
	if _, err := w.w.Process(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	if state := w.rowState(t, e.EventID, notify.ChannelReminder); state != inbox.NotifUnknown {
		t.Fatalf("the reminder's row: %s", state)
	}
	if r, _ := w.reminded(t); r != 1 || w.counted("NotifUnknownDropped") < 1 || w.counted("NotifResent") != 0 {
		t.Fatalf("%d reminders (want the one before the crash); metrics %s", r, w.emf.String())
	}
}

// A redelivery finds the email's row held by the sweep (mid-send, its
// lease running): it keeps off, so a crash's repeat is a second copy and
// never a third.
func TestTheWorkerKeepsOffARowTheSweepHolds(t *testing.T) {
	w := newEmailWorld(t)
	e := w.paid(t, "pay_e7", w.to)
	w.dieAfterSend(t, e, notify.ChannelEmail)
	// The sweep has claimed the row and is sending it.
	if _, err := w.pool.Exec(context.Background(), `UPDATE notif SET lease_until = now() + interval '1 minute' WHERE event_id = $1 AND channel = 'email'`, e.EventID); err != nil {
		t.Fatal(err)
	}
	res, err := w.w.Process(context.Background(), e)
	if err != nil || strings.Contains(res.Extra, "email=sent") {
		t.Fatalf("the redelivery sent under the sweep's lease: %+v %v", res, err)
	}
	if n := len(w.emails(t)); n != 1 {
		t.Fatalf("%d emails, want the one before the crash", n)
	}
}

// Every email type whose send timed out is sent again by the sweep (each
// chose a duplicate over a loss), and counted.
func TestEveryPaymentEmailWhoseSendTimedOutIsSentAgain(t *testing.T) {
	for _, state := range []string{event.Succeeded, event.Failed, event.Refunded, event.RefundFailed} {
		t.Run(state, func(t *testing.T) {
			w := newEmailWorld(t)
			e := w.settled(t, "pay_t"+strings.ToLower(state[:4]), w.to, "pm_1", state)
			w.ses.arm(1)
			if res, err := w.w.Process(context.Background(), e); err != nil || res.Extra != "email=failed" {
				t.Fatalf("%+v %v", res, err)
			}
			if _, err := w.pool.Exec(context.Background(), `UPDATE notif SET next_attempt_at = now() WHERE event_id = $1`, e.EventID); err != nil {
				t.Fatal(err)
			}
			if n, err := w.sweeper.FinishPending(context.Background(), 10); err != nil || n != 1 {
				t.Fatalf("the sweep finished %d: %v", n, err)
			}
			if n := len(w.emails(t)); n != 2 || w.emailState(t, e.EventID) != inbox.NotifSent {
				t.Fatalf("%d emails (row %s), want the timed-out one and its repeat", n, w.emailState(t, e.EventID))
			}
			if w.counted("NotifUnknownRetried") < 1 {
				t.Errorf("not counted: %s", w.emf.String())
			}
		})
	}
}

// A receipt still owed when the refund's email goes out is sent all the
// same: an email has no replace id, so the later one does not hide it, and
// both say something that happened.
func TestAReceiptIsNotSupersededByTheRefundsEmail(t *testing.T) {
	w := newEmailWorld(t)
	paid := w.paid(t, "pay_s1", w.to)
	w.ses.arm(1)
	if res, err := w.w.Process(context.Background(), paid); err != nil || res.Extra != "email=failed" {
		t.Fatalf("%+v %v", res, err)
	}
	refunded := payment("pay_s1", "m1", event.Refunded, 3000)
	refunded.CallerID = w.caller
	if res, err := w.w.Process(context.Background(), refunded); err != nil || res.Extra != "email=sent" {
		t.Fatalf("the refund: %+v %v", res, err)
	}
	if _, err := w.pool.Exec(context.Background(), `UPDATE notif SET next_attempt_at = now() WHERE event_id = $1`, paid.EventID); err != nil {
		t.Fatal(err)
	}
	if n, err := w.sweeper.FinishPending(context.Background(), 10); err != nil || n != 1 || w.emailState(t, paid.EventID) != inbox.NotifSent {
		t.Fatalf("the sweep finished %d (%v), the receipt's row %s", n, err, w.emailState(t, paid.EventID))
	}
}

// Two declines of one card, both workers dead after the commit: the sweep
// finds both reminders and its gate lets one through, the other DROPPED.
func TestTheSweepAsksTheGateToo(t *testing.T) {
	g, _ := reminderGate(t, testenv.Cache(t), 0)
	w := newEmailWorld(t, g)
	var ids []string
	for _, pid := range []string{"pay_sg1", "pay_sg2"} {
		e := w.settled(t, pid, w.to, "pm_card_chargeDeclined", event.Failed)
		w.dieAfterCommit(t, e)
		ids = append(ids, e.EventID)
	}
	if _, err := w.reminders.FinishPending(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	var dropped int
	if err := w.pool.QueryRow(context.Background(), `SELECT count(*) FROM notif WHERE channel = 'reminder' AND state = 'DROPPED' AND event_id = ANY($1)`, ids).Scan(&dropped); err != nil || dropped != 1 {
		t.Fatalf("%d DROPPED (%v), want 1", dropped, err)
	}
	if r, _ := w.reminded(t); r != 1 {
		t.Fatalf("%d reminders, want 1", r)
	}
}

// A repeat that dies mid-send too: the next attempt sends no third copy.
// The email may have gone twice already; it is recorded UNKNOWN, counted.
func TestARepeatThatAlsoDiesIsNotSentAThirdTime(t *testing.T) {
	w := newEmailWorld(t)
	e := w.paid(t, "pay_e8", w.to)
	for range 2 {
		w.dieAfterSend(t, e, notify.ChannelEmail)
	}
	res, err := w.w.Process(context.Background(), e)
	if err != nil || res.Extra != "email=unknown" {
		t.Fatalf("%+v %v", res, err)
	}
	if n, err := w.sweeper.FinishPending(context.Background(), 10); err != nil || n != 0 {
		t.Fatalf("the sweep took %d: %v", n, err)
	}
	if n := len(w.emails(t)); n != 2 || w.emailState(t, e.EventID) != inbox.NotifUnknown {
		t.Fatalf("%d emails (row %s), want 2 and UNKNOWN", n, w.emailState(t, e.EventID))
	}
	if w.counted("NotifResent") != 1 || w.counted("NotifUnknownDropped") != 1 {
		t.Errorf("want one repeat and one unknown counted: %s", w.emf.String())
	}
}

// The worker is mid-send when the sweep runs: the worker's lease keeps the
// sweep off the row, so one email goes out, not two.
func TestTheSweepKeepsOffARowTheWorkerIsSending(t *testing.T) {
	w := newEmailWorld(t)
	e := w.paid(t, "pay_e9", w.to)
	hold, entered := make(chan struct{}), make(chan struct{}, 1)
	w.ses.mu.Lock()
	w.ses.hold, w.ses.entered = hold, entered
	w.ses.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := w.w.Process(context.Background(), e)
		done <- err
	}()
	<-entered
	w.ses.mu.Lock()
	w.ses.hold = nil
	w.ses.mu.Unlock()
	n, err := w.sweeper.FinishPending(context.Background(), 10)
	close(hold)
	if err != nil || n != 0 {
		t.Fatalf("the sweep finished %d (%v) while the worker was sending", n, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(w.emails(t)); n != 1 || w.emailState(t, e.EventID) != inbox.NotifSent {
		t.Fatalf("%d emails (row %s), want 1", n, w.emailState(t, e.EventID))
	}
}

// With too little of the invocation left to send and record an email, the
// worker leaves it to a run with time: nothing sent, the row PENDING, no
// attempt counted.
func TestAnEmailIsNotStartedWithoutTimeToRecordIt(t *testing.T) {
	w := newEmailWorld(t)
	e := w.paid(t, "pay_e10", w.to)
	ctx, cancel := context.WithTimeout(context.Background(), inbox.SendWindow-time.Second)
	defer cancel()
	res, err := w.w.Process(ctx, e)
	if err != nil || res.Extra != "email=left" {
		t.Fatalf("%+v %v", res, err)
	}
	if n := len(w.emails(t)); n != 0 || w.emailState(t, e.EventID) != inbox.NotifPending {
		t.Fatalf("%d emails (row %s), want none and PENDING", n, w.emailState(t, e.EventID))
	}
	if res, err := w.w.Process(context.Background(), e); err != nil || res.Extra != "email=sent" {
		t.Fatalf("the next delivery, with time: %+v %v", res, err)
	}
}

// The sweep, like the worker, starts no email without time to record it:
// the row goes back unleased with its attempt uncounted, and the next run
// with time sends it.
func TestTheSweepStartsNoEmailWithoutTimeToRecordIt(t *testing.T) {
	w := newEmailWorld(t)
	e := w.paid(t, "pay_e11", w.to)
	w.dieAfterCommit(t, e)
	var before int
	if err := w.pool.QueryRow(context.Background(), `SELECT attempts FROM notif WHERE event_id = $1 AND channel = 'email'`, e.EventID).Scan(&before); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(context.Background(), inbox.SendWindow-time.Second)
	defer cancel()
	if _, err := w.sweeper.FinishPending(short, 10); err != nil {
		t.Fatal(err)
	}
	var attempts int
	var leased bool
	if err := w.pool.QueryRow(context.Background(), `SELECT attempts, lease_until IS NOT NULL FROM notif WHERE event_id = $1 AND channel = 'email'`, e.EventID).Scan(&attempts, &leased); err != nil {
		t.Fatal(err)
	}
	if n := len(w.emails(t)); n != 0 || w.emailState(t, e.EventID) != inbox.NotifPending || attempts != before || leased {
		t.Fatalf("%d emails, row %s, attempts %d (before %d), leased %v; want none, PENDING, unchanged, released", n, w.emailState(t, e.EventID), attempts, before, leased)
	}
	if _, err := w.sweeper.FinishPending(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	if n := len(w.emails(t)); n != 1 || w.emailState(t, e.EventID) != inbox.NotifSent {
		t.Fatalf("the next run, with time: %d emails, row %s", n, w.emailState(t, e.EventID))
	}
}

// A reminder's channel or sweep without its gate is refused at start (it
// would email "your card was declined" about every event), and so is a gate
// on a channel whose message is not a logical one.
func TestALogicalMessageNeedsItsGate(t *testing.T) {
	g, _ := reminderGate(t, testenv.Cache(t), 0)
	w := newEmailWorld(t)
	var sender notify.EmailSender
	raise := &inbox.Raise{Gate: g, Template: string(notify.CardDeclinedReminder), States: []string{event.Failed}}
	for name, ch := range map[string]inbox.Channel{
		"a reminder without a gate": {Name: "reminder", Sender: sender, Message: notify.CardDeclinedReminder},
		"a receipt with a gate":     {Name: "email", Sender: sender, Raise: raise},
	} {
		if _, err := inbox.New(w.pool, w.pusher, inbox.Config{Extra: []inbox.Channel{ch}}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := inbox.NewNotifSweeper(w.pool, sender, inbox.SweepConfig{Channel: "reminder", Message: notify.CardDeclinedReminder}); err == nil {
		t.Error("a reminder sweep without a gate: accepted")
	}
}

// Our own refusals — the PSP refused our request (a rotated key), nothing
// at the PSP carries the payment — are not the card's fault: the buyer
// gets the decline email, never a reminder to update the card, and the
// card's gate is left alone, so the issuer's decline of the same card
// later raises its reminder.
func TestOurOwnRefusalRaisesNoCardReminder(t *testing.T) {
	g, _ := reminderGate(t, testenv.Cache(t), 0)
	w := newEmailWorld(t, g)
	var ours []string
	for i, code := range []string{"psp_invalid_request", "psp_no_charge"} {
		e := w.declined(t, fmt.Sprintf("pay_own%d", i), w.to, "pm_card_visa", code)
		ours = append(ours, e.EventID)
		if _, err := w.w.Process(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	if r, d := w.reminded(t); r != 0 || d < 2 {
		t.Fatalf("our own refusals: %d reminders and %d decline emails, want none and at least 2", r, d)
	}
	for _, id := range ours {
		if state := w.rowState(t, id, notify.ChannelReminder); state != "none" {
			t.Errorf("%s: a reminder row %s, want none", id, state)
		}
	}
	issuer := w.declined(t, "pay_issuer", w.to, "pm_card_visa", "insufficient_funds")
	if _, err := w.w.Process(context.Background(), issuer); err != nil {
		t.Fatal(err)
	}
	if r, _ := w.reminded(t); r != 1 || w.rowState(t, issuer.EventID, notify.ChannelReminder) != inbox.NotifSent {
		t.Fatalf("the issuer's decline: %d reminders, row %s; want 1 and SENT", r, w.rowState(t, issuer.EventID, notify.ChannelReminder))
	}
}

// A reminder row our own refusal raised before the decline code was
// checked (written by the worker of the version before, PENDING when the
// new one is deployed) is dropped by the sweep, not sent.
func TestTheSweepDropsAReminderOurOwnRefusalRaised(t *testing.T) {
	g, _ := reminderGate(t, testenv.Cache(t), 0)
	w := newEmailWorld(t, g)
	e := w.declined(t, "pay_old", w.to, "pm_card_visa", "psp_invalid_request")
	payload, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.pool.Exec(context.Background(), `
		INSERT INTO notif (event_id, channel, state, replace_id, caller_id, payload, created_at)
		VALUES ($1, 'reminder', 'PENDING', $2, $3, $4, now() - interval '1 minute')`, e.EventID, e.PaymentID, e.CallerID, payload); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reminders.FinishPending(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	if r, _ := w.reminded(t); r != 0 {
		t.Fatalf("%d reminders sent for our own refusal", r)
	}
	if state := w.rowState(t, e.EventID, notify.ChannelReminder); state != inbox.NotifDropped {
		t.Fatalf("the reminder's row: %s, want DROPPED", state)
	}
}

// unverified makes the reminder's sender an address SES has not verified:
// SES refuses its sends (400 MessageRejected), a send that definitely did
// not go out. It returns the verified one.
func (w *emailWorld) unverified() string {
	from := w.reminder.From
	w.reminder.From = "unverified-" + testenv.RandomID(4) + "@oncepay.test"
	return from
}

// A reminder the gate let through whose send SES refused did not reach the
// buyer: the gate gives the card back, so the card's next decline raises
// its reminder (before, the card was held for the window and the next
// decline's reminder dropped, while the buyer had none). The refused row,
// retried by the sweep, is then the duplicate: one reminder in all.
func TestARefusedReminderGivesTheCardBack(t *testing.T) {
	g, _ := reminderGate(t, testenv.Cache(t), 0)
	w := newEmailWorld(t, g)
	first := w.settled(t, "pay_rf1", w.to, "pm_card_visa", event.Failed)
	from := w.unverified()
	if res, err := w.w.Process(context.Background(), first); err != nil || res.Extra != "email=sent reminder=failed" {
		t.Fatalf("the refused reminder: %+v %v", res, err)
	}
	if r, _ := w.reminded(t); r != 0 {
		t.Fatalf("%d reminders taken by SES from an unverified sender: the refusal is not injected", r)
	}
	w.reminder.From = from
	second := w.settled(t, "pay_rf2", w.to, "pm_card_visa", event.Failed)
	if _, err := w.w.Process(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	if r, _ := w.reminded(t); r != 1 {
		t.Fatalf("the card's next decline: %d reminders, want 1 (row %s): the refused reminder kept the card",
			r, w.rowState(t, second.EventID, notify.ChannelReminder))
	}
	// The sweep retries the refused one: the duplicate now.
	if _, err := w.pool.Exec(context.Background(), `UPDATE notif SET next_attempt_at = now() WHERE event_id = $1`, first.EventID); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reminders.FinishPending(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	if r, _ := w.reminded(t); r != 1 {
		t.Fatalf("%d reminders, want 1", r)
	}
	if a, b := w.rowState(t, first.EventID, notify.ChannelReminder), w.rowState(t, second.EventID, notify.ChannelReminder); a != inbox.NotifDropped || b != inbox.NotifSent {
		t.Fatalf("the reminders' rows: %s and %s, want DROPPED and SENT", a, b)
	}
}

// The sweep gives up on a reminder SES keeps refusing (STUCK, past its
// horizon): the card is given back too.
func TestAReminderTheSweepGivesUpOnGivesTheCardBack(t *testing.T) {
	g, _ := reminderGate(t, testenv.Cache(t), 0)
	w := newEmailWorld(t, g)
	first := w.settled(t, "pay_gu1", w.to, "pm_card_visa", event.Failed)
	w.dieAfterCommit(t, first)
	from := w.unverified()
	if _, err := w.pool.Exec(context.Background(), `UPDATE notif SET armed_at = now() - interval '25 hours' WHERE event_id = $1 AND channel = 'reminder'`, first.EventID); err != nil {
		t.Fatal(err)
	}
	if _, err := w.reminders.FinishPending(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	if state := w.rowState(t, first.EventID, notify.ChannelReminder); state != inbox.NotifStuck {
		t.Fatalf("the refused reminder's row: %s, want STUCK", state)
	}
	w.reminder.From = from
	second := w.settled(t, "pay_gu2", w.to, "pm_card_visa", event.Failed)
	if _, err := w.w.Process(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	if r, _ := w.reminded(t); r != 1 || w.rowState(t, second.EventID, notify.ChannelReminder) != inbox.NotifSent {
		t.Fatalf("the card's next decline: %d reminders (row %s), want 1 and SENT: the given-up reminder kept the card",
			r, w.rowState(t, second.EventID, notify.ChannelReminder))
	}
}

// A reminder whose answer was lost may be in the buyer's inbox: it keeps
// the card, and the card's next decline is the duplicate.
func TestAReminderThatMayHaveGoneKeepsTheCard(t *testing.T) {
	g, _ := reminderGate(t, testenv.Cache(t), 0)
	w := newEmailWorld(t, g)
	first := w.settled(t, "pay_mg1", w.to, "pm_card_visa", event.Failed)
	w.ses.skip, w.ses.left = 1, 1 // the decline email goes, the reminder's answer is lost
	if res, err := w.w.Process(context.Background(), first); err != nil || res.Extra != "email=sent reminder=unknown" {
		t.Fatalf("%+v %v", res, err)
	}
	second := w.settled(t, "pay_mg2", w.to, "pm_card_visa", event.Failed)
	if _, err := w.w.Process(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	if r, _ := w.reminded(t); r != 1 || w.rowState(t, second.EventID, notify.ChannelReminder) != inbox.NotifDropped {
		t.Fatalf("%d reminders (the next decline's row %s), want the lost-answer one only and DROPPED", r, w.rowState(t, second.EventID, notify.ChannelReminder))
	}
}
