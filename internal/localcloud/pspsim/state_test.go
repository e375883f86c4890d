package pspsim_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/psp"
)

// durable is a simulator with a state file that a test can restart: the
// process ends (Close, or a crash that leaves the file as it is) and a new
// one starts on the same file.
type durable struct {
	t     *testing.T
	path  string
	clock *clock
	hooks *receiver
	env   *env
	srv   *httptest.Server
}

func newDurable(t *testing.T) *durable {
	d := &durable{t: t, path: filepath.Join(t.TempDir(), "pspsim.state"), clock: &clock{now: time.Now()}, hooks: newReceiver(t)}
	d.start()
	t.Cleanup(d.stop)
	return d
}

func (d *durable) config() pspsim.Config {
	return pspsim.Config{
		Clock: d.clock.Now, WebhookURL: d.hooks.url, WebhookSecret: whsec, ManualWebhooks: true,
		Logger: quiet(), StateFile: d.path,
	}
}

func (d *durable) start() {
	d.t.Helper()
	sim, err := pspsim.Open(d.config())
	if err != nil {
		d.t.Fatalf("Open: %v", err)
	}
	d.srv = httptest.NewServer(sim)
	d.env = &env{sim: sim, url: d.srv.URL, clock: d.clock, hooks: d.hooks}
	d.env.psp = d.env.client(d.t)
}

func (d *durable) stop() {
	if d.env != nil {
		d.srv.Close()
		d.env.sim.Close()
		d.env = nil
	}
}

// crash ends the simulator like SIGKILL: no Close, nothing flushed.
func (d *durable) crash() {
	d.srv.Close()
	d.env.sim.Crash()
	d.env = nil
}

func (d *durable) restart() {
	d.t.Helper()
	d.stop()
	d.start()
}

// The issue-14 defect: a restarted simulator forgot every key, so the
// resolver's replay of a charge's key after `make down && make up`
// charged the card again. With a state file a replay after the restart
// answers the saved result, Idempotent-Replayed, and nothing is charged.
func TestAKeyChargedBeforeARestartReplaysAfterItWithNoSecondCharge(t *testing.T) {
	d := newDurable(t)
	req := chargeReq("pay_restart")
	first := mustCharge(t, d.env, req)
	if first.Outcome != psp.Succeeded || first.Replayed {
		t.Fatalf("first charge: %+v", first)
	}
	before := wantCharges(t, d.env, 1)

	d.restart()

	again := mustCharge(t, d.env, req)
	if again.Outcome != psp.Succeeded || !again.Replayed || again.PaymentIntentID != first.PaymentIntentID || again.ChargeID != first.ChargeID {
		t.Fatalf("replay after the restart: %+v, want the saved %s/%s replayed", again, first.PaymentIntentID, first.ChargeID)
	}
	after := wantCharges(t, d.env, 1)
	if after[0].ID != before[0].ID || after[0].PaymentIntent != before[0].PaymentIntent {
		t.Fatalf("the charge changed across the restart: %+v -> %+v", before[0], after[0])
	}
	// The key still holds its parameters: another amount under it is
	// Stripe's idempotency_error, not a charge.
	other := req
	other.Amount++
	if res, err := d.env.psp.Charge(context.Background(), other); err == nil && res.Outcome == psp.Succeeded {
		t.Fatalf("another amount under the restored key charged: %+v", res)
	}
	// The PaymentIntent itself is there to read, as the resolver does.
	res, err := d.env.psp.Lookup(context.Background(), "pay_restart")
	if err != nil || res.Outcome != psp.Succeeded || res.PaymentIntentID != first.PaymentIntentID {
		t.Fatalf("lookup after the restart: %+v, %v", res, err)
	}
	wantCharges(t, d.env, 1)
}

// What a reply told the client is on disk before the reply left: a
// simulator killed right after answering still knows the key.
func TestAKeyAnsweredBeforeACrashReplaysAfterIt(t *testing.T) {
	d := newDurable(t)
	first := mustCharge(t, d.env, chargeReq("pay_crash"))
	d.crash()
	d.start()
	again := mustCharge(t, d.env, chargeReq("pay_crash"))
	if !again.Replayed || again.ChargeID != first.ChargeID {
		t.Fatalf("after a crash: %+v, want %s replayed", again, first.ChargeID)
	}
	wantCharges(t, d.env, 1)
}

// Many charges at once, each made durable before its reply (concurrent
// requests share fsyncs): after a restart every key replays its own
// charge and nothing is charged twice.
func TestConcurrentChargesAllSurviveARestart(t *testing.T) {
	d := newDurable(t)
	const n = 32
	var wg sync.WaitGroup
	first := make([]psp.Result, n)
	for i := range n {
		wg.Go(func() { first[i] = mustChargeAsync(t, d.env, chargeReq(payID(i))) })
	}
	wg.Wait()
	wantCharges(t, d.env, n)
	d.restart()
	for i := range n {
		res := mustCharge(t, d.env, chargeReq(payID(i)))
		if !res.Replayed || res.ChargeID != first[i].ChargeID {
			t.Errorf("key %d after the restart: %+v, want a replay of %s", i, res, first[i].ChargeID)
		}
	}
	wantCharges(t, d.env, n)
}

func payID(i int) string { return "pay_many_" + string(rune('a'+i%26)) + string(rune('a'+i/26)) }

func mustChargeAsync(t *testing.T, e *env, req psp.ChargeRequest) psp.Result {
	res, err := e.psp.Charge(context.Background(), req)
	if err != nil {
		t.Errorf("Charge: %v", err)
	}
	return res
}

// A webhook not yet delivered when the simulator stops is delivered after
// it starts again, with its event id, signed afresh; one the endpoint
// refused keeps its attempts.
func TestAPendingWebhookDeliverySurvivesARestart(t *testing.T) {
	d := newDurable(t)
	res := mustCharge(t, d.env, chargeReq("pay_hook"))
	if n := d.env.sim.PendingWebhooks(); n != 1 {
		t.Fatalf("%d pending deliveries, want payment_intent.succeeded", n)
	}
	d.hooks.refuse = 1
	if _, err := d.env.sim.FlushWebhooks(context.Background()); err == nil {
		t.Fatal("the refused delivery reported success")
	}
	refused := d.hooks.events(t)
	if len(refused) != 1 {
		t.Fatalf("%d delivery attempts before the restart", len(refused))
	}

	d.restart()

	if n := d.env.sim.PendingWebhooks(); n != 1 {
		t.Fatalf("after the restart %d pending deliveries, want the refused one", n)
	}
	d.hooks.reset()
	if n := flush(t, d.env); n != 1 {
		t.Fatalf("delivered %d after the restart", n)
	}
	evs := d.hooks.events(t) // verified with the production parser
	if len(evs) != 1 || evs[0].ID != refused[0].ID || evs[0].Type != "payment_intent.succeeded" || evs[0].PaymentIntentID != res.PaymentIntentID {
		t.Fatalf("after the restart: %+v, want %s again", evs, refused[0].ID)
	}
	// Delivered is delivered: a second restart sends nothing more.
	d.restart()
	if n := d.env.sim.PendingWebhooks(); n != 0 {
		t.Fatalf("%d pending after the acknowledged delivery and a restart", n)
	}
}

// A refund and the payment method's use survive too: a refund replayed
// after a restart is the same refund, and a single-use payment method
// stays used.
func TestRefundsAndPaymentMethodsSurviveARestart(t *testing.T) {
	d := newDurable(t)
	res := mustCharge(t, d.env, chargeReq("pay_refund_restart"))
	refReq := psp.RefundRequest{IdempotencyKey: "pay_refund_restart:cancel:refund", PaymentID: "pay_refund_restart", PaymentIntentID: res.PaymentIntentID}
	r1, err := d.env.psp.Refund(context.Background(), refReq)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.env.sim.AddPaymentMethod("pm_once"); err != nil {
		t.Fatal(err)
	}
	once := chargeReq("pay_pm_once")
	once.PaymentMethod = "pm_once"
	mustCharge(t, d.env, once)

	d.restart()

	r2, err := d.env.psp.Refund(context.Background(), refReq)
	if err != nil || r2.RefundID != r1.RefundID || !r2.Replayed {
		t.Fatalf("refund replay after the restart: %+v, %v; want %s replayed", r2, err, r1.RefundID)
	}
	if refunds := d.env.sim.Refunds(); len(refunds) != 1 {
		t.Fatalf("%d refunds after the restart", len(refunds))
	}
	if c := wantCharges(t, d.env, 2); c[0].AmountRefunded != c[0].Amount {
		t.Fatalf("the refunded charge after the restart: %+v", c[0])
	}
	again := chargeReq("pay_pm_twice")
	again.PaymentMethod = "pm_once"
	if res, err := d.env.psp.Charge(context.Background(), again); err == nil && res.Outcome == psp.Succeeded {
		t.Fatalf("a used single-use payment method paid again after the restart: %+v", res)
	}
	wantCharges(t, d.env, 2)
}

// Keys are kept for the window, not forever: one whose window passed while
// the simulator was down is pruned at start, and its replay is a new
// request, as at Stripe after 24 h.
func TestAKeyPastItsWindowIsPrunedAtStart(t *testing.T) {
	d := newDurable(t)
	mustCharge(t, d.env, chargeReq("pay_old"))
	d.stop()
	d.clock.Advance(pspsim.MinKeyWindow + 2*time.Hour) // past the window and its prune jitter
	d.start()
	if res := mustCharge(t, d.env, chargeReq("pay_old")); res.Replayed {
		t.Fatalf("a key past its window replayed: %+v", res)
	}
	wantCharges(t, d.env, 2)
}

// A state file that does not read back is an error at start: starting
// empty would forget keys a client may replay.
func TestACorruptStateFileIsAnErrorAtStartNotAmnesia(t *testing.T) {
	d := newDurable(t)
	mustCharge(t, d.env, chargeReq("pay_corrupt"))
	d.stop()
	good, err := os.ReadFile(d.path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(good), "\n")
	for name, content := range map[string]string{
		"a garbled line":       lines[0] + "{not json\n" + strings.Join(lines[1:], ""),
		"not a state file":     "hello\n",
		"an empty file":        "",
		"an unknown field":     lines[0] + `{"seq":1,"surprise":true}` + "\n",
		"a header of the past": `{"pspsim_state":99}` + "\n",
	} {
		if err := os.WriteFile(d.path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if sim, err := pspsim.Open(d.config()); err == nil {
			sim.Close()
			t.Errorf("%s: Open succeeded", name)
		}
	}
	// A torn last line is the append a crash cut short, which no reply
	// acknowledged: dropped, and everything before it loads.
	torn := string(good) + `{"seq":99,"keys":[{"key":"half`
	if err := os.WriteFile(d.path, []byte(torn), 0o600); err != nil {
		t.Fatal(err)
	}
	d.start()
	if res := mustCharge(t, d.env, chargeReq("pay_corrupt")); !res.Replayed {
		t.Fatalf("after a torn last line the key was lost: %+v", res)
	}
	wantCharges(t, d.env, 1)
}

// Two simulators on one state file would each overwrite the other's
// changes: the second is refused.
func TestTwoSimulatorsCannotShareAStateFile(t *testing.T) {
	d := newDurable(t)
	if sim, err := pspsim.Open(d.config()); err == nil {
		sim.Close()
		t.Fatal("a second simulator opened the same state file")
	}
}

// Reset forgets everything, in the file too.
func TestResetIsDurable(t *testing.T) {
	d := newDurable(t)
	mustCharge(t, d.env, chargeReq("pay_reset"))
	d.env.sim.Reset()
	d.restart()
	wantCharges(t, d.env, 0)
	if res := mustCharge(t, d.env, chargeReq("pay_reset")); res.Replayed {
		t.Fatalf("a key replayed after Reset and a restart: %+v", res)
	}
}

// A running simulator rewrites its journal now and then instead of letting
// it grow for the whole run, and what it rewrote loads as it was.
func TestARunningSimulatorCompactsItsJournal(t *testing.T) {
	defer pspsim.SetCompactEvery(pspsim.SetCompactEvery(5))
	d := newDurable(t)
	for i := range 12 {
		mustCharge(t, d.env, chargeReq(payID(i)))
	}
	b, err := os.ReadFile(d.path)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(b), "\n"); lines > 2+5 {
		t.Fatalf("the journal holds %d lines after 12 charges with compaction every 5", lines)
	}
	d.restart()
	for i := range 12 {
		if res := mustCharge(t, d.env, chargeReq(payID(i))); !res.Replayed {
			t.Fatalf("key %d lost across a compaction and a restart: %+v", i, res)
		}
	}
	wantCharges(t, d.env, 12)
}
