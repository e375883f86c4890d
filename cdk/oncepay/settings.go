package oncepay

import (
	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
	"github.com/oncepay/oncepay/cdk/oncepay/totalstable"
)

// The settings types the props take, named here so that a stack outside
// this module can write them (the packages they come from are internal).
type (
	// QueueSettings: the events queue -> worker mapping, and the queue's
	// visibility timeout and maxReceiveCount (applied to a queue the
	// worker makes, checked against one it is given).
	QueueSettings = eventsource.Queue
	// StreamSettings: a DynamoDB stream mapping (the relay's, the stream
	// job's).
	StreamSettings = eventsource.Stream
	// Timing: the payment's deadline rules the api's timeout and
	// environment derive from.
	Timing = config.Timing
	// TotalsVersion: what the stream job counts (TotalsV1, TotalsV2).
	TotalsVersion = totalstable.Version
)

// The stream job's versions.
const (
	TotalsV1 = totalstable.V1
	TotalsV2 = totalstable.V2
)

// Values of StreamSettings fields.
const (
	// Forever is MaxRetryAttempts' and MaxRecordAgeSeconds' "no limit".
	Forever     = eventsource.Forever
	TrimHorizon = eventsource.TrimHorizon
	Latest      = eventsource.Latest
)

// DefaultWorkerSettings are the worker mapping's defaults (eventsource.Default):
// batches of 10 with partial failures, visibility 6x WorkerTimeout, five
// deliveries before the DLQ.
func DefaultWorkerSettings() QueueSettings { return eventsource.Default().Worker }

// DefaultRelaySettings are the relay mapping's defaults: batches of 100,
// partial failures, bisect on error, 10 retries, then the failure queue.
func DefaultRelaySettings() StreamSettings { return eventsource.Default().Relay }

// DefaultTotalsSettings are the stream job's mapping defaults: a one-minute
// tumbling window, 10 retries, then the failure queue.
func DefaultTotalsSettings() StreamSettings { return eventsource.Default().Totals }

// DefaultTiming is the payment's default deadline rules (5 s deadline).
func DefaultTiming() Timing { return config.Default() }

// DefaultSizings are every function's timeout and memory under DefaultTiming.
func DefaultSizings() Sizings { return SizingsFor(config.Default()) }
