package story_test

// The story's beats and branches as scenarios on the whole path: API, key
// store, ledger, PSP, resolver, webhook, outbox, relay, queue, worker, push.
// Each asserts the money (PSP charges, credits, m1's balance) and what the
// phone shows, not just a status code. The API-level halves of 3a, 3c, 3d
// and P6 live in internal/api/pay_test.go
// (TestCrashedOwnerIsTakenOverAfterLeaseAndMargin, TestPausedOwnerCannotComplete,
// TestReorderedBodyReplaysAndAChangedAmountIs422,
// TestExpiredKeyRecordStillPresentIsAnsweredFromTheLedger); the messaging
// halves of P3, P4, R and N on published events live in
// infra-tests/messaging. These play them from the tap to the phone.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/testkit/story"
)

var ctx = context.Background()

// crashOnce returns an API hook that crashes the first request to reach it.
func crashOnce() func(context.Context) error {
	var done atomic.Bool
	return func(context.Context) error {
		if done.CompareAndSwap(false, true) {
			return api.ErrCrash
		}
		return nil
	}
}

// settle runs every hop until nothing moves.
func settle(t *testing.T, w *story.World) {
	t.Helper()
	if err := w.Settle(ctx); err != nil {
		t.Fatal(err)
	}
}

// expectCount checks m1's count after the world has settled.
func expectCount(t *testing.T, w *story.World, want story.Count) story.Count {
	t.Helper()
	settle(t, w)
	c, err := w.Count(ctx, "m1")
	if err != nil {
		t.Fatal(err)
	}
	// Alerts are the pushes that reached the phone: a double push collapses
	// into one shown notification, so only the alert count catches it.
	if c.Charges != want.Charges || c.Credits != want.Credits || c.Balance != want.Balance || c.Shown != want.Shown || c.Alerts != want.Alerts {
		t.Fatalf("count = %+v, want %d charges, %d credits, m1 = %d, %d shown, %d alerts", c, want.Charges, want.Credits, want.Balance, want.Shown, want.Alerts)
	}
	for _, p := range w.PushLog() {
		if p.ReplaceID == "" || p.ReplaceID != p.PaymentID {
			t.Fatalf("push %+v without the payment as its replace id", p)
		}
	}
	return c
}

func expectStatus(t *testing.T, r api.Response, status int) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("answer %d %s, want %d", r.Status, r.Body, status)
	}
}

var pid7 = story.PaymentID("u1", "K1")

// Beat 3a: the owner dies after claiming (at three points); after its lease
// plus the margin a repeat takes over, checks the ledger row first and
// replays the derived PSP key. One charge, one credit, one notification.
func TestBeat3a_CrashedOwnerIsTakenOver_OneChargeOneCreditOneNotification(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		set     func(*api.Hooks, func(context.Context) error)
		charged int // charges made before the crash
	}{
		{"after the PENDING insert", func(h *api.Hooks, f func(context.Context) error) { h.AfterPendingInsert = f }, 0},
		{"after the PSP charged", func(h *api.Hooks, f func(context.Context) error) { h.AfterPSPReply = f }, 1},
		{"before the key record completes", func(h *api.Hooks, f func(context.Context) error) { h.BeforeComplete = f }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, story.Options{})
			var h api.Hooks
			tc.set(&h, crashOnce())
			w.SetAPIHooks(h)
			expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusInternalServerError)
			if n := len(w.Charges("")); n != tc.charged {
				t.Fatalf("%d charges before the takeover, want %d", n, tc.charged)
			}
			w.Clock.Advance(w.Timing.Deadline)
			// The record is still IN_PROGRESS: inside lease + margin, 409,
			// whatever the dead owner got done.
			expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusConflict)
			w.Clock.Advance(w.Timing.Margin + time.Millisecond)
			late := w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now())
			expectStatus(t, late, http.StatusCreated)
			if ch := w.Charges(""); len(ch) != 1 || ch[0].IdempotencyKey != ids.ChargeKey(pid7) {
				t.Fatalf("charges %+v, want one under the derived key", ch)
			}
			expectCount(t, w, story.Count{Charges: 1, Credits: 1, Balance: 15000, Shown: 1, Alerts: 1})
		})
	}
}

// Beat 3b: the owner dies after writing PENDING and before the PSP call.
// The resolver leaves the row alone while its owner may still run; the
// phone's retry inside the lease hears 409; the retry after it finishes the
// payment. If the phone never comes back, the resolver settles the stale
// PENDING row itself. Either way: one charge, one credit, one notification.
func TestBeat3b_PendingWaitsForTheRetryOrTheResolver(t *testing.T) {
	t.Parallel()
	for _, phoneReturns := range []bool{true, false} {
		name := "the phone retries"
		if !phoneReturns {
			name = "the phone never comes back: the resolver settles it"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, story.Options{})
			w.SetAPIHooks(api.Hooks{AfterPendingInsert: crashOnce()})
			expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusInternalServerError)
			r, err := w.Resolver()
			if err != nil {
				t.Fatal(err)
			}
			if rep, err := r.Run(ctx); err != nil || rep.Claimed != 0 {
				t.Fatalf("resolver inside the deadline = %+v, %v: it must leave a PENDING row whose owner may run", rep, err)
			}
			w.Clock.Advance(time.Second)
			expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusConflict)
			if n := len(w.Charges("")); n != 0 {
				t.Fatalf("%d charges while PENDING waits", n)
			}
			w.Clock.Advance(w.Timing.Deadline + w.Timing.Margin)
			if phoneReturns {
				expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusCreated)
			} else if rep, err := r.Run(ctx); err != nil || rep.Succeeded != 1 {
				t.Fatalf("resolver past deadline + margin = %+v, %v", rep, err)
			}
			if p, _ := w.Ledger.Get(ctx, pid7); p.State != ledger.Succeeded {
				t.Fatalf("row %s", p.State)
			}
			expectCount(t, w, story.Count{Charges: 1, Credits: 1, Balance: 15000, Shown: 1, Alerts: 1})
		})
	}
}

// Beat 3c: the owner freezes after the PSP answered (a zombie). A repeat
// takes over and finishes; the zombie wakes, its completion is refused and
// it answers what the record holds. One charge, one credit, one notification.
func TestBeat3c_PausedOwnerIsAZombieThatCannotComplete(t *testing.T) {
	t.Parallel()
	w := newWorld(t, story.Options{})
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	w.SetAPIHooks(api.Hooks{AfterPSPReply: func(context.Context) error {
		first := false
		once.Do(func() { first = true })
		if first {
			close(paused)
			<-resume
		}
		return nil
	}})
	zombie := make(chan api.Response)
	go func() { zombie <- w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()) }()
	<-paused
	w.Clock.Advance(w.Timing.Deadline + w.Timing.Margin + time.Second)
	taker := w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now())
	expectStatus(t, taker, http.StatusCreated)
	close(resume)
	z := <-zombie
	if z.Status != http.StatusCreated || string(z.Body) != string(taker.Body) || z.Headers.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("zombie answered %d %s, want the taker's answer replayed", z.Status, z.Body)
	}
	expectCount(t, w, story.Count{Charges: 1, Credits: 1, Balance: 15000, Shown: 1, Alerts: 1})
}

// Beat 3d: A2 reuses K1 with 3,500. 422 and nothing runs: no PSP call, no
// second credit, no second notification; the first payment is untouched.
func TestBeat3d_KeyReuseIs422AndMovesNoMoney(t *testing.T) {
	t.Parallel()
	w := newWorld(t, story.Options{})
	expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusCreated)
	settle(t, w)
	w.Clock.Advance(10 * time.Second)
	reuse := w.Pay(ctx, "u1", "K1", strings.Replace(story.Body, "3000", "3500", 1), w.Clock.Now())
	expectStatus(t, reuse, http.StatusUnprocessableEntity)
	// Also after the key record's window, when only the ledger row knows H1.
	w.Clock.Advance(2 * time.Hour)
	expectStatus(t, w.Pay(ctx, "u1", "K1", strings.Replace(story.Body, "3000", "3500", 1), w.Clock.Now()), http.StatusUnprocessableEntity)
	if p, _ := w.Ledger.Get(ctx, pid7); p.Amount != 3000 {
		t.Fatalf("row amount %d", p.Amount)
	}
	expectCount(t, w, story.Count{Charges: 1, Credits: 1, Balance: 15000, Shown: 1, Alerts: 1})
}

// noGuard is Branch X's counterfactual, here and nowhere else: the durable
// guard removed. Every payment gets a random id and the unique (caller,
// key) never meets a second row, so a request whose key record expired is a
// stranger to the ledger and to the PSP.
type noGuard struct{ api.Ledger }

func (g noGuard) InsertPending(ctx context.Context, p ledger.Payment, receiptEmail string) (ledger.Payment, bool, error) {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	p.ID = "pay_x" + hex.EncodeToString(b)
	p.ClientKey += "#" + hex.EncodeToString(b)
	return g.Ledger.InsertPending(ctx, p, receiptEmail)
}

// Branch X: the buyer comes back after two hours, when the key record has
// forgotten K1. With the durable guard the ledger answers and nothing
// reaches the PSP (snapshot P6); without it (the counterfactual switch) the
// PSP charges again: $60.00 for one order, m1 credited twice, two
// notifications. The story's "one charge" check fails with the switch on.
func TestBranchX_WithoutTheDurableGuardTheTwoHourReturnChargesTwice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		noGuard bool
		want    story.Count
	}{
		{"with the durable guard (P6)", false, story.Count{Charges: 1, Credits: 1, Balance: 15000, Shown: 1, Alerts: 1}},
		{"without it (Branch X)", true, story.Count{Charges: 2, Credits: 2, Balance: 18000, Shown: 2, Alerts: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := story.Options{}
			if tc.noGuard {
				o.WrapLedger = func(l api.Ledger) api.Ledger { return noGuard{l} }
			}
			w := newWorld(t, o)
			first := w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now())
			expectStatus(t, first, http.StatusCreated)
			settle(t, w)
			w.Clock.Advance(2 * time.Hour)
			back := w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now())
			expectStatus(t, back, http.StatusCreated)
			if replayed := back.Headers.Get("Idempotent-Replayed") == "true"; replayed == tc.noGuard {
				t.Fatalf("two hours later: replayed = %v", replayed)
			}
			c := expectCount(t, w, tc.want)
			if mismatch := c.Mismatch(); tc.noGuard != (len(mismatch) > 0) {
				t.Fatalf("the story's count check says %v", mismatch)
			}
		})
	}
}

// relayThriceWorkerDiesAfterPush plays P3 and P4 on a settled payment's
// event: the relay crashes after sending twice, the first worker dies after
// pushing, the queue redelivers, the relay's third send arrives.
func relayThriceWorkerDiesAfterPush(t *testing.T, w *story.World, eventID string) {
	t.Helper()
	w.RelayCrashes.Store(2)
	for range 2 {
		if _, err := w.Stream.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var done atomic.Bool
	w.SetWorkerHooks(inbox.Hooks{AfterPush: func(_ context.Context, e event.Event) error {
		if e.EventID == eventID && done.CompareAndSwap(false, true) {
			return api.ErrCrash
		}
		return nil
	}})
	if _, err := w.Queue.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	w.SetWorkerHooks(inbox.Hooks{})
	if !done.Load() {
		t.Fatal("the worker never reached the push")
	}
	if _, err := w.Queue.Expire(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Queue.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Stream.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Queue.Drain(ctx); err != nil {
		t.Fatal(err)
	}
}

// Branch N: without the notification record every delivery of ev_7 pushes
// (three alerts for one payment: the first worker's, the redelivery's, the
// relay's third send's); the replace id still shows one notification. With
// the record: the crash's unavoidable second push, and no third. m1 is
// credited once either way: the inbox, not the notif record, guards money.
func TestBranchN_WithoutTheNotifRecordEveryDeliveryPushes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		withoutRecord bool
		alerts        int
	}{{"with the notif record", false, 2}, {"without it (Branch N)", true, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, story.Options{WithoutNotifRecord: tc.withoutRecord})
			expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusCreated)
			relayThriceWorkerDiesAfterPush(t, w, ids.EventID(pid7, "SUCCEEDED"))
			if w.Queue.Stats().Received < 3 {
				// The queue dropped the relay's third send: AWS (and LocalStack)
				// keep a dedup id 5 minutes; moto forgets it once the message is
				// deleted and delivers. A send after the window gets through on
				// AWS too, so play that copy rather than compare nothing.
				deliverOnceMore(t, w, ids.EventID(pid7, "SUCCEEDED"))
			}
			expectCount(t, w, story.Count{Charges: 1, Credits: 1, Balance: 15000, Shown: 1, Alerts: tc.alerts})
		})
	}
}

// deliverOnceMore hands the worker one more copy of the event, as a queue
// delivers a send it did not drop: read from the outbox intent the ledger
// recorded, the same bytes every re-send carries.
func deliverOnceMore(t *testing.T, w *story.World, eventID string) {
	t.Helper()
	var payload string
	if err := w.Pool.QueryRow(ctx, `SELECT payload::text FROM outbox_intents WHERE event_id = $1`, eventID).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	e, err := event.Unmarshal([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Worker.Process(ctx, e); err != nil {
		t.Fatal(err)
	}
}

// Branch R, ready means notified (docs/mechanism.md#seed-part-7): the worker
// commits the credit and dies before pushing. The redelivery finds the inbox
// row and still pushes, because the notification record says PENDING: the row
// is SENT after the redelivery, before any sweep ran. The counterfactual is
// the source document's worker, for which the inbox row means done: the
// redelivery only acknowledges and nothing else finishes the record, so m1
// is credited and the phone shows nothing ("after the redelivery at 44.50, the phone shows no
// notification, although m1 was credited"); the story's count check fails.
// With only the duplicate's check removed the sweep pushes instead: each
// finisher alone is enough, so the guarded row's SENT-after-the-redelivery
// is what shows the redelivery's own check at work.
func TestBranchR_WorkerDiesAfterCommitTheRedeliveryStillNotifies(t *testing.T) {
	t.Parallel()
	eventID := ids.EventID(pid7, "SUCCEEDED")
	for _, tc := range []struct {
		name            string
		o               story.Options
		afterRedelivery string // the notif row after the redelivery
		afterSweep      string // and after one sweep
		alerts          int
	}{
		{"ready means notified", story.Options{}, "SENT", "SENT", 1},
		{"the duplicate only acknowledges, the sweep still finishes", story.Options{DuplicateOnlyAcks: true}, "PENDING", "SENT", 1},
		{"without either (Branch R)", story.Options{DuplicateOnlyAcks: true, WithoutNotifSweep: true}, "PENDING", "PENDING", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, tc.o)
			notif := func(when, want string) {
				t.Helper()
				var state string
				if err := w.Pool.QueryRow(ctx, `SELECT state FROM notif WHERE event_id = $1`, eventID).Scan(&state); err != nil {
					t.Fatalf("%s: notif row: %v", when, err)
				}
				if state != want {
					t.Fatalf("%s: notif %s, want %s", when, state, want)
				}
			}
			expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusCreated)
			var done atomic.Bool
			w.SetWorkerHooks(inbox.Hooks{AfterCommit: func(_ context.Context, e event.Event) error {
				if e.EventID == eventID && done.CompareAndSwap(false, true) {
					return api.ErrCrash
				}
				return nil
			}})
			if _, err := w.Stream.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Queue.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			w.SetWorkerHooks(inbox.Hooks{})
			if got, _ := w.CollectPushes(ctx); len(got) != 0 || !done.Load() {
				t.Fatalf("%d pushes before the redelivery (crashed: %v)", len(got), done.Load())
			}
			if b, _ := w.Balance(ctx, "m1"); b != 15000 {
				t.Fatalf("m1 = %d after the commit", b)
			}
			notif("after the crash", "PENDING")

			// The redelivery, 30 s later on AWS: a duplicate for the inbox.
			if n, err := w.Queue.Expire(ctx); err != nil || n != 1 {
				t.Fatalf("released %d in-flight messages (%v), want the crashed one", n, err)
			}
			if _, err := w.Queue.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			if d := w.EMF.Sum("EventsDuplicate"); d != 1 {
				t.Fatalf("%v duplicates counted, want the redelivery", d)
			}
			notif("after the redelivery", tc.afterRedelivery)
			if _, err := w.Notifs.FinishPending(ctx, inbox.SweepLimit); err != nil {
				t.Fatal(err)
			}
			notif("after the sweep", tc.afterSweep)

			want := story.Count{Charges: 1, Credits: 1, Balance: 15000, Shown: tc.alerts, Alerts: tc.alerts}
			if tc.afterSweep == "SENT" {
				expectCount(t, w, want)
				return
			}
			// Nothing will finish the row, so Settle would never come quiet:
			// wait out a push in flight to the phone, then count.
			if _, err := w.AwaitPushes(ctx, time.Second); err != nil {
				t.Fatal(err)
			}
			c, err := w.Count(ctx, "m1")
			if err != nil {
				t.Fatal(err)
			}
			if c.Charges != want.Charges || c.Credits != want.Credits || c.Balance != want.Balance || c.Shown != want.Shown || c.Alerts != want.Alerts {
				t.Fatalf("count = %+v, want %+v", c, want)
			}
			if m := c.Mismatch(); len(m) != 1 || !strings.Contains(m[0], "0 notifications") {
				t.Fatalf("the story's count check says %v, want only the missing notification", m)
			}
			if open, err := w.InTransit(ctx); err != nil || open != 1 {
				t.Fatalf("%d events in transit (%v), want the one owed notification", open, err)
			}
		})
	}
}

// The late original (docs/mechanism.md#seed-part-4): the deadline refuses it,
// the void stops it without the deadline, the VOID ledger row stops it after
// the window. Only K2 charges; m1 is untouched.
func TestBranchLateOriginal_DeadlineAndVoidStopIt(t *testing.T) {
	t.Parallel()
	w := newWorld(t, story.Options{})
	if err := story.LateOriginal(ctx, w); err != nil {
		t.Fatal(err)
	}
	expectCount(t, w, story.Count{Charges: 1, Credits: 0, Balance: 12000, Shown: 1, Alerts: 1})
}

// Snapshot P6: after the story's main line, two hours on, the key record has
// forgotten K1 and the ledger answers; nothing new reaches the PSP, the
// merchant or the phone.
func TestSnapshotP6_TheBuyerComesBackTwoHoursLater(t *testing.T) {
	t.Parallel()
	w := newWorld(t, story.Options{})
	if _, err := story.Play(ctx, w); err != nil {
		t.Fatal(err)
	}
	before := w.Phone.Alerts()
	w.Clock.Advance(2 * time.Hour)
	back := w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now())
	expectStatus(t, back, http.StatusCreated)
	// The main line's worker died after pushing (P4): its redelivery pushed
	// again under the same replace id, so two alerts and one notification.
	c := expectCount(t, w, story.Count{Charges: 1, Credits: 1, Balance: 15000, Shown: 1, Alerts: 2})
	if c.Alerts != before {
		t.Fatalf("the return buzzed the phone: %d -> %d alerts", before, c.Alerts)
	}
}

func TestCountMismatchNamesEveryDifference(t *testing.T) {
	if m := story.Want.Mismatch(); len(m) != 0 {
		t.Fatalf("the story's own count mismatches: %v", m)
	}
	m := story.Count{Charges: 2, Credits: 2, Balance: 18000, Shown: 2}.Mismatch()
	if len(m) != 4 {
		t.Fatalf("mismatch = %v, want all four counts named", m)
	}
}

// Found by the chaos runner (seed 42): after the key record's window a key
// reuse claims the expired record with its own fingerprint and dies before
// the ledger refuses it. The real payment's repeats must not hear 422 from
// that unchecked fingerprint: inside the dead claimant's lease they hear
// 409 (the ledger row is theirs), after it they take over and the ledger
// answers; the reuse gets 422 once the ledger is asked. Nothing moves money.
func TestKeyReuseThatDiesAfterTheWindowDoesNotLockOutThePayment(t *testing.T) {
	t.Parallel()
	w := newWorld(t, story.Options{})
	reuse := strings.Replace(story.Body, "3000", "3500", 1)
	first := w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now())
	expectStatus(t, first, http.StatusCreated)
	settle(t, w)
	w.Clock.Advance(2 * time.Hour)
	w.SetAPIHooks(api.Hooks{AfterClaim: crashOnce()})
	expectStatus(t, w.Pay(ctx, "u1", "K1", reuse, w.Clock.Now()), http.StatusInternalServerError)
	w.SetAPIHooks(api.Hooks{})

	w.Clock.Advance(time.Second)
	expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusConflict)
	// The reuse's own repeat meets its dead twin's lease: in progress.
	expectStatus(t, w.Pay(ctx, "u1", "K1", reuse, w.Clock.Now()), http.StatusConflict)
	w.Clock.Advance(w.Timing.Deadline + w.Timing.Margin)
	back := w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now())
	expectStatus(t, back, http.StatusCreated)
	if string(back.Body) != string(first.Body) || back.Headers.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after the lease: %s replayed=%q, want the first answer replayed", back.Body, back.Headers.Get("Idempotent-Replayed"))
	}
	expectStatus(t, w.Pay(ctx, "u1", "K1", reuse, w.Clock.Now()), http.StatusUnprocessableEntity)
	expectCount(t, w, story.Count{Charges: 1, Credits: 1, Balance: 15000, Shown: 1, Alerts: 1})
}

// Found by the chaos runner (seed 658): the owner of K1 dies inside its
// lease, and a reuse of K1 (3,500) arrives before the lease passes. Only the
// ledger says which request is the payment, so the reuse hears 422 only when
// the dead owner's PENDING row is there; with no row yet it hears 409, and
// after the lease whichever request comes back first is the payment. A 422
// is never contradicted later.
func TestKeyReuseInsideADeadOwnersLease(t *testing.T) {
	t.Parallel()
	reuse := strings.Replace(story.Body, "3000", "3500", 1)
	for _, c := range []struct {
		name        string
		dies        api.Hooks
		reuseHears  int    // inside the lease
		payment     string // the body that becomes the payment after it
		other       string
		wantBalance int64
	}{
		{"no row yet: 409, and the reuse becomes the payment", api.Hooks{AfterClaim: crashOnce()}, http.StatusConflict, reuse, story.Body, 15500},
		{"its row is there: 422, and the owner's retry finishes it", api.Hooks{AfterPendingInsert: crashOnce()}, http.StatusUnprocessableEntity, story.Body, reuse, 15000},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, story.Options{})
			w.SetAPIHooks(c.dies)
			expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusInternalServerError)
			w.SetAPIHooks(api.Hooks{})
			w.Clock.Advance(250 * time.Millisecond)
			expectStatus(t, w.Pay(ctx, "u1", "K1", reuse, w.Clock.Now()), c.reuseHears)
			w.Clock.Advance(w.Timing.Deadline + w.Timing.Margin)
			won := w.Pay(ctx, "u1", "K1", c.payment, w.Clock.Now())
			expectStatus(t, won, http.StatusCreated)
			if c.payment == reuse && !strings.Contains(string(won.Body), `"amount":3500`) {
				t.Fatalf("the reuse became the payment but answered %s", won.Body)
			}
			expectStatus(t, w.Pay(ctx, "u1", "K1", c.other, w.Clock.Now()), http.StatusUnprocessableEntity)
			settle(t, w)
			expectCount(t, w, story.Count{Charges: 1, Credits: 1, Balance: c.wantBalance, Shown: 1, Alerts: 1})
		})
	}
}
