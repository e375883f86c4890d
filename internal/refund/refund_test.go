package refund_test

import (
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/refund"
)

func TestBackoffDoublesFromBaseAndIsCappedAtMax(t *testing.T) {
	b := refund.Backoff{Base: 30 * time.Second, Max: 10 * time.Minute, Budget: 8}
	want := []time.Duration{
		30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute,
		10 * time.Minute, 10 * time.Minute, 10 * time.Minute,
	}
	for i, w := range want {
		if got := b.Delay(i + 1); got != w {
			t.Errorf("Delay(%d) = %s, want %s", i+1, got, w)
		}
	}
	// Attempt counts below 1 (a row never attempted) wait the base.
	if got := b.Delay(0); got != b.Base {
		t.Errorf("Delay(0) = %s", got)
	}
	// Absurd counts neither overflow nor exceed the cap.
	for _, n := range []int{64, 1000, 1 << 30} {
		if got := b.Delay(n); got != b.Max {
			t.Errorf("Delay(%d) = %s, want the cap", n, got)
		}
	}
	// Without a cap the doubling still never overflows into a negative wait.
	open := refund.Backoff{Base: time.Second}
	for _, n := range []int{10, 62, 63, 64, 200} {
		if got := open.Delay(n); got <= 0 {
			t.Errorf("uncapped Delay(%d) = %s", n, got)
		}
	}
}

func TestBackoffBudgetAlertsFromTheBudgetOn(t *testing.T) {
	b := refund.Backoff{Base: time.Second, Max: time.Minute, Budget: 3}
	for attempts, want := range map[int]bool{0: false, 1: false, 2: false, 3: true, 4: true, 100: true} {
		if got := b.Exhausted(attempts); got != want {
			t.Errorf("Exhausted(%d) = %v, want %v", attempts, got, want)
		}
	}
}

// The zero value (the API's own first attempt): due at once, never alerts.
func TestZeroBackoffRetriesAtOnceAndNeverAlerts(t *testing.T) {
	var b refund.Backoff
	if d := b.Delay(1); d != 0 {
		t.Errorf("Delay(1) = %s, want 0", d)
	}
	if b.Exhausted(1 << 20) {
		t.Error("the zero value alerted")
	}
	if err := b.Validate(); err != nil {
		t.Error(err)
	}
}

func TestBackoffValidate(t *testing.T) {
	if err := refund.DefaultBackoff().Validate(); err != nil {
		t.Errorf("default: %v", err)
	}
	for _, b := range []refund.Backoff{
		{Base: -time.Second},
		{Base: time.Minute, Max: time.Second},
		{Base: time.Second, Budget: -1},
	} {
		if b.Validate() == nil {
			t.Errorf("%+v validated", b)
		}
	}
}

// The default schedule reaches its budget about an hour after the first
// open attempt: long enough for a PSP blip, short enough for a human to
// look the same day.
func TestDefaultScheduleReachesItsBudgetWithinAboutAnHour(t *testing.T) {
	b := refund.DefaultBackoff()
	var total time.Duration
	for n := 1; n < b.Budget; n++ {
		total += b.Delay(n)
	}
	if total < 30*time.Minute || total > 2*time.Hour {
		t.Fatalf("the budget is reached %s after the first attempt", total)
	}
	t.Logf("default: alert after %d attempts, %s after the first", b.Budget, total)
}

func TestFingerprintNamesThePayment(t *testing.T) {
	a, again := refund.Fingerprint("pay_a"), refund.Fingerprint("pay_a")
	if a == refund.Fingerprint("pay_b") || a != again {
		t.Fatal("the fingerprint must be a function of the payment alone")
	}
}
