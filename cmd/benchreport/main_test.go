package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: arm64
pkg: github.com/oncepay/oncepay/internal/api
BenchmarkFirstCall-2 	 300	 1 ns/op	 2.0 ratio-p50	 10 api-p50-ms
BenchmarkReplay-2 	 300	 1 ns/op	 1.05 ratio-p50
BenchmarkRequestCounts-2 	 300	 1 ns/op	 5 happy-writes	 3 happy-ddb-writes	 5 happy-roundtrips	 0 replay-writes	 1 replay-roundtrips
BenchmarkConcurrency-2 	 1	 1 ns/op	 90 c1-req/s	 8 c1-p50-ms	 50 c1-p99-ms	 150 c64-req/s	 300 c64-p50-ms	 900 c64-p99-ms	 1 dup64-charges	 1 dup64-201s
BenchmarkLambdaBootstrap-2 	 5	 1 ns/op	 11.1 api-MiB	 66 api-cold-p50-ms	 7.7 relay-MiB
`

// The sections hold each figure against its target, and the plots are
// written where the report links them.
func TestReportHoldsFiguresAgainstTargets(t *testing.T) {
	dir := t.TempDir()
	plots := filepath.Join(dir, "plots")
	var out strings.Builder
	if err := run(strings.NewReader(sample), &out, "make bench", plots); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	for _, want := range []string{
		"| happy path ≤ 1.3x the floor | FirstCall ratio-p50 | 2.00x | **missed** |",
		"| replay ≤ 1.1x one GetItem | Replay ratio-p50 | 1.05x | met |",
		"| ≤ 5 durable writes per payment (happy path) | RequestCounts happy-writes | 5 | met |",
		"| 64 concurrent duplicates -> exactly one charge | Concurrency dup64-charges | 1 | met |",
		"| api bootstrap ≤ 10 MiB stripped | LambdaBootstrap api-MiB | 11.10 MiB | **missed** |",
		"| relay bootstrap ≤ 10 MiB stripped | LambdaBootstrap relay-MiB | 7.70 MiB | met |",
		"| 64 | 150 | 300.0 | 900.0 |",
		"## Cost model: dollars per million payments",
		"(" + filepath.ToSlash(filepath.Join(plots, "throughput.svg")) + ")",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, f := range []string{"throughput.svg", "p99.svg"} {
		b, err := os.ReadFile(filepath.Join(plots, f))
		if err != nil || !strings.Contains(string(b), "<svg") {
			t.Errorf("%s: %v", f, err)
		}
	}
}
