package inbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sesv2"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/phone"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// loseReplies passes sends to moto's SES and, while armed, throws the
// answer away after SES took the message: the provider's timeout, the
// send made and unknown.
type loseReplies struct {
	notify.SESAPI
	mu   sync.Mutex
	left int
}

func (l *loseReplies) SendEmail(ctx context.Context, in *sesv2.SendEmailInput, opts ...func(*sesv2.Options)) (*sesv2.SendEmailOutput, error) {
	out, err := l.SESAPI.SendEmail(ctx, in, opts...)
	l.mu.Lock()
	defer l.mu.Unlock()
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
	sweeper  *inbox.NotifSweeper
	crash    *string // AfterSend fails once for this channel when set
}

func newEmailWorld(t *testing.T) *emailWorld {
	t.Helper()
	ses := testenv.SES(t)
	ew := &emailWorld{ses: &loseReplies{SESAPI: ses}, from: testenv.NewEmailIdentity(t, ses), to: "buyer-" + testenv.RandomID(4) + "@example.com", crash: new(string)}
	var sender notify.EmailSender
	ew.world = newWorld(t, func(c *inbox.Config) {
		c.Extra = []inbox.Channel{{Name: notify.ChannelEmail, Sender: &sender, OnlyWithReceipt: true}}
		c.Hooks.AfterSend = func(_ context.Context, _ event.Event, channel string) error {
			if *ew.crash == channel {
				*ew.crash = ""
				return errors.New("the worker died after the send")
			}
			return nil
		}
	})
	sender = notify.EmailSender{SES: ew.ses, DB: ew.pool, From: ew.from}
	sw, err := inbox.NewNotifSweeper(ew.pool, sender, inbox.SweepConfig{Channel: notify.ChannelEmail, Grace: time.Nanosecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ew.sweeper = sw
	return ew
}

// paid writes the payment's ledger row with a receipt address (or none),
// as the api does, and returns its SUCCEEDED event.
func (w *emailWorld) paid(t *testing.T, pid, to string) event.Event {
	t.Helper()
	_, _, err := ledger.New(w.pool).InsertPending(context.Background(), ledger.Payment{ID: pid, CallerID: "u1", ClientKey: "K-" + pid,
		Fingerprint: "H", Amount: 3000, Currency: "USD", MerchantID: "m1", OrderID: pid, PaymentMethod: "pm_1",
		DeadlineAt: time.Now().Add(5 * time.Second)}, to)
	if err != nil {
		t.Fatal(err)
	}
	return payment(pid, "m1", event.Succeeded, 3000)
}

func (w *emailWorld) emails(t *testing.T) []phone.Email {
	t.Helper()
	return testenv.SentEmails(t, w.to)
}

func (w *emailWorld) emailState(t *testing.T, eventID string) string {
	t.Helper()
	var s string
	if err := w.pool.QueryRow(context.Background(), `SELECT COALESCE((SELECT state FROM notif WHERE event_id = $1 AND channel = 'email'), 'none')`, eventID).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
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

// The worker dies between the email's send and SENT: the redelivery sends
// it again (the accepted duplicate: the email has no replace id), and then
// never a third.
func TestAWorkerCrashAfterTheEmailSendsASecondCopyAndNotAThird(t *testing.T) {
	w := newEmailWorld(t)
	e := w.paid(t, "pay_e3", w.to)
	*w.crash = notify.ChannelEmail
	if _, err := w.w.Process(context.Background(), e); err == nil {
		t.Fatal("the crash after the send did not stop the delivery")
	}
	for range 2 {
		if _, err := w.w.Process(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(w.emails(t)); n != 2 || w.emailState(t, e.EventID) != inbox.NotifSent {
		t.Fatalf("%d emails (row %s), want 2: the one before the crash and its one repeat", n, w.emailState(t, e.EventID))
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
	if !strings.Contains(w.emf.String(), `"NotifUnknownRetried":1`) {
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
