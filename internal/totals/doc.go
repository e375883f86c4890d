// Package totals is the stream job: merchants' daily totals from the outbox
// table's stream, run by Lambda's tumbling window (docs/stream-job.md,
// docs/mechanism.md#seed-part-8).
//
// Lambda is the engine. It hands each invocation the state the previous one
// returned and checkpoints that state together with the stream position, so
// the state is exactly-once per shard; a failed invocation is handed the same
// batch with the same, older state: a restore. What the job writes to the
// sink is not rewound, so the sink makes repeated output harmless:
//
//   - every write is absolute (SET total), tagged with the checkpoint the
//     writing run was handed, and a sparse index lists the keys by tag;
//   - a run that finds the sink marked at its own checkpoint knows
//     an earlier run from the same state wrote and was lost, and runs the
//     full flush before its batch: every key of its state rewritten with its
//     tag, every key tagged at or after it that the state does not hold
//     deleted;
//   - seen event ids live in the state and expire by event time + horizon,
//     the same boundary at which a copy is rejected as late (sent to the
//     recount queue), against the watermark kept in the state as the floor.
//
// Lambda drops the state when a window closes (or is terminated early at its
// 1 MB); the final invoke saves it to the sink as the shard's carry and the
// next window's first invoke, handed a fresh state, loads it. A final invoke
// Lambda discards drops the state without a carry: a fresh state that finds
// the sink marked past its carry, or at it from another window, rebuilds the
// lost state from the sink's totals and sends their keys to the recount.
package totals
