package config

import (
	"testing"
	"time"
)

func TestDefaultsSatisfyFormula2(t *testing.T) {
	d := Default()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	// The story's numbers: 5 s + 0.02 s < 10 s, with our 1 s margin on top.
	if d.Deadline+d.Margin+d.PreStampWait >= d.ClientTimeout {
		t.Fatal("formula 2 broken by the defaults")
	}
	if d.FunctionTimeout() != 6*time.Second {
		t.Fatalf("function timeout = %s", d.FunctionTimeout())
	}
}

func TestFormula2RejectsADeadlineThatOutlivesTheClient(t *testing.T) {
	for _, tc := range []Timing{
		{Deadline: 9 * time.Second, ClientTimeout: 10 * time.Second, Margin: time.Second, KeyWindow: time.Hour, PSPKeyWindow: 24 * time.Hour},
		// The story's counterexample: the stamp taken after an 11.98 s queue.
		{Deadline: 5 * time.Second, ClientTimeout: 10 * time.Second, PreStampWait: 11980 * time.Millisecond, KeyWindow: time.Hour, PSPKeyWindow: 24 * time.Hour},
		{Deadline: 5 * time.Second, ClientTimeout: 10 * time.Second, Margin: time.Second, KeyWindow: 5 * time.Second},
	} {
		if err := tc.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", tc)
		}
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv("ONCEPAY_DEADLINE", "3s")
	got, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if got.Deadline != 3*time.Second {
		t.Fatalf("deadline = %s", got.Deadline)
	}
	t.Setenv("ONCEPAY_DEADLINE", "20s")
	if _, err := FromEnv(); err == nil {
		t.Fatal("a 20 s deadline against a 10 s client timeout was accepted")
	}
}

// A takeover may replay a charge key only while the PSP still holds it when
// the replay lands: counted from the first request's arrival (its row's
// deadline minus the deadline), with the replay's own deadline and the
// clock margin to spare.
func TestPSPKeyLiveCountsFromTheFirstArrivalWithTheMargin(t *testing.T) {
	d := Default()
	arrival := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	first := arrival.Add(d.Deadline)
	for _, tc := range []struct {
		callDeadline time.Time
		live         bool
	}{
		{arrival.Add(time.Hour), true},
		{arrival.Add(d.PSPKeyWindow - d.Margin - time.Millisecond), true},
		{arrival.Add(d.PSPKeyWindow - d.Margin), false},
		{arrival.Add(25 * time.Hour), false},
	} {
		if got := d.PSPKeyLive(first, tc.callDeadline); got != tc.live {
			t.Errorf("PSPKeyLive(first %s, call by %s) = %v, want %v", first, tc.callDeadline, got, tc.live)
		}
	}
	t.Setenv("ONCEPAY_PSP_KEY_WINDOW", "12h")
	got, err := FromEnv()
	if err != nil || got.PSPKeyWindow != 12*time.Hour {
		t.Fatalf("FromEnv = %+v, %v", got, err)
	}
	if (Timing{Deadline: time.Second}).WithDefaults().PSPKeyWindow != d.PSPKeyWindow {
		t.Fatal("WithDefaults left the PSP key window zero")
	}
}
