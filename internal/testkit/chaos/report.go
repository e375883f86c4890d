package chaos

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/oncepay/oncepay/internal/testkit/story"
)

// Summary adds up many schedules.
type Summary struct {
	Runs       int
	Payments   int
	Steps      int
	Elapsed    time.Duration
	Covered    map[string]int // what fired, summed over the schedules
	Doors      map[string]int // schedules per front door
	Failed     []Result       // schedules with violations
	Violations int
	// Reconciled and Again sum the reconciliation's outcome counts after
	// each schedule, and its second run's.
	Reconciled, Again map[string]int
}

// add sums counts into *into, making it on first use.
func add(into *map[string]int, counts map[string]int) {
	if *into == nil {
		*into = map[string]int{}
	}
	for k, v := range counts {
		(*into)[k] += v
	}
}

// Add counts one schedule's result.
func (s *Summary) Add(r Result) {
	if s.Covered == nil {
		s.Covered = map[string]int{}
		s.Doors = map[string]int{}
	}
	s.Doors[r.Door]++
	s.Runs++
	s.Payments += r.Payments
	s.Steps += r.Steps
	for k, v := range r.Covered {
		s.Covered[k] += v
	}
	add(&s.Reconciled, r.Reconciled)
	add(&s.Again, r.Again)
	if len(r.Violations) > 0 {
		s.Failed = append(s.Failed, r)
		s.Violations += len(r.Violations)
	}
}

// Merge adds another summary's figures to s.
func (s *Summary) Merge(o Summary) {
	if s.Covered == nil {
		s.Covered, s.Doors = map[string]int{}, map[string]int{}
	}
	s.Runs += o.Runs
	s.Payments += o.Payments
	s.Steps += o.Steps
	s.Elapsed += o.Elapsed
	for k, v := range o.Covered {
		s.Covered[k] += v
	}
	for k, v := range o.Doors {
		s.Doors[k] += v
	}
	add(&s.Reconciled, o.Reconciled)
	add(&s.Again, o.Again)
	s.Failed = append(s.Failed, o.Failed...)
	s.Violations += o.Violations
}

// Missing lists the points no schedule reached.
func (s *Summary) Missing() []string {
	var out []string
	for _, p := range Points {
		if s.Covered[p] == 0 {
			out = append(out, p)
		}
	}
	return out
}

// Err is the verdict: nil only when no schedule found a violation. A
// violation is a failure wherever it was seen: under load or alone, a
// schedule that broke an invariant once has shown the system can.
func (s *Summary) Err() error {
	if s.Violations == 0 {
		return nil
	}
	seeds := make([]string, len(s.Failed))
	for i, f := range s.Failed {
		seeds[i] = fmt.Sprint(f.Seed)
	}
	return fmt.Errorf("chaos: %d violations in %d of %d schedules (seeds %s)", s.Violations, len(s.Failed), s.Runs, strings.Join(seeds, ", "))
}

// FiredLine is the fault-kind counts of what fired, one line.
func (s *Summary) FiredLine() string { return countsLine(s.Covered) }

// ReconciledLine is the reconciliation's outcome counts after the
// schedules and its second run's, one line.
func (s *Summary) ReconciledLine() string {
	return countsLine(s.Reconciled) + "; second run " + countsLine(s.Again)
}

func countsLine(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// Print writes the figures and, for each failing seed, its violations and
// the command that replays it.
func (s *Summary) Print(out io.Writer) {
	fmt.Fprintf(out, "chaos: %d schedules, %d payments, %d steps in %s; %d violations in %d schedules\n",
		s.Runs, s.Payments, s.Steps, s.Elapsed.Round(time.Millisecond), s.Violations, len(s.Failed))
	var doors []string
	for d, n := range s.Doors {
		doors = append(doors, fmt.Sprintf("%s=%d", d, n))
	}
	sort.Strings(doors)
	fmt.Fprintf(out, "front doors: %s\n", strings.Join(doors, " "))
	fmt.Fprintf(out, "fired: %s\n", s.FiredLine())
	fmt.Fprintf(out, "reconciliation after each schedule: %s\n", s.ReconciledLine())
	if m := s.Missing(); len(m) > 0 {
		fmt.Fprintf(out, "points never hit: %s\n", strings.Join(m, " "))
	}
	for _, f := range s.Failed {
		fmt.Fprintf(out, "\nseed %d (replay: go run ./cmd/chaos -runs 1 -seed %d -trace):\n", f.Seed, f.Seed)
		for _, v := range f.Violations {
			fmt.Fprintf(out, "  %s\n", v)
		}
	}
}

// WorldSchedules is how many schedules one world plays before RunMany
// replaces it with a fresh one.
const WorldSchedules = 200

// Config shapes RunMany.
type Config struct {
	First   uint64    // the first seed; the others follow it
	Runs    int       // how many schedules
	Workers int       // worlds played side by side (default 1)
	Trace   io.Writer // receives every schedule's steps; nil: none
	// Progress, when set, receives a line every ProgressEvery schedules (and
	// at once for a schedule with a violation), so a long run shows it is
	// alive and a failing seed is known before the run ends.
	Progress      io.Writer
	ProgressEvery int
	// World shapes each world; Serial is always set (a schedule must replay).
	World story.Options
	// Between, when set, runs after every BatchRuns schedules, once every
	// world of the batch is closed and before the next batch builds its
	// own: a long run restarts the emulators there (DynamoDB Local keeps
	// the stream records of deleted tables and its writes slow tenfold
	// over a few thousand schedules). An error ends the run.
	Between   func(ctx context.Context) error
	BatchRuns int

	// underLoad, a test-only switch, replaces every schedule with one that
	// plays nothing and reports a violation when it is played beside other
	// worlds (Workers > 1), none when it is played alone: the intermittent
	// failure a replay-alone excuse would wave through, whatever the
	// product's code does.
	underLoad bool
}

// RunMany plays cfg.Runs schedules on cfg.Workers worlds side by side and
// sums them up, in batches of cfg.BatchRuns with cfg.Between run between
// them. A seed's schedule does not depend on which world played it.
func RunMany(ctx context.Context, cfg Config) (Summary, error) {
	start := time.Now()
	batch := cfg.Runs
	if cfg.Between != nil && cfg.BatchRuns > 0 {
		batch = cfg.BatchRuns
	}
	var sum Summary
	var err error
	for off := 0; off < cfg.Runs && err == nil && ctx.Err() == nil; off += batch {
		if off > 0 {
			if err = cfg.Between(ctx); err != nil {
				err = fmt.Errorf("chaos: between batches after %d schedules: %w", off, err)
				break
			}
		}
		err = runBatch(ctx, cfg, &sum, cfg.First+uint64(off), min(batch, cfg.Runs-off), start)
	}
	if err == nil && sum.Runs < cfg.Runs {
		err = fmt.Errorf("chaos: stopped after %d of %d schedules: %w", sum.Runs, cfg.Runs, context.Cause(ctx))
	}
	sum.Elapsed = time.Since(start)
	sort.Slice(sum.Failed, func(i, j int) bool { return sum.Failed[i].Seed < sum.Failed[j].Seed })
	return sum, err
}

// openWorlds counts the worlds RunMany has open, for the test that Between
// sees none.
var openWorlds atomic.Int64

// runBatch plays n schedules from seed first on fresh worlds, adding to sum,
// and closes its worlds before it returns.
func runBatch(ctx context.Context, cfg Config, sum *Summary, first uint64, n int, start time.Time) error {
	workers, runs, trace := max(cfg.Workers, 1), cfg.Runs, cfg.Trace
	opts := cfg.World
	opts.Serial = true
	if opts.Balances == nil {
		opts.Balances = map[string]int64{} // every schedule's merchants start at 0
	}
	seeds := make(chan uint64)
	results := make(chan Result)
	errs := make(chan error, workers)
	for range workers {
		go func() {
			r, err := newWorld(ctx, opts)
			if err != nil {
				errs <- err
				for range seeds {
				}
				return
			}
			openWorlds.Add(1)
			open := true
			closeWorld := func() {
				if open {
					r.w.Close()
					open = false
					openWorlds.Add(-1)
				}
			}
			played := 0
			for seed := range seeds {
				var res Result
				if cfg.underLoad {
					res = Result{Seed: seed, Covered: map[string]int{}}
					if workers > 1 {
						res.Violations = []string{"injected: a violation seen only under load"}
					}
				} else {
					res, err = r.Run(ctx, seed)
				}
				played++
				// What is stuck in a world that never quiesced would stall
				// every later schedule's quiescence; and the payments a PSP
				// keeps answering open (a saved 5xx, open for its 24 h key
				// window on the database's real clock) pile up over many
				// schedules and make every resolver run ask about all of
				// them. Either way, go on in a fresh world. A schedule's
				// outcome does not depend on the world's history.
				if err == nil && (res.NotQuiet || played%WorldSchedules == 0) {
					closeWorld()
					var next *Runner
					if next, err = newWorld(ctx, opts); err == nil {
						r, open = next, true
						openWorlds.Add(1)
					}
				}
				if err != nil {
					closeWorld()
					if res.Seed != 0 {
						results <- res // what it saw before it broke
					}
					errs <- err
					for range seeds {
					}
					return
				}
				results <- res
			}
			closeWorld() // before the batch ends: Between may restart what it uses
			errs <- nil
		}()
	}
	go func() {
		defer close(seeds)
		for i := range n {
			select {
			case seeds <- first + uint64(i):
			case <-ctx.Done():
				return
			}
		}
	}()
	var firstErr error
	for done := 0; done < workers; {
		select {
		case res := <-results:
			sum.Add(res)
			if p := cfg.Progress; p != nil {
				if len(res.Violations) > 0 {
					fmt.Fprintf(p, "chaos: seed %d: %d violations: %s\n", res.Seed, len(res.Violations), strings.Join(res.Violations, "; "))
				}
				if every := max(cfg.ProgressEvery, 1); sum.Runs%every == 0 || sum.Runs == runs {
					fmt.Fprintf(p, "chaos: %d/%d schedules, %d payments, %d violations, %s\n",
						sum.Runs, runs, sum.Payments, sum.Violations, time.Since(start).Round(time.Second))
				}
			}
			if trace != nil {
				for _, l := range res.Trace {
					fmt.Fprintf(trace, "seed %d: %s\n", res.Seed, l)
				}
			}
		case err := <-errs:
			done++
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}
	}
	return firstErr
}
