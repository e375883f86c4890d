package regions_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/testkit/regions"
)

// Two-Region chaos: randomized schedules with a failover at a random step
// each (regions.Chaos). ONCEPAY_REGIONS_CHAOS_RUNS sets how many (default
// 10; make chaos-regions runs 1,000), ONCEPAY_REGIONS_CHAOS_SEED the first
// seed. Any violation fails; the failing seed replays with the same seed.
func TestTwoRegionChaos(t *testing.T) {
	runs, first := 10, uint64(1)
	if v, err := strconv.Atoi(os.Getenv("ONCEPAY_REGIONS_CHAOS_RUNS")); err == nil && v > 0 {
		runs = v
	}
	if v, err := strconv.ParseUint(os.Getenv("ONCEPAY_REGIONS_CHAOS_SEED"), 10, 64); err == nil {
		first = v
	}
	if testing.Short() {
		runs = 3
	}
	newSystem(t, regions.Options{}).Close() // the CI rule: fail when the Regions are missing
	fired, reconciled := map[string]int{}, map[string]int{}
	bad := 0
	for seed := first; seed < first+uint64(runs); seed++ {
		sc, err := regions.Chaos(context.Background(), seed)
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, joinLog(sc.Log))
		}
		t.Logf("seed %d: lag %v, %d payments, R1 failed at step %d, %d violation(s), reconciliation %v", seed, sc.Lag, sc.Payments, sc.FailAt, len(sc.Violations), sc.Reconciled)
		for k, v := range sc.Fired {
			fired[k] += v
		}
		for k, v := range sc.Reconciled {
			reconciled[k] += v
		}
		if len(sc.Violations) > 0 {
			bad++
			t.Errorf("seed %d (lag %v, %d payments, R1 failed at step %d): %v\n%s", seed, sc.Lag, sc.Payments, sc.FailAt, sc.Violations, joinLog(sc.Log))
		}
	}
	// The SUMMARY prefix at the start of a line is what make test's
	// summary repeats (scripts/testsummary.sh): printed, not t.Log'd, whose
	// indented file:line prefix it would not match.
	fmt.Printf("SUMMARY regions chaos: %d schedules, %d with violations; reconciliation in R2 after the failover: %v (adopted: charged, answered and written in R1's last lag, lost with it); fired: %v\n",
		runs, bad, reconciled, fired)
	if fired["failover"] != runs {
		t.Errorf("%d failovers in %d schedules", fired["failover"], runs)
	}
	// The failover from inside a request must actually happen: a run whose
	// hooks stopped firing would otherwise pass on the boundary failovers.
	inFlight := 0
	for k, v := range fired {
		if strings.HasPrefix(k, "failover_after_") {
			inFlight += v
		}
	}
	if runs >= 10 && inFlight == 0 {
		t.Errorf("no failover in flight fired in %d schedules", runs)
	}
}

func joinLog(lines []string) string {
	out := ""
	for _, l := range lines {
		out += "    " + l + "\n"
	}
	return out
}
