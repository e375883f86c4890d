package main

import (
	"strings"
	"testing"
)

const liveLine = "BenchmarkLiveTapToPush-2 \t 1\t 100 ns/op\t 10 p99-over-1s-rate\t 80 ramp-top-rate" +
	"\t 40 r1-tap-answer-p50-ms\t 90 r1-tap-answer-p99-ms\t 600 r1-tap-push-p50-ms\t 1500 r1-tap-push-p99-ms\t 1500 r1-all-p99-ms\t 20 r1-taps\t 0 r1-429s\t 0 r1-5xx\t 0 r1-lost\t 0 r1-errors" +
	"\t 900 r50-tap-push-p50-ms\t 2500 r50-tap-push-p99-ms\t 30000 r50-all-p99-ms\t 500 r50-taps\t 0 r50-429s\t 40 r50-5xx\t 3 r50-lost\t 0 r50-errors" +
	"\t 400 ramp5-tap-push-p50-ms\t 800 ramp5-tap-push-p99-ms\t 800 ramp5-all-p99-ms\t 100 ramp5-taps\t 0 ramp5-429s\t 0 ramp5-5xx\t 0 ramp5-lost\t 0 ramp5-errors" +
	"\t 700 ramp10-tap-push-p50-ms\t 1200 ramp10-tap-push-p99-ms\t 1200 ramp10-all-p99-ms\t 100 ramp10-taps\t 0 ramp10-429s\t 0 ramp10-5xx\t 0 ramp10-lost\t 0 ramp10-errors" +
	"\t 800 ramp80-tap-push-p50-ms\t 1900 ramp80-tap-push-p99-ms\t 30000 ramp80-all-p99-ms\t 320 ramp80-taps\t 21 ramp80-429s\t 9 ramp80-5xx\t 2 ramp80-lost\t 1 ramp80-errors\n"

// The live section sets each rate's tap -> push beside the in-process
// TapToPush of the same run as ratios (the sample's in-process p50 is
// 300 ms, its p99 500 ms), steady phases first, then the ramp by rate, and
// says where the p99 passed 1 s.
func TestLiveSectionComparesWithTheInProcessFigures(t *testing.T) {
	var out strings.Builder
	if err := run(strings.NewReader(sample+liveLine), &out, "make bench", "", []string{"TapToPush", "LiveTapToPush"}); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	want := []string{
		"## Live stack: tap -> push",
		"| rate /s | taps | push p50 ms | push p99 ms | p50 live / in-process | p99 live / in-process | push p99 ms, all taps | answer p50 / p99 ms | 429 | 5xx | lost | no answer or other |",
		"| 1 | 20 | 600 | 1500 | 2.00x | 3.00x | 1500 | 40 / 90 | 0 | 0 | 0 | 0 |",
		"| 50 | 500 | 900 | 2500 | 3.00x | 5.00x | 30000 | — / — | 0 | 40 | 3 | 0 |",
		"| 5 (ramp) | 100 | 400 | 800 | 1.33x | 1.60x | 800 | — / — | 0 | 0 | 0 | 0 |",
		"| 10 (ramp) | 100 | 700 | 1200 | 2.33x | 2.40x | 1200 | — / — | 0 | 0 | 0 | 0 |",
		"| 80 (ramp) | 320 | 800 | 1900 | 2.67x | 3.80x | 30000 | — / — | 21 | 9 | 2 | 1 |",
		"**The live stack's p99 passes 1 s at 10 taps/s**",
		"(this run's 50/s phase: 0 refused)",
	}
	last := -1
	for _, w := range want {
		i := strings.Index(md, w)
		if i < 0 {
			t.Errorf("report lacks %q", w)
			continue
		}
		if i < last {
			t.Errorf("%q is out of order", w)
		}
		last = i
	}
	if !strings.Contains(md, "| LiveTapToPush | 1 | r50-5xx | 40.000 |  |") {
		t.Error("the live figures are not in the table of every figure")
	}
}

// A ramp whose p99 stayed under 1 s says so with its top rate, and without
// the in-process figures the ratios are marked absent rather than invented.
func TestLiveSectionSaysWhenTheRampNeverPassed(t *testing.T) {
	in := strings.NewReplacer("10 p99-over-1s-rate", "0 p99-over-1s-rate").Replace(liveLine)
	var out strings.Builder
	if err := run(strings.NewReader(in), &out, "make bench", "", nil); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	for _, w := range []string{
		"**The live stack's p99 did not pass 1 s up to 80 taps/s**",
		"| 1 | 20 | 600 | 1500 | — | — | 1500 | 40 / 90 | 0 | 0 | 0 | 0 |",
	} {
		if !strings.Contains(md, w) {
			t.Errorf("report lacks %q", w)
		}
	}
}

// A 50/s phase the throttle refused taps in is said to have measured the
// door too, never "the door refuses none of them".
func TestLiveSectionSaysWhenThe50sPhaseWasRefused(t *testing.T) {
	in := strings.NewReplacer("0 r50-429s", "7 r50-429s").Replace(liveLine)
	var out strings.Builder
	if err := run(strings.NewReader(in), &out, "make bench", "", nil); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	if !strings.Contains(md, "this run's 50/s phase had 7 refused") || strings.Contains(md, "refused none of them") {
		t.Fatalf("the 50/s sentence does not say the phase was refused:\n%s", md)
	}
}

// make bench's run without the live benchmark (the live stack was not
// serving) is refused, as any run that lost a benchmark is.
func TestReportRefusesARunWithoutTheLiveStack(t *testing.T) {
	var out strings.Builder
	err := run(strings.NewReader(sample), &out, "make bench", "", benchmarks)
	if err == nil || !strings.Contains(err.Error(), "LiveTapToPush") {
		t.Fatalf("err = %v, want LiveTapToPush named as missing", err)
	}
}

// The hot merchant's live rate is set against one worker transaction after
// another, from the same run.
func TestHotMerchantAgainstTheWorkerTransaction(t *testing.T) {
	in := sample + "BenchmarkLiveHotMerchant-2 \t 1\t 1 ns/op\t 8 hot-events/s\t 40 hot-ingest/s\t 16 many-events/s\t 30 many-ingest/s\n"
	var out strings.Builder
	if err := run(strings.NewReader(in), &out, "make bench", t.TempDir(), nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| 1/(worker transaction), first delivery (5.0 ms) | 200 | 1.00x |",
		"| live stack, one merchant (paid at 40.0/s) | 8.0 | 0.04x |",
		"| live stack, many merchants (paid at 30.0/s) | 16.0 | 0.08x |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}
