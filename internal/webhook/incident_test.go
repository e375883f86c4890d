package webhook_test

import (
	"bytes"
	"testing"

	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/psp"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
	"github.com/oncepay/oncepay/internal/webhook"
)

// Issue 13 defect 4's last line of defence: the PSP charged (its reply was
// lost) but the ledger closed the payment as not charged — FAILED (a wrong
// "not charged" inference: the buyer heard "you were not charged") or VOID.
// The payment_intent.succeeded webhook that then arrives is an incident, not
// an Info line: an error log carrying the alert, and a metric of its own the
// stack alarms on. It is acknowledged (a redelivery cannot help) and moves
// nothing: no allowed edge leaves FAILED or VOID.
func TestWebhookSucceededOnFailedRowIsAnIncident(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close func(t *testing.T, w *worldtest.World, pid string)
		state ledger.State
	}{
		{"FAILED", func(t *testing.T, w *worldtest.World, pid string) {
			if _, _, moved, err := w.Ledger.Settle(ctx, pid, ledger.Outcome{State: ledger.Failed, DeclineCode: "psp_invalid_request"}, w.Clock.Now()); err != nil || !moved {
				t.Fatalf("settle FAILED: moved=%v err=%v", moved, err)
			}
		}, ledger.Failed},
		{"VOID", func(t *testing.T, w *worldtest.World, pid string) {
			// No allowed edge leads here from UNKNOWN: the state is forced,
			// as a bug or a hand edit would leave it (with the
			// edge trigger off).
			tx, err := w.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)                                                                  //nolint:errcheck // a no-op after commit
			if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil { // the edge trigger stays quiet
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `UPDATE payments SET state = 'VOID' WHERE payment_id = $1`, pid); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}, ledger.Void},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := worldtest.New(t, worldtest.Options{})
			pid := lostReply(t, w, "K1", worldtest.Body3000)
			tc.close(t, w, pid)
			before := w.Row("u1", "K1")
			intents := w.Count(`SELECT count(*) FROM outbox_intents WHERE payment_id = $1`, pid)

			flush(t, w, 1) // payment_intent.succeeded, acknowledged

			if after := w.Row("u1", "K1"); after != before || after.State != tc.state {
				t.Fatalf("row %+v -> %+v: the webhook moved a closed payment", before, after)
			}
			if n := len(w.Sim.Charges()); n != 1 {
				t.Fatalf("charges = %d", n)
			}
			if got := w.Metric(webhook.MetricSucceededOnFailed); got != 1 {
				t.Fatalf("%s = %v, want 1", webhook.MetricSucceededOnFailed, got)
			}
			if got := w.Metric("WebhookLate"); got != 0 {
				t.Fatalf("WebhookLate = %v: the incident was counted as a late webhook", got)
			}
			if !alertLogged(w, webhook.MetricSucceededOnFailed, pid) {
				t.Fatalf("no error log line carries the alert for %s", pid)
			}
			if n := w.Count(`SELECT count(*) FROM outbox_intents WHERE payment_id = $1`, pid); n != intents {
				t.Fatalf("outbox intents %d -> %d", intents, n)
			}
			if n := w.Count(`SELECT count(*) FROM outbox_intents WHERE event_id = $1`, ids.EventID(pid, "SUCCEEDED")); n != 0 {
				t.Fatal("a SUCCEEDED event was recorded for a closed payment")
			}
		})
	}
}

// A charge carrying our payment id that no ledger row holds (across Regions:
// written in a failed Region's last lag and lost in the failover) is an
// incident too: acknowledged and recorded (a redelivery is a duplicate), so
// the error log and its metric, which the stack alarms on, are the only
// trace. Nothing is written to the payments.
func TestWebhookSucceededForAnUnknownPaymentIsAnIncident(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	pid := ids.PaymentID(ids.Scope("u1", "K1"))
	if _, err := w.PSP.Charge(ctx, psp.ChargeRequest{IdempotencyKey: ids.ChargeKey(pid), PaymentID: pid,
		MerchantID: "m1", Amount: 3000, Currency: "USD", PaymentMethod: "pm_card_visa"}); err != nil {
		t.Fatal(err)
	}
	flush(t, w, 1)
	if got := w.Metric(webhook.MetricSucceededUnknown); got != 1 {
		t.Fatalf("%s = %v, want 1", webhook.MetricSucceededUnknown, got)
	}
	if n := w.Count(`SELECT count(*) FROM payments WHERE payment_id = $1`, pid); n != 0 {
		t.Errorf("the webhook wrote %d payment rows", n)
	}
	if !alertLogged(w, webhook.MetricSucceededUnknown, pid) {
		t.Errorf("no error log line carries the alert for %s", pid)
	}
}

// alertLogged reports whether an error line of the world's log carries the
// alert for the payment.
func alertLogged(w *worldtest.World, alert, pid string) bool {
	for _, line := range bytes.Split(w.Logs.Bytes(), []byte("\n")) {
		if bytes.Contains(line, []byte(`"level":"ERROR"`)) && bytes.Contains(line, []byte(`"alert":"`+alert+`"`)) &&
			bytes.Contains(line, []byte(`"payment_id":"`+pid+`"`)) {
			return true
		}
	}
	return false
}
