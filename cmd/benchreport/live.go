package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// liveBench is the live stack's benchmark (infra-tests/live).
const liveBench = "LiveTapToPush"

// liveRow is one rate LiveTapToPush ran at: a steady phase ("r<rate>-")
// or a ramp step ("ramp<rate>-").
type liveRow struct {
	prefix string
	rate   float64
	ramp   bool
}

// liveRows finds the rates the run reported (each has a "<prefix>taps"
// figure), steady phases first, each kind by rate.
func liveRows(f figures) []liveRow {
	var rows []liveRow
	for unit := range f[liveBench] {
		prefix, ok := strings.CutSuffix(unit, "-taps")
		if !ok {
			continue
		}
		row := liveRow{prefix: prefix + "-"}
		num, isRamp := strings.CutPrefix(prefix, "ramp")
		if !isRamp {
			if num, ok = strings.CutPrefix(prefix, "r"); !ok {
				continue
			}
		}
		rate, err := strconv.ParseFloat(num, 64)
		if err != nil {
			continue
		}
		row.rate, row.ramp = rate, isRamp
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].ramp != rows[j].ramp {
			return !rows[i].ramp
		}
		return rows[i].rate < rows[j].rate
	})
	return rows
}

// writeLive compares the live stack's tap -> push with the in-process
// TapToPush of the same run: ratios, because both move with the machine.
func writeLive(out io.Writer, f figures) {
	rows := liveRows(f)
	if len(rows) == 0 {
		return
	}
	get := func(unit string) (string, float64, bool) {
		v, ok := f.get(liveBench, unit)
		if !ok {
			return "—", 0, false
		}
		return strconv.FormatFloat(v, 'f', 0, 64), v, true
	}
	ratio := func(live float64, okLive bool, unit string) string {
		in, ok := f.get("TapToPush", unit)
		if !ok || !okLive || in <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.2fx", live/in)
	}
	fmt.Fprintln(out, "## Live stack: tap -> push")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "The same walk on the live local stack (`localcloud serve`, started by `make up`): every template function under aws-lambda-rie (at most 4 environments per function locally), the stream and queue mappings played by the local cloud, the HTTP API by the front door with the stage's throttle as the template sets it (50/s, burst 100: not turned off, so a 429 is the throttle's). Only the public surface: POST /payments at the HttpApiUrl with a local caller token, and the pushes from a queue of the benchmark's own subscribed to the push topic. Open loop: taps arrive on a fixed schedule at the rate, whatever the answers do, so a slow answer cannot hold back the taps behind it and hide its cost. A tap's time runs from just before its POST is sent to the long poll's return with its push. Taps spread over 16 merchants (FIFO groups). The ratios are live over the in-process TapToPush of this run (one tap at a time, the handlers in the benchmark's process).")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| rate /s | taps | push p50 ms | push p99 ms | p50 live / in-process | p99 live / in-process | push p99 ms, all taps | answer p50 / p99 ms | 429 | 5xx | lost | no answer or other |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		kind := ""
		if r.ramp {
			kind = " (ramp)"
		}
		taps, _, _ := get(r.prefix + "taps")
		p50s, p50, ok50 := get(r.prefix + "tap-push-p50-ms")
		p99s, p99, ok99 := get(r.prefix + "tap-push-p99-ms")
		all, _, _ := get(r.prefix + "all-p99-ms")
		a50, _, _ := get(r.prefix + "tap-answer-p50-ms")
		a99, _, _ := get(r.prefix + "tap-answer-p99-ms")
		n429, _, _ := get(r.prefix + "429s")
		n5xx, _, _ := get(r.prefix + "5xx")
		lost, _, _ := get(r.prefix + "lost")
		other, _, _ := get(r.prefix + "errors")
		fmt.Fprintf(out, "| %s%s | %s | %s | %s | %s | %s | %s | %s / %s | %s | %s | %s | %s |\n",
			strconv.FormatFloat(r.rate, 'f', -1, 64), kind, taps, p50s, p99s,
			ratio(p50, ok50, "tap-push-p50-ms"), ratio(p99, ok99, "tap-push-p99-ms"), all, a50, a99, n429, n5xx, lost, other)
	}
	fmt.Fprintln(out)
	top, _ := f.get(liveBench, "ramp-top-rate")
	if over, ok := f.get(liveBench, "p99-over-1s-rate"); ok {
		if over > 0 {
			fmt.Fprintf(out, "**The live stack's p99 passes 1 s at %s taps/s**, the first ramp step past it (its p99 over all taps: a refused, failed or unanswered tap, or one with no push within 30 s, counts as slower than every delivered one).\n\n", strconv.FormatFloat(over, 'f', -1, 64))
		} else {
			fmt.Fprintf(out, "**The live stack's p99 did not pass 1 s up to %s taps/s** (the ramp's top; refused and lost taps count as slower than every delivered one).\n\n", strconv.FormatFloat(top, 'f', -1, 64))
		}
	}
	fmt.Fprintln(out, "Push p50 and p99 are of the taps whose push came (the answer's, of the taps answered 201 or 202), ranked as the in-process figures are: the sample at floor(n·p), so up to 100 taps the p99 is the slowest; \"all taps\" ranks the rest above them. 429: refused by the stage's throttle; 5xx: the front door's 500 for a function at its environment cap (API Gateway's answer to a throttled invocation) or a function error; lost: answered, but no push within 30 s; no answer or other: the request itself failed, or got a status other than 201, 202, 429 and 5xx. Between phases the driver waits for the stack to go quiet (no push for 3 s), so a phase's backlog does not land on the next.")
	fmt.Fprintln(out)
	if n, ok := f.get(liveBench, "r50-429s"); ok {
		if n == 0 {
			fmt.Fprintf(out, "50/s is the throttle's own rate, the edge the acceptance asks for: arrivals evenly at 50/s never empty its bucket, so the door refused none of them (this run's 50/s phase: 0 refused); what the phase meets is the stack behind the door. Above 50/s the throttle refuses once the burst of 100 is spent, as the deployed stage would.\n\n")
		} else {
			fmt.Fprintf(out, "50/s is the throttle's own rate, the edge the acceptance asks for. Arrivals evenly at 50/s should never empty its bucket, yet this run's 50/s phase had %s refused: the taps did not arrive evenly (the driver fell behind its schedule), so the phase measured the door as well as the stack behind it.\n\n", strconv.FormatFloat(n, 'f', 0, 64))
		}
	}
}

// hotBench is the live stack's hot-merchant benchmark (infra-tests/live).
const hotBench = "LiveHotMerchant"

// writeHot sets one hot merchant's events/s through relay -> SQS FIFO ->
// worker against what one worker transaction allows (1/its time, from
// WorkerTransaction in the same run), with the many-merchant figure and
// the in-process harness's beside it.
func writeHot(out io.Writer, f figures) {
	hot, ok1 := f.get(hotBench, "hot-events/s")
	many, ok2 := f.get(hotBench, "many-events/s")
	if !ok1 || !ok2 {
		return
	}
	fmt.Fprintln(out, "## One hot merchant")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "One merchant's events are serialised twice: by its SQS FIFO message group (the queue hands out a group's next batch only when the last is done) and by its balance row. LiveHotMerchant pays a backlog on the live stack (every function under aws-lambda-rie, the stream and queue mappings played as Lambda plays them, moto's queue and topic) and reads how fast the worker's credits commit, from the credits' own commit stamps; the many-merchant phase spreads the same backlog over several merchants, one group each. The ceiling a single group could reach is one worker transaction after another: 1/(WorkerTransaction's first delivery) from the same run.")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| figure | events/s | against 1/(worker transaction) |")
	fmt.Fprintln(out, "|---|---|---|")
	ceiling, okc := f.get("WorkerTransaction", "first-ms/op")
	frac := func(v float64) string {
		if !okc || ceiling <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.2fx", v/(1000/ceiling))
	}
	if okc && ceiling > 0 {
		fmt.Fprintf(out, "| 1/(worker transaction), first delivery (%.1f ms) | %.0f | 1.00x |\n", ceiling, 1000/ceiling)
	}
	ingest := func(unit string) string {
		if v, ok := f.get(hotBench, unit); ok {
			return fmt.Sprintf(" (paid at %.1f/s)", v)
		}
		return ""
	}
	fmt.Fprintf(out, "| live stack, one merchant%s | %.1f | %s |\n", ingest("hot-ingest/s"), hot, frac(hot))
	fmt.Fprintf(out, "| live stack, many merchants%s | %.1f | %s |\n", ingest("many-ingest/s"), many, frac(many))
	if v, ok := f.get("RelayToWorker", "hot-events/s"); ok {
		fmt.Fprintf(out, "| in-process harness, one merchant | %.1f | %s |\n", v, frac(v))
	}
	if v, ok := f.get("RelayToWorker", "many-events/s"); ok {
		fmt.Fprintf(out, "| in-process harness, many merchants | %.1f | %s |\n", v, frac(v))
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "A drain rate near its paid-at rate means the worker kept up and the figure is the ingest's. Between one transaction and the next of a group sit the push's SNS publish and the second commit (the notification marked SENT), the queue's delete, and the mapping's next receive: that, not the ledger, is what the hot merchant's rate is made of here. Spreading merchants over groups is what lifts it; a merchant that needs more than one group's rate needs its events sharded (the balance row stays one writer at a time).")
	fmt.Fprintln(out)
}
