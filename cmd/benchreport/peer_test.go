package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const peerLine = "BenchmarkPeerSideBySide-2 \t 100\t 1 ns/op" +
	"\t 10 first-oncepay-p50-ms\t 20 first-oncepay-p99-ms\t 12.5 first-peer-p50-ms\t 25 first-peer-p99-ms\t 0.8 first-p50-oncepay/peer\t 0.8 first-p99-oncepay/peer" +
	"\t 4 replay-oncepay-p50-ms\t 16 replay-oncepay-p99-ms\t 8 replay-peer-p50-ms\t 16 replay-peer-p99-ms\t 0.5 replay-p50-oncepay/peer\t 1 replay-p99-oncepay/peer" +
	"\t 97 dup1-oncepay-orig-201-n\t 3 dup1-oncepay-orig-409-n\t 94 dup1-oncepay-dup-409-n\t 3 dup1-oncepay-dup-201-n\t 3 dup1-oncepay-dup-201-replayed-n" +
	"\t 83 dup1-peer-orig-201-n\t 17 dup1-peer-orig-500-inprogress-n\t 76 dup1-peer-dup-500-inprogress-n\t 24 dup1-peer-dup-201-n" +
	"\t 5 dup1-oncepay-refused-p50-ms\t 10 dup1-peer-refused-p50-ms\t 0.5 dup1-refused-p50-oncepay/peer" +
	"\t 1 dup64-oncepay-charges\t 1 dup64-oncepay-psp-calls\t 1 dup64-oncepay-201-n\t 61 dup64-oncepay-409-n\t 2 dup64-oncepay-201-replayed-n\t 78 dup64-oncepay-p50-ms\t 135 dup64-oncepay-max-ms" +
	"\t 1 dup64-peer-charges\t 1 dup64-peer-psp-calls\t 4 dup64-peer-201-n\t 60 dup64-peer-500-inprogress-n\t 392 dup64-peer-p50-ms\t 551 dup64-peer-max-ms" +
	"\t 3 first-oncepay-ddb-requests\t 3 first-oncepay-ddb-writes\t 2 first-oncepay-ddb-PutItem\t 1 first-oncepay-ddb-UpdateItem\t 2 first-oncepay-sql-statements\t 2 first-oncepay-sql-commits\t 5 first-oncepay-durable-writes" +
	"\t 2 first-peer-ddb-requests\t 2 first-peer-ddb-writes\t 1 first-peer-ddb-PutItem\t 1 first-peer-ddb-UpdateItem\t 0 first-peer-sql-statements\t 0 first-peer-sql-commits\t 2 first-peer-durable-writes" +
	"\t 1 replay-oncepay-ddb-requests\t 1 replay-oncepay-ddb-PutItem!ConditionalCheckFailedException\t 0 replay-oncepay-durable-writes" +
	"\t 1 replay-peer-ddb-requests\t 1 replay-peer-ddb-PutItem!ConditionalCheckFailedException\t 0 replay-peer-durable-writes" +
	"\t 80 cold-oncepay-p50-ms\t 270 cold-peer-p50-ms\t 0.296 cold-p50-oncepay/peer\t 20 peer-node-major\n"

// The side-by-side section renders each figure for both sides with its
// ratio, the answers as counted (the peer's in-progress error named), the
// counts on the wire, the pinned versions and the guarantees table.
func TestPeerSectionSetsTheSidesSideBySide(t *testing.T) {
	pkg := filepath.Join(t.TempDir(), "package.json")
	if err := os.WriteFile(pkg, []byte(`{"dependencies":{"@aws-sdk/client-dynamodb":"3.1.0","@aws-lambda-powertools/idempotency":"2.35.0"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	defer func(p string) { peerPackage = p }(peerPackage)
	peerPackage = pkg
	var out strings.Builder
	if err := run(strings.NewReader(sample+peerLine), &out, "make bench", "", []string{peerBench}); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	for _, want := range []string{
		"## Side by side with Powertools idempotency (TypeScript)",
		"(@aws-lambda-powertools/idempotency@2.35.0, @aws-sdk/client-dynamodb@3.1.0, pinned in _tools/peer)",
		"on Node.js 20,",
		"100 iterations, interleaved",
		"| first call p50 ms | 10.00 | 12.50 | 0.80x |",
		"| replay p99 ms | 16.00 | 16.00 | 1.00x |",
		"| one concurrent duplicate: the original's answers | 201 ×97, 409 in progress ×3 | 201 ×83, 500 (IdempotencyAlreadyInProgressError) ×17 | |",
		"| one concurrent duplicate: the duplicate's answers | 409 in progress ×94, 201 ×3, 201 marked replayed ×3 | 500 (IdempotencyAlreadyInProgressError) ×76, 201 ×24 | |",
		"| one concurrent duplicate: the refusal's p50 ms | 5.00 | 10.00 | 0.50x |",
		"| 64 concurrent duplicates: charges at the simulator (PSP calls) | **1** (1) | **1** (1) | |",
		"| 64 concurrent duplicates: answers | 409 in progress ×61, 201 marked replayed ×2, 201 ×1 | 500 (IdempotencyAlreadyInProgressError) ×60, 201 ×4 | |",
		"| 64 concurrent duplicates: p50 / max ms | 78 / 135 | 392 / 551 | |",
		"| DynamoDB requests, first call | 3 (PutItem ×2, UpdateItem ×1) | 2 (PutItem ×1, UpdateItem ×1) | |",
		"| DynamoDB requests, replay | 1 (PutItem refused by its condition ×1) | 1 (PutItem refused by its condition ×1) | |",
		"| SQL statements / commits, first call | 2 / 2 | none (no ledger) | |",
		"| durable writes per payment | **5** (3 DynamoDB + 2 SQL commits) | **2** (2 DynamoDB + 0 SQL commits) | |",
		"| cold start p50 ms (fresh emulator, first invocation a payment) | 80 | 270 | 0.30x |",
		"| a takeover after the owner's lease passed |",
		"| a duplicate while the first is in flight | 409 problem+json",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// The section sits after the requests per payment it extends.
	if strings.Index(md, "## Side by side") < strings.Index(md, "## Requests per payment") {
		t.Error("the side-by-side section comes before the requests per payment")
	}
}

// A run without the benchmark has no section, and a make bench run that
// lost it is refused; unreadable versions are left out, not invented.
func TestPeerSectionAbsentWithoutItsBenchmark(t *testing.T) {
	var out strings.Builder
	if err := run(strings.NewReader(sample), &out, "make bench", "", nil); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "Side by side") {
		t.Error("a run without PeerSideBySide has its section")
	}
	if err := run(strings.NewReader(sample), &out, "make bench", "", benchmarks); err == nil || !strings.Contains(err.Error(), peerBench) {
		t.Errorf("make bench's run without %s: err = %v, want it named", peerBench, err)
	}
	if v := peerVersions(filepath.Join(t.TempDir(), "missing.json")); v != nil {
		t.Errorf("versions of a missing package.json: %v", v)
	}
}
