package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/inspect"
	"github.com/oncepay/oncepay/internal/localcloud/phone"
)

// paidOnce is a live beat that went right: 201, SUCCEEDED, one credit of
// the amount, the balance moved by the amount, one push 300 ms after the tap.
func paidOnce() liveOutcome {
	t0 := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	push := phone.Push{ReceivedAt: t0.Add(300 * time.Millisecond), Channel: phone.ChannelTopic, Source: "topic", MessageID: "m1",
		ReplaceID: "pay_x", PaymentID: "pay_x", EventID: "pay_x:SUCCEEDED"}
	return liveOutcome{
		Answers:       []exchange{{at: t0, method: http.MethodPost, path: "/payments", status: http.StatusCreated}},
		Payment:       inspect.Payment{PaymentID: "pay_x", State: "SUCCEEDED"},
		Credits:       []inspect.Entry{{EventID: "pay_x:SUCCEEDED", MerchantID: liveMerchant, Amount: 1250, Currency: "USD"}},
		BalanceBefore: 5000, BalanceAfter: 6250,
		Pushes:    []phone.Push{push},
		TapToPush: 300 * time.Millisecond,
	}
}

func TestLiveBeatPassesAPaymentChargedCreditedAndNotifiedOnce(t *testing.T) {
	if err := paidOnce().check(1250); err != nil {
		t.Fatalf("a payment paid, credited and notified once failed the live beat: %v", err)
	}
}

// Each way the live beat must fail: the demo exits non-zero on any of them.
func TestLiveBeatFails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(*liveOutcome)
		want   string
	}{
		{"when the balance moved by twice the amount (credited twice)", func(o *liveOutcome) { o.BalanceAfter = o.BalanceBefore + 2500 }, "balance moved by 2500"},
		{"when the balance did not move", func(o *liveOutcome) { o.BalanceAfter = o.BalanceBefore }, "balance moved by 0"},
		{"when two credit rows exist", func(o *liveOutcome) { o.Credits = append(o.Credits, o.Credits[0]) }, "2 credit(s)"},
		{"when no credit row exists", func(o *liveOutcome) { o.Credits = nil }, "0 credit(s)"},
		{"when the payment is not SUCCEEDED", func(o *liveOutcome) { o.Payment.State = "UNKNOWN" }, "holds the payment UNKNOWN"},
		{"when the tap was answered 202", func(o *liveOutcome) { o.Answers[0].status = http.StatusAccepted }, "not a 201"},
		{"when the CLI saw no push in time (exit 7)", func(o *liveOutcome) { o.CLIExit = 7 }, "exited 7"},
		{"when no push reached the phone", func(o *liveOutcome) { o.Pushes = nil }, "no push reached the phone"},
		{"when the push came after 10 s", func(o *liveOutcome) { o.TapToPush = 10*time.Second + time.Millisecond }, "want within 10s"},
		{"when the phone shows two alerts (pushed twice)", func(o *liveOutcome) {
			p := o.Pushes[0]
			p.MessageID = "m2"
			o.Pushes = append(o.Pushes, p)
		}, "2 alerts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := paidOnce()
			tc.break_(&o)
			err := o.check(1250)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("check = %v, want a failure saying %q", err, tc.want)
			}
		})
	}
}
