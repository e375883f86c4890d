package resolver_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

// setReadOnly makes the world's ledger database refuse writes (what a
// standby Region's Aurora secondary does before its promotion), or accept
// them again (the promotion), for every new connection.
func setReadOnly(t *testing.T, w *worldtest.World, on bool) {
	t.Helper()
	verb := "RESET default_transaction_read_only"
	if on {
		verb = "SET default_transaction_read_only = on"
	}
	func() {
		conn, err := w.Pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, `SET default_transaction_read_only = off`); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I `+verb+`', current_database()); END $$`); err != nil {
			t.Fatal(err)
		}
	}()
	w.Pool.Reset() // new connections take the database's setting
}

// unknownPayment is a world whose u1/K1 payment lost its PSP reply: UNKNOWN,
// charged, for a resolver to settle.
func unknownPayment(t *testing.T) *worldtest.World {
	t.Helper()
	w := worldtest.New(t, worldtest.Options{})
	loseReply(t, w, ids.PaymentID(ids.Scope("u1", "K1")))
	if r := w.Pay("u1", "K1", worldtest.Body3000); r.Status != http.StatusAccepted {
		t.Fatalf("first call = %d %s", r.Status, r.Body)
	}
	return w
}

// A standby Region's resolver finds its ledger read-only and waits: no PSP
// call, no write attempted, no error (its alarm stays quiet). Promoted, the
// same resolver settles the open payment it inherited.
func TestAStandbysResolverWaitsUntilItsLedgerIsPromoted(t *testing.T) {
	w := unknownPayment(t)
	charges := len(w.Sim.Charges())
	setReadOnly(t, w, true)
	t.Cleanup(func() { setReadOnly(t, w, false) })
	w.Clock.Advance(time.Second)
	cfg := w.ResolverConfig()
	cfg.CheckStandby = true // across Regions (ONCEPAY_STANDBY_CHECK)
	r := w.Resolver(cfg, worldtest.ResolverOptions{})
	rep := run(t, r)
	if !rep.Standby || rep.Claimed != 0 || rep.PSPCalls != 0 {
		t.Fatalf("read-only ledger: report %+v; want standby, nothing claimed or called", rep)
	}
	if len(w.Sim.Charges()) != charges || w.Metric("ResolverStandby") != 1 {
		t.Errorf("charges %d -> %d, ResolverStandby %v", charges, len(w.Sim.Charges()), w.Metric("ResolverStandby"))
	}
	setReadOnly(t, w, false)
	rep = run(t, r)
	if rep.Standby || rep.Succeeded != 1 {
		t.Fatalf("promoted: report %+v; want the inherited payment settled", rep)
	}
	if row := w.Row("u1", "K1"); row.State != ledger.Succeeded || len(w.Sim.Charges()) != charges {
		t.Errorf("row %s, charges %d; want SUCCEEDED with the one charge", row.State, len(w.Sim.Charges()))
	}
}

// With the MRSC claim table (no TTL) the resolver's run deletes the key
// records past their window, and leaves the live ones.
func TestTheResolverSweepsExpiredKeyRecordsWhenTheTableHasNoTTL(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	if r := w.Pay("u1", "K1", worldtest.Body3000); r.Status != http.StatusCreated {
		t.Fatalf("pay: %d %s", r.Status, r.Body)
	}
	w.Clock.Advance(2 * time.Hour) // past the key window (1 h)
	if r := w.Pay("u1", "K2", worldtest.Body3000); r.Status != http.StatusCreated {
		t.Fatalf("pay: %d %s", r.Status, r.Body)
	}
	rep := run(t, w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{SweepClaims: true}))
	if rep.ClaimsSwept != 1 {
		t.Errorf("swept %d, want K1's record", rep.ClaimsSwept)
	}
	if _, found := w.Record("u1", "K2"); !found {
		t.Error("the live record K2 was swept")
	}
	if rep := run(t, w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{})); rep.ClaimsSwept != 0 {
		t.Errorf("a resolver without the sweep swept %d", rep.ClaimsSwept)
	}
}

// In one Region there is no standby and no check: a read-only ledger is an
// error the run reports (the alarm's), not a quiet wait.
func TestOneRegionsResolverDoesNotTakeAReadOnlyLedgerForAStandby(t *testing.T) {
	w := unknownPayment(t)
	setReadOnly(t, w, true)
	t.Cleanup(func() { setReadOnly(t, w, false) })
	w.Clock.Advance(time.Second)
	rep, err := w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{}).Run(ctx)
	if err == nil || rep.Standby {
		t.Errorf("one Region, read-only ledger: report %+v, err %v; want an error, not a standby", rep, err)
	}
}

// The same read-only ledger in the Region that homes the callers is an
// outage, not a wait: the run settles nothing (it cannot write) but counts
// HomeLedgerReadOnly, which the Region stacks alarm on; a standby's run
// (not the home) counts only ResolverStandby, and a home record it cannot
// read fails the run (ResolverErrors) rather than pass for a standby's wait.
func TestAReadOnlyLedgerInTheHomeRegionIsCounted(t *testing.T) {
	w := unknownPayment(t)
	charges := len(w.Sim.Charges())
	setReadOnly(t, w, true)
	t.Cleanup(func() { setReadOnly(t, w, false) })
	cfg := w.ResolverConfig()
	cfg.CheckStandby = true
	isHome := func(home bool, err error) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) { return home, err }
	}

	rep := run(t, w.Resolver(cfg, worldtest.ResolverOptions{IsHome: isHome(false, nil)}))
	if !rep.Standby || rep.HomeReadOnly || w.Metric("HomeLedgerReadOnly") != 0 {
		t.Errorf("standby: report %+v, HomeLedgerReadOnly %v; want a quiet wait", rep, w.Metric("HomeLedgerReadOnly"))
	}
	rep = run(t, w.Resolver(cfg, worldtest.ResolverOptions{IsHome: isHome(true, nil)}))
	if !rep.Standby || !rep.HomeReadOnly || rep.PSPCalls != 0 || w.Metric("HomeLedgerReadOnly") != 1 {
		t.Errorf("home: report %+v, HomeLedgerReadOnly %v; want it counted, no PSP call", rep, w.Metric("HomeLedgerReadOnly"))
	}
	unreadable := errors.New("home table unreachable")
	if _, err := w.Resolver(cfg, worldtest.ResolverOptions{IsHome: isHome(false, unreadable)}).Run(ctx); !errors.Is(err, unreadable) {
		t.Errorf("home record unreadable: err %v, want it returned", err)
	}
	if len(w.Sim.Charges()) != charges || w.Metric("ResolverStandby") != 3 {
		t.Errorf("charges %d -> %d, ResolverStandby %v; want no charge, 3 waits", charges, len(w.Sim.Charges()), w.Metric("ResolverStandby"))
	}
	if row := w.Row("u1", "K1"); row.State != ledger.Unknown {
		t.Errorf("row %s, want still UNKNOWN", row.State)
	}
}

// An Aurora global database's secondary serves nothing at its writer
// endpoint until the promotion, so a standby's sweep cannot even ask
// whether its ledger is read-only. Outside the home Region a host that does
// not resolve is the standby's wait (no error: no retries, no AsyncFailures, no alarm every
// minute); in the home Region, or with no home record to ask, the error
// stands.
func TestAnUnreachableLedgerOutsideTheHomeIsAStandbysWait(t *testing.T) {
	w := unknownPayment(t)
	charges := len(w.Sim.Charges())
	ledgerAt := func(host string) *ledger.Store { return ledger.New(testenv.UnreachableLedger(t, host)) }
	// A name that does not resolve: the secondary's endpoint.
	gone := ledgerAt("oncepay-ledger.cluster-x.invalid:5432")
	cfg := w.ResolverConfig()
	cfg.CheckStandby = true
	isHome := func(home bool, err error) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) { return home, err }
	}

	rep, err := w.Resolver(cfg, worldtest.ResolverOptions{Ledger: gone, IsHome: isHome(false, nil)}).Run(ctx)
	if err != nil || !rep.Standby || w.Metric("ResolverStandby") != 1 {
		t.Errorf("standby, writer unreachable: report %+v, err %v, ResolverStandby %v; want a quiet wait", rep, err, w.Metric("ResolverStandby"))
	}
	if _, err := w.Resolver(cfg, worldtest.ResolverOptions{Ledger: gone, IsHome: isHome(true, nil)}).Run(ctx); err == nil {
		t.Error("home Region, writer unreachable: no error; want the outage reported")
	}
	unreadable := errors.New("home table unreachable")
	if _, err := w.Resolver(cfg, worldtest.ResolverOptions{Ledger: gone, IsHome: isHome(false, unreadable)}).Run(ctx); !errors.Is(err, unreadable) {
		t.Errorf("home record unreadable too: err %v, want it returned", err)
	}
	if _, err := w.Resolver(cfg, worldtest.ResolverOptions{Ledger: gone}).Run(ctx); err == nil {
		t.Error("no home record to ask: no error; want the connection's")
	}
	// Any other failure to reach the ledger (refused here; an IAM login, a
	// security group, TLS) is an error outside the home too: a standby
	// that could never reach its ledger is not a quiet wait.
	refused := ledgerAt("127.0.0.1:1")
	if _, err := w.Resolver(cfg, worldtest.ResolverOptions{Ledger: refused, IsHome: isHome(false, nil)}).Run(ctx); err == nil {
		t.Error("standby, connection refused: no error; want it reported")
	}
	if len(w.Sim.Charges()) != charges {
		t.Errorf("charges %d -> %d; want none", charges, len(w.Sim.Charges()))
	}
}
