package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: arm64
pkg: github.com/oncepay/oncepay/internal/api
BenchmarkFirstCall-2 	 300	 1 ns/op	 2.0 ratio-p50	 10 api-p50-ms	 5 floor-p50-ms	 7.5 design-p50-ms	 1.333 design-ratio-p50
BenchmarkFirstCallPSP300-2 	 30	 1 ns/op	 1.02 ratio-p50	 306 api-p50-ms	 300 floor-p50-ms	 303 design-p50-ms	 1.01 design-ratio-p50
BenchmarkFirstCallAcrossRegions-2 	 200	 1 ns/op	 10 api-p50-ms	 30 api-p99-ms	 11.5 api-routed-p50-ms	 33 api-routed-p99-ms	 1.2 home-read-p50-ms	 4 home-read-p99-ms	 1.15 routed-ratio-p50	 1.1 routed-ratio-p99
BenchmarkReplay-2 	 300	 1 ns/op	 1.5 ratio-p50	 1.05 put-ratio-p50	 1.0 failedput-p50-ms	 1.03 store-p50-ms	 1.05 replay-p50-ms
BenchmarkRequestCounts-2 	 300	 1 ns/op	 5 happy-writes	 3 happy-ddb-writes	 5 happy-roundtrips	 0 replay-writes	 1 replay-roundtrips
BenchmarkWorkerTransaction-2 	 300	 1 ns/op	 5 first-ms/op
BenchmarkConcurrency-2 	 1	 1 ns/op	 90 c1-req/s	 8 c1-p50-ms	 50 c1-p99-ms	 150 c64-req/s	 300 c64-p50-ms	 900 c64-p99-ms	 1 dup64-charges	 1 dup64-201s
BenchmarkLambdaBootstrap-2 	 5	 1 ns/op	 11.1 api-MiB	 66 api-cold-p50-ms	 7.7 relay-MiB
BenchmarkLambdaWarmInvoke-2 	 100	 1 ns/op	 10.81 api-inline-MiB	 15 api-warm-first-inline-p50-ms	 16.5 api-warm-first-noinline-p50-ms	 1.1 api-warm-first-noinline/inline	 4 api-warm-replay-inline-p50-ms	 5 api-warm-replay-noinline-p50-ms	 1.25 api-warm-replay-noinline/inline
BenchmarkTapToPush-2 	 1000	 1 ns/op	 30 tap-answer-max-ms	 5 tap-answer-min-ms	 10 tap-answer-p50-ms	 20 tap-answer-p90-ms	 25 tap-answer-p99-ms	 28 tap-answer-p999-ms	 900 tap-push-max-ms	 100 tap-push-min-ms	 300 tap-push-p50-ms	 400 tap-push-p90-ms	 500 tap-push-p99-ms	 800 tap-push-p999-ms
`

// The sections hold each figure against its target, and the plots are
// written where the report links them.
func TestReportHoldsFiguresAgainstTargets(t *testing.T) {
	dir := t.TempDir()
	plots := filepath.Join(dir, "plots")
	var out strings.Builder
	if err := run(strings.NewReader(sample+peerLine+"\n"), &out, "make bench", plots, nil); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	for _, want := range []string{
		"| api ≤ 1.15x its design floor (five sequential round trips, bare) | FirstCall design-ratio-p50 | 1.333x | **missed** |",
		"| api ≤ 1.15x its design floor, PSP at 300 ms (assumed) | FirstCallPSP300 design-ratio-p50 | 1.010x | met |",
		"| simulator (answers in under 1 ms) | 300 | 5.0 | 7.5 | 10.0 | 2.00x | 1.33x |",
		"| 300 ms per charge (assumed) | 30 | 300.0 | 303.0 | 306.0 | 1.02x | 1.01x |",
		"| FirstCallPSP300 | 30 | design-ratio-p50 | 1.010 | ≤ 1.15x the design floor (PSP at 300 ms, assumed) |",
		"| FirstCallPSP300 | 30 | ratio-p50 | 1.020 |  |",
		"Warm invocations of api, 100 iterations",
		"inlining on; 10.81 MiB stripped for linux/arm64",
		"| replay of a completed payment | 5.00 | 4.00 | 1.25x |",
		"| first call (fresh key) | 16.50 | 15.00 | 1.10x |",
		"| replay ≤ 1.10x a bare failing conditional put (ALL_OLD) | Replay put-ratio-p50 | 1.050x | met |",
		"| ≤ 5 durable writes per payment (happy path) | RequestCounts happy-writes | 5 | met |",
		"| 64 concurrent duplicates -> exactly one charge | Concurrency dup64-charges | 1 | met |",
		"| api bootstrap ≤ 10 MiB stripped | LambdaBootstrap api-MiB | 11.10 MiB | **missed** |",
		"| relay bootstrap ≤ 10 MiB stripped | LambdaBootstrap relay-MiB | 7.70 MiB | met |",
		"| 64 | 150 | 300.0 | 900.0 |",
		"## Cost model: dollars per million payments",
		// The home routing's cost, routed against one Region.
		"| first call, routed by home | 11.50 | 33.00 |",
		"| the home read alone | 1.20 | 4.00 |",
		"Routed / one Region: 1.15x at p50, 1.10x at p99.",
		// The cost model prices both sides from their counted writes.
		"oncepay 3, the peer 2 (counted) | 1.88 | 1.25 |",
		"| **total** | **8.03** | **2.27** |",
		// A replay's time, split: the store's claim, then the handler.
		"| the store's claim | 1.030 | 1.03x |",
		"| the api's replay | 1.050 | 1.05x |",
		"(" + filepath.ToSlash(filepath.Join(plots, "throughput.svg")) + ")",
		"## End-to-end tap -> push\n\n1000 taps, one at a time",
		"| ms | min | p50 | p90 | p99 | p999 | max |",
		"| API answer | 5.0 | 10.0 | 20.0 | 25.0 | 28.0 | 30.0 |",
		"| tap -> push | 100.0 | 300.0 | 400.0 | 500.0 | 800.0 | 900.0 |",
		"Medians: the answer after 10.0 ms, the push after 300.0 ms: 97% of the median tap -> push comes after the buyer has the answer.",
		"(" + filepath.ToSlash(filepath.Join(plots, "tap-push-cdf.svg")) + ")",
		"| TapToPush | 1000 | tap-push-p999-ms | 800.000 |  |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// The notes render this run's cost of no inlining from the figures.
	if flat := strings.Join(strings.Fields(md), " "); !strings.Contains(flat, "took 1.25x the inlined build's time for a replay (+1.00 ms) and 1.10x for a first call (+1.50 ms)") {
		t.Errorf("the bootstrap note lacks the measured cost of no inlining")
	}
	for _, f := range []string{"throughput.svg", "p99.svg", "tap-push-cdf.svg"} {
		b, err := os.ReadFile(filepath.Join(plots, f))
		if err != nil || !strings.Contains(string(b), "<svg") {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// A distribution's points come back lowest first, p999 read as 99.9, and
// units that are not "<name>-<point>-ms" left out.
func TestDistributionParsesItsPoints(t *testing.T) {
	f := figures{}
	for unit, v := range map[string]float64{
		"tap-push-max-ms": 900, "tap-push-p999-ms": 800, "tap-push-p50-ms": 300, "tap-push-min-ms": 100,
		"tap-push-p5-ms": 150, "tap-push-p50": 1, "tap-push-mean-ms": 2, "tap-pushy-p50-ms": 3,
		"tap-answer-p50-ms": 10, "tap-push-p100-ms": 4, "tap-push-pxx-ms": 5,
	} {
		f.set("TapToPush", unit, v)
	}
	got := distribution(f, "TapToPush", "tap-push")
	want := []point{{0, 100}, {5, 150}, {50, 300}, {99.9, 800}, {100, 900}}
	if len(got) != len(want) {
		t.Fatalf("distribution = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("point %d = %v, want %v", i, got[i], want[i])
		}
	}
	for pct, label := range map[float64]string{0: "min", 5: "p5", 99.9: "p999", 100: "max"} {
		if l := pctLabel(pct); l != label {
			t.Errorf("pctLabel(%g) = %q, want %q", pct, l, label)
		}
	}
	if d := distribution(f, "OutboxToPush", "tap-push"); d != nil {
		t.Errorf("a benchmark that did not run has points %v", d)
	}
}

// The CDF's log axis is marked at 1, 2 and 5 of each decade it spans, and an
// axis with no data gets no marks instead of a loop that never ends.
func TestTicks125(t *testing.T) {
	var got []string
	for _, tk := range ticks125(13, 500) {
		got = append(got, tk.Label)
	}
	if strings.Join(got, " ") != "20 50 100 200 500" {
		t.Errorf("ticks125(13, 500) = %v", got)
	}
	if tk := ticks125(0, 1); tk != nil {
		t.Errorf("ticks125(0, 1) = %v, want none", tk)
	}
}

// Without the warm-invoke benchmark the report says the cost of no inlining
// was not measured instead of rendering an empty table or stale prose, and
// without the PSP300 run its target line and table row are absent.
func TestReportWithoutWarmInvokeOrPSP300(t *testing.T) {
	in := "goos: linux\ngoarch: arm64\nBenchmarkFirstCall-2 \t 300\t 1 ns/op\t 2.0 ratio-p50\t 10 api-p50-ms\n"
	var out strings.Builder
	if err := run(strings.NewReader(in), &out, "make bench", "", nil); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	for _, absent := range []string{"Warm invocations", "## Lambda bootstraps", "PSP at 300 ms", "300 ms per charge"} {
		if strings.Contains(md, absent) {
			t.Errorf("report has %q", absent)
		}
	}
	for _, want := range []string{
		"This run did not measure it (LambdaWarmInvoke did not run).",
		"| simulator (answers in under 1 ms) | 300 | – | – | 10.0 | 2.00x | – |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// A run that lost a benchmark (its service was down, so it skipped or
// failed) is refused instead of reported without its rows, and the cost
// model is not filled in with guesses for what was not measured.
func TestReportRefusesARunMissingABenchmark(t *testing.T) {
	lost := regexp.MustCompile(`(?m)^BenchmarkWorkerTransaction.*\n`).ReplaceAllString(sample+peerLine+"\n", "")
	var out strings.Builder
	err := run(strings.NewReader(lost), &out, "make bench", "", benchmarks)
	if err == nil || !strings.Contains(err.Error(), "WorkerTransaction") {
		t.Fatalf("run without WorkerTransaction: err = %v, want it named", err)
	}
	out.Reset()
	if err := run(strings.NewReader(lost), &out, "make bench", "", nil); err != nil {
		t.Fatal(err)
	}
	if md := out.String(); !strings.Contains(md, "Not computed: this run did not measure WorkerTransaction") {
		t.Errorf("cost model without WorkerTransaction does not say so")
	}
}

// wrap keeps every word, in order, on indented lines no longer than asked.
func TestWrap(t *testing.T) {
	s := "the build as made took against the inlined one: a replay 1.25x (+1.00 ms), a first call 1.10x"
	got := wrap(s, 20)
	for _, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		if !strings.HasPrefix(l, "  ") || len(l) > 22 {
			t.Errorf("line %q", l)
		}
	}
	if strings.Join(strings.Fields(got), " ") != s {
		t.Errorf("wrap lost words: %q", got)
	}
}

// A warning another package wrote to stderr while a benchmark ran lands
// between its name and its figures; the report still reads the figures.
func TestRejoinRepairsABenchmarkLineSplitByALogLine(t *testing.T) {
	in := "BenchmarkRelayToWorker-2   \tSDK 2026/11/30 12:23:53 WARN failed to discard remaining HTTP response body\n" +
		"     300\t  60933780 ns/op\t        25.25 hot-events/s\n" +
		"BenchmarkOther-2 \t 10\t 5 ns/op\n"
	got := rejoin(in)
	want := "BenchmarkRelayToWorker-2\t300\t  60933780 ns/op\t        25.25 hot-events/s\n" +
		"BenchmarkOther-2 \t 10\t 5 ns/op\n"
	if got != want {
		t.Fatalf("rejoin:\n%q\nwant\n%q", got, want)
	}
}
