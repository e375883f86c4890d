package story

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
)

// Body is the story's payment: order 42, $30.00, to merchant m1.
const Body = `{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_card_visa"}`

// Count is the story's final count.
type Count struct {
	Charges   int    // PSP charges, all keys
	ChargeID  string // the one charge's id
	Credits   int    // credits to m1
	Balance   int64  // m1's balance
	Shown     int    // notifications on the phone (collapsed by replace id)
	Alerts    int    // pushes that reached the phone
	ReplaceID string // the notification's replace id
}

// Want is the story's count (docs/mechanism.md#seed-part-13). Two alerts:
// worker w1 pushed, then died before recording SENT, so w2's redelivery
// pushes again under the same replace id (one shown). A third alert would be
// a double push the replace id hides, so it is counted, not collapsed.
var Want = Count{Charges: 1, Credits: 1, Balance: 15000, Shown: 1, Alerts: 2}

// Mismatch lists how c differs from the story's count; empty when it agrees.
func (c Count) Mismatch() []string {
	var out []string
	if c.Charges != Want.Charges {
		out = append(out, fmt.Sprintf("%d PSP charges, the story has %d", c.Charges, Want.Charges))
	}
	if c.Credits != Want.Credits {
		out = append(out, fmt.Sprintf("%d credits to m1, the story has %d", c.Credits, Want.Credits))
	}
	if c.Balance != Want.Balance {
		out = append(out, fmt.Sprintf("m1 = %d, the story has 12,000 -> 15,000", c.Balance))
	}
	if c.Shown != Want.Shown {
		out = append(out, fmt.Sprintf("%d notifications on the phone, the story has %d", c.Shown, Want.Shown))
	}
	return out
}

// StoryMismatch is Mismatch plus the alerts of the story's main line (the
// seed counts what the phone shows; a branch can rightly differ in alerts).
func (c Count) StoryMismatch() []string {
	out := c.Mismatch()
	if c.Alerts != Want.Alerts {
		out = append(out, fmt.Sprintf("%d pushes reached the phone, the story has %d (w1's, then w2's after the crash)", c.Alerts, Want.Alerts))
	}
	return out
}

// Run builds a world on the local cloud, plays the story and its
// late-original branch, prints the event table and the final count to out,
// and returns an error when anything differs from the story.
func Run(ctx context.Context, out io.Writer) (Count, error) {
	w, err := New(ctx, Options{})
	if err != nil {
		return Count{}, err
	}
	defer w.Close()
	c, err := Play(ctx, w)
	berr, serr := error(nil), error(nil)
	var sc StreamCount
	if err == nil {
		berr = LateOriginal(ctx, w)
	}
	if err == nil && berr == nil {
		sc, serr = StreamJob(ctx, w)
	}
	w.Table.Print(out)
	fmt.Fprint(out, w.Table.short(fmt.Sprintf("\n== final count: %d charge (%s), %d credit to m1 (12,000 -> %s), %d notification on the phone (%d pushes, replace id %s)\n",
		c.Charges, c.ChargeID, c.Credits, thousands(c.Balance), c.Shown, c.Alerts, c.ReplaceID)))
	if err == nil && berr == nil {
		m2 := "none"
		if sc.M2 >= 0 {
			m2 = thousands(sc.M2)
		}
		fmt.Fprintf(out, "== the stream job: m1 = %s, m2 = %s after a restore and its full flush (m1 read %s during the flush)\n",
			thousands(sc.M1), m2, thousands(sc.M1DuringFlush))
	}
	if err != nil {
		return c, err
	}
	if berr != nil {
		return c, fmt.Errorf("the late-original branch: %w", berr)
	}
	if serr != nil {
		return c, fmt.Errorf("the stream beat: %w", serr)
	}
	if m := c.StoryMismatch(); len(m) > 0 {
		return c, fmt.Errorf("the count differs from the story's: %v", m)
	}
	return c, nil
}

// answer is the part of an API answer the story reads.
type answer struct {
	PaymentID string `json:"payment_id"`
	State     string `json:"state"`
	PSPCharge string `json:"psp_charge"`
	Type      string `json:"type"`
}

func decode(r api.Response) answer {
	var a answer
	_ = json.Unmarshal(r.Body, &a)
	return a
}

func replayed(r api.Response) bool { return r.Headers.Get("Idempotent-Replayed") == "true" }

// check collects the story's broken expectations.
type check struct{ errs []error }

func (c *check) want(ok bool, format string, args ...any) {
	if !ok {
		c.errs = append(c.errs, fmt.Errorf(format, args...))
	}
}

func (c *check) err() error { return errors.Join(c.errs...) }

// Play runs the story's main line on w (caller u1, key K1, merchant m1) and
// returns the final count. An error names every beat whose outcome differs
// from the story's.
func Play(ctx context.Context, w *World) (Count, error) {
	t, ck := w.Table, &check{}
	pid := PaymentID("u1", "K1")
	chargeKey, eventID := ids.ChargeKey(pid), ids.EventID(pid, string(ledger.Succeeded))
	t.Alias(eventID, "ev_7")
	t.Alias(pid, "pay_7")
	w.Table.Section("the main line: u1 taps Pay once for order 42, $30.00 (docs/mechanism.md §2, §4-§10)", w.T0)

	t.Add("phone", "tap: makes K1, writes it to the journal, sends A1", "K1")
	// The reply is lost at the PSP: it charges, then holds its answer and
	// drops the connection. The real hold is short; the fake clock shows
	// the story's times (the charge at 0.28, the deadline at 5.02).
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: chargeKey}, Kind: pspsim.FaultLoseReply, DelayMS: 150}); err != nil {
		return Count{}, err
	}
	w.SetClock(0.02)
	w.SetAPIHooks(api.Hooks{
		AfterClaim: func(context.Context) error {
			t.Add("api-1", "claims the key record: IN_PROGRESS, in_progress_until 5.02", ids.Scope("u1", "K1"))
			return nil
		},
		AfterPendingInsert: func(context.Context) error {
			t.Add("ledger", "PENDING row before any external call (the durable guard, UNIQUE (u1, K1))", pid)
			return nil
		},
	})
	w.OnPSP = func(key string, err error) {
		if key != chargeKey || err == nil {
			return
		}
		w.SetClock(0.28)
		ch := w.Charges(chargeKey)
		chID := ""
		if len(ch) > 0 {
			chID = ch[0].ID
			t.Alias(chID, "ch_1")
		}
		t.Add("PSP", "charges the card; the reply is lost on the way back", chargeKey+" -> "+chID)
		w.Clock.Set(w.At(5.02).Add(time.Millisecond))
		t.Add("api-1", "deadline (arrival 0.02 + 5 s): no answer from the PSP", pid)
	}
	a1 := w.Pay(ctx, "u1", "K1", Body, w.At(0.02))
	w.OnPSP = nil
	w.SetAPIHooks(api.Hooks{})
	row, _ := w.Ledger.Get(ctx, pid)
	rec, _, _ := w.Claims.Get(ctx, ids.Scope("u1", "K1"), w.Clock.Now())
	t.Add("api-1", fmt.Sprintf("PENDING -> %s (CAS); key record stores a POINTER; answers %d %s", row.State, a1.Status, decode(a1).State), pid)
	ck.want(a1.Status == http.StatusAccepted && row.State == ledger.Unknown && rec.State == idem.Completed && rec.Pointer,
		"lost reply: answer %d, row %s, record %+v; want 202, UNKNOWN, a pointer", a1.Status, row.State, rec)

	// P2: the retry at 10.00 hears "processing", rendered from the row.
	w.SetClock(10)
	t.Add("phone", "10 s timeout: retries with the same key (A2)", "K1")
	a2 := w.Pay(ctx, "u1", "K1", Body, w.At(10))
	t.Add("api-2", fmt.Sprintf("claim fails: the record holds a pointer; renders the row: %d %s, Idempotent-Replayed", a2.Status, decode(a2).State), pid)
	ck.want(a2.Status == http.StatusAccepted && decode(a2).State == "PROCESSING" && replayed(a2),
		"retry at 10.00: %d %s replayed=%v; want 202 PROCESSING replayed", a2.Status, a2.Body, replayed(a2))
	ck.want(len(w.Charges("")) == 1, "after the retry the PSP holds %d charges", len(w.Charges("")))

	// docs/mechanism.md#seed-part-5: the resolver replays the derived key and
	// gets the saved ch_1.
	w.SetClock(10.5)
	r, err := w.Resolver()
	if err != nil {
		return Count{}, err
	}
	rep, err := r.Run(ctx)
	if err != nil {
		return Count{}, fmt.Errorf("resolver: %w", err)
	}
	row, _ = w.Ledger.Get(ctx, pid)
	t.Add("resolver", fmt.Sprintf("replays %s: the PSP answers its saved %s; UNKNOWN -> %s (CAS) + journal + outbox intent; pointer -> final answer",
		chargeKey, row.PSPCharge, row.State), pid+", "+eventID)
	ck.want(rep.Succeeded == 1 && rep.PSPCalls == 1 && row.State == ledger.Succeeded && len(w.Charges("")) == 1,
		"resolver: report %+v, row %s, %d charges; want one replay, SUCCEEDED, still one charge", rep, row.State, len(w.Charges("")))

	// The late webhook: inbox + the same CAS, which finds nothing to move.
	w.SetClock(11)
	n, err := w.Sim.FlushWebhooks(ctx)
	if err != nil {
		return Count{}, fmt.Errorf("webhooks: %w", err)
	}
	after, _ := w.Ledger.Get(ctx, pid)
	intents, _ := w.Int(ctx, `SELECT count(*) FROM outbox_intents WHERE payment_id = $1`, pid)
	t.Add("webhook", fmt.Sprintf("%d late payment_intent.succeeded: inbox row written, the CAS finds %s: nothing moves", n, after.State), pid)
	ck.want(n >= 1 && after == row && intents == 1 && w.EMF.Sum("WebhookLate") >= 1,
		"late webhook: %d delivered, row changed %v, %d outbox intents; want harmless", n, after != row, intents)

	// P3: the relay sends ev_7 three times, crashing after the first two.
	w.RelayCrashes.Store(2)
	for i, at := range []float64{12, 12.5} {
		w.SetClock(at)
		if _, err := w.Stream.Step(ctx); err != nil {
			return Count{}, fmt.Errorf("relay: %w", err)
		}
		what := "sends the event to the FIFO queue (dedup id = event id), dies before the batch is acknowledged"
		if i == 1 {
			what = "the stream hands the record over again: sends it again, dies again"
		}
		t.Add("relay", what, eventID)
	}
	ck.want(w.Stream.Stats().FunctionErrors == 2, "relay: %+v, want two crashes", w.Stream.Stats())

	// P4: the worker credits, pushes, and dies before marking the intent SENT.
	w.SetClock(14)
	w.SetWorkerHooks(inboxCrashAfterPush(w, eventID))
	if _, err := w.Queue.Step(ctx); err != nil {
		return Count{}, fmt.Errorf("worker: %w", err)
	}
	w.SetWorkerHooks(noWorkerHooks)
	received := w.Queue.Stats().Received
	bal, _ := w.Balance(ctx, "m1")
	// Awaited, not collected: a receive whose answer the emulator dropped
	// leaves the push invisible for the watch queue's visibility timeout.
	first, err := w.AwaitPushes(ctx, pushPatience)
	if err != nil {
		return Count{}, err
	}
	t.Add("queue", fmt.Sprintf("two sends, %d message: the dedup window dropped the second", received), eventID)
	ck.want(received == 1 && bal == 15000 && len(first) == 1,
		"worker w1: %d deliveries, m1 = %d, %d pushes; want 1, 15,000, 1", received, bal, len(first))

	w.SetClock(44.5)
	if _, err := w.Queue.Expire(ctx); err != nil {
		return Count{}, err
	}
	t.Add("queue", "visibility timeout (30 s) runs out: redelivers to w2", eventID)
	if _, err := w.Queue.Drain(ctx); err != nil {
		return Count{}, fmt.Errorf("worker: %w", err)
	}
	second, err := w.AwaitPushes(ctx, pushPatience)
	if err != nil {
		return Count{}, err
	}
	notif, _ := w.notifState(ctx, eventID)
	t.Add("worker w2", fmt.Sprintf("inbox: a repeat, no credit; notif PENDING -> pushes again with replace id %s -> %s", pid, notif), eventID)
	t.Add("phone", fmt.Sprintf("the second push replaces the first: %d on screen after %d alerts", len(w.Phone.Shown()), w.Phone.Alerts()), pid)
	ck.want(len(second) == 1 && second[0].ReplaceID == pid && notif == "SENT" && len(w.Phone.Shown()) == 1,
		"worker w2: pushes %+v, notif %s, %d shown; want one push for %s, SENT, one shown", second, notif, len(w.Phone.Shown()), pid)

	// The relay's third send is acknowledged; the worker's inbox drops it.
	w.SetClock(45)
	before := w.Queue.Stats().Received
	if _, err := w.Stream.Drain(ctx); err != nil {
		return Count{}, fmt.Errorf("relay: %w", err)
	}
	t.Add("relay", "sends the event a third time; acknowledged", eventID)
	if _, err := w.Queue.Drain(ctx); err != nil {
		return Count{}, fmt.Errorf("worker: %w", err)
	}
	third, err := w.CollectPushes(ctx)
	if err != nil {
		return Count{}, err
	}
	if w.Queue.Stats().Received > before {
		t.Add("worker", "inbox: a repeat (the local queue forgets a dedup id once its message is deleted); notif SENT: no push", eventID)
	} else {
		t.Add("queue", "the dedup window drops the third send", eventID)
	}
	ck.want(len(third) == 0, "third send pushed %d times, want none", len(third))

	// P6: two hours later the key record has forgotten K1; the ledger answers.
	w.SetClock(7200)
	t.Add("phone", "the buyer comes back and the app resends A3 with K1", "K1")
	a3 := w.Pay(ctx, "u1", "K1", Body, w.At(7200))
	rec, _, _ = w.Claims.Get(ctx, ids.Scope("u1", "K1"), w.Clock.Now())
	t.Add("api-3", fmt.Sprintf("key record expired at 3,605.02: claims anew; UNIQUE (u1, K1) finds %s: %d %s, replayed; record rewritten with the final answer",
		pid, a3.Status, decode(a3).State), pid)
	ck.want(a3.Status == http.StatusCreated && replayed(a3) && rec.Answer != nil && len(w.Charges("")) == 1,
		"two hours later: %d %s replayed=%v, %d charges; want 201 from the ledger and no PSP call", a3.Status, a3.Body, replayed(a3), len(w.Charges("")))

	c, err := w.Count(ctx, "m1")
	if err != nil {
		return c, err
	}
	return c, ck.err()
}

var noWorkerHooks = inbox.Hooks{}

// pushPatience is how long the story waits for a push it expects: past the
// phone queue's visibility timeout (WatchVisibility), so a push whose first
// receive was lost on the wire is seen again.
const pushPatience = 2*WatchVisibility + time.Second

// errWorkerCrash is a worker dying where a hook stands.
var errWorkerCrash = errors.New("story: worker died")

// inboxCrashAfterPush is snapshot P4's fault: the first worker commits,
// pushes, and dies before marking the notification SENT.
func inboxCrashAfterPush(w *World, eventID string) inbox.Hooks {
	var done atomic.Bool
	return inbox.Hooks{
		AfterCommit: func(ctx context.Context, e event.Event) error {
			if e.EventID == eventID && !done.Load() {
				bal, _ := w.Balance(ctx, e.MerchantID)
				w.Table.Add("worker w1", fmt.Sprintf("inbox row new: credits %s %s (balance now %s); notif PENDING, one transaction",
					e.MerchantID, thousands(e.Amount), thousands(bal)), eventID)
			}
			return nil
		},
		AfterPush: func(_ context.Context, e event.Event) error {
			if e.EventID != eventID || !done.CompareAndSwap(false, true) {
				return nil
			}
			w.Table.Add("worker w1", "pushes with replace id "+e.PaymentID, e.PaymentID)
			w.SetClock(14.5)
			w.Table.Add("worker w1", "dies before marking the notification SENT", eventID)
			return errWorkerCrash
		},
	}
}

// thousands renders minor units the way the story does: 12,000.
func thousands(n int64) string {
	s := seconds(time.Duration(n) * time.Second)
	return s[:len(s)-3]
}

func (w *World) notifState(ctx context.Context, eventID string) (string, error) {
	var s string
	err := w.Pool.QueryRow(ctx, `SELECT state FROM notif WHERE event_id = $1`, eventID).Scan(&s)
	return s, err
}

// Count reads the count for merchant: every PSP charge, the merchant's
// credits and balance, and what the phone shows.
func (w *World) Count(ctx context.Context, merchant string) (Count, error) {
	ch := w.Charges("")
	credits, err := w.Int(ctx, `SELECT count(*) FROM credits WHERE merchant_id = $1`, merchant)
	if err != nil {
		return Count{}, err
	}
	bal, err := w.Balance(ctx, merchant)
	if err != nil {
		return Count{}, err
	}
	c := Count{Charges: len(ch), Credits: int(credits), Balance: bal, Shown: len(w.Phone.Shown()), Alerts: w.Phone.Alerts()}
	if len(ch) > 0 {
		c.ChargeID = ch[0].ID
	}
	if s := w.Phone.Shown(); len(s) > 0 {
		c.ReplaceID = s[0].ReplaceID
	}
	return c, nil
}

// LateOriginal is the late-original branch (docs/mechanism.md#seed-part-4),
// for caller u2 and merchant m2 so the main line's count stays the story's: A1
// waits in a server's queue past the phone's timeout; the phone's "did it go
// through?" voids K1 and the buyer pays with a new key K2; when A1 finally
// runs, the deadline refuses it, the VOID stops it even without the deadline,
// and the VOID ledger row still stops it after the key record's hour. One
// charge (K2).
func LateOriginal(ctx context.Context, w *World) error {
	t, ck := w.Table, &check{}
	start := w.Clock.Now().Add(time.Minute).Truncate(time.Second)
	w.Clock.Set(start)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	set := func(s float64) { w.Clock.Set(at(s)) }
	t.Section("branch: the late original, stopped by the deadline and the void (docs/mechanism.md §7; caller u2, merchant m2)", start)
	body := `{"merchant_id":"m2","order_id":"43","amount":3000,"currency":"USD","payment_method":"pm_card_visa"}`
	k1, k2 := PaymentID("u2", "K1"), PaymentID("u2", "K2")
	t.Alias(ids.EventID(k2, "SUCCEEDED"), "ev_9")
	t.Alias(k1, "pay_8")
	t.Alias(k2, "pay_9")

	set(0.02)
	t.Add("load balancer", "stamps A1's arrival; A1 waits in api-1's queue", "K1")
	set(10)
	res := w.Resolve(ctx, "u2", "K1")
	t.Add("phone", fmt.Sprintf("10 s timeout: \"did it go through?\" -> %d %s: K1 voided in both stores", res.Status, decode(res).State), k1)
	ck.want(res.Status == http.StatusOK && decode(res).State == "VOID", "resolve: %d %s, want 200 VOID", res.Status, res.Body)
	set(10.02)
	a2 := w.Pay(ctx, "u2", "K2", body, at(10.02))
	t.Alias(decode(a2).PSPCharge, "ch_2")
	t.Add("api-2", fmt.Sprintf("the buyer taps again with a new key K2: %d %s", a2.Status, decode(a2).State), k2+" -> "+decode(a2).PSPCharge)
	ck.want(a2.Status == http.StatusCreated, "the new key: %d %s, want 201", a2.Status, a2.Body)

	set(12)
	late := w.Pay(ctx, "u2", "K1", body, at(0.02))
	t.Add("api-1", fmt.Sprintf("A1 leaves the queue, stamped 0.02: older than the 5 s deadline -> %d; nothing claimed", late.Status), k1)
	ck.want(late.Status == http.StatusServiceUnavailable, "late original: %d, want 503", late.Status)
	noDeadline := w.Pay(ctx, "u2", "K1", body, at(12))
	t.Add("api-1", fmt.Sprintf("the same A1 stamped at pickup (no deadline to stop it): the VOID record -> %d", noDeadline.Status), k1)
	ck.want(noDeadline.Status == http.StatusConflict, "late original without the deadline: %d, want 409", noDeadline.Status)
	set(12 + 3600 + 10)
	afterWindow := w.Pay(ctx, "u2", "K1", body, w.Clock.Now())
	t.Add("api-1", fmt.Sprintf("an hour later the key record has expired: the VOID ledger row under UNIQUE (u2, K1) -> %d", afterWindow.Status), k1)
	ck.want(afterWindow.Status == http.StatusConflict, "late original after the window: %d, want 409", afterWindow.Status)

	if err := w.Settle(ctx); err != nil {
		return err
	}
	bal, _ := w.Balance(ctx, "m2")
	var k2Pushes int
	for _, p := range w.Phone.Shown() {
		if p.ReplaceID == k2 {
			k2Pushes++
		}
	}
	t.Add("worker", fmt.Sprintf("K2's event credits m2 (0 -> %s) and notifies once", thousands(bal)), ids.EventID(k2, "SUCCEEDED"))
	ck.want(len(w.Charges(ids.ChargeKey(k1))) == 0 && len(w.Charges(ids.ChargeKey(k2))) == 1 && bal == 3000 && k2Pushes == 1,
		"branch count: %d charges for K1, %d for K2, m2 = %d, %d notifications; want 0, 1, 3,000, 1",
		len(w.Charges(ids.ChargeKey(k1))), len(w.Charges(ids.ChargeKey(k2))), bal, k2Pushes)
	return ck.err()
}

// Settle runs every hop until nothing moves: the resolver (open payments,
// the outbox sweep), the PSP's pending webhooks, the relay, the worker,
// whose messages left in flight by a crash are made visible again, and the
// operator's redrive of the DLQ. The pushes delivered meanwhile go onto the
// phone.
func (w *World) Settle(ctx context.Context) error {
	r, err := w.Resolver()
	if err != nil {
		return err
	}
	// Give up only after 50 rounds AND, with something still in transit,
	// longer than the queue's visibility timeout without movement: a
	// message whose receive was lost on the wire comes back only then
	// (at-least-once delivery, as on AWS), and that is not a stuck world.
	lastMove := time.Now()
	for round := 0; round < 500; round++ {
		if round >= 50 && time.Since(lastMove) > w.visibility+5*time.Second {
			break
		}
		if round > 0 {
			// A crashed resolver run holds its rows until its lease ends.
			w.Clock.Advance(6 * time.Minute)
		}
		moved := 0
		rep, err := r.Run(ctx)
		if err != nil {
			return fmt.Errorf("settle: resolver: %w", err)
		}
		// Claimed alone is no movement: a payment whose PSP answer stays
		// open (a saved 5xx inside the key window) is taken every run.
		moved += rep.Succeeded + rep.Failed + rep.AlreadySettled + rep.Crashed + rep.Published + rep.Sweep.Created
		n, err := w.Sim.FlushWebhooks(ctx)
		if err != nil {
			return fmt.Errorf("settle: webhooks: %w", err)
		}
		moved += n
		if n, err = w.Stream.Drain(ctx); err != nil {
			return fmt.Errorf("settle: relay: %w", err)
		}
		moved += n
		if n, err = w.Queue.Expire(ctx); err != nil {
			return fmt.Errorf("settle: expire: %w", err)
		}
		moved += n
		if n, err = w.Queue.Drain(ctx); err != nil {
			return fmt.Errorf("settle: worker: %w", err)
		}
		moved += n
		// The worker function's sweep schedule: PENDING notifications.
		if n, err = w.Notifs.FinishPending(ctx, inbox.SweepLimit); err != nil {
			return fmt.Errorf("settle: notification sweep: %w", err)
		}
		moved += n
		// The operator's answer to the DLQ-depth alarm: redrive.
		if n, err = w.RedriveDLQ(ctx); err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		w.Redriven.Add(int64(n))
		moved += n
		got, err := w.CollectPushes(ctx)
		if err != nil {
			return err
		}
		moved += len(got)
		// Round 0 runs on the schedule's clock, before any lease or deadline
		// has passed: a quiet round 0 proves nothing about a payment whose
		// owner crashed after the PSP charged (its PENDING row waits for
		// the resolver's horizon). Quiet counts only after a clock move.
		if moved > 0 {
			lastMove = time.Now()
		}
		if moved > 0 || round == 0 {
			continue
		}
		// Nothing moved this round, but the emulators can lag (a stream
		// record not yet readable under load): quiescent means the ledger
		// has nothing in transit either.
		open, err := w.InTransit(ctx)
		if err != nil {
			return err
		}
		if open == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	open, _ := w.InTransit(ctx)
	var stuck []string
	if rows, err := w.Pool.Query(ctx, `
		SELECT i.event_id || ' (intent, no inbox row)' FROM outbox_intents i WHERE NOT EXISTS (SELECT 1 FROM processed p WHERE p.event_id = i.event_id)
		UNION ALL SELECT event_id || ' (notif PENDING)' FROM notif WHERE state = 'PENDING' LIMIT 8`); err == nil {
		for rows.Next() {
			var id string
			if rows.Scan(&id) == nil {
				stuck = append(stuck, id)
			}
		}
		rows.Close()
	}
	st := w.Stream.Stats()
	return fmt.Errorf("%w after %s without movement: %d events in transit %v; the queue's DLQ holds %d; the relay's stream discarded %d records after %d failed invocations",
		ErrNotQuiet, time.Since(lastMove).Round(time.Second), open, stuck, w.dlqDepth(ctx), st.Discarded, st.FunctionErrors)
}

// ErrNotQuiet means Settle gave up: something kept moving or stayed in
// transit (a dead-lettered event, for one).
var ErrNotQuiet = errors.New("settle: not quiescent")

// InTransit counts the events the ledger recorded that the consumer has not
// finished: intents with no inbox row, and notification intents still
// PENDING.
func (w *World) InTransit(ctx context.Context) (int64, error) {
	return w.Int(ctx, `SELECT
		(SELECT count(*) FROM outbox_intents i WHERE NOT EXISTS (SELECT 1 FROM processed p WHERE p.event_id = i.event_id))
		+ (SELECT count(*) FROM notif WHERE state = 'PENDING')`)
}
