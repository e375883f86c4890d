package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// figures holds every reported value by benchmark and unit.
type figures map[string]map[string]float64

func (f figures) set(bench, unit string, v float64) {
	if f[bench] == nil {
		f[bench] = map[string]float64{}
	}
	f[bench][unit] = v
}

// get returns a figure and whether the run reported it.
func (f figures) get(bench, unit string) (float64, bool) {
	v, ok := f[bench][unit]
	return v, ok
}

// BootstrapLimitMiB is DEVELOPERS.md's bound on each stripped bootstrap.
const BootstrapLimitMiB = 10.0

func writeSections(out io.Writer, f figures, plots string) error {
	writeTargets(out, f)
	writeFirstCall(out, f)
	writeReplay(out, f)
	writeRegions(out, f)
	writeBootstraps(out, f)
	writeCounts(out, f)
	writePeer(out, f)
	if err := writeSweep(out, f, plots); err != nil {
		return err
	}
	writePush(out, f)
	if err := writeTapToPush(out, f, plots); err != nil {
		return err
	}
	writeLive(out, f)
	writeHot(out, f)
	writeCost(out, f)
	return nil
}

func writePush(out io.Writer, f figures) {
	p50, ok := f.get("OutboxToPush", "push-p50-ms")
	if !ok {
		return
	}
	p90, _ := f.get("OutboxToPush", "push-p90-ms")
	p99, _ := f.get("OutboxToPush", "push-p99-ms")
	fmt.Fprintln(out, "## End to end: outbox -> push")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "One event at a time from the outbox put (the API's last write before it answers the tap) to the push handed to SNS: stream mapping (polling every 250 ms when idle, as Lambda's does), relay, SQS FIFO, the worker's transaction, the publish. The tap's own latency is FirstCall's api figure above; the push arrives that much plus this after the tap.")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| p50 ms | p90 ms | p99 ms |")
	fmt.Fprintln(out, "|---|---|---|")
	fmt.Fprintf(out, "| %.0f | %.0f | %.0f |\n\n", p50, p90, p99)
}

// point is one point of a latency distribution: the share of samples at or
// below ms, in percent (0: the minimum, 100: the maximum).
type point struct {
	pct, ms float64
}

// distribution reads the points bench reported as "<name>-<at>-ms", where
// at is min, max or a quantile pN (past two digits only p99…, whose further
// digits are decimals: p999 is 99.9), lowest first; nil if it reported none.
func distribution(f figures, bench, name string) []point {
	var pts []point
	for unit, v := range f[bench] {
		at, ok := strings.CutPrefix(unit, name+"-")
		if !ok {
			continue
		}
		if at, ok = strings.CutSuffix(at, "-ms"); !ok {
			continue
		}
		var pct float64
		switch {
		case at == "min":
			pct = 0
		case at == "max":
			pct = 100
		case strings.HasPrefix(at, "p") && len(at) > 1:
			digits := at[1:]
			if len(digits) > 2 {
				if !strings.HasPrefix(digits, "99") {
					continue // p100, p250: not a quantile in this notation
				}
				digits = digits[:2] + "." + digits[2:]
			}
			p, err := strconv.ParseFloat(digits, 64)
			if err != nil || p <= 0 || p >= 100 {
				continue
			}
			pct = p
		default:
			continue
		}
		pts = append(pts, point{pct, v})
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].pct < pts[j].pct })
	return pts
}

// pctLabel names a distribution point in a table header.
func pctLabel(pct float64) string {
	switch pct {
	case 0:
		return "min"
	case 100:
		return "max"
	}
	return "p" + strings.ReplaceAll(strconv.FormatFloat(pct, 'f', -1, 64), ".", "")
}

// valueAt returns the distribution's value at pct, if it was reported.
func valueAt(pts []point, pct float64) (float64, bool) {
	for _, p := range pts {
		if p.pct == pct {
			return p.ms, true
		}
	}
	return 0, false
}

func writeTapToPush(out io.Writer, f figures, plots string) error {
	push := distribution(f, "TapToPush", "tap-push")
	if len(push) == 0 {
		return nil
	}
	answer := distribution(f, "TapToPush", "tap-answer")
	fmt.Fprintln(out, "## End-to-end tap -> push")
	fmt.Fprintln(out)
	fmt.Fprintf(out, "%d taps, one at a time, each from the moment POST /payments is handed to the api handler (DynamoDB key store, PostgreSQL ledger, the PSP simulator, the outbox put) until its push reached the phone: the later of the push received from a queue subscribed to the push topic and the worker's invocation returning with the notification row SENT. In between: the outbox stream (polled every 250 ms when idle, as Lambda's mapping does), relay, SQS FIFO (long-polled), the worker's transaction, the SNS publish. Each tap waits a random fraction of the stream's idle poll first, so taps land anywhere in it, as real ones do; a warm-up tap is not counted. The API answer of the same taps is beside it.\n\n", iterations(f, "TapToPush"))
	cols := push
	fmt.Fprint(out, "| ms |")
	for _, p := range cols {
		fmt.Fprintf(out, " %s |", pctLabel(p.pct))
	}
	fmt.Fprint(out, "\n|---|")
	for range cols {
		fmt.Fprint(out, "---|")
	}
	fmt.Fprintln(out)
	for _, row := range []struct {
		name string
		pts  []point
	}{{"API answer", answer}, {"tap -> push", push}} {
		if len(row.pts) == 0 {
			continue
		}
		fmt.Fprintf(out, "| %s |", row.name)
		for _, c := range cols {
			if v, ok := valueAt(row.pts, c.pct); ok {
				fmt.Fprintf(out, " %.1f |", v)
			} else {
				fmt.Fprint(out, " |")
			}
		}
		fmt.Fprintln(out)
	}
	p50, _ := valueAt(push, 50)
	if a50, ok := valueAt(answer, 50); ok && p50 > 0 {
		fmt.Fprintf(out, "\nMedians: the answer after %.1f ms, the push after %.1f ms: %.0f%% of the median tap -> push comes after the buyer has the answer.\n", a50, p50, (p50-a50)/p50*100)
	}
	fmt.Fprintln(out)
	if plots == "" {
		return nil
	}
	if err := os.MkdirAll(plots, 0o755); err != nil {
		return err
	}
	file := filepath.Join(plots, "tap-push-cdf.svg")
	if err := cdfPlot(file, map[string][]point{"API answer": answer, "tap -> push": push}); err != nil {
		return fmt.Errorf("tap -> push plot: %w", err)
	}
	fmt.Fprintf(out, "![tap -> push CDF](%s)\n\n", filepath.ToSlash(file))
	return nil
}

// iterations returns how many iterations bench ran (recorded by run).
func iterations(f figures, bench string) int {
	v, _ := f.get(bench, iterUnit)
	return int(v)
}

// cdfPlot draws each distribution as a CDF through its reported points, on
// a log time axis so the answer (milliseconds) and the push (hundreds) share
// one plot.
func cdfPlot(path string, series map[string][]point) error {
	p := plot.New()
	p.Title.Text = "End-to-end tap -> push (CDF)"
	p.X.Label.Text = "ms since the tap (log scale)"
	p.Y.Label.Text = "% of taps"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.TickerFunc(ticks125)
	p.Y.Min, p.Y.Max = 0, 100
	names := make([]string, 0, len(series))
	for n := range series {
		names = append(names, n)
	}
	sort.Strings(names)
	for i, n := range names {
		var xy plotter.XYs
		for _, pt := range series[n] {
			if pt.ms > 0 { // a log axis has no zero
				xy = append(xy, plotter.XY{X: pt.ms, Y: pt.pct})
			}
		}
		if len(xy) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(xy)
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
		p.Add(line, points)
		p.Legend.Add(n, line, points)
	}
	p.Add(plotter.NewGrid())
	// Room on both sides, so the ends of the curves are not on the frame;
	// the legend goes bottom right, where a CDF has no line.
	p.X.Min, p.X.Max = p.X.Min/1.5, p.X.Max*1.5
	return p.Save(6*vg.Inch, 3.5*vg.Inch, path)
}

// ticks125 marks 1, 2 and 5 of each decade between min and max (> 0): a log
// axis spanning one or two decades gets readable labels, not just the powers
// of ten.
func ticks125(lo, hi float64) []plot.Tick {
	var t []plot.Tick
	if !(lo > 0) || math.IsInf(hi, 0) || math.IsNaN(hi) {
		return nil // no data: no decades to mark (and no end to the loop)
	}
	for dec := math.Pow(10, math.Floor(math.Log10(lo))); dec <= hi; dec *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := m * dec; v >= lo && v <= hi {
				t = append(t, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
			}
		}
	}
	return t
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func writeTargets(out io.Writer, f figures) {
	fmt.Fprintln(out, "## Targets")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| target | figure | this run | |")
	fmt.Fprintln(out, "|---|---|---|---|")
	if v, ok := f.get("FirstCall", "design-ratio-p50"); ok {
		fmt.Fprintf(out, "| api ≤ 1.15x its design floor (five sequential round trips, bare) | FirstCall design-ratio-p50 | %.3fx | %s |\n", v, verdict(v <= 1.15))
	}
	if v, ok := f.get("FirstCallPSP300", "design-ratio-p50"); ok {
		fmt.Fprintf(out, "| api ≤ 1.15x its design floor, PSP at 300 ms (assumed) | FirstCallPSP300 design-ratio-p50 | %.3fx | %s |\n", v, verdict(v <= 1.15))
	}
	if v, ok := f.get("Replay", "put-ratio-p50"); ok {
		fmt.Fprintf(out, "| replay ≤ 1.10x a bare failing conditional put (ALL_OLD) | Replay put-ratio-p50 | %.3fx | %s |\n", v, verdict(v <= 1.10))
	}
	if v, ok := f.get("RequestCounts", "happy-writes"); ok {
		fmt.Fprintf(out, "| ≤ 5 durable writes per payment (happy path) | RequestCounts happy-writes | %.0f | %s |\n", v, verdict(v <= 5))
	}
	if v, ok := f.get("Concurrency", "dup64-charges"); ok {
		fmt.Fprintf(out, "| 64 concurrent duplicates -> exactly one charge | Concurrency dup64-charges | %.0f | %s |\n", v, verdict(v == 1))
	}
	for _, fn := range lambdas(f) {
		v, _ := f.get("LambdaBootstrap", fn+"-MiB")
		fmt.Fprintf(out, "| %s bootstrap ≤ 10 MiB stripped | LambdaBootstrap %s-MiB | %.2f MiB | %s |\n", fn, fn, v, verdict(v <= BootstrapLimitMiB))
	}
	fmt.Fprintln(out)
}

// lambdas lists the functions LambdaBootstrap sized.
func lambdas(f figures) []string {
	var fns []string
	for unit := range f["LambdaBootstrap"] {
		if fn, ok := strings.CutSuffix(unit, "-MiB"); ok {
			fns = append(fns, fn)
		}
	}
	sort.Strings(fns)
	return fns
}

// firstCallRuns are FirstCall's two PSP latencies: the simulator's own and
// the assumed 300 ms of a real PSP.
var firstCallRuns = []struct{ bench, psp string }{
	{"FirstCall", "simulator (answers in under 1 ms)"},
	{"FirstCallPSP300", "300 ms per charge (assumed)"},
}

func writeFirstCall(out io.Writer, f figures) {
	var rows []string
	for _, r := range firstCallRuns {
		api, ok := f.get(r.bench, "api-p50-ms")
		if !ok {
			continue
		}
		g := func(u string) string {
			if v, ok := f.get(r.bench, u); ok {
				return fmt.Sprintf("%.1f", v)
			}
			return "–"
		}
		x := func(u string) string {
			if v, ok := f.get(r.bench, u); ok {
				return fmt.Sprintf("%.2fx", v)
			}
			return "–"
		}
		rows = append(rows, fmt.Sprintf("| %s | %d | %s | %s | %.1f | %s | %s | %s | %s |", r.psp, iterations(f, r.bench), g("floor-p50-ms"), g("design-p50-ms"), api, x("ratio-p50"), x("design-ratio-p50"), g("api-no-outbox-put-p50-ms"), x("no-outbox-put-design-ratio-p50")))
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(out, "## First call against its floors")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Medians of the happy path, interleaved with its floors in the same loop. The floor is the four round trips the target names, bare (the claim's conditional put, the guard insert, the PSP call, the final commit); the design floor adds the bare completion UpdateItem, the design's fifth sequential round trip. api / floor is the target's ratio; api / design floor is the implementation's own overhead. The 300 ms row has the simulator hold each charge 300 ms: an ASSUMED latency for a real PSP, not a measurement of one. The last two columns are the same handler without its outbox put, in the same loop (the three take each place in turn): the put runs side by side with the completion, so it adds no round trip to the design, but on this machine it shares two cores with DynamoDB Local, PostgreSQL and the simulator, and DynamoDB Local writes a stream-enabled table's stream records into its own store. What it costs here is the difference between the two ratios; on DynamoDB the two writes go to different partitions in parallel. No deployment runs without the put: it is only the measure.")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| PSP | iterations | floor p50 ms | design floor p50 ms | api p50 ms | api / floor | api / design floor | api without its outbox put p50 ms | that / design floor |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintln(out, r)
	}
	fmt.Fprintln(out)
}

// writeRegions weighs the home routing across Regions (docs/regions.md):
// the same first call with and without the router, interleaved.
func writeRegions(out io.Writer, f figures) {
	const b = "FirstCallAcrossRegions"
	ratio, ok := f.get(b, "routed-ratio-p50")
	if !ok {
		return
	}
	g := func(u string) string {
		if v, ok := f.get(b, u); ok {
			return fmt.Sprintf("%.2f", v)
		}
		return "–"
	}
	fmt.Fprintln(out, "## Across Regions: what the home routing adds")
	fmt.Fprintln(out)
	fmt.Fprintf(out, "%d interleaved iterations: a first call by the api as one Region runs it, by the same api with its home router (the caller's record and the default one, two strongly consistent GetItems side by side, before the claim), and the router's read alone. The read is one more round trip on the path before the claim; across Regions it is what stops a second Region from claiming a key the home holds (docs/regions.md).\n\n", iterations(f, b))
	fmt.Fprintln(out, "| | p50 ms | p99 ms |")
	fmt.Fprintln(out, "|---|---|---|")
	fmt.Fprintf(out, "| first call, one Region | %s | %s |\n", g("api-p50-ms"), g("api-p99-ms"))
	fmt.Fprintf(out, "| first call, routed by home | %s | %s |\n", g("api-routed-p50-ms"), g("api-routed-p99-ms"))
	fmt.Fprintf(out, "| the home read alone | %s | %s |\n\n", g("home-read-p50-ms"), g("home-read-p99-ms"))
	fmt.Fprintf(out, "Routed / one Region: %.2fx at p50, %sx at p99.\n\n", ratio, g("routed-ratio-p99"))
}

// writeReplay splits a replay's time: the bare put its claim is, the key
// record store's claim (the put under the request's deadline, the holder
// decoded), the whole handler.
func writeReplay(out io.Writer, f figures) {
	put, ok1 := f.get("Replay", "failedput-p50-ms")
	store, ok2 := f.get("Replay", "store-p50-ms")
	api, ok3 := f.get("Replay", "replay-p50-ms")
	if !ok1 || !ok2 || !ok3 || put <= 0 {
		return
	}
	fmt.Fprintln(out, "## Replay, step by step")
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Medians of %d rounds, each step taking each place in turn. The store's claim is `idem.Store.Claim` as the handler calls it: the same put under a deadline context, and the holder (with its stored answer) decoded. What lies between it and the replay is the handler's own: the header's key, the body's parse and fingerprint, the answer from the record, two log lines (the CPU profile reading under Reading the figures puts it at 17 µs idle).\n\n", iterations(f, "Replay"))
	fmt.Fprintln(out, "| step | p50 ms | / bare put |")
	fmt.Fprintln(out, "|---|---|---|")
	if v, ok := f.get("Replay", "getitem-p50-ms"); ok {
		fmt.Fprintf(out, "| bare GetItem (for reference) | %.3f | %.2fx |\n", v, v/put)
	}
	fmt.Fprintf(out, "| bare failing conditional put (ALL_OLD) | %.3f | 1.00x |\n", put)
	fmt.Fprintf(out, "| the store's claim | %.3f | %.2fx |\n", store, store/put)
	fmt.Fprintf(out, "| the api's replay | %.3f | %.2fx |\n", api, api/put)
	fmt.Fprintln(out)
}

func writeBootstraps(out io.Writer, f figures) {
	fns := lambdas(f)
	warm := warmInvoke(f)
	if len(fns) == 0 && len(warm) == 0 {
		return
	}
	fmt.Fprintln(out, "## Lambda bootstraps")
	fmt.Fprintln(out)
	if len(fns) > 0 {
		fmt.Fprintln(out, "Size: `make lambdas`'s build (linux/arm64, static, `-trimpath -ldflags='-s -w'`, the rule's tags and flags). Cold start: aws-lambda-rie on this machine (host architecture), from the emulator's process start to the first successful invocation, median of fresh emulators; the emulator's own start is included, Lambda's sandbox and download are not.")
		fmt.Fprintln(out)
		fmt.Fprintln(out, "| function | stripped MiB | cold start p50 ms |")
		fmt.Fprintln(out, "|---|---|---|")
		for _, fn := range fns {
			size, _ := f.get("LambdaBootstrap", fn+"-MiB")
			cold := "not started (its invocation is the migration)"
			if v, ok := f.get("LambdaBootstrap", fn+"-cold-p50-ms"); ok {
				cold = fmt.Sprintf("%.0f", v)
			}
			fmt.Fprintf(out, "| %s | %.2f | %s |\n", fn, size, cold)
		}
		fmt.Fprintln(out)
	}
	if len(warm) == 0 {
		return
	}
	size := ""
	if v, ok := f.get("LambdaWarmInvoke", "api-inline-MiB"); ok {
		size = fmt.Sprintf("; %.2f MiB stripped for linux/arm64", v)
	}
	fmt.Fprintf(out, "Warm invocations of api, %d iterations: the bootstrap as `make lambdas` builds it (inlining off) and the same build without `-gcflags=all=-l` (inlining on%s), both under aws-lambda-rie against the same table, ledger and PSP simulator, invoked interleaved; each iteration sends each one replay of a completed payment and one first call with a fresh key. Wall time as the caller sees it, the emulator's hop included. CPU: the bootstrap process's own, every thread, read from the kernel's per-task schedstat around each invocation and averaged (the emulator's and the simulator's CPU are not in it; the Runtime API exchange with the emulator and the Go runtime's own work are).\n\n", iterations(f, "LambdaWarmInvoke"), size)
	fmt.Fprintln(out, "| request | inlining off (as built) p50 ms | inlining on p50 ms | off / on | CPU per request, as built µs | CPU per request, inlining on µs | as built, GOMAXPROCS = the machine's CPUs: p50 ms | its CPU µs |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|")
	us := func(v float64, ok bool) string {
		if !ok {
			return "–"
		}
		return fmt.Sprintf("%.0f", v)
	}
	for _, w := range warm {
		off, okOff := f.get("LambdaWarmInvoke", "api-cpu-"+w.key+"-noinline-us")
		on, okOn := f.get("LambdaWarmInvoke", "api-cpu-"+w.key+"-inline-us")
		all, okAll := f.get("LambdaWarmInvoke", "api-warm-"+w.key+"-allprocs-p50-ms")
		allCPU, okAllCPU := f.get("LambdaWarmInvoke", "api-cpu-"+w.key+"-allprocs-us")
		allMS := "–"
		if okAll {
			allMS = fmt.Sprintf("%.2f", all)
		}
		fmt.Fprintf(out, "| %s | %.2f | %.2f | %.2fx | %s | %s | %s | %s |\n", w.name, w.off, w.on, w.ratio, us(off, okOff), us(on, okOn), allMS, us(allCPU, okAllCPU))
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "As built, every function sets GOMAXPROCS to the CPU Lambda gives it (boot.FitProcs: one per 1,769 MB of memory, at least one); the last two columns are the same build told to use every CPU the machine shows, as Go does by default inside a Lambda sandbox, which shows its host's vCPUs whatever the function's share.")
	fmt.Fprintln(out)
}

// warmFigure is one request kind of LambdaWarmInvoke.
type warmFigure struct {
	key            string // in the figures' names
	name, short    string // in the table, in prose
	off, on, ratio float64
}

// warmInvoke reads LambdaWarmInvoke's figures, replay first; nil if it did
// not run.
func warmInvoke(f figures) []warmFigure {
	var ws []warmFigure
	for _, k := range []struct{ key, name, short string }{
		{"replay", "replay of a completed payment", "a replay"},
		{"first", "first call (fresh key)", "a first call"},
	} {
		off, ok1 := f.get("LambdaWarmInvoke", "api-warm-"+k.key+"-noinline-p50-ms")
		on, ok2 := f.get("LambdaWarmInvoke", "api-warm-"+k.key+"-inline-p50-ms")
		ratio, ok3 := f.get("LambdaWarmInvoke", "api-warm-"+k.key+"-noinline/inline")
		if ok1 && ok2 && ok3 {
			ws = append(ws, warmFigure{k.key, k.name, k.short, off, on, ratio})
		}
	}
	return ws
}

// requestKinds are RequestCounts' kinds, in the order they are explained.
var requestKinds = []struct{ key, name string }{
	{"happy", "happy path (first call, charged)"},
	{"replay", "replay of a final answer"},
	{"pointer", "pointer render (reply lost, answered from the row)"},
	{"inprogress", "409 in progress"},
	{"reused", "422 key reused with another body"},
}

func writeCounts(out io.Writer, f figures) {
	if _, ok := f.get("RequestCounts", "happy-writes"); !ok {
		return
	}
	fmt.Fprintln(out, "## Requests per payment (counted on the wire)")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Counted by an AWS SDK middleware (each DynamoDB call by operation and outcome) and a pgx tracer (each statement; a COMMIT or an autocommit INSERT/UPDATE/DELETE/WITH is a durable write). The SQL commits column counts explicit COMMITs only: the api's ledger writes are autocommit statements, each its own commit, so they show under SQL statements and durable writes. A failed conditional put is a round trip DynamoDB bills as a write but not a durable write. Exact counts, per request:")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| request | durable writes | round trips | DynamoDB writes billed | DynamoDB reads | SQL statements | SQL commits |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|")
	for _, k := range requestKinds {
		g := func(u string) float64 { v, _ := f.get("RequestCounts", k.key+"-"+u); return v }
		fmt.Fprintf(out, "| %s | %g | %g | %g | %g | %g | %g |\n", k.name, g("writes"), g("roundtrips"), g("ddb-writes"), g("ddb-reads"), g("sql-statements"), g("sql-commits"))
	}
	if v, ok := f.get("RequestCounts", "happy-psp-calls"); ok {
		fmt.Fprintf(out, "\nThe happy path also makes %g PSP call (not a durable write of ours; the PSP's own idempotency key guards it).\n", v)
	}
	fmt.Fprint(out, writesJustified)
}

const writesJustified = `
The happy path's five durable writes, each the one thing that makes a
failure recoverable:

1. **Claim** (DynamoDB conditional PutItem on the key record): one owner per
   key; without it two concurrent first calls both charge.
2. **PENDING row** (ledger INSERT, before the PSP call): the payment exists
   before money moves, so a crash after the charge leaves a row the resolver
   finds and settles; without it a charge can exist with no record of it.
3. **Settle** (one ledger statement, committed on its own: the state move,
   the journal entries and the outbox intent): the payment's outcome and
   its event commit together. The merchant's balance is not written here:
   the worker writes it, in its inbox transaction, downstream.
4. **Outbox put** (DynamoDB PutItem, side by side with 5): hands the event
   to the stream -> relay -> SQS path now instead of at the next sweep; the
   ledger's outbox row remains the source, so losing this put delays, never
   loses, the event.
5. **Completion** (DynamoDB UpdateItem storing the final answer): a repeat is
   answered by the key record alone (one failed conditional put, no ledger
   read); without it every repeat inside the window would read the ledger or
   answer 409.

A Powertools-style guard has 1 and 5 around the business write (3): the price
of the durable guard is 2 (one ledger write) and of the outbox 4 (one PutItem),
plus the relay, queue and worker downstream (below).

`

func writeSweep(out io.Writer, f figures, plots string) error {
	var xs []int
	for unit := range f["Concurrency"] {
		var n int
		if _, err := fmt.Sscanf(unit, "c%d-req/s", &n); err == nil && strings.HasSuffix(unit, "-req/s") {
			xs = append(xs, n)
		}
	}
	if len(xs) == 0 {
		return nil
	}
	sort.Ints(xs)
	fmt.Fprintln(out, "## Concurrency sweep")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "vegeta (as a library) against the local front door over HTTP (bearer token -> payload-2.0 event -> api handler -> DynamoDB Local, PostgreSQL, the PSP simulator), n clients back to back with distinct keys, 2 s per level. One process stands in for many Lambda instances, so the figures bound the local cloud, not Lambda's scaling.")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| clients | req/s | p50 ms | p99 ms |")
	fmt.Fprintln(out, "|---|---|---|---|")
	rps, p99 := plotter.XYs{}, plotter.XYs{}
	for _, n := range xs {
		r, _ := f.get("Concurrency", fmt.Sprintf("c%d-req/s", n))
		p50, _ := f.get("Concurrency", fmt.Sprintf("c%d-p50-ms", n))
		q, _ := f.get("Concurrency", fmt.Sprintf("c%d-p99-ms", n))
		fmt.Fprintf(out, "| %d | %.0f | %.1f | %.1f |\n", n, r, p50, q)
		rps = append(rps, plotter.XY{X: float64(n), Y: r})
		p99 = append(p99, plotter.XY{X: float64(n), Y: q})
	}
	if v, ok := f.get("Concurrency", "dup64-charges"); ok {
		c, _ := f.get("Concurrency", "dup64-201s")
		fmt.Fprintf(out, "\n64 concurrent requests with one key: **%.0f charge(s)**; %.0f answered 201 SUCCEEDED (the owner, and any repeat that arrived after its completion), the others 409 while it was in progress", v, c)
		if e, ok := f.get("Concurrency", "dup64-transport-errors"); ok && e > 0 {
			fmt.Fprintf(out, ", except %.0f that got no HTTP answer at all (a transport error between the load driver and the local front door; its text is in the benchmark's log)", e)
		}
		fmt.Fprintln(out, ".")
	}
	fmt.Fprintln(out)
	if plots == "" {
		return nil
	}
	if err := os.MkdirAll(plots, 0o755); err != nil {
		return err
	}
	for _, pl := range []struct {
		file, title, y string
		xy             plotter.XYs
	}{
		{"throughput.svg", "Throughput by clients", "requests/s", rps},
		{"p99.svg", "p99 latency by clients", "p99 ms", p99},
	} {
		if err := linePlot(filepath.Join(plots, pl.file), pl.title, pl.y, pl.xy); err != nil {
			return err
		}
		fmt.Fprintf(out, "![%s](%s)\n", pl.title, filepath.ToSlash(filepath.Join(plots, pl.file)))
	}
	fmt.Fprintln(out)
	return nil
}

func linePlot(path, title, ylabel string, xy plotter.XYs) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "clients (log scale)"
	p.Y.Label.Text = ylabel
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.ConstantTicks(ticks(xy))
	line, points, err := plotter.NewLinePoints(xy)
	if err != nil {
		return err
	}
	p.Add(line, points, plotter.NewGrid())
	return p.Save(6*vg.Inch, 3.5*vg.Inch, path)
}

func ticks(xy plotter.XYs) []plot.Tick {
	var t []plot.Tick
	for _, p := range xy {
		t = append(t, plot.Tick{Value: p.X, Label: fmt.Sprintf("%g", p.X)})
	}
	return t
}

// Prices: us-east-1 on-demand list prices. AWS's own pricing pages cannot
// be reached from the build machines; each price is labelled in the report
// with the public page it was read from (2026-12-02), and the constants
// below marked "assumption" are ours, not prices.
const (
	priceWRU        = 0.625 / 1e6  // DynamoDB on-demand, per write request unit
	priceRRU        = 0.125 / 1e6  // DynamoDB on-demand, per read request unit
	priceSQSFIFO    = 0.50 / 1e6   // SQS FIFO, per request (64 KiB chunk)
	priceSNSPublish = 0.50 / 1e6   // SNS publish (mobile push), per request
	priceSNSPush    = 0.50 / 1e6   // SNS mobile push delivery, per notification
	priceLambdaReq  = 0.20 / 1e6   // Lambda, per request
	priceLambdaGBs  = 0.0000133334 // Lambda arm64, per GB-second
	priceACUHour    = 0.12         // Aurora Serverless v2, per ACU-hour
	priceAuroraIO   = 0.20 / 1e6   // Aurora Standard, per I/O request
	commitsPerACUs  = 250.0        // assumption: commits per second one ACU sustains
	iosPerCommit    = 3.0          // assumption: Aurora I/Os billed per commit (WAL + page writes, amortised)
	sqsPerMessage   = 3.0          // assumption: SendMessageBatch share + Receive + Delete (upper bound: batches of one)
	apiMB           = 512.0        // cdk/oncepay/sizing.go
	peerMB          = 512.0        // assumption: the peer sized as the api
	downstreamMB    = 256.0        // relay and worker
	relayMS         = 10.0         // assumption: relay's share per event (batched stream records)
	million         = 1e6
)

// priceSources says where each price was read, for the report.
const priceSources = `Prices (us-east-1, on demand; AWS's pricing pages cannot be reached from where this runs, so each was read on 2026-12-02 from a public page quoting it — verify before quoting):

| price | value | read from |
|---|---|---|
| DynamoDB write request unit | $0.625 / M | AWS News Blog, "Amazon DynamoDB On-Demand" (updated 2025-01-31, after the November 2024 halving); airbyte.com, DynamoDB pricing (2025-07-21) |
| DynamoDB read request unit | $0.125 / M | the same |
| SQS FIFO request (64 KiB) | $0.50 / M | cloudburn.io, Amazon SQS pricing (2026-03-14); factualminds.com (2026-06-13) |
| SNS publish, mobile push delivery | $0.50 / M each | factualminds.com, Amazon SNS pricing (2026) |
| Lambda request | $0.20 / M | cloudchipr.com, AWS Lambda pricing (2024) |
| Lambda arm64 duration | $0.0000133334 / GB-s (first 7.5 B GB-s a month) | the same |
| Aurora Serverless v2 | $0.12 / ACU-hour | c3x.dev (2026); awsnegotiations.com (2026-05) |
| Aurora Standard I/O | $0.20 / M requests | assumption (Aurora Standard's list price as remembered; no page read) |

Assumptions, not prices: one ACU sustains 250 commits/s; 3 Aurora I/Os per commit; 3 SQS requests per message (batches of one); 10 ms of relay per event; memory from cdk/oncepay/sizing.go (api 512 MB, relay and worker 256 MB) and the peer sized as the api; free tiers ignored.
`

type costLine struct {
	item       string
	ours, base float64 // dollars per million payments
}

func writeCost(out io.Writer, f figures) {
	ddbW, ok := f.get("RequestCounts", "happy-ddb-writes")
	if !ok {
		return
	}
	commits, _ := f.get("RequestCounts", "happy-writes")
	commits -= ddbW // the durable writes that are not DynamoDB's are the ledger's (autocommit statements, each its own commit)
	// No measurement, no cost line: the model never fills a gap with a guess.
	need := func(bench, unit string) (float64, bool) {
		v, ok := f.get(bench, unit)
		if !ok {
			fmt.Fprintf(out, "## Cost model\n\nNot computed: this run did not measure %s's %s.\n\n", bench, unit)
		}
		return v, ok
	}
	// Both sides' durations from the same invocation path: each bootstrap
	// under aws-lambda-rie, interleaved (PeerSideBySide).
	apiMS, ok := need(peerBench, "first-oncepay-p50-ms")
	if !ok {
		return
	}
	peerMS, ok := need(peerBench, "first-peer-p50-ms")
	if !ok {
		return
	}
	peerW, ok := need(peerBench, "first-peer-ddb-writes")
	if !ok {
		return
	}
	workerMS, ok := need("WorkerTransaction", "first-ms/op")
	if !ok {
		return
	}
	gbs := func(mb, ms float64) float64 { return mb / 1024 * ms / 1000 }
	aurora := func(n float64) float64 {
		return n*million/commitsPerACUs/3600*priceACUHour + n*million*iosPerCommit*priceAuroraIO
	}
	lambda := func(mb, ms float64) float64 { return million * (priceLambdaReq + gbs(mb, ms)*priceLambdaGBs) }
	lines := []costLine{
		{fmt.Sprintf("DynamoDB writes (1 WRU each, items ≤ 1 KB): oncepay %.0f, the peer %.0f (counted)", ddbW, peerW), ddbW * million * priceWRU, peerW * million * priceWRU},
		{fmt.Sprintf("Ledger writes on Aurora, each its own commit (ACU time + I/O, assumed): oncepay %.0f; the peer given the same one business write", commits), aurora(commits), aurora(1)},
		{fmt.Sprintf("the handler's Lambda (request + GB-s at the measured first-call p50 under the emulator: oncepay %.1f ms, the peer %.1f ms)", apiMS, peerMS), lambda(apiMB, apiMS), lambda(peerMB, peerMS)},
		{"relay Lambda (DynamoDB stream, one invocation per event: upper bound)", lambda(downstreamMB, relayMS), 0},
		{"SQS FIFO (send, receive, delete)", million * sqsPerMessage * priceSQSFIFO, 0},
		{"worker Lambda (request + GB-s at the measured first delivery) + its 2 commits", lambda(downstreamMB, workerMS) + aurora(2), 0},
		{"SNS publish + mobile push delivery", million * (priceSNSPublish + priceSNSPush), 0},
	}
	fmt.Fprintln(out, "## Cost model: dollars per million payments")
	fmt.Fprintln(out)
	fmt.Fprintf(out, "From the requests counted in this run (oncepay's happy path: %.0f DynamoDB writes and %.0f ledger writes, autocommit statements that each commit on their own, so the table's SQL commits column, which counts explicit COMMITs, shows 0; the peer's: %.0f DynamoDB writes) and its durations (worker %.1f ms). The peer is the Powertools handler of the side-by-side table, given the same one ledger write its business logic would make; it has nothing downstream (no outbox, no events, no push). Lambda cold starts, data transfer, CloudWatch and the NAT/VPC endpoints are left out of both.\n\n", ddbW, commits, peerW, workerMS)
	fmt.Fprintln(out, "| item | oncepay $/M | the peer $/M |")
	fmt.Fprintln(out, "|---|---|---|")
	var ours, base float64
	for _, l := range lines {
		fmt.Fprintf(out, "| %s | %.2f | %.2f |\n", l.item, l.ours, l.base)
		ours += l.ours
		base += l.base
	}
	fmt.Fprintf(out, "| **total** | **%.2f** | **%.2f** |\n\n", ours, base)
	push := million * (priceSNSPublish + priceSNSPush)
	fmt.Fprintf(out, "The durable guard, the outbox and the push cost **$%.2f per million payments** over the peer (%.1fx), of which $%.2f is the push notification itself (a peer that notifies pays it too). Against a card fee of ~$0.30 + 2.9%% that is %.5f%% of a $30 payment's fee.\n\n", ours-base, ours/base, push, (ours-base)/million/(0.30+0.029*30)*100)
	fmt.Fprint(out, priceSources)
	fmt.Fprintln(out)
}
