package blackbox

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/awsclient"
	"github.com/oncepay/oncepay/internal/awsclient/dynamoclient"
	"github.com/oncepay/oncepay/internal/awsclient/sqsclient"
	"github.com/oncepay/oncepay/internal/totals"
)

// TestTheStreamJobsTotalsMatchTheLedgerThroughAKilledRun: payments to a
// merchant of the case's own (one declined) flow through the front door
// while the runner kills an invocation of the stack's totals function as it
// runs. Lambda's retry hands the batch again with the last committed state,
// and the merchant's day total in the sink ends at the sum of its SUCCEEDED
// payments: none counted twice, the declined one not at all. The kill lands
// milliseconds into the run, mostly before its sink writes, and the stack
// runs one version, so this proves the real binaries' totals through a
// crash and a retry; that the flush undoes a lost run's writes is proved
// where the crash point can be chosen (internal/totals, the story's beat).
func TestTheStreamJobsTotalsMatchTheLedgerThroughAKilledRun(t *testing.T) {
	t.Parallel()
	s := live(t)
	s.needAdmin(t)
	calm(t)
	if s.totals == "" {
		t.Fatal("the stack's outputs name no TotalsTableName")
	}
	ctx := context.Background()
	cfg, err := awsclient.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := totals.NewTable(dynamoclient.New(cfg), s.totals)
	if err != nil {
		t.Fatal(err)
	}
	a := newActors("totals")
	// The day key is the events' UTC day: keep the payments off midnight.
	if now := time.Now().UTC(); now.Add(3*time.Minute).Day() != now.Day() {
		time.Sleep(time.Until(now.Truncate(24 * time.Hour).Add(24*time.Hour + time.Second)))
	}

	// Warm the function first: the runner aims a kill at a warm
	// environment only (a cold start dies in the runtime's init).
	warm, err := s.pay(ctx, a.caller, "K-warm", a.body("o-warm", 100, "pm_card_visa"))
	if err != nil || warm.Status != http.StatusCreated {
		t.Fatalf("first payment: %v, %v", warm, err)
	}
	want := int64(100)
	day := time.Now().UTC().Format("2006-01-02")
	key := totals.Key{Merchant: a.merchant, Day: day, Currency: "USD"}
	if err := awaitTotal(ctx, sink, key, want, 60*time.Second); err != nil {
		t.Fatalf("before the kill: %v", err)
	}

	type aim struct{ killed, busy int }
	aimed := make(chan aim, 1)
	kerr := make(chan error, 1)
	go func() {
		n, busy, err := s.killInFlight(ctx, "totals", 30*time.Second)
		aimed <- aim{n, busy}
		kerr <- err
	}()
	time.Sleep(200 * time.Millisecond) // the aim is armed
	for i := range 6 {
		method := "pm_card_visa"
		amount := int64(200 + i)
		if i == 3 {
			method = "pm_card_chargeDeclined"
		}
		r, err := s.pay(ctx, a.caller, fmt.Sprintf("K%d", i), a.body(fmt.Sprintf("o-%d", i), amount, method))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case i == 3 && r.Status == http.StatusPaymentRequired:
		case i != 3 && r.Status == http.StatusCreated:
			want += amount
		default:
			t.Fatalf("payment %d answered %v", i, r)
		}
		time.Sleep(300 * time.Millisecond) // separate batches
	}
	k := <-aimed
	if err := <-kerr; err != nil {
		t.Fatal(err)
	}
	if k.killed != 1 || k.busy != 1 {
		t.Fatalf("the aimed kill killed %d (%d busy): no totals run was killed as it ran", k.killed, k.busy)
	}
	if err := awaitTotal(ctx, sink, key, want, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	// And it stays there: nothing counted again later.
	time.Sleep(3 * time.Second)
	if got, _, err := sink.DayTotal(ctx, key); err != nil || got != want {
		t.Errorf("a moment later %s = %d (%v), want %d", key, got, err, want)
	}
}

// awaitTotal waits until the sink holds want for key.
func awaitTotal(ctx context.Context, sink *totals.Table, key totals.Key, want int64, within time.Duration) error {
	var got int64
	_, err := eventually(ctx, within, 500*time.Millisecond, func(ctx context.Context) error {
		n, _, err := sink.DayTotal(ctx, key)
		if err != nil {
			return err
		}
		got = n
		if n != want {
			return fmt.Errorf("%w: %s = %d", errNotYet, key, n)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s = %d after %s, want %d (the ledger's SUCCEEDED sum): %w", key, got, within, want, err)
	}
	return nil
}

// TestTheStacksRecountWritesADayThatIsOverFromTheLedger: a late copy for a
// merchant's day that is over, sent to the stack's recount queue as the
// stream job sends one, is taken by the stack's recount function (the
// template's mapping, its ledger login, its grant on the sink) and its
// day's total written from the ledger: nothing for a merchant the ledger
// never paid, a row that then stands over any partial. That the recount
// counts what the ledger holds is proved on a ledger of the test's own
// (internal/recount): no public call settles a payment on a past day.
func TestTheStacksRecountWritesADayThatIsOverFromTheLedger(t *testing.T) {
	t.Parallel()
	s := live(t)
	if s.totals == "" || s.recount == "" {
		t.Fatal("the stack's outputs name no TotalsTableName or RecountQueueUrl")
	}
	ctx := context.Background()
	cfg, err := awsclient.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := totals.NewTable(dynamoclient.New(cfg), s.totals)
	if err != nil {
		t.Fatal(err)
	}
	send, err := totals.RecountQueue(sqsclient.New(cfg), s.recount)
	if err != nil {
		t.Fatal(err)
	}
	a := newActors("recount")
	key := totals.Key{Merchant: a.merchant, Day: time.Now().UTC().Add(-48 * time.Hour).Format("2006-01-02"), Currency: "USD"}
	if err := sink.Put(ctx, "shardId-bb", 1, map[totals.Key]int64{key: 700}); err != nil { // a partial the ledger does not back
		t.Fatal(err)
	}
	if err := send(ctx, totals.Late{EventID: a.merchant + ":SUCCEEDED", PaymentID: a.merchant, MerchantID: a.merchant,
		Day: key.Day, Currency: key.Currency, Shard: "shardId-bb"}); err != nil {
		t.Fatal(err)
	}
	_, err = eventually(ctx, 60*time.Second, 500*time.Millisecond, func(ctx context.Context) error {
		p, err := sink.Partials(ctx, key)
		if err != nil {
			return err
		}
		if n, ok := p[totals.RecountShard]; !ok || n != 0 {
			return fmt.Errorf("%w: %s partials %v", errNotYet, key, p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the recount row: %v", err)
	}
	if got, found, err := sink.DayTotal(ctx, key); err != nil || !found || got != 0 {
		t.Errorf("%s = %d (found %v, %v), want the recount's 0 over the shard's 700", key, got, found, err)
	}
}
