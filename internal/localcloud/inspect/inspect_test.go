package inspect_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/localcloud/inspect"
	"github.com/oncepay/oncepay/internal/localcloud/phone"
	"github.com/oncepay/oncepay/internal/testkit/story"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// paidWorld makes the story's payment through the real api, relay, worker
// and notifier (the story's world), with a phone of the test's own on the
// world's push topic, and returns the world, the payment id and the phone's
// file once the push is on it.
func paidWorld(t *testing.T) (*story.World, string, string) {
	t.Helper()
	ctx := context.Background()
	w, err := story.New(ctx, story.Options{})
	if errors.Is(err, story.ErrUnavailable) && os.Getenv("CI") == "" {
		t.Skipf("local cloud unavailable (run `make up`): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	sqsc, snsc := testenv.SQS(t), testenv.SNS(t)
	res, err := phone.Provision(ctx, sqsc, snsc, w.PushTopic, phone.Names{Queue: "t-phone-" + testenv.RandomID(6), PlatformApplication: "t-phone-" + testenv.RandomID(6)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = sqsc.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: &res.QueueURL}) })
	path := filepath.Join(t.TempDir(), "pushes.jsonl")
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- phone.Run(runCtx, phone.Config{SQS: sqsc, QueueURL: res.QueueURL, Path: path, Wait: time.Second, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("phone: %v", err)
		}
	})

	r := w.Pay(ctx, "u1", "k-inspect-"+testenv.RandomID(6), story.Body, w.Clock.Now())
	var ans struct {
		PaymentID string `json:"payment_id"`
		State     string `json:"state"`
	}
	if err := json.Unmarshal(r.Body, &ans); err != nil || r.Status != http.StatusCreated || ans.State != "SUCCEEDED" {
		t.Fatalf("pay = %d %s (%v), want 201 SUCCEEDED", r.Status, r.Body, err)
	}
	if err := w.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := phone.Wait(wctx, path, ans.PaymentID, 0); err != nil {
		t.Fatal(err)
	}
	return w, ans.PaymentID, path
}

func TestInspectShowsASucceededCreditedNotifiedPaymentWithItsPushOnThePhone(t *testing.T) {
	w, pid, path := paidWorld(t)
	r, err := inspect.Read(context.Background(), w.Pool, path, pid)
	if err != nil {
		t.Fatal(err)
	}
	p := r.Payment
	if p.PaymentID != pid || p.CallerID != "u1" || p.State != "SUCCEEDED" || deref(p.Amount) != 3000 || deref(p.Currency) != "USD" ||
		deref(p.MerchantID) != "m1" || deref(p.OrderID) != "42" || deref(p.PaymentMethod) != "pm_card_visa" || p.ClientKey == "" {
		t.Errorf("payment = %+v", p)
	}
	charges := w.Charges(ids.ChargeKey(pid))
	if len(charges) != 1 || deref(p.PSPCharge) != charges[0].ID || p.DeclineCode != nil || p.CreatedAt.IsZero() || p.UpdatedAt.IsZero() {
		t.Errorf("payment's PSP charge %v (the simulator's: %+v), decline %v, times %v/%v", deref(p.PSPCharge), charges, p.DeclineCode, p.CreatedAt, p.UpdatedAt)
	}
	if r.Refund != nil {
		t.Errorf("refund = %+v, want none", r.Refund)
	}
	eid := pid + ":SUCCEEDED"
	if len(r.Events) != 1 || r.Events[0].EventID != eid || r.Events[0].State != "SUCCEEDED" || r.Events[0].ProcessedAt == nil {
		t.Errorf("events = %+v, want the SUCCEEDED event, processed", r.Events)
	}
	if len(r.Credits) != 1 || r.Credits[0] != (inspect.Entry{EventID: eid, MerchantID: "m1", Amount: 3000, Currency: "USD", CreatedAt: r.Credits[0].CreatedAt}) {
		t.Errorf("credits = %+v, want one credit of 3000 USD to m1 for %s", r.Credits, eid)
	}
	if len(r.Debits) != 0 {
		t.Errorf("debits = %+v, want none", r.Debits)
	}
	if len(r.Notifications) != 1 {
		t.Fatalf("notifications = %+v, want one", r.Notifications)
	}
	if n := r.Notifications[0]; n.EventID != eid || n.Channel != "push" || n.State != "SENT" || n.ReplaceID != pid || n.SentAt == nil {
		t.Errorf("notification = %+v, want the push SENT with the payment as replace id", n)
	}
	if len(r.Pushes) != 1 {
		t.Fatalf("pushes = %+v, want one", r.Pushes)
	}
	if ps := r.Pushes[0]; ps.ReplaceID != pid || ps.PaymentID != pid || ps.EventID != eid || ps.Channel != phone.ChannelTopic || ps.Title != "Payment confirmed" {
		t.Errorf("push = %+v", ps)
	}
	if len(r.Phone) != 1 || r.Phone[0].ReplaceID != pid || r.Phone[0].Alerts != 1 {
		t.Errorf("phone = %+v, want one entry for %s with 1 alert", r.Phone, pid)
	}

	// The documented shape (docs/localcloud.md): every key present, none renamed.
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"":              {"credits", "debits", "emails", "events", "notifications", "payment", "phone", "pushes", "refund"},
		"payment":       {"amount", "caller_id", "client_key", "created_at", "currency", "deadline_at", "decline_code", "merchant_id", "order_id", "payment_id", "payment_method", "psp_charge", "resolve_attempts", "state", "updated_at"},
		"events":        {"consumed_at", "created_at", "event_id", "processed_at", "redrives", "state"},
		"credits":       {"amount", "created_at", "currency", "event_id", "merchant_id"},
		"notifications": {"attempts", "channel", "created_at", "event_id", "last_error", "replace_id", "sent_at", "state"},
		"pushes":        {"body", "channel", "event_id", "message_id", "payload", "payment_id", "received_at", "replace_id", "sent_at", "source", "state", "title"},
		"phone":         {"alerts", "latest", "replace_id"},
	}
	for part, keys := range want {
		obj := doc
		if part != "" {
			obj = nil
			raw := doc[part]
			if strings.HasPrefix(string(raw), "[") {
				var list []map[string]json.RawMessage
				if err := json.Unmarshal(raw, &list); err != nil || len(list) == 0 {
					t.Fatalf("%s = %s", part, raw)
				}
				obj = list[0]
			} else if err := json.Unmarshal(raw, &obj); err != nil {
				t.Fatal(err)
			}
		}
		if got := slices.Sorted(maps.Keys(obj)); !slices.Equal(got, keys) {
			t.Errorf("keys of %q = %v, want %v", part, got, keys)
		}
	}
}

func TestInspectOfAnUnknownPaymentIsErrUnknownPayment(t *testing.T) {
	pool, _ := testenv.Ledger(t)
	_, err := inspect.Read(context.Background(), pool, filepath.Join(t.TempDir(), "none.jsonl"), "pay_nosuchpayment")
	if !errors.Is(err, inspect.ErrUnknownPayment) || !strings.Contains(err.Error(), "pay_nosuchpayment") {
		t.Fatalf("err = %v, want ErrUnknownPayment naming the id", err)
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// The emails kept are those whose body names the payment, and only those:
// another payment's id that starts the same is not it.
func TestAddEmailsKeepsThePaymentsOwn(t *testing.T) {
	r := inspect.Report{Payment: inspect.Payment{PaymentID: "pay_a"}, Emails: []phone.Email{}}
	r.AddEmails([]phone.Email{
		{ID: "1", Body: "Your payment went through.\n\nPayment: pay_a\n"},
		{ID: "2", Body: "Your payment went through.\n\nPayment: pay_ab\n"},
		{ID: "3", Body: "Your payment was refunded.\n\nPayment: pay_a\n"},
	})
	if len(r.Emails) != 2 || r.Emails[0].ID != "1" || r.Emails[1].ID != "3" {
		t.Fatalf("emails %+v, want 1 and 3", r.Emails)
	}
}
