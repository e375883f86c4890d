// Package eventsource holds the settings of the Lambda event-source
// mappings: on the payment's path the outbox stream -> relay and the events
// queue -> worker, and beside it the outbox stream -> the totals job. One
// struct carries them, so the CDK constructs that create the mappings and
// the local harness that plays them read the same numbers.
//
// Each field is named after the Lambda (or SQS) parameter it sets. Stream and
// Queue start from Lambda's documented defaults (DefaultStream, DefaultQueue);
// Default returns oncepay's choices on top of them, each with its reason.
package eventsource

import (
	"fmt"
	"time"
)

// Starting positions of a stream mapping.
const (
	TrimHorizon = "TRIM_HORIZON"
	Latest      = "LATEST"
)

// Forever is the value of MaxRetryAttempts and MaxRecordAge that means "no
// limit": failed records are retried until they leave the stream (24 h).
const Forever = -1

// StreamRetention is how long a DynamoDB stream keeps a record.
const StreamRetention = 24 * time.Hour

// Stream is a DynamoDB Streams event-source mapping.
type Stream struct {
	// BatchSize: records per invocation (Lambda: default 100, max 10,000).
	BatchSize int
	// MaxBatchingWindow: how long to gather records before invoking
	// (MaximumBatchingWindowInSeconds; default 0, max 300 s).
	MaxBatchingWindow time.Duration
	// StartingPosition: TrimHorizon or Latest (required by Lambda).
	StartingPosition string
	// BisectOnError splits a failed batch in two and retries each half
	// (BisectBatchOnFunctionError; default false). Splitting does not count
	// as a retry.
	BisectOnError bool
	// MaxRetryAttempts: retries of a failing batch before its records go to
	// the on-failure destination (MaximumRetryAttempts; default Forever).
	MaxRetryAttempts int
	// MaxRecordAgeSeconds: records older than this are discarded to the
	// on-failure destination unprocessed (MaximumRecordAgeInSeconds; default
	// Forever, else 60 s to 7 days).
	MaxRecordAgeSeconds int
	// ReportBatchItemFailures: the function may report the first failed
	// record so the retry resumes from it (FunctionResponseTypes).
	ReportBatchItemFailures bool
	// ParallelizationFactor: concurrent batches per shard (default 1).
	// Ordering per item needs 1, so oncepay keeps it.
	ParallelizationFactor int
	// TumblingWindow: the window of a stateful mapping
	// (TumblingWindowInSeconds; 0 = none, else 1 s..15 min). Lambda hands
	// each invocation of a window the state the previous one answered.
	TumblingWindow time.Duration
}

// Queue is an SQS event-source mapping plus the two queue attributes that
// decide redelivery: the visibility timeout and the redrive policy's
// maxReceiveCount.
type Queue struct {
	// BatchSize: messages per invocation (default 10; a FIFO queue allows
	// at most 10).
	BatchSize int
	// MaxBatchingWindow: not supported on FIFO queues; 0.
	MaxBatchingWindow time.Duration
	// ReportBatchItemFailures: the function reports failed message ids and
	// only the others are deleted.
	ReportBatchItemFailures bool
	// MaxConcurrency: the most concurrent invocations the mapping starts
	// (ScalingConfig.MaximumConcurrency, 2..1000); 0 = no limit but the
	// function's own.
	MaxConcurrency int
	// VisibilityTimeout (queue attribute, default 30 s): how long a received
	// message stays hidden before it is delivered again.
	VisibilityTimeout time.Duration
	// MaxReceiveCount (redrive policy): deliveries before SQS moves a message
	// to the dead-letter queue; 0 means no DLQ.
	MaxReceiveCount int
}

// Settings are both mappings of the path.
type Settings struct {
	Relay  Stream // outbox stream -> relay function
	Worker Queue  // events queue -> worker function
	Totals Stream // outbox stream -> the totals job (tumbling window)
}

// DefaultStream returns Lambda's defaults for a DynamoDB stream mapping.
func DefaultStream() Stream {
	return Stream{
		BatchSize:             100,
		StartingPosition:      TrimHorizon,
		MaxRetryAttempts:      Forever,
		MaxRecordAgeSeconds:   Forever,
		ParallelizationFactor: 1,
	}
}

// DefaultQueue returns Lambda's and SQS's defaults for a queue mapping.
func DefaultQueue() Queue {
	return Queue{BatchSize: 10, VisibilityTimeout: 30 * time.Second}
}

// WorkerTimeout is the worker function's timeout the queue's visibility
// timeout is derived from (AWS advises at least six times it).
const WorkerTimeout = 30 * time.Second

// Default returns oncepay's settings.
//
// Relay: batches of 100 (SQS takes them 10 per call); partial batch
// failures so a send error retries from the failed record and not the whole
// batch; bisect so a record that can never be sent ends up alone; 10 retries
// and then the on-failure destination, because a stuck record would
// otherwise hold its shard for the stream's whole 24 h retention and then be
// dropped silently.
//
// Worker: batches of 10 (the FIFO maximum) with partial batch failures; a
// visibility timeout of 6x the worker timeout (AWS's advice for an SQS
// event source); five deliveries before the DLQ, which rides out a short
// ledger outage while a poison event stops soon after.
func Default() Settings {
	relay := DefaultStream()
	relay.BisectOnError = true
	relay.MaxRetryAttempts = 10
	relay.ReportBatchItemFailures = true

	worker := DefaultQueue()
	worker.ReportBatchItemFailures = true
	worker.VisibilityTimeout = 6 * WorkerTimeout
	worker.MaxReceiveCount = 5
	// Totals: a one-minute tumbling window (each window's close saves the
	// job's carry, so shorter means more carry writes and longer means a
	// bigger state); no partial failures and no bisect (the state answers
	// for the whole batch). Retries without a count: a discarded final
	// invoke drops the window's state, which the job then rebuilds from
	// its sink and sends to the recount (docs/stream-job.md#lost-state);
	// retrying keeps that the last resort. Records older than the stream's
	// retention less an hour are discarded to the on-failure destination,
	// which the recount reads, rather than leave the stream unrecorded; the
	// iterator-age alarm fires hours before.
	totals := DefaultStream()
	totals.MaxRecordAgeSeconds = int((StreamRetention - time.Hour).Seconds())
	totals.TumblingWindow = time.Minute
	return Settings{Relay: relay, Worker: worker, Totals: totals}
}

// Validate checks s against Lambda's limits.
func (s Stream) Validate() error {
	switch {
	case s.BatchSize < 1 || s.BatchSize > 10000:
		return fmt.Errorf("eventsource: stream batch size %d not in 1..10000", s.BatchSize)
	case s.MaxBatchingWindow < 0 || s.MaxBatchingWindow > 300*time.Second:
		return fmt.Errorf("eventsource: stream batching window %s not in 0..300s", s.MaxBatchingWindow)
	case s.StartingPosition != TrimHorizon && s.StartingPosition != Latest:
		return fmt.Errorf("eventsource: starting position %q is neither %s nor %s", s.StartingPosition, TrimHorizon, Latest)
	case s.MaxRetryAttempts < Forever || s.MaxRetryAttempts > 10000:
		return fmt.Errorf("eventsource: max retry attempts %d not in -1..10000", s.MaxRetryAttempts)
	case s.MaxRecordAgeSeconds != Forever && (s.MaxRecordAgeSeconds < 60 || s.MaxRecordAgeSeconds > 604800):
		return fmt.Errorf("eventsource: max record age %ds is neither -1 nor in 60..604800", s.MaxRecordAgeSeconds)
	case s.ParallelizationFactor < 1 || s.ParallelizationFactor > 10:
		return fmt.Errorf("eventsource: parallelization factor %d not in 1..10", s.ParallelizationFactor)
	case s.TumblingWindow < 0 || s.TumblingWindow > 15*time.Minute || s.TumblingWindow%time.Second != 0:
		return fmt.Errorf("eventsource: tumbling window %s is not whole seconds in 0..900s", s.TumblingWindow)
	}
	return nil
}

// Validate checks q against Lambda's and SQS's limits for a FIFO queue.
func (q Queue) Validate() error {
	switch {
	case q.BatchSize < 1 || q.BatchSize > 10:
		return fmt.Errorf("eventsource: FIFO queue batch size %d not in 1..10", q.BatchSize)
	case q.MaxBatchingWindow != 0:
		return fmt.Errorf("eventsource: a FIFO queue mapping takes no batching window")
	case q.MaxConcurrency != 0 && (q.MaxConcurrency < 2 || q.MaxConcurrency > 1000):
		return fmt.Errorf("eventsource: max concurrency %d is neither 0 nor in 2..1000", q.MaxConcurrency)
	case q.VisibilityTimeout < 0 || q.VisibilityTimeout > 12*time.Hour:
		return fmt.Errorf("eventsource: visibility timeout %s not in 0..12h", q.VisibilityTimeout)
	case q.MaxReceiveCount < 0 || q.MaxReceiveCount > 1000:
		return fmt.Errorf("eventsource: max receive count %d not in 0..1000", q.MaxReceiveCount)
	}
	return nil
}

// Validate checks the mappings.
func (s Settings) Validate() error {
	if err := s.Relay.Validate(); err != nil {
		return err
	}
	if err := s.Totals.Validate(); err != nil {
		return fmt.Errorf("totals: %w", err)
	}
	return s.Worker.Validate()
}
