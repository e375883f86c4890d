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
	// The seed's numbers: 5 s + 0.02 s < 10 s, with our 1 s margin on top.
	if d.Deadline+d.Margin+d.PreStampWait >= d.ClientTimeout {
		t.Fatal("formula 2 broken by the defaults")
	}
	if d.FunctionTimeout() != 6*time.Second {
		t.Fatalf("function timeout = %s", d.FunctionTimeout())
	}
}

func TestFormula2RejectsADeadlineThatOutlivesTheClient(t *testing.T) {
	for _, tc := range []Timing{
		{Deadline: 9 * time.Second, ClientTimeout: 10 * time.Second, Margin: time.Second, KeyWindow: time.Hour},
		// The seed's counterexample: the stamp taken after an 11.98 s queue.
		{Deadline: 5 * time.Second, ClientTimeout: 10 * time.Second, PreStampWait: 11980 * time.Millisecond, KeyWindow: time.Hour},
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
