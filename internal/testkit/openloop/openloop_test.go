package openloop

import (
	"context"
	"sync"
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// A run of 50/s for 10 s is 500 arrivals 20 ms apart, the first at once.
func TestScheduleSpacesArrivalsEvenly(t *testing.T) {
	at := Schedule(50, 10*time.Second)
	if len(at) != 500 || at[0] != 0 || at[1] != ms(20) || at[499] != ms(9980) {
		t.Fatalf("Schedule(50, 10s): %d arrivals, first %v, %v, last %v", len(at), at[0], at[1], at[len(at)-1])
	}
	if len(Schedule(0, time.Second)) != 0 || len(Schedule(1, 0)) != 0 {
		t.Error("a zero rate or duration schedules arrivals")
	}
}

// An arrival that hangs does not hold back the ones after it: each is fired
// on its own schedule (the point of an open-loop driver).
func TestRunFiresOnScheduleWhileEarlierArrivalsHang(t *testing.T) {
	var mu sync.Mutex
	fired := map[int]time.Time{}
	start := time.Now()
	out := Run(context.Background(), Schedule(20, 500*time.Millisecond), func(_ context.Context, i int) Outcome {
		mu.Lock()
		fired[i] = time.Now()
		mu.Unlock()
		if i == 0 {
			time.Sleep(400 * time.Millisecond) // the first answer is slow
		}
		return Outcome{Latency: ms(i), OK: true}
	})
	if len(out) != 10 {
		t.Fatalf("%d outcomes, want 10", len(out))
	}
	// Arrival 5 is due at 250 ms: a closed loop would fire it after 400 ms.
	if got := fired[5].Sub(start); got > ms(350) {
		t.Errorf("arrival 5 fired after %v, want ~250 ms (it waited for arrival 0)", got)
	}
	for i, o := range out {
		if !o.OK || o.Latency != ms(i) {
			t.Errorf("outcome %d = %+v, not its own", i, o)
		}
	}
}

// Failed arrivals rank above every completed one, so 2 refusals in 100
// put the p99 at Infinite while the p50 stays a completed latency.
func TestQuantileCountsFailuresAsSlowest(t *testing.T) {
	var out []Outcome
	for i := 1; i <= 98; i++ {
		out = append(out, Outcome{Latency: ms(i), OK: true})
	}
	out = append(out, Outcome{Status: 429}, Outcome{Status: 500})
	s := Summarize(50, out)
	if s.N != 100 || s.Failed != 2 {
		t.Fatalf("N=%d Failed=%d, want 100 and 2", s.N, s.Failed)
	}
	if got := s.Quantile(0.50); got != ms(51) {
		t.Errorf("p50 = %v, want 51ms (index 50)", got)
	}
	if got := s.Quantile(0.99); got != Infinite {
		t.Errorf("p99 = %v, want Infinite with 2%% failed", got)
	}
	if got := s.Delivered(0.99); got != ms(98) {
		t.Errorf("delivered p99 = %v, want 98ms", got)
	}
	if (Summary{}).Quantile(0.5) != 0 || (Summary{}).Delivered(0.5) != 0 {
		t.Error("an empty run has a latency")
	}
}

// The ramp's answer is the lowest rate whose p99 passes the limit, failed
// arrivals counting; none passing is said so.
func TestFirstOverFindsTheLowestRatePastTheLimit(t *testing.T) {
	step := func(rate float64, lat time.Duration, failed int) Summary {
		var out []Outcome
		for range 100 - failed {
			out = append(out, Outcome{Latency: lat, OK: true})
		}
		for range failed {
			out = append(out, Outcome{Status: 429})
		}
		return Summarize(rate, out)
	}
	steps := []Summary{step(80, ms(300), 5), step(5, ms(200), 0), step(40, ms(1200), 0), step(20, ms(900), 0)}
	if r, ok := FirstOver(steps, 0.99, time.Second); !ok || r != 40 {
		t.Errorf("FirstOver = %v, %v; want 40 (its p99 is 1.2 s)", r, ok)
	}
	// 5 of 100 refused at 80/s: its p99 is past any limit.
	if r, ok := FirstOver(steps[:2], 0.99, time.Second); !ok || r != 80 {
		t.Errorf("FirstOver = %v, %v; want 80 (refusals count)", r, ok)
	}
	if _, ok := FirstOver(steps[1:2], 0.99, time.Second); ok {
		t.Error("a ramp under the limit passed it")
	}
}
