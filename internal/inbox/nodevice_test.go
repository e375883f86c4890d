package inbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, for goose
	"github.com/pressly/goose/v3"

	"github.com/oncepay/oncepay/internal/devices"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// deviceWorld is production's push path with no topic fallback: a worker
// and a sweep whose Notifier pushes to the caller's devices only (the
// ledger's devices table), and the devices function's registry over the
// same ledger and moto's SNS, with a GCM platform application. A caller
// starts with no device.
type deviceWorld struct {
	world
	snsc     *sns.Client
	devices  devices.Handler
	notifier *notify.Notifier
	sweep    *inbox.NotifSweeper
	sweepMF  *bytes.Buffer
}

func newDeviceWorld(t *testing.T) deviceWorld {
	t.Helper()
	pool, _ := testenv.Ledger(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO merchant_balances (merchant_id, currency, balance) VALUES ('m1', 'USD', 12000)`); err != nil {
		t.Fatal(err)
	}
	snsc := testenv.SNS(t)
	app, err := snsc.CreatePlatformApplication(ctx, &sns.CreatePlatformApplicationInput{
		Name: aws.String("t-nodevice-" + testenv.RandomID(4)), Platform: aws.String("GCM"),
		Attributes: map[string]string{"PlatformCredential": "test-key"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = snsc.DeletePlatformApplication(context.Background(), &sns.DeletePlatformApplicationInput{PlatformApplicationArn: app.PlatformApplicationArn})
	})
	reg, err := devices.NewRegistry(pool, snsc, map[notify.Platform]string{notify.GCM: aws.ToString(app.PlatformApplicationArn)}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	n, err := notify.New(snsc, notify.NewDeviceStore(pool), notify.Config{Logger: quiet}) // no TopicArn: production
	if err != nil {
		t.Fatal(err)
	}
	emf, sweepMF := &bytes.Buffer{}, &bytes.Buffer{}
	w, err := inbox.New(pool, n, inbox.Config{Logger: quiet, MaxReceiveCount: 5, Metrics: metrics.New(emf, "worker")})
	if err != nil {
		t.Fatal(err)
	}
	// The sweep's back-off keeps its default (30 s first): a waiting push
	// this test sees go out went because it was made due, not by the clock.
	sw, err := inbox.NewNotifSweeper(pool, n, inbox.SweepConfig{Logger: quiet, Metrics: metrics.New(sweepMF, "worker"), Grace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return deviceWorld{
		world: world{pool: pool, w: w, emf: emf}, snsc: snsc, notifier: n,
		devices: devices.Handler{Store: reg, Log: quiet}, sweep: sw, sweepMF: sweepMF,
	}
}

// handle delivers e to the worker as its queue would.
func (d deviceWorld) handle(t *testing.T, e event.Event) {
	t.Helper()
	resp, err := d.w.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{message(t, e, 1)}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle %s = %+v, %v", e.EventID, resp, err)
	}
}

// register is the app's PUT /devices/{id} through the devices function's
// handler, and returns the endpoint the worker now pushes to.
func (d deviceWorld) register(t *testing.T, caller, deviceID string, counter int64, token string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"platform": "GCM", "token": token})
	r := d.devices.Serve(context.Background(), devices.Request{Method: http.MethodPut, Path: "/devices/" + deviceID,
		Headers: http.Header{devices.CounterHeader: {strconv.FormatInt(counter, 10)}}, Body: body, Caller: caller})
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		t.Fatalf("register %s: %d %s", deviceID, r.Status, r.Body)
	}
	devs, err := notify.NewDeviceStore(d.pool).Endpoints(context.Background(), caller)
	if err != nil || len(devs) != 1 {
		t.Fatalf("%s's endpoints after the registration: %+v, %v", caller, devs, err)
	}
	return devs[0].EndpointArn
}

// received is what moto recorded as pushed to the endpoint: each push's
// GCM message, as the phone would show it.
type received struct {
	Tag, Title, EventID string
}

func (d deviceWorld) received(t *testing.T, endpoint string) []received {
	t.Helper()
	msgs, err := harness.EndpointMessages(context.Background(), os.Getenv("AWS_ENDPOINT_URL"), endpoint)
	if err != nil {
		t.Fatal(err)
	}
	var out []received
	for _, m := range msgs {
		var parts map[string]string
		if err := json.Unmarshal([]byte(m), &parts); err != nil {
			t.Fatalf("endpoint message %q: %v", m, err)
		}
		var gcm struct {
			FcmV1Message struct {
				Message struct {
					Notification struct{ Title string }
					Data         map[string]string
					Android      struct {
						Notification struct{ Tag string }
					}
				}
			} `json:"fcmV1Message"`
		}
		if err := json.Unmarshal([]byte(parts["GCM"]), &gcm); err != nil {
			t.Fatalf("GCM part %q: %v", parts["GCM"], err)
		}
		msg := gcm.FcmV1Message.Message
		out = append(out, received{Tag: msg.Android.Notification.Tag, Title: msg.Notification.Title, EventID: msg.Data["event_id"]})
	}
	return out
}

func (d deviceWorld) finish(t *testing.T) int {
	t.Helper()
	n, err := d.sweep.FinishPending(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The first payment came before the app's first registration committed:
// the caller had no device when the worker pushed. The push is not given
// up: it waits, the sweep's retries while there is still no device leave
// it waiting, and the registration (the devices function's real path)
// makes it due at once: the next sweep sends it, once, with the payment
// as replace id, and it is SENT.
func TestAPushWithNoDeviceYetGoesOutOnceTheAppRegisters(t *testing.T) {
	d := newDeviceWorld(t)
	ctx := context.Background()
	e := payment("pay_nd", "m1", inbox.Succeeded, 700)
	d.handle(t, e)
	if s := d.notif(t, e.EventID); s != inbox.NotifPending {
		t.Fatalf("notif %s after a push with no device, want PENDING: the app may register any moment", s)
	}
	if b := d.balance(t, "m1"); b != 12700 {
		t.Fatalf("m1 = %d, want the credit at once", b)
	}
	// The sweep while there is still no device: nothing sent, nothing given up.
	if _, err := d.pool.Exec(ctx, `UPDATE notif SET next_attempt_at = NULL WHERE event_id = $1`, e.EventID); err != nil {
		t.Fatal(err)
	}
	if n := d.finish(t); n != 0 {
		t.Fatalf("FinishPending with no device = %d, want 0", n)
	}
	if s := d.notif(t, e.EventID); s != inbox.NotifPending {
		t.Fatalf("notif %s after the sweep found no device, want PENDING", s)
	}
	if got := metrics.Sum(d.emf.Bytes(), "PushUndeliverable") + metrics.Sum(d.sweepMF.Bytes(), "PushUndeliverable"); got != 0 {
		t.Fatalf("PushUndeliverable = %v, want 0", got)
	}

	endpoint := d.register(t, "u1", "D1", 1, "tok-"+testenv.RandomID(4))
	if n := d.finish(t); n != 1 {
		t.Fatalf("FinishPending after the registration = %d, want the waiting push", n)
	}
	if n := d.finish(t); n != 0 {
		t.Fatalf("a second FinishPending = %d, want nothing left", n)
	}
	got := d.received(t, endpoint)
	if len(got) != 1 || got[0].Tag != "pay_nd" || got[0].EventID != e.EventID || got[0].Title != "Payment confirmed" {
		t.Fatalf("the device got %+v, want one push tagged pay_nd", got)
	}
	if s := d.notif(t, e.EventID); s != inbox.NotifSent {
		t.Fatalf("notif %s, want SENT", s)
	}
}

// A push that has waited past the horizon (a day from its row's creation)
// with no device is given up: UNDELIVERABLE, counted, final, and a device
// registered afterwards does not get it.
func TestAPushWaitingPastTheHorizonIsUndeliverable(t *testing.T) {
	d := newDeviceWorld(t)
	ctx := context.Background()
	e := payment("pay_old", "m1", inbox.Succeeded, 700)
	d.handle(t, e)
	if _, err := d.pool.Exec(ctx, `UPDATE notif SET created_at = now() - interval '24 hours 1 minute', next_attempt_at = NULL WHERE event_id = $1`, e.EventID); err != nil {
		t.Fatal(err)
	}
	if n := d.finish(t); n != 1 {
		t.Fatalf("FinishPending past the horizon = %d, want 1 (finished UNDELIVERABLE)", n)
	}
	if s := d.notif(t, e.EventID); s != inbox.NotifUndeliverable {
		t.Fatalf("notif %s, want UNDELIVERABLE", s)
	}
	if got := metrics.Sum(d.sweepMF.Bytes(), "PushUndeliverable"); got != 1 {
		t.Fatalf("the sweep's PushUndeliverable = %v, want 1", got)
	}
	endpoint := d.register(t, "u1", "D1", 1, "tok-"+testenv.RandomID(4))
	d.finish(t)
	if got := d.received(t, endpoint); len(got) != 0 {
		t.Fatalf("the device got %+v, want nothing: the push was given up", got)
	}
}

// The payment's push and then its refund's both found no device. When the
// app registers, only the latest is sent: it carries the payment's state
// now, and the replace id would fold the two anyway. The payment's is
// SUPERSEDED by the refund's, which is SENT.
func TestWhenTheAppRegistersOnlyTheLatestWaitingPushGoesOut(t *testing.T) {
	d := newDeviceWorld(t)
	paid, refunded := settledRefund(t, d.pool, "pay_two", 3000)
	d.handle(t, paid)
	d.handle(t, refunded)
	for _, e := range []event.Event{paid, refunded} {
		if s := d.notif(t, e.EventID); s != inbox.NotifPending {
			t.Fatalf("notif %s = %s with no device, want PENDING", e.EventID, s)
		}
	}
	endpoint := d.register(t, "u1", "D1", 1, "tok-"+testenv.RandomID(4))
	if n := d.finish(t); n != 2 {
		t.Fatalf("FinishPending after the registration = %d, want 2 (one sent, one superseded)", n)
	}
	got := d.received(t, endpoint)
	if len(got) != 1 || got[0].EventID != refunded.EventID || got[0].Tag != "pay_two" || got[0].Title != "Payment refunded" {
		t.Fatalf("the device got %+v, want only the refund's push, tagged pay_two", got)
	}
	if s := d.notif(t, paid.EventID); s != inbox.NotifSuperseded {
		t.Fatalf("the payment's notif %s, want SUPERSEDED", s)
	}
	if s := d.notif(t, refunded.EventID); s != inbox.NotifSent {
		t.Fatalf("the refund's notif %s, want SENT", s)
	}
	if b := d.balance(t, "m1"); b != 12000 {
		t.Fatalf("m1 = %d, want 12000 (credited, then debited)", b)
	}
}

// A later notification that was never delivered replaces nothing on the
// phone, so it retires nothing. The payment's push failed on an SNS outage
// and is owed (PENDING, backing off); the refund's found no device and
// waited past the horizon: UNDELIVERABLE. The payment's is not retired by
// it: once SNS is back the sweep sends it, with the payment's replace id.
func TestAnUndeliverableLaterPushDoesNotRetireAnEarlierOneStillOwed(t *testing.T) {
	p := newPushWorld(t)
	ctx := context.Background()
	paid, refunded := settledRefund(t, p.pool, "pay_ux", 3000)
	p.breakSNS(t)
	if resp, err := p.w.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{message(t, paid, 1)}}); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle %s = %+v, %v", paid.EventID, resp, err)
	}
	if s := p.notif(t, paid.EventID); s != inbox.NotifPending {
		t.Fatalf("the payment's notif %s after the outage, want PENDING", s)
	}
	// The refund's event reaches a worker that pushes to devices only
	// (production); the caller has none.
	devicesOnly, err := notify.New(p.snsc, notify.NewDeviceStore(p.pool), notify.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	emf := &bytes.Buffer{}
	w, err := inbox.New(p.pool, devicesOnly, inbox.Config{Logger: quiet, MaxReceiveCount: 5, Metrics: metrics.New(emf, "worker")})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := w.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{message(t, refunded, 1)}}); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle %s = %+v, %v", refunded.EventID, resp, err)
	}
	// A day later: the refund's push has waited past the horizon; the
	// payment's is still backing off.
	if _, err := p.pool.Exec(ctx, `UPDATE notif SET created_at = now() - interval '24 hours 1 minute', next_attempt_at = NULL WHERE event_id = $1`, refunded.EventID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.pool.Exec(ctx, `UPDATE notif SET next_attempt_at = now() + interval '1 hour' WHERE event_id = $1`, paid.EventID); err != nil {
		t.Fatal(err)
	}
	sw, err := inbox.NewNotifSweeper(p.pool, devicesOnly, inbox.SweepConfig{Logger: quiet, Metrics: metrics.New(emf, "worker"), Grace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sw.FinishPending(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if s := p.notif(t, refunded.EventID); s != inbox.NotifUndeliverable {
		t.Fatalf("the refund's notif %s, want UNDELIVERABLE past the horizon", s)
	}
	if got := metrics.Sum(emf.Bytes(), "PushUndeliverable"); got != 1 {
		t.Fatalf("PushUndeliverable = %v, want 1", got)
	}
	if s := p.notif(t, paid.EventID); s != inbox.NotifPending {
		t.Fatalf("the payment's notif %s, want still PENDING", s)
	}

	p.healSNS(t)
	if _, err := p.pool.Exec(ctx, `UPDATE notif SET next_attempt_at = NULL WHERE event_id = $1`, paid.EventID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.sweep.FinishPending(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if s := p.notif(t, paid.EventID); s != inbox.NotifSent {
		t.Fatalf("the payment's notif %s, want SENT: an undeliverable later push replaces nothing", s)
	}
	got := p.pushes(t)
	if len(got) != 1 || got[0].EventID != paid.EventID || got[0].ReplaceID != "pay_ux" {
		t.Fatalf("pushes %+v, want the payment's, with replace id pay_ux", got)
	}
	if !strings.HasPrefix(got[0].Title, "Payment confirmed") {
		t.Fatalf("push title %q", got[0].Title)
	}
}

// Migration 00016 gives the pushes the old rule recorded UNDELIVERABLE
// within the last day (the default horizon) back to waiting for a device,
// due at once; an older one, and an email with no address (no device
// changes that), stay UNDELIVERABLE. Its Down makes the waiting push what
// the old rule made of it.
func TestMigration16PutsTheDaysUndeliverablePushesBackToWaiting(t *testing.T) {
	ctx := context.Background()
	_, dsn := testenv.Ledger(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, os.DirFS("../ledger/migrations"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 15); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `
		INSERT INTO notif (event_id, channel, state, replace_id, caller_id, created_at, next_attempt_at) VALUES
		  ('pay_1:SUCCEEDED', 'push', 'UNDELIVERABLE', 'pay_1', 'u1', now() - interval '1 hour', now() + interval '1 hour'),
		  ('pay_2:SUCCEEDED', 'push', 'UNDELIVERABLE', 'pay_2', 'u1', now() - interval '25 hours', NULL),
		  ('pay_1:SUCCEEDED', 'email', 'UNDELIVERABLE', 'pay_1', 'u1', now() - interval '1 hour', NULL),
		  ('pay_3:SUCCEEDED', 'push', 'SENT', 'pay_3', 'u1', now() - interval '1 hour', NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	states := func() map[string]string {
		t.Helper()
		rows, err := db.QueryContext(ctx, `SELECT event_id || '/' || channel, state || CASE WHEN awaiting_device_since IS NOT NULL AND next_attempt_at IS NULL THEN ' waiting, due' ELSE '' END FROM notif`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			out[k] = v
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := map[string]string{
		"pay_1:SUCCEEDED/push": "PENDING waiting, due", "pay_2:SUCCEEDED/push": "UNDELIVERABLE",
		"pay_1:SUCCEEDED/email": "UNDELIVERABLE", "pay_3:SUCCEEDED/push": "SENT",
	}
	if got := states(); !maps.Equal(got, want) {
		t.Fatalf("after 00016: %v, want %v", got, want)
	}
	if _, err := p.DownTo(ctx, 15); err != nil {
		t.Fatal(err)
	}
	var state string
	if err := db.QueryRowContext(ctx, `SELECT state FROM notif WHERE event_id = 'pay_1:SUCCEEDED' AND channel = 'push'`).Scan(&state); err != nil || state != "UNDELIVERABLE" {
		t.Fatalf("after 00016's Down the waiting push is %q (%v), want UNDELIVERABLE", state, err)
	}
}
