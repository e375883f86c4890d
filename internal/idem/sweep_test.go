package idem_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/idem"
)

// The MRSC table's sweep (no TTL there): expired records go, unexpired ones
// stay, and a sweep stopped at its page budget says so and is finished by
// the next ones.
func TestTheSweepDeletesExpiredRecordsOnly(t *testing.T) {
	st, db, table := newStore(t)
	ctx := context.Background()
	for i := range 150 {
		c := claim(fmt.Sprintf("payments#u1#old-%d", i), "A1", t0)
		c.ExpiresAt = t0.Add(time.Minute)
		if err := st.Claim(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if err := st.Claim(ctx, claim(fmt.Sprintf("payments#u1#live-%d", i), "A1", t0.Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
	}
	sw := idem.NewSweeper(db, table)
	now := t0.Add(30 * time.Minute) // the old ones expired, the live ones not
	rep, err := sw.Sweep(ctx, now, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.More || rep.Deleted == 0 || rep.Deleted > 100 {
		t.Fatalf("one page: %+v; want some deleted, at most a page, and more to do", rep)
	}
	deleted := rep.Deleted
	for rep.More {
		if rep, err = sw.Sweep(ctx, now, 1); err != nil {
			t.Fatal(err)
		}
		deleted += rep.Deleted
	}
	if deleted != 150 {
		t.Errorf("deleted %d, want the 150 expired", deleted)
	}
	for i := range 5 {
		if _, found, err := st.Get(ctx, fmt.Sprintf("payments#u1#live-%d", i), now); err != nil || !found {
			t.Errorf("live record %d: found %v, %v", i, found, err)
		}
	}
}

// A sweep stopped at its page budget is taken up where it stopped: with
// nothing to delete, successive sweeps read the table once through, then
// start over.
func TestTheSweepGoesOnWhereItStopped(t *testing.T) {
	st, db, table := newStore(t)
	ctx := context.Background()
	for i := range 250 {
		if err := st.Claim(ctx, claim(fmt.Sprintf("payments#u1#live-%d", i), "A1", t0)); err != nil {
			t.Fatal(err)
		}
	}
	sw := idem.NewSweeper(db, table)
	scanned, sweeps := 0, 0
	for more := true; more; sweeps++ {
		if sweeps == 5 {
			t.Fatalf("after 5 one-page sweeps %d items read and the table still not through: each sweep starts over", scanned)
		}
		rep, err := sw.Sweep(ctx, t0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Deleted != 0 {
			t.Fatalf("deleted %d live records", rep.Deleted)
		}
		scanned, more = scanned+rep.Scanned, rep.More
	}
	if scanned != 250 || sweeps != 3 {
		t.Errorf("read %d items in %d sweeps; want the 250 once, in 3", scanned, sweeps)
	}
}
