package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// peerBench is infra-tests/peer's benchmark: oncepay's api and the
// Powertools peer side by side.
const peerBench = "PeerSideBySide"

// peerPackage holds the peer's pinned versions (read when the report is
// written, from the repository root make bench runs in).
var peerPackage = "_tools/peer/package.json"

// peerVersions lists path's dependencies as name@version, sorted; nil when
// the file cannot be read.
func peerVersions(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if json.Unmarshal(b, &pkg) != nil {
		return nil
	}
	var out []string
	for name, v := range pkg.Dependencies {
		out = append(out, name+"@"+v)
	}
	sort.Strings(out)
	return out
}

// answerNames are the benchmark's answer labels as the table names them.
var answerNames = map[string]string{
	"201":            "201",
	"201-replayed":   "201 marked replayed",
	"409":            "409 in progress",
	"500-inprogress": "500 (IdempotencyAlreadyInProgressError)",
	"500-other":      "500 (another function error)",
}

// answers renders the counts reported as "<prefix><label>-n", most first.
func answers(f figures, prefix string) string {
	type n struct {
		label string
		v     float64
	}
	var ns []n
	for unit, v := range f[peerBench] {
		label, ok := strings.CutPrefix(unit, prefix)
		if !ok {
			continue
		}
		if label, ok = strings.CutSuffix(label, "-n"); !ok || v == 0 {
			continue
		}
		if name, ok := answerNames[label]; ok {
			label = name
		}
		ns = append(ns, n{label, v})
	}
	if len(ns) == 0 {
		return "–"
	}
	sort.Slice(ns, func(i, j int) bool {
		if ns[i].v != ns[j].v {
			return ns[i].v > ns[j].v
		}
		return ns[i].label < ns[j].label
	})
	var parts []string
	for _, x := range ns {
		parts = append(parts, fmt.Sprintf("%s ×%g", x.label, x.v))
	}
	return strings.Join(parts, ", ")
}

// ddbOps renders the DynamoDB operations reported as "<prefix>ddb-<Op>"
// ("PutItem!ConditionalCheckFailedException": a refused conditional put).
func ddbOps(f figures, prefix string) string {
	var ops []string
	for unit, v := range f[peerBench] {
		op, ok := strings.CutPrefix(unit, prefix+"ddb-")
		if !ok || op == "requests" || op == "writes" || v == 0 {
			continue
		}
		if name, outcome, failed := strings.Cut(op, "!"); failed && outcome == "ConditionalCheckFailedException" {
			op = name + " refused by its condition"
		} else if failed {
			op = name + " failed (" + outcome + ")"
		}
		ops = append(ops, fmt.Sprintf("%s ×%.3g", op, v))
	}
	sort.Strings(ops)
	return strings.Join(ops, ", ")
}

func writePeer(out io.Writer, f figures) {
	if f[peerBench] == nil {
		return
	}
	g := func(unit string) (float64, bool) { return f.get(peerBench, unit) }
	num := func(unit, format string) string {
		if v, ok := g(unit); ok {
			return fmt.Sprintf(format, v)
		}
		return "–"
	}
	fmt.Fprintln(out, "## Side by side with Powertools idempotency (TypeScript)")
	fmt.Fprintln(out)
	versions := ""
	if vs := peerVersions(peerPackage); len(vs) > 0 {
		versions = " (" + strings.Join(vs, ", ") + ", pinned in _tools/peer)"
	}
	node := ""
	if v, ok := g("peer-node-major"); ok {
		node = fmt.Sprintf(" on Node.js %.0f", v)
	}
	fmt.Fprintf(out, "What a team would pick instead of oncepay's api: a handler wrapped whole with Powertools' `makeIdempotent` over its `DynamoDBPersistenceLayer`%s%s, run by a small custom runtime (`_tools/peer/bootstrap`). Its configuration is the documented defaults (1 h key window, md5, no local cache) plus payload validation over the five meaning fields and the record key from the caller and the Idempotency-Key header; this version always asks for ALL_OLD on a refused conditional put. It does the api's business work: one charge (POST /v1/payment_intents, confirm=true, form-encoded) under the key oncepay derives from the caller+key scope, and a 201 with the payment. Both sides are bootstraps under aws-lambda-rie (the emulator's hop included on both), against the same DynamoDB Local and one PSP simulator, each behind counters of its own on the wire; %d iterations, interleaved, alternating which side goes first. **oncepay's api also writes the PostgreSQL ledger and an outbox item; the peer writes neither**: the durable-write rows show what that costs.\n\n",
		versions, node, iterations(f, peerBench))
	fmt.Fprintln(out, "| figure | oncepay | peer | oncepay / peer |")
	fmt.Fprintln(out, "|---|---|---|---|")
	row := func(name, unit, format, ratio string) {
		r := "–"
		if ratio != "" {
			r = num(ratio, "%.2fx")
		}
		fmt.Fprintf(out, "| %s | %s | %s | %s |\n", name, num(strings.Replace(unit, "%s", "oncepay", 1), format), num(strings.Replace(unit, "%s", "peer", 1), format), r)
	}
	row("first call p50 ms", "first-%s-p50-ms", "%.2f", "first-p50-oncepay/peer")
	row("first call p99 ms", "first-%s-p99-ms", "%.2f", "first-p99-oncepay/peer")
	row("replay p50 ms", "replay-%s-p50-ms", "%.2f", "replay-p50-oncepay/peer")
	row("replay p99 ms", "replay-%s-p99-ms", "%.2f", "replay-p99-oncepay/peer")
	text := func(name string, cell func(side string) string) {
		fmt.Fprintf(out, "| %s | %s | %s | |\n", name, cell("oncepay"), cell("peer"))
	}
	text("one concurrent duplicate: the original's answers", func(s string) string { return answers(f, "dup1-"+s+"-orig-") })
	text("one concurrent duplicate: the duplicate's answers", func(s string) string { return answers(f, "dup1-"+s+"-dup-") })
	row("one concurrent duplicate: the refusal's p50 ms", "dup1-%s-refused-p50-ms", "%.2f", "dup1-refused-p50-oncepay/peer")
	text("64 concurrent duplicates: charges at the simulator (PSP calls)", func(s string) string {
		return num("dup64-"+s+"-charges", "**%.0f**") + " (" + num("dup64-"+s+"-psp-calls", "%.0f") + ")"
	})
	text("64 concurrent duplicates: answers", func(s string) string { return answers(f, "dup64-"+s+"-") })
	text("64 concurrent duplicates: p50 / max ms", func(s string) string {
		return num("dup64-"+s+"-p50-ms", "%.0f") + " / " + num("dup64-"+s+"-max-ms", "%.0f")
	})
	for _, k := range []struct{ key, name string }{{"first", "first call"}, {"replay", "replay"}} {
		text("DynamoDB requests, "+k.name, func(s string) string {
			return num(k.key+"-"+s+"-ddb-requests", "%.3g") + " (" + ddbOps(f, k.key+"-"+s+"-") + ")"
		})
	}
	text("SQL statements / commits, first call", func(s string) string {
		if v, _ := g("first-" + s + "-sql-statements"); v == 0 {
			return "none (no ledger)"
		}
		return num("first-"+s+"-sql-statements", "%.3g") + " / " + num("first-"+s+"-sql-commits", "%.3g")
	})
	text("durable writes per payment", func(s string) string {
		return num("first-"+s+"-durable-writes", "**%.3g**") + " (" + num("first-"+s+"-ddb-writes", "%.3g") + " DynamoDB + " + num("first-"+s+"-sql-commits", "%.3g") + " SQL commits)"
	})
	text("durable writes per replay", func(s string) string { return num("replay-"+s+"-durable-writes", "%.3g") })
	row("cold start p50 ms (fresh emulator, first invocation a payment)", "cold-%s-p50-ms", "%.0f", "cold-p50-oncepay/peer")
	fmt.Fprintln(out)
	fmt.Fprint(out, peerReading)
	fmt.Fprint(out, peerGuarantees)
}

// peerReading explains how the figures were taken; it holds across runs.
const peerReading = `How they were taken. Latencies are wall time as the caller of the
emulator sees it. The one concurrent duplicate is sent 2 ms after its
original, on a second warm environment; which of the two holds the key is
the race's outcome, so both answers are counted, and the latency is the
refusal's (the answer that tells a duplicate its key is in flight). The 64
duplicates go to 64 warm environments at once, one each, as Lambda runs
concurrent invocations; the charges are the simulator's under the key's
derived PSP key, the PSP calls those the side sent. The peer's 201s are the
one that charged and replays of it, which it does not mark. Requests and writes are
counted on the wire: a reverse proxy in front of DynamoDB Local (by
X-Amz-Target and outcome; a refused conditional put is a request, not a
durable write) and, for oncepay, a PostgreSQL proxy reading the frontend
protocol (a COMMIT, or an INSERT/UPDATE/DELETE/WITH outside a transaction,
is a commit). The peer's IdempotencyAlreadyInProgressError is thrown out
of the handler: a function error, which API Gateway answers 500
{"message":"Internal Server Error"}, the answer a crash gets. Cold start is
from the emulator's process start to the answer of its first invocation (a
first call: the runtime's start, its SDK's load and first connections
included), median of 5 per side, alternating.

`

// peerGuarantees is what each side guarantees that the other does not, as
// read in oncepay's code and in the peer's installed Powertools source
// (_tools/peer/node_modules/@aws-lambda-powertools/idempotency/lib/esm).
const peerGuarantees = `What each side guarantees that the other does not (oncepay: internal/api,
internal/idem, internal/ledger; the peer: Powertools' IdempotencyHandler,
BasePersistenceLayer and DynamoDBPersistenceLayer as installed):

| case | oncepay | peer (Powertools) |
|---|---|---|
| a repeat after the key window (1 h on both) | the ledger row, UNIQUE per caller and key and kept for good, answers it: a settled payment is answered from its row, with no PSP call | the expired record is overwritten by the next put (its condition admits ` + "`expiration < now`" + `) and the handler runs again: a new PSP call under the same key, a replay only while the PSP remembers the key (Stripe: at least 24 h), a second charge after |
| the events of a payment | the settle commit writes the outbox intent with the state move; the outbox put, the relay and the FIFO queue deliver it to a worker whose inbox credits it once | none: whatever the handler does after the charge (an event, a credit) is its own write, which a crash between the two loses, or repeats on the retry that runs the handler again |
| the PSP reply lost or late (a timeout) | the row goes UNKNOWN and the caller gets 202 with a pointer to resolve; the resolver replays the PSP with the same key and settles it | a thrown error deletes the record (unconditional DeleteItem) and answers 500: the outcome is learnt only if the client retries; a function killed at its timeout leaves the record INPROGRESS until its in-progress expiry (the time the invocation had left), 500 to every retry until then |
| a takeover after the owner's lease passed | conditional on the old owner; the completion is conditional on the owner, so a paused first owner that wakes up cannot overwrite the new owner's answer (it answers what the record holds) | the put takes the expired INPROGRESS record with no owner in it; the result is saved by an unconditional UpdateItem and a failure deletes by an unconditional DeleteItem, so a paused first invocation that wakes up overwrites or deletes the new owner's record |
| a duplicate while the first is in flight | 409 problem+json with Retry-After (a retry is told when) | IdempotencyAlreadyInProgressError thrown: 500 through API Gateway, the same answer as a crash (unless the team maps it) |
| the same key with another body | 422, against the completed record or the ledger row (409 while neither decides yet); the fingerprint is a versioned SHA-256 of the five meaning fields as parsed (currency upper-cased) | IdempotencyValidationError thrown (md5 of the JMESPath selection, raw values): 500 through API Gateway |
| a replay | marked Idempotent-Replayed: true | the stored response, byte for byte, unmarked: a client cannot tell it from a first answer |
| the key store (DynamoDB) down | carries on with the durable guard alone (the ledger row), and answers | the put fails: IdempotencyPersistenceLayerError, 500, nothing charged |
| the ledger (PostgreSQL) down | 503 and nothing charged: no PSP call without a durable intent | not affected: it has no ledger, so it keeps charging on DynamoDB alone |
| a request older than its deadline | refused before anything runs (the gateway's arrival stamp) | no deadline: a late delivery runs |

Seen in the peer's source, not exercised here: the check meant to treat an
expired in-progress record as inconsistent compares its expiry (epoch
milliseconds) with ` + "`new Date().getUTCMilliseconds()`" + ` (0-999, the
millisecond field of the clock), so it never fires; the put's own condition
takes such a record over anyway, so the path it guards is not reached in
the runs above.

`
