package chaos_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/testkit/chaos"
	"github.com/oncepay/oncepay/internal/testkit/story"
)

var ctx = context.Background()

// played sums every schedule the package's tests ran, for TestMain's line.
var played struct {
	sync.Mutex
	sum chaos.Summary
}

// TestMain prints, after the tests, how many schedules ran and how often
// each fault kind fired (what fired, not what was armed), as a SUMMARY line
// make test repeats at its end (scripts/testsummary.sh).
func TestMain(m *testing.M) {
	code := m.Run()
	played.Lock()
	fmt.Printf("SUMMARY chaos: %d schedules run; fired: %s; reconciliation after each: %s\n", played.sum.Runs, played.sum.FiredLine(), played.sum.ReconciledLine())
	played.Unlock()
	os.Exit(code)
}

// runMany runs schedules, skipping outside CI when the local cloud is down.
func runMany(t *testing.T, cfg chaos.Config) chaos.Summary {
	t.Helper()
	sum, err := chaos.RunMany(ctx, cfg)
	if errors.Is(err, story.ErrUnavailable) && os.Getenv("CI") == "" {
		t.Skipf("local cloud unavailable (run `make up`): %v", err)
	}
	played.Lock()
	played.sum.Merge(sum)
	played.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// ciWorkers is how many worlds the CI test plays side by side: two, one
// per core of the machines CI runs on, so the emulators are not the
// suspect when a schedule fails.
const ciWorkers = 2

// A few hundred random schedules of duplicates, crashes at every hop's crash
// points, paused owners, lost replies, outages past every retry, ambiguous
// commits, refunds, redeliveries and webhook orders, through both front
// doors, with the PSP's awkward behaviours (a 500 saved after the charge,
// refunds that settle or fail later, late and twin events, a lagging search
// index, 3-D Secure cards, unknown and single-use payment methods), keep
// every invariant. ONCEPAY_CHAOS_RUNS overrides the count;
// -short runs 30. Any violation fails the test: there is no replay that
// excuses one.
func TestRandomFaultSchedulesKeepEveryInvariant(t *testing.T) {
	runs := 200
	if testing.Short() {
		runs = 30
	}
	if v, err := strconv.Atoi(os.Getenv("ONCEPAY_CHAOS_RUNS")); err == nil && v > 0 {
		runs = v
	}
	var out strings.Builder
	sum := runMany(t, chaos.Config{First: 1, Runs: runs, Workers: ciWorkers})
	sum.Print(&out)
	t.Log("\n" + out.String())
	if sum.Runs != runs {
		t.Fatalf("%d of %d schedules ran", sum.Runs, runs)
	}
	failIfViolated(t, sum)
	if m := sum.Missing(); runs >= 200 && len(m) > 0 {
		t.Fatalf("no schedule reached %v: the runner lost a fault", m)
	}
}

// failIfViolated is the CI verdict: every violation is a failure.
func failIfViolated(t *testing.T, sum chaos.Summary) {
	t.Helper()
	for _, f := range sum.Failed {
		t.Errorf("seed %d (go run ./cmd/chaos -runs 1 -seed %d -trace):\n  %s", f.Seed, f.Seed, strings.Join(f.Violations, "\n  "))
	}
	if err := sum.Err(); err != nil {
		t.Error(err)
	}
}

// excusedBefore is the verdict the CI test gave before: a schedule that
// failed under load was replayed alone and forgiven if it came back clean.
// Kept only to show what it let through.
func excusedBefore(t *testing.T, sum chaos.Summary, cfg chaos.Config) bool {
	t.Helper()
	for _, f := range sum.Failed {
		alone := cfg
		alone.First, alone.Runs, alone.Workers = f.Seed, 1, 1
		if again := runMany(t, alone); again.Violations > 0 {
			return false
		}
	}
	return true
}

// An intermittent violation — one a schedule shows beside other worlds and
// not alone — passed the old verdict (replayed alone, it came back clean)
// and fails the new one.
func TestAViolationSeenOnlyUnderLoadFailsTheRun(t *testing.T) {
	var progress strings.Builder
	cfg := chaos.UnderLoad(chaos.Config{First: 900, Runs: 2, Workers: 2, Progress: &progress, ProgressEvery: 1})
	sum := runMany(t, cfg)
	if sum.Violations == 0 {
		t.Fatal("the injected violation was not reported")
	}
	// A long run names a failing seed when it is played, not only at the end.
	if p := progress.String(); !strings.Contains(p, "violations: injected") || !strings.Contains(p, "chaos: 2/2 schedules") {
		t.Fatalf("progress lines:\n%s", p)
	}
	cfg.Progress = nil
	if !excusedBefore(t, sum, cfg) {
		t.Fatalf("the old verdict failed the run too; the injected violation should have been excused alone: %v", sum.Failed)
	}
	if sum.Err() == nil {
		t.Fatal("the new verdict passed a run with a violation")
	}
}

// A long run in batches plays every seed once, runs Between only between
// batches (after every world of the batch is closed), and ends at the
// first error Between returns, with the schedules already played counted.
func TestBatchesRunBetweenAndStopAtItsError(t *testing.T) {
	var progress strings.Builder
	calls := 0
	cfg := chaos.UnderLoad(chaos.Config{First: 910, Runs: 5, Workers: 1, BatchRuns: 2, Progress: &progress, ProgressEvery: 1,
		Between: func(context.Context) error {
			calls++
			if n := chaos.OpenWorlds(); n != 0 {
				t.Errorf("Between ran with %d worlds open", n)
			}
			return nil
		}})
	sum := runMany(t, cfg)
	if sum.Runs != 5 || calls != 2 {
		t.Fatalf("played %d schedules with %d calls between; want 5 and 2", sum.Runs, calls)
	}
	for i := 1; i <= 5; i++ {
		if !strings.Contains(progress.String(), fmt.Sprintf("chaos: %d/5 schedules", i)) {
			t.Fatalf("no progress line for schedule %d:\n%s", i, progress.String())
		}
	}
	// Each seed once: the progress lines name no seed, but a violation
	// line does, and under load every schedule reports one when played
	// beside another world; alone (Workers 1) none. So play the batches
	// with two workers and count each seed's violation line.
	var twice strings.Builder
	cfg2 := chaos.UnderLoad(chaos.Config{First: 920, Runs: 5, Workers: 2, BatchRuns: 2, Progress: &twice, ProgressEvery: 100,
		Between: func(context.Context) error { return nil }})
	if _, err := chaos.RunMany(ctx, cfg2); err != nil {
		t.Fatal(err)
	}
	for seed := 920; seed < 925; seed++ {
		if n := strings.Count(twice.String(), fmt.Sprintf("chaos: seed %d:", seed)); n != 1 {
			t.Errorf("seed %d played %d times", seed, n)
		}
	}
	// A run cut short (an interrupt between batches) is an error, never a
	// clean summary of fewer schedules.
	cut, cancel := context.WithCancel(ctx)
	cfg.Progress, cfg.Between = nil, func(context.Context) error { cancel(); return nil }
	if sum, err := chaos.RunMany(cut, cfg); err == nil || sum.Runs >= 5 {
		t.Errorf("an interrupted run: %d schedules, err %v; want an error and fewer than 5", sum.Runs, err)
	}
	stop := errors.New("emulator did not come back")
	cfg.Progress, cfg.Between = nil, func(context.Context) error { return stop }
	sum, err := chaos.RunMany(ctx, cfg)
	if !errors.Is(err, stop) || sum.Runs != 2 {
		t.Fatalf("Between's error: got %v after %d schedules; want it after 2", err, sum.Runs)
	}
}

// Seeds that found bugs stay fixed: 42 (a dead key reuse's fingerprint
// locked the payment out), 474 and 806 (quiescence declared before any
// deadline passed, leaving a charged PENDING row unresolved), 658 (a 422
// said before the ledger had a row, later contradicted by a 201). The
// widened fault model (front doors, outages, refunds, ambiguous commits)
// draws other schedules from the same seeds, so these now replay new
// schedules; the old bugs' steps live on as internal/story scenario tests.
// Found by the widened model: 6 (a resolve through the ALB with a
// percent-encoded key voided another scope: told VOID, the payment
// SUCCEEDED), 51 (a takeover after a charge met the PSP's 403 and recorded
// FAILED over the charge), 36 (a relay that gave up on a re-driven event
// again: the next re-drive waited five real minutes in the world, and a
// failed push 30 s). Found in the checker: 20261814 and 20261944 (a pay
// answered 202 and the resolve its Location names, in the same step,
// answered an honest "nothing was run" for a read whose reply was lost; the
// checker blamed the resolve for the row the pay had written).
func TestSeedsThatFoundBugsStayFixed(t *testing.T) {
	for _, seed := range []uint64{6, 36, 42, 51, 474, 658, 806, 20261814, 20261944} {
		sum := runMany(t, chaos.Config{First: seed, Runs: 1})
		if sum.Runs != 1 {
			// A seed that did not run checked nothing: never a pass.
			t.Errorf("seed %d: %d schedules ran, not 1", seed, sum.Runs)
		}
		for _, f := range sum.Failed {
			t.Errorf("seed %d (go run ./cmd/chaos -runs 1 -seed %d -trace):\n  %s", f.Seed, f.Seed, strings.Join(f.Violations, "\n  "))
		}
	}
}

// A seed is the whole schedule: played on two different worlds, it makes
// the same steps and finds the same things.
func TestAScheduleReplaysFromItsSeed(t *testing.T) {
	var a, b strings.Builder
	runMany(t, chaos.Config{First: 4242, Runs: 3, Trace: &a})
	runMany(t, chaos.Config{First: 4242, Runs: 3, Trace: &b})
	if a.String() != b.String() || a.Len() == 0 {
		t.Fatalf("the same seeds played differently:\n%s\n---\n%s", a.String(), b.String())
	}
}

// noGuard removes the durable guard (Branch X,
// docs/mechanism.md#seed-part-0), here only: every request is a new payment
// under a random id.
type noGuard struct{ api.Ledger }

func (g noGuard) InsertPending(ctx context.Context, p ledger.Payment, receiptEmail string) (ledger.Payment, bool, error) {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	p.ID = "pay_x" + hex.EncodeToString(b)
	p.ClientKey += "#" + hex.EncodeToString(b)
	return g.Ledger.InsertPending(ctx, p, receiptEmail)
}

// The checker is honest: without the durable guard the same schedules
// break the money invariants.
func TestTheCheckerCatchesTheMissingDurableGuard(t *testing.T) {
	sum := runMany(t, chaos.Config{First: 1, Runs: 5, World: story.Options{WrapLedger: func(l api.Ledger) api.Ledger { return noGuard{l} }}})
	if sum.Violations == 0 {
		t.Fatal("five schedules without the durable guard found nothing")
	}
	var all []string
	for _, f := range sum.Failed {
		all = append(all, f.Violations...)
	}
	if !slices.ContainsFunc(all, func(v string) bool { return strings.Contains(v, "balance") }) {
		t.Fatalf("violations %v name no balance", all)
	}
}

// failsCharges records every payment the api settles SUCCEEDED as FAILED,
// over the PSP's charge: the ledger contradicting the PSP, here only.
type failsCharges struct{ api.Ledger }

func (f failsCharges) Settle(ctx context.Context, id string, o ledger.Outcome, now time.Time, h ...ledger.Hook) (ledger.Payment, *event.Event, bool, error) {
	if o.State == ledger.Succeeded {
		o = ledger.Outcome{State: ledger.Failed, PSPCharge: o.PSPCharge, DeclineCode: "chaos_test"}
	}
	return f.Ledger.Settle(ctx, id, o, now, h...)
}

// The reconciliation's invariant is honest: a charge the ledger holds
// FAILED is reversed by the reconciliation after the schedule, and the
// reversal, agreement as it is, is still reported as the path's failure.
func TestTheCheckerReportsAChargeTheReconciliationReversed(t *testing.T) {
	sum := runMany(t, chaos.Config{First: 1, Runs: 3, World: story.Options{WrapLedger: func(l api.Ledger) api.Ledger { return failsCharges{l} }}})
	if sum.Reconciled["reversed"] == 0 {
		t.Fatalf("no reversal in three schedules whose ledger fails every charge: %v", sum.Reconciled)
	}
	var all []string
	for _, f := range sum.Failed {
		all = append(all, f.Violations...)
	}
	if !slices.ContainsFunc(all, func(v string) bool {
		return strings.Contains(v, "reversed by the reconciliation (its refund SUCCEEDED)")
	}) {
		t.Fatalf("violations %v name no reversed charge", all)
	}
}
