// Package openloop drives a system at a fixed arrival rate and reads the
// latencies it measured. It is open loop: each arrival is fired at its
// scheduled moment whether or not earlier ones have finished, so a slow
// answer delays no later arrival and cannot hide its own cost (the
// coordinated omission of a closed-loop driver that waits before sending
// the next request).
package openloop

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"
)

// Outcome is what one arrival measured: its latency when it completed, or
// that it did not (refused, failed, never finished within the driver's
// patience).
type Outcome struct {
	Latency time.Duration
	OK      bool
	// Answer is the time to the request's own answer, when the latency
	// runs past it (tap -> push: the answer comes first); 0: none.
	Answer time.Duration
	Status int           // the HTTP status of the request, if it got one
	Late   time.Duration // how far behind its scheduled moment it was fired
}

// Schedule returns the offsets from the start at which a run of rate
// arrivals per second for d fires: evenly spaced, the first at 0.
func Schedule(rate float64, d time.Duration) []time.Duration {
	if rate <= 0 || d <= 0 {
		return nil
	}
	n := int(math.Round(rate * d.Seconds()))
	at := make([]time.Duration, n)
	for i := range at {
		at[i] = time.Duration(float64(i) / rate * float64(time.Second))
	}
	return at
}

// Run fires fire(ctx, i) at each of the schedule's offsets from now, each in
// its own goroutine, and returns the outcomes in arrival order once every
// arrival has returned. fire measures its own latency (from just before it
// sends); Run fills in Late.
func Run(ctx context.Context, schedule []time.Duration, fire func(ctx context.Context, i int) Outcome) []Outcome {
	out := make([]Outcome, len(schedule))
	var wg sync.WaitGroup
	start := time.Now()
	for i, at := range schedule {
		if d := time.Until(start.Add(at)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				wg.Wait()
				return out[:i]
			}
		}
		late := max(time.Since(start)-at, 0)
		wg.Go(func() {
			o := fire(ctx, i)
			o.Late = late
			out[i] = o
		})
	}
	wg.Wait()
	return out
}

// Summary is a run's latency distribution over every arrival, failed ones
// included.
type Summary struct {
	Rate   float64
	N      int             // arrivals
	Failed int             // arrivals that did not complete
	sorted []time.Duration // latencies of the completed ones, ascending
}

// Summarize reads a run of rate arrivals per second.
func Summarize(rate float64, outcomes []Outcome) Summary {
	s := Summary{Rate: rate, N: len(outcomes)}
	for _, o := range outcomes {
		if o.OK {
			s.sorted = append(s.sorted, o.Latency)
		} else {
			s.Failed++
		}
	}
	slices.Sort(s.sorted)
	return s
}

// Infinite is the latency of an arrival that never completed.
const Infinite = time.Duration(math.MaxInt64)

// Quantile returns the latency at or below which a share p of the arrivals
// completed, ranked as the in-process benchmarks rank theirs (the sample
// at index floor(n*p)). A failed arrival ranks above every completed one,
// as Infinite: one that never got its answer took longer than any that did,
// so refusals cannot improve a percentile. 0 when the run had no arrivals.
func (s Summary) Quantile(p float64) time.Duration {
	if s.N == 0 {
		return 0
	}
	i := min(s.N-1, int(float64(s.N)*p))
	if i >= len(s.sorted) {
		return Infinite
	}
	return s.sorted[i]
}

// Delivered returns the completed arrivals' own quantile (failures left
// out): the figure to show beside Quantile when some arrivals failed.
func (s Summary) Delivered(p float64) time.Duration {
	if len(s.sorted) == 0 {
		return 0
	}
	return s.sorted[min(len(s.sorted)-1, int(float64(len(s.sorted))*p))]
}

// FirstOver returns the lowest rate among steps whose quantile p exceeds
// limit, and whether any did. Steps need not be in rate order.
func FirstOver(steps []Summary, p float64, limit time.Duration) (float64, bool) {
	best, found := 0.0, false
	for _, s := range steps {
		if s.N > 0 && s.Quantile(p) > limit && (!found || s.Rate < best) {
			best, found = s.Rate, true
		}
	}
	return best, found
}
