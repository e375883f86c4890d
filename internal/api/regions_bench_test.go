package api_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/home"
	"github.com/oncepay/oncepay/internal/testkit/albsign"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// BenchmarkFirstCallAcrossRegions weighs the home-Region routing
// (docs/regions.md): a first call by the api with its router (the caller's
// record and the default one, two strongly consistent GetItems side by
// side, before anything else) against the same api without one, interleaved
// in one run; and the router's read alone. Reported: each one's p50 and p99,
// and routed / unrouted.
func BenchmarkFirstCallAcrossRegions(b *testing.B) {
	w := newWorld(b)
	w.timing = config.Default()
	w.clock = nil
	w.rebuildRealClock()
	mover := home.NewMover(w.db, testenv.NewTable(b, w.db, "caller"))
	rt, err := home.NewRouter(mover.Store(), "us-east-1", "us-east-1", regionURLs)
	if err != nil {
		b.Fatal(err)
	}
	quiet := slog.New(slog.NewJSONHandler(io.Discard, nil))
	plain := w.h
	routed := api.New(api.Deps{Claims: w.claims, Ledger: w.ledger, PSP: w.psp, Publisher: w.outbox, Timing: w.timing,
		Log: quiet, ALB: albsign.Default.Verifier(time.Now), Homes: rt})
	ctx := context.Background()
	var unroutedS, routedS, readS samples
	pay := func(h *api.Handler, into *samples, i int) { w.timedFirstCall(b, h, into, "regions", i) }
	steps := []func(i int){
		func(i int) { pay(plain, &unroutedS, i) },
		func(i int) { pay(routed, &routedS, i) },
		func(i int) {
			start := time.Now()
			if _, err := rt.Decide(ctx, "bench"); err != nil {
				b.Fatal(err)
			}
			readS = append(readS, time.Since(start))
		},
	}
	interleave(b, steps)
	w.h = plain
	report(b, "api", unroutedS)
	report(b, "api-routed", routedS)
	report(b, "home-read", readS)
	b.ReportMetric(ms(routedS.pct(0.5))/ms(unroutedS.pct(0.5)), "routed-ratio-p50")
	b.ReportMetric(ms(routedS.pct(0.99))/ms(unroutedS.pct(0.99)), "routed-ratio-p99")
}
