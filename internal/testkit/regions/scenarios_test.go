package regions_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/testkit/regions"
	"github.com/oncepay/oncepay/internal/testkit/story"
)

// newSystem builds two Regions, failing in CI when they are not running and
// skipping elsewhere (the project's rule for integration tests).
func newSystem(t *testing.T, o regions.Options) *regions.System {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := regions.New(ctx, o)
	if errors.Is(err, story.ErrUnavailable) || errors.Is(err, regions.ErrUnavailable) {
		if os.Getenv("CI") != "" {
			t.Fatalf("two local Regions are required in CI: %v", err)
		}
		t.Skipf("two local Regions not running (make up): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// lagSlack is what a loaded machine may add to a replication's configured
// lag (polls, scheduling); more means the replication is not what the
// scenario says it runs with.
const lagSlack = 750 * time.Millisecond

// lags measures and prints the lag each replicated store runs with.
func lags(t *testing.T, s *regions.System) {
	t.Helper()
	measure := func(store string, m func(context.Context) (time.Duration, error)) {
		t.Helper()
		d, err := m(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: configured lag %v, measured %v", store, s.Lag, d.Round(time.Millisecond))
		if d < s.Lag || d > s.Lag+lagSlack {
			t.Errorf("%s replicated in %v; want its lag %v (+ up to %v)", store, d, s.Lag, lagSlack)
		}
	}
	if s.ClaimsRepl != nil {
		measure("claim table (global table, last writer wins)", s.ClaimsRepl.Measure)
	} else {
		t.Logf("claim table: strongly consistent (one table for both Regions: no lag)")
	}
	if s.Ledger != nil {
		measure("ledger (logical replication to the standby)", s.Ledger.Measure)
	}
}

// Branch F2 without home routing (a test-only setting): the phone's resend
// A1' lands in R2 while R1's claim is still on its way (A1 has charged and
// not yet answered). Both Regions' conditional writes check their own
// replica, both claim, both run the whole path: the derived PSP key makes
// it one charge, but each Region credits m1: 18,000.
func TestF2WithoutHomeRoutingBothRegionsClaim(t *testing.T) {
	s := newSystem(t, regions.Options{WithoutHomeRouting: true})
	lags(t, s)
	ctx := context.Background()
	r, err := s.PlayF2(ctx)
	logTable(t, s)
	if err != nil {
		t.Fatal(err)
	}
	if r.A1.Status != http.StatusCreated || r.A1.State != "SUCCEEDED" {
		t.Fatalf("A1 in R1: %+v", r.A1)
	}
	if r.Away.Status != http.StatusCreated || r.Away.State != "SUCCEEDED" || r.Away.Replayed {
		t.Fatalf("A1' in R2 (%v after A1's claim, lag %v): %+v; want its own run (201, not replayed): R2's replica had no claim yet", r.Gap, s.Lag, r.Away)
	}
	if r.A1.PSPCharge == "" || r.A1.PSPCharge != r.Away.PSPCharge || r.A1.PaymentID != r.Away.PaymentID {
		t.Errorf("the two runs: %+v and %+v; want one payment id and one charge", r.A1, r.Away)
	}
	if r.Charges != 1 || r.Charged != 3000 {
		t.Errorf("%d charges (%d cents), want 1 (the derived key pay_7:charge)", r.Charges, r.Charged)
	}
	if r.Credits != 2 || r.M1 != 18000 || r.Payments[0] != 1 || r.Payments[1] != 1 {
		t.Errorf("count %+v; want the double credit: 2 credits, m1 18,000, a payment row in each Region", r.Count)
	}
	// Last writer wins made the two replicas agree on one claim: it hid
	// that there were two.
	r1, _, err1 := s.R1.Claims.Get(ctx, ids.Scope("u1", "K1"), s.Clock.Now())
	r2, _, err2 := s.R2.Claims.Get(ctx, ids.Scope("u1", "K1"), s.Clock.Now())
	if err1 != nil || err2 != nil || r1.Owner == "" || r1.Owner != r2.Owner {
		t.Errorf("after replication the replicas disagree: %q vs %q (%v, %v)", r1.Owner, r2.Owner, err1, err2)
	}
}

// Branch F2 with home routing: R2 answers the resend 421 with R1's URL; the
// client follows it to R1, where A1 still runs: 409. One charge, one
// credit, m1 = 15,000, and R2's ledger never saw the payment.
func TestF2WithHomeRoutingTheResendIs421Then409(t *testing.T) {
	s := newSystem(t, regions.Options{})
	lags(t, s)
	r, err := s.PlayF2(context.Background())
	logTable(t, s)
	if err != nil {
		t.Fatal(err)
	}
	if r.Away.Status != http.StatusMisdirectedRequest || r.Away.HomeRegion != regions.R1 || r.Away.HomeURL != regions.URLs[regions.R1] ||
		r.Away.Type != "https://oncepay.dev/problems/misdirected" || r.Away.HomeVersion != 1 {
		t.Fatalf("A1' in R2: %+v; want 421 naming R1 by u1's own record (version 1, replicated)", r.Away)
	}
	if r.Home.Status != http.StatusConflict || r.Home.Type != "https://oncepay.dev/problems/in-progress" {
		t.Fatalf("A1' followed to R1: %+v; want 409 in-progress", r.Home)
	}
	if r.A1.Status != http.StatusCreated {
		t.Fatalf("A1: %+v", r.A1)
	}
	if r.Charges != 1 || r.Credits != 1 || r.M1 != 15000 || r.Pushes != 1 || r.Payments[1] != 0 {
		t.Errorf("count %+v; want 1 charge, 1 credit, m1 15,000, 1 push, nothing in R2's ledger", r.Count)
	}
}

// F2 with the strongly consistent claim option (MRSC) and no home routing:
// R2's conditional write sees R1's claim: one claim wins, the resend is a
// repeat in progress (409).
func TestF2WithStrongClaimsOneClaimWins(t *testing.T) {
	s := newSystem(t, regions.Options{WithoutHomeRouting: true, Claims: regions.Strong})
	lags(t, s)
	r, err := s.PlayF2(context.Background())
	logTable(t, s)
	if err != nil {
		t.Fatal(err)
	}
	if r.A1.Status != http.StatusCreated || r.Away.Status != http.StatusConflict || r.Away.Type != "https://oncepay.dev/problems/in-progress" {
		t.Fatalf("A1 %+v, A1' in R2 %+v; want 201 and 409 in-progress", r.A1, r.Away)
	}
	if r.Charges != 1 || r.Credits != 1 || r.M1 != 15000 || r.Payments[1] != 0 {
		t.Errorf("count %+v; want 1 charge, 1 credit, m1 15,000, nothing in R2's ledger", r.Count)
	}
}

func playF(t *testing.T, sw regions.Switches) regions.F {
	t.Helper()
	s := newSystem(t, regions.Options{Standby: true})
	lags(t, s)
	r, err := s.PlayF(context.Background(), sw)
	logTable(t, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover: %v from its first step to R2 answering R1's caller (promote the standby, move %d home record(s), the retry's answer)", r.Failover.Round(time.Millisecond), r.Moved)
	if r.A1.Status != http.StatusAccepted {
		t.Fatalf("A1: %+v; want 202 (the lost reply)", r.A1)
	}
	if r.StandbyBefore != ledger.Unknown {
		t.Fatalf("R2's standby before the failure: %s; want the UNKNOWN row replicated", r.StandbyBefore)
	}
	if r.StandbyAtFailure != ledger.Unknown {
		t.Fatalf("R2's standby holds %s after R1 failed: R1's last second replicated; the scenario needs it lost", r.StandbyAtFailure)
	}
	if r.Moved == 0 {
		t.Error("the failover moved no caller")
	}
	if r.AfterFailover.Status != http.StatusAccepted || r.AfterFailover.State != "PROCESSING" {
		t.Errorf("u1's retry in R2 after the failover: %+v; want 202 PROCESSING", r.AfterFailover)
	}
	if r.Back.Status != http.StatusMisdirectedRequest || r.Back.HomeRegion != regions.R2 || r.Back.HomeVersion < 1 {
		t.Errorf("R1 back: u1's retry %+v; want 421 to R2 at version >= 1", r.Back)
	}
	return r
}

// Branch F: R2 never saw R1's last second, yet it produces the same charge
// key and the same event id: one charge (the PSP replays its saved result),
// one credit, one notification; R1's leftover copy is stopped by the home
// inbox.
func TestFRegionFailsMidReplicationAndR2Replays(t *testing.T) {
	r := playF(t, regions.Switches{})
	pid := story.PaymentID("u1", "K1")
	if len(r.EventIDs) != 1 || r.EventIDs[0] != ids.EventID(pid, string(ledger.Succeeded)) {
		t.Errorf("R2's outbox intents %v, want the derived %s", r.EventIDs, ids.EventID(pid, string(ledger.Succeeded)))
	}
	if r.Charges != 1 || r.Charged != 3000 || r.Credits != 1 || r.M1 != 15000 || r.Pushes != 1 {
		t.Errorf("count %+v; want 1 charge (3,000), 1 credit, m1 15,000, 1 push", r.Count)
	}
	if r.Leftover < 1 {
		t.Errorf("R1's worker handled %d messages when R1 came back: its leftover copy never reached the home inbox, so nothing was tested", r.Leftover)
	}
}

// The first counterfactual: R2 replays with a per-Region attempt key
// (pay_7:R2:1); the PSP has never seen it and charges again.
func TestFCounterfactualPerRegionAttemptKeyChargesTwice(t *testing.T) {
	r := playF(t, regions.Switches{RegionKey: true})
	if r.Charges != 2 || r.Charged != 6000 {
		t.Errorf("%d charges (%d cents); want the counterfactual's 2 ($60.00)", r.Charges, r.Charged)
	}
}

// The second: R1's outbox copy carries a random event id; nothing in the
// home inbox matches it, so m1 is credited again: 18,000.
func TestFCounterfactualRandomEventIDCreditsTwice(t *testing.T) {
	r := playF(t, regions.Switches{RandomEventID: true})
	if r.Credits != 2 || r.M1 != 18000 {
		t.Errorf("%d credits, m1 = %d; want the counterfactual's 2, 18,000", r.Credits, r.M1)
	}
	if r.Charges != 1 {
		t.Errorf("%d charges, want 1", r.Charges)
	}
}

func logTable(t *testing.T, s *regions.System) {
	t.Helper()
	var b strings.Builder
	s.R1.Table.Print(&b)
	t.Log("\n" + b.String())
}

// The demo's Region beat (make demo): both branches, their tables and the
// seed's counts, or an error naming what differs.
func TestRunPlaysTheRegionBeat(t *testing.T) {
	newSystem(t, regions.Options{}).Close() // the CI rule: fail when the Regions are missing
	var b strings.Builder
	if err := regions.Run(context.Background(), &b); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	out := b.String()
	for _, want := range []string{"branch F2", "branch F:", "R1's leftover copy stopped by the home inbox", "the failover took"} {
		if !strings.Contains(out, want) {
			t.Errorf("the beat's output lacks %q:\n%s", want, out)
		}
	}
}
