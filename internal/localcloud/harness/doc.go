// Package harness plays, in Go, the parts of AWS that the local cloud's
// emulators do not run: Lambda's event-source mappings. A StreamPoller reads
// a DynamoDB stream (DynamoDB Local's) and invokes a stream handler the way a
// DynamoDB stream mapping does; a QueuePoller receives from an SQS queue
// (moto's) and invokes a queue handler the way an SQS mapping does. Both
// take their settings from eventsource.Settings, the struct the CDK mappings
// use too.
//
// Tests and the demo drive them step by step: Step makes one poll and at most
// one invocation (per shard), Drain steps until nothing is left, Run loops
// until its context ends. Nothing here sleeps to pass time: a QueuePoller's
// Expire makes the messages it left in flight visible again, standing for
// their visibility timeout running out.
//
// What is emulated, and what is left to the emulator:
//   - Stream: batches up to BatchSize gathered for up to MaxBatchingWindow;
//     a function error retries the batch (split in two first when
//     BisectOnError; splitting is not counted as a retry); a partial batch
//     failure checkpoints before the lowest reported sequence number and
//     retries from it (with bisect, only the rest of that batch); an
//     identifier not in the batch fails the whole batch; after
//     MaxRetryAttempts retries (or past MaxRecordAgeSeconds) the batch is
//     discarded to the on-failure destination (a Go callback or an SQS
//     queue) with Lambda's on-failure record; parent shards before children;
//     one batch per shard at a time (ParallelizationFactor 1, the only
//     value oncepay uses). A handler error wrapping ErrNotInvoked (a
//     throttle, a runner that could not start the function) re-reads the
//     same batch after PollInterval with no attempt counted and no bisect,
//     as Lambda does. StreamConfig.Resume and Checkpoints carry a mapping's
//     position across restarts of a long-running poller.
//   - Queue: ReceiveMessage with BatchSize and every system attribute; a
//     function error deletes nothing; a partial batch failure deletes all but
//     the reported messages; an identifier not in the batch fails the whole
//     batch. A batch not invoked (ErrNotInvoked) is retried in place by
//     Run's pollers within half the visibility timeout, then left to SQS's
//     redelivery (a receive counted, as on AWS). Redelivery after the visibility timeout, FIFO group locking and
//     the move to the dead-letter queue after maxReceiveCount receives are
//     SQS's own: moto 5 implements the RedrivePolicy (it moves a message
//     whose receive count has reached maxReceiveCount to the DLQ when a
//     receive finds it visible again), so the harness does not emulate it.
//
// Pushes: a PushQueue reads the pushes a topic fans out to a subscribed SQS
// queue, and a Phone shows them the way a device does, one notification per
// replace id.
package harness
