package chaos_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/chaos"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/story"
)

var ctx = context.Background()

// runMany runs schedules, skipping outside CI when the local cloud is down.
func runMany(t *testing.T, cfg chaos.Config) chaos.Summary {
	t.Helper()
	sum, err := chaos.RunMany(ctx, cfg)
	if errors.Is(err, story.ErrUnavailable) && os.Getenv("CI") == "" {
		t.Skipf("local cloud unavailable (run `make up`): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// A few hundred random schedules of duplicates, crashes at every hop's crash
// points, paused owners, lost replies, redeliveries and webhook orders keep
// every invariant. ONCEPAY_CHAOS_RUNS overrides the count; -short runs 30.
func TestRandomFaultSchedulesKeepEveryInvariant(t *testing.T) {
	runs := 200
	if testing.Short() {
		runs = 30
	}
	if v, err := strconv.Atoi(os.Getenv("ONCEPAY_CHAOS_RUNS")); err == nil && v > 0 {
		runs = v
	}
	var out strings.Builder
	sum := runMany(t, chaos.Config{First: 1, Runs: runs, Workers: 6})
	sum.Print(&out)
	t.Log("\n" + out.String())
	if sum.Runs != runs {
		t.Fatalf("%d of %d schedules ran", sum.Runs, runs)
	}
	// A schedule is a function of its seed: a failure that is the system's
	// comes back when the seed is played again alone. One that does not
	// (seen only under sustained load of several worlds on the emulators:
	// a stream record or a push that never arrived) is reported, not hidden.
	for _, f := range sum.Failed {
		again := runMany(t, chaos.Config{First: f.Seed, Runs: 1})
		if again.Violations > 0 {
			t.Errorf("seed %d fails again alone (go run ./cmd/chaos -runs 1 -seed %d -trace):\n  %s", f.Seed, f.Seed, strings.Join(again.Failed[0].Violations, "\n  "))
			continue
		}
		t.Logf("seed %d failed under load but not alone (emulator lag, not a schedule outcome):\n  %s", f.Seed, strings.Join(f.Violations, "\n  "))
	}
	if m := sum.Missing(); runs >= 200 && len(m) > 0 {
		t.Fatalf("no schedule reached %v: the runner lost a fault", m)
	}
}

// Seeds that found bugs stay fixed: 42 (a dead key reuse's fingerprint
// locked the payment out), 474 and 806 (quiescence declared before any
// deadline passed, leaving a charged PENDING row unresolved), 658 (a 422
// said before the ledger had a row, later contradicted by a 201).
func TestSeedsThatFoundBugsStayFixed(t *testing.T) {
	for _, seed := range []uint64{42, 474, 658, 806} {
		sum := runMany(t, chaos.Config{First: seed, Runs: 1})
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

// noGuard removes the durable guard (seed Branch X), here only: every
// request is a new payment under a random id.
type noGuard struct{ api.Ledger }

func (g noGuard) InsertPending(ctx context.Context, p ledger.Payment) (ledger.Payment, bool, error) {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	p.ID = "pay_x" + hex.EncodeToString(b)
	p.ClientKey += "#" + hex.EncodeToString(b)
	return g.Ledger.InsertPending(ctx, p)
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
