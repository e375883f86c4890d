package regions

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Run plays the story's sixth beat (docs/mechanism.md#seed-part-9) on two local Regions with
// the seed's 1.0 s lag and prints each branch's event table and count: F2
// with home routing (the resend is sent home and hears 409), then F (R1
// fails in the middle of replication; R2 is promoted and replays with the
// same derived IDs). It fails when a count differs from the seed's.
func Run(ctx context.Context, out io.Writer) error {
	var bad []string
	want := func(ok bool, format string, args ...any) {
		if !ok {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	s, err := New(ctx, Options{})
	if err != nil {
		return err
	}
	f2, err := s.PlayF2(ctx)
	s.R1.Table.Print(out)
	s.Close()
	if err != nil {
		return fmt.Errorf("branch F2: %w", err)
	}
	fmt.Fprintf(out, "== F2 with home routing: R2 answered %d, R1 then %d; %d charge, %d credit, m1 = %d\n", f2.Away.Status, f2.Home.Status, f2.Charges, f2.Credits, f2.M1)
	want(f2.Away.Status == http.StatusMisdirectedRequest && f2.Home.Status == http.StatusConflict, "F2: the resend answered %d then %d, want 421 then 409", f2.Away.Status, f2.Home.Status)
	want(f2.Charges == 1 && f2.Credits == 1 && f2.M1 == 15000, "F2: %d charges, %d credits, m1 %d; want 1, 1, 15,000", f2.Charges, f2.Credits, f2.M1)

	if s, err = New(ctx, Options{Standby: true}); err != nil {
		return err
	}
	defer s.Close()
	claims, cerr := s.ClaimsRepl.Measure(ctx)
	ledger, lerr := s.Ledger.Measure(ctx)
	if cerr != nil || lerr != nil {
		return fmt.Errorf("measure the lag: %v %v", cerr, lerr)
	}
	f, err := s.PlayF(ctx, Switches{})
	s.R1.Table.Print(out)
	if err != nil {
		return fmt.Errorf("branch F: %w", err)
	}
	fmt.Fprintf(out, "== F: the lag measured before the failure: claim table %v, ledger %v; the failover took %v (promote, move %d home record(s), R2's first answer to u1)\n",
		claims.Round(1e6), ledger.Round(1e6), f.Failover.Round(1e6), f.Moved)
	fmt.Fprintf(out, "== F: %d charge, %d credit to m1 (12,000 -> %d), %d push; R1's leftover copy stopped by the home inbox (%d message(s))\n",
		f.Charges, f.Credits, f.M1, f.Pushes, f.Leftover)
	want(f.StandbyAtFailure == "UNKNOWN", "F: R2's standby held %s when R1 failed, want UNKNOWN (R1's last second lost)", f.StandbyAtFailure)
	want(f.Charges == 1 && f.Credits == 1 && f.M1 == 15000 && f.Pushes == 1 && f.Leftover >= 1,
		"F: %d charges, %d credits, m1 %d, %d pushes, %d leftover; want 1, 1, 15,000, 1, >= 1", f.Charges, f.Credits, f.M1, f.Pushes, f.Leftover)
	if len(bad) > 0 {
		return fmt.Errorf("the Region beat differs from the seed's: %s", strings.Join(bad, "; "))
	}
	return nil
}
