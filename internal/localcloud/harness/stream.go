package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
)

// ErrNotInvoked is what a handler wraps when the invocation never ran: the
// function was throttled (every execution environment busy) or the runner
// could not start it. Lambda retries such a batch without counting a retry
// attempt and without bisecting (a stream batch stays bound by its maximum
// record age); an SQS batch is retried in place within its visibility
// timeout, after which SQS redelivers it, a receive counted as on AWS.
var ErrNotInvoked = errors.New("harness: the function was not invoked")

// StreamHandler is a Lambda handler for DynamoDB stream batches.
type StreamHandler func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error)

// StreamAPI is the DynamoDB Streams calls a StreamPoller makes.
type StreamAPI interface {
	DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error)
	GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

// StreamFailure is Lambda's on-failure record for a discarded stream batch.
type StreamFailure struct {
	RequestContext struct {
		RequestID              string `json:"requestId"`
		FunctionArn            string `json:"functionArn"`
		Condition              string `json:"condition"` // RetryAttemptsExhausted or RecordAgeExceeded
		ApproximateInvokeCount int    `json:"approximateInvokeCount"`
	} `json:"requestContext"`
	ResponseContext struct {
		StatusCode      int    `json:"statusCode"`
		ExecutedVersion string `json:"executedVersion"`
		FunctionError   string `json:"functionError,omitempty"`
	} `json:"responseContext"`
	Version   string `json:"version"`
	Timestamp string `json:"timestamp"`
	BatchInfo struct {
		ShardID                         string `json:"shardId"`
		StartSequenceNumber             string `json:"startSequenceNumber"`
		EndSequenceNumber               string `json:"endSequenceNumber"`
		ApproximateArrivalOfFirstRecord string `json:"approximateArrivalOfFirstRecord"`
		ApproximateArrivalOfLastRecord  string `json:"approximateArrivalOfLastRecord"`
		BatchSize                       int    `json:"batchSize"`
		StreamArn                       string `json:"streamArn"`
	} `json:"DDBStreamBatchInfo"`
}

// OnFailure receives the record of each discarded batch. An error keeps the
// batch where it is: the next Step tries the destination again.
type OnFailure func(ctx context.Context, f StreamFailure) error

// SendMessageAPI is the SQS call an SQS on-failure destination makes.
type SendMessageAPI interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// SQSDestination returns an OnFailure that sends each record, as JSON, to a
// standard queue, as Lambda's SQS on-failure destination does.
func SQSDestination(client SendMessageAPI, queueURL string) OnFailure {
	return func(ctx context.Context, f StreamFailure) error {
		b, err := json.Marshal(f)
		if err != nil {
			return fmt.Errorf("harness: encode on-failure record: %w", err)
		}
		if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String(string(b))}); err != nil {
			return fmt.Errorf("harness: send on-failure record: %w", err)
		}
		return nil
	}
}

// StreamConfig configures a StreamPoller. Zero fields take the defaults.
type StreamConfig struct {
	// StreamArn is the stream to read (required).
	StreamArn string
	// Settings are the mapping's (default eventsource.DefaultStream(): Lambda's).
	Settings eventsource.Stream
	// OnFailure receives discarded batches (default: none; they are only
	// counted and logged, as Lambda drops them with no destination).
	OnFailure OnFailure
	// FunctionArn names the function in on-failure records.
	FunctionArn string
	// Region goes into each record's awsRegion (default $AWS_REGION or us-east-1).
	Region string
	// PollInterval is Run's wait after a poll that found nothing (default
	// 250 ms: Lambda polls a DynamoDB stream's shards four times a second).
	PollInterval time.Duration
	// MaxDrainSteps bounds Drain (default 10,000).
	MaxDrainSteps int
	// QuietPolls is how many empty steps in a row, QuietPause apart, Drain
	// needs before it calls the stream drained (default 2, 100 ms): a
	// stream's GetRecords may come back empty while a record just written
	// is still on its way (DynamoDB Local's streams lag under load).
	QuietPolls int
	QuietPause time.Duration
	// Logger receives a line per invocation outcome (default slog.Default()).
	Logger *slog.Logger
	// Resume is where a restarted mapping picks up: the last acknowledged
	// sequence number by shard id, as Checkpoints returned it. Lambda keeps a
	// mapping's position across its own restarts; without it a restart
	// would read the whole stream again from TrimHorizon.
	Resume map[string]string
	// ResumeWindows is a tumbling window mapping's open windows, as
	// Position returned them with Resume's checkpoints.
	ResumeWindows map[string]WindowState
	// Committed, when set, is called after every step of a tumbling window
	// mapping that moved a shard's checkpoint or its window's state, with
	// the position then (under the poller's lock, before the next
	// invocation). Lambda checkpoints a window's state with the stream
	// position at every invocation; a host that keeps them across its
	// restarts must save both at once, here, or a restart pairs a position
	// with a state of another moment (docs/stream-job.md#the-converse).
	// While it returns an error, the poller invokes nothing: each Step
	// calls it again first, so the sink never runs ahead of what is saved.
	Committed func(Position) error
}

// Position is a mapping's committed position, taken at one moment: each
// shard's last acknowledged sequence number and, for a tumbling window, its
// open window with the state the last successful invocation answered.
type Position struct {
	Checkpoints map[string]string      `json:"checkpoints"`
	Windows     map[string]WindowState `json:"windows,omitempty"`
}

// WindowState is a shard's open tumbling window.
type WindowState struct {
	Start     time.Time         `json:"start"`
	State     map[string]string `json:"state,omitempty"`
	Terminate bool              `json:"terminate,omitempty"` // the state passed MaxWindowState
}

// StreamStats counts what a StreamPoller did.
type StreamStats struct {
	Invocations     int // handler invocations
	Records         int // records handed over, re-deliveries included
	Acked           int // records the checkpoint moved past after their batch succeeded (each once)
	FunctionErrors  int // invocations that returned an error (or panicked)
	PartialFailures int // invocations that reported batch item failures
	Bisections      int // failed batches split in two
	Retries         int // failed invocations whose records will be retried
	Throttles       int // batches not invoked (ErrNotInvoked), retried without counting an attempt
	Discarded       int // records sent to the on-failure destination
	// A tumbling window's closes: final invokes, and early ends at the
	// state limit.
	WindowsClosed, WindowsTerminatedEarly int
	Failures                              []StreamFailure
}

// StreamPoller plays a DynamoDB stream event-source mapping. Its methods are
// safe for concurrent use; steps run one at a time.
type StreamPoller struct {
	api     StreamAPI
	handler StreamHandler
	window  WindowHandler // set instead of handler for a tumbling window
	cfg     StreamConfig

	mu      sync.Mutex
	started bool
	shards  map[string]*shard
	order   []string
	stats   StreamStats
	unsaved bool // Committed failed: save before anything else
}

type shard struct {
	id, parent string
	checkpoint string  // last sequence number acknowledged
	first      string  // first record read while there is no checkpoint: retries read AT it
	latest     *string // LATEST iterator for shards open when the mapping started
	attempts   int     // failed invocations at this position
	invokes    int     // invocations at this position
	limits     []int   // batch sizes owed to bisected halves, last = next
	done       bool
	win        window // the open tumbling window, if any
	commits    int    // checkpoint moves and window closes: Committed's trigger
}

// NewStreamPoller returns a poller that feeds handler from the stream.
func NewStreamPoller(api StreamAPI, handler StreamHandler, cfg StreamConfig) (*StreamPoller, error) {
	if api == nil || handler == nil {
		return nil, errors.New("harness: NewStreamPoller needs a StreamAPI and a handler")
	}
	if cfg.StreamArn == "" {
		return nil, errors.New("harness: StreamConfig.StreamArn is required")
	}
	if cfg.Settings == (eventsource.Stream{}) {
		cfg.Settings = eventsource.DefaultStream()
	}
	if err := cfg.Settings.Validate(); err != nil {
		return nil, err
	}
	if cfg.FunctionArn == "" {
		cfg.FunctionArn = "arn:aws:lambda:local:000000000000:function:stream-handler"
	}
	if cfg.Region == "" {
		cfg.Region = os.Getenv("AWS_REGION")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 250 * time.Millisecond
	}
	if cfg.QuietPolls == 0 {
		cfg.QuietPolls = 2
	}
	if cfg.QuietPause == 0 {
		cfg.QuietPause = 100 * time.Millisecond
	}
	if cfg.MaxDrainSteps == 0 {
		cfg.MaxDrainSteps = 10000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &StreamPoller{api: api, handler: handler, cfg: cfg, shards: map[string]*shard{}}, nil
}

// Stats returns a copy of the counters.
func (p *StreamPoller) Stats() StreamStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Failures = append([]StreamFailure(nil), p.stats.Failures...)
	return s
}

// Checkpoints returns the last acknowledged sequence number of every shard
// that has one, for StreamConfig.Resume.
func (p *StreamPoller) Checkpoints() map[string]string {
	return p.Position().Checkpoints
}

// Position returns the checkpoints and the open windows at one moment, for
// StreamConfig.Resume and ResumeWindows.
func (p *StreamPoller) Position() Position {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.position()
}

func (p *StreamPoller) position() Position {
	pos := Position{Checkpoints: map[string]string{}}
	for id, sh := range p.shards {
		if sh.checkpoint != "" {
			pos.Checkpoints[id] = sh.checkpoint
		}
		if sh.win.open {
			if pos.Windows == nil {
				pos.Windows = map[string]WindowState{}
			}
			pos.Windows[id] = WindowState{Start: sh.win.start, State: maps.Clone(sh.win.state), Terminate: sh.win.terminate}
		}
	}
	return pos
}

// Step polls every readable shard once and makes at most one invocation per
// shard. It blocks for the DynamoDB Streams calls, the handler and, with a
// batching window, up to that window. It returns the records handed to the
// handler (0: nothing to do).
func (p *StreamPoller) Step(ctx context.Context) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.unsaved {
		if err := p.cfg.Committed(p.position()); err != nil {
			return 0, fmt.Errorf("harness: save the committed position: %w", err)
		}
		p.unsaved = false
	}
	if err := p.discover(ctx); err != nil {
		return 0, err
	}
	total := 0
	for _, id := range p.order {
		sh := p.shards[id]
		if sh.done {
			continue
		}
		if parent, ok := p.shards[sh.parent]; ok && !parent.done {
			continue // a child waits for its parent, as Lambda keeps per-item order
		}
		step := p.stepShard
		if p.window != nil {
			step = p.stepWindow
		}
		commits := sh.commits
		n, err := step(ctx, sh)
		if p.window != nil && sh.commits != commits && p.cfg.Committed != nil {
			if serr := p.cfg.Committed(p.position()); serr != nil {
				p.unsaved = true
				return total + n, errors.Join(err, fmt.Errorf("harness: save the committed position: %w", serr))
			}
		}
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// Drain steps until QuietPolls steps in a row hand over nothing. It blocks
// for every step and fails if MaxDrainSteps steps did not get there (a batch
// failing forever).
func (p *StreamPoller) Drain(ctx context.Context) (int, error) {
	total, quiet := 0, 0
	for range p.cfg.MaxDrainSteps {
		n, err := p.Step(ctx)
		total += n
		if err != nil {
			return total, err
		}
		if n > 0 {
			quiet = 0
			continue
		}
		if quiet++; quiet >= p.cfg.QuietPolls {
			return total, nil
		}
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(p.cfg.QuietPause):
		}
	}
	return total, fmt.Errorf("harness: stream not drained after %d steps", p.cfg.MaxDrainSteps)
}

// Run steps until ctx ends, waiting PollInterval after a step that found
// nothing or failed. It blocks; it returns nil when ctx ends.
func (p *StreamPoller) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		n, err := p.Step(ctx)
		if err != nil && ctx.Err() == nil {
			p.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "stream poll failed", slog.String("error", err.Error()))
		}
		if n == 0 || err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(p.cfg.PollInterval):
			}
		}
	}
	return nil
}

func (p *StreamPoller) discover(ctx context.Context) error {
	var start *string
	for {
		out, err := p.api.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(p.cfg.StreamArn), ExclusiveStartShardId: start})
		if err != nil {
			return fmt.Errorf("harness: describe stream: %w", err)
		}
		for _, s := range out.StreamDescription.Shards {
			id := aws.ToString(s.ShardId)
			if _, known := p.shards[id]; known {
				continue
			}
			sh := &shard{id: id, parent: aws.ToString(s.ParentShardId), checkpoint: p.cfg.Resume[id]}
			if w, ok := p.cfg.ResumeWindows[id]; ok && p.window != nil && sh.checkpoint != "" {
				sh.win = window{open: true, start: w.Start, state: maps.Clone(w.State), terminate: w.Terminate}
			}
			// Shards open when the mapping starts honour the starting
			// position; shards born later are read from their start.
			if !p.started && p.cfg.Settings.StartingPosition == eventsource.Latest && sh.checkpoint == "" {
				it, err := p.api.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
					StreamArn: aws.String(p.cfg.StreamArn), ShardId: s.ShardId, ShardIteratorType: types.ShardIteratorTypeLatest,
				})
				if err != nil {
					return fmt.Errorf("harness: LATEST iterator of %s: %w", id, err)
				}
				sh.latest = it.ShardIterator
			}
			p.shards[id] = sh
			p.order = append(p.order, id)
		}
		start = out.StreamDescription.LastEvaluatedShardId
		if start == nil {
			break
		}
	}
	p.started = true
	return nil
}

// fetch reads up to limit records from the shard's position. closed reports
// that the shard has ended and every record has been read.
func (p *StreamPoller) fetch(ctx context.Context, sh *shard, limit int) (recs []types.Record, closed bool, err error) {
	iter := sh.latest
	if iter == nil || sh.checkpoint != "" || sh.first != "" {
		in := &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(p.cfg.StreamArn), ShardId: aws.String(sh.id)}
		switch {
		case sh.checkpoint != "":
			in.ShardIteratorType, in.SequenceNumber = types.ShardIteratorTypeAfterSequenceNumber, aws.String(sh.checkpoint)
		case sh.first != "":
			in.ShardIteratorType, in.SequenceNumber = types.ShardIteratorTypeAtSequenceNumber, aws.String(sh.first)
		default:
			in.ShardIteratorType = types.ShardIteratorTypeTrimHorizon
		}
		it, err := p.api.GetShardIterator(ctx, in)
		if err != nil {
			return nil, false, fmt.Errorf("harness: iterator of %s: %w", sh.id, err)
		}
		iter = it.ShardIterator
	}
	began := time.Now()
	for iter != nil && len(recs) < limit {
		out, err := p.api.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(int32(min(limit-len(recs), 1000)))})
		if err != nil {
			return nil, false, fmt.Errorf("harness: get records of %s: %w", sh.id, err)
		}
		recs = append(recs, out.Records...)
		iter = out.NextShardIterator
		if sh.checkpoint == "" && sh.first == "" && sh.latest != nil {
			sh.latest = iter // LATEST moves on while nothing has been read
		}
		if len(out.Records) == 0 {
			if w := p.cfg.Settings.MaxBatchingWindow; w > 0 && len(recs) > 0 && time.Since(began) < w {
				select {
				case <-ctx.Done():
					return nil, false, ctx.Err()
				case <-time.After(min(50*time.Millisecond, w-time.Since(began))):
				}
				continue
			}
			break
		}
	}
	if len(recs) > 0 && sh.checkpoint == "" && sh.first == "" {
		sh.first = aws.ToString(recs[0].Dynamodb.SequenceNumber)
		sh.latest = nil
	}
	return recs, iter == nil && len(recs) == 0, nil
}

// batchLimit is the size of the shard's next batch: the one owed to a
// bisected half, else the mapping's.
func (sh *shard) batchLimit(size int) int {
	if n := len(sh.limits); n > 0 {
		return sh.limits[n-1]
	}
	return size
}

// popLimit drops the batch size the last batch was owed, if any.
func (sh *shard) popLimit() {
	if n := len(sh.limits); n > 0 {
		sh.limits = sh.limits[:n-1]
	}
}

// notInvoked counts a batch that never ran: it is read again at the next
// step with no attempt counted. 0 records makes Run pause first.
func (p *StreamPoller) notInvoked(ctx context.Context, sh *shard, records int, err error) (int, error) {
	p.stats.Throttles++
	p.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "stream batch not invoked", slog.String("shard", sh.id),
		slog.Int("records", records), slog.String("error", err.Error()))
	return 0, nil
}

// succeeded moves the shard past recs.
func (p *StreamPoller) succeeded(sh *shard, recs []types.Record) {
	p.ack(sh, recs[len(recs)-1])
	p.stats.Acked += len(recs)
	sh.popLimit()
}

// giveUp discards recs once their retries are exhausted.
func (p *StreamPoller) giveUp(ctx context.Context, sh *shard, recs []types.Record, functionError string) error {
	if err := p.discard(ctx, sh, recs, "RetryAttemptsExhausted", functionError); err != nil {
		return err
	}
	sh.popLimit()
	return nil
}

func (p *StreamPoller) stepShard(ctx context.Context, sh *shard) (int, error) {
	recs, closed, err := p.fetch(ctx, sh, sh.batchLimit(p.cfg.Settings.BatchSize))
	if err != nil {
		return 0, err
	}
	if len(recs) == 0 {
		sh.limits = nil
		sh.done = closed
		return 0, nil
	}
	if old := p.tooOld(recs); old > 0 {
		return 0, p.discard(ctx, sh, recs[:old], "RecordAgeExceeded", "")
	}
	ev, err := lambdaEvent(recs, p.cfg.StreamArn, p.cfg.Region)
	if err != nil {
		return 0, err
	}
	resp, herr := invokeStream(ctx, p.handler, ev)
	if errors.Is(herr, ErrNotInvoked) {
		return p.notInvoked(ctx, sh, len(recs), herr)
	}
	sh.invokes++
	p.stats.Invocations++
	p.stats.Records += len(recs)
	failedAt := -1
	if herr == nil && p.cfg.Settings.ReportBatchItemFailures && len(resp.BatchItemFailures) > 0 {
		failedAt, herr = lowestFailure(recs, resp.BatchItemFailures)
	}
	log := func(outcome string, attrs ...slog.Attr) {
		attrs = append([]slog.Attr{slog.String("shard", sh.id), slog.Int("records", len(recs)),
			slog.String("first_sequence_number", aws.ToString(recs[0].Dynamodb.SequenceNumber)), slog.String("outcome", outcome)}, attrs...)
		p.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "stream batch", attrs...)
	}
	switch {
	case herr == nil && failedAt < 0:
		log("ok")
		p.succeeded(sh, recs)
	case herr != nil:
		return p.failed(ctx, sh, recs, herr, log)
	default:
		p.stats.PartialFailures++
		log("partial failure", slog.String("failed_sequence_number", aws.ToString(recs[failedAt].Dynamodb.SequenceNumber)))
		if failedAt > 0 {
			p.ack(sh, recs[failedAt-1])
			p.stats.Acked += failedAt
		}
		sh.attempts++
		rest := recs[failedAt:]
		if n := len(sh.limits); n > 0 {
			sh.limits[n-1] = len(rest)
		} else if p.cfg.Settings.BisectOnError {
			sh.limits = append(sh.limits, len(rest)) // bisected at the returned sequence number
		}
		if p.exhausted(sh) {
			return len(recs), p.giveUp(ctx, sh, rest, "")
		}
		p.stats.Retries++
	}
	return len(recs), nil
}

// failed handles an invocation that returned an error: bisect, retry or
// discard, as the mapping's settings say.
func (p *StreamPoller) failed(ctx context.Context, sh *shard, recs []types.Record, herr error, log func(string, ...slog.Attr)) (int, error) {
	p.stats.FunctionErrors++
	log("function error", slog.String("error", herr.Error()))
	if p.cfg.Settings.BisectOnError && len(recs) > 1 {
		p.stats.Bisections++
		sh.popLimit()
		half := len(recs) / 2
		sh.limits = append(sh.limits, len(recs)-half, half)
		return len(recs), nil
	}
	sh.attempts++
	if p.exhausted(sh) {
		return len(recs), p.giveUp(ctx, sh, recs, "Unhandled")
	}
	p.stats.Retries++
	return len(recs), nil
}

func (p *StreamPoller) exhausted(sh *shard) bool {
	max := p.cfg.Settings.MaxRetryAttempts
	return max != eventsource.Forever && sh.attempts > max
}

func (p *StreamPoller) tooOld(recs []types.Record) int {
	age := p.cfg.Settings.MaxRecordAgeSeconds
	if age == eventsource.Forever {
		return 0
	}
	n := 0
	for _, r := range recs {
		if t := r.Dynamodb.ApproximateCreationDateTime; t == nil || time.Since(*t) <= time.Duration(age)*time.Second {
			break
		}
		n++
	}
	return n
}

func (p *StreamPoller) ack(sh *shard, last types.Record) {
	sh.checkpoint = aws.ToString(last.Dynamodb.SequenceNumber)
	sh.commits++
	sh.first = ""
	sh.attempts, sh.invokes = 0, 0
}

// discard hands recs to the on-failure destination and moves past them.
func (p *StreamPoller) discard(ctx context.Context, sh *shard, recs []types.Record, condition, functionError string) error {
	var f StreamFailure
	f.RequestContext.RequestID = fmt.Sprintf("%s-%s", sh.id, aws.ToString(recs[0].Dynamodb.SequenceNumber))
	f.RequestContext.FunctionArn = p.cfg.FunctionArn
	f.RequestContext.Condition = condition
	f.RequestContext.ApproximateInvokeCount = sh.invokes
	f.ResponseContext.StatusCode = 200
	f.ResponseContext.ExecutedVersion = "$LATEST"
	f.ResponseContext.FunctionError = functionError
	f.Version = "1.0"
	f.Timestamp = time.Now().UTC().Format(time.RFC3339Nano)
	f.BatchInfo.ShardID = sh.id
	f.BatchInfo.StartSequenceNumber = aws.ToString(recs[0].Dynamodb.SequenceNumber)
	f.BatchInfo.EndSequenceNumber = aws.ToString(recs[len(recs)-1].Dynamodb.SequenceNumber)
	f.BatchInfo.ApproximateArrivalOfFirstRecord = arrival(recs[0])
	f.BatchInfo.ApproximateArrivalOfLastRecord = arrival(recs[len(recs)-1])
	f.BatchInfo.BatchSize = len(recs)
	f.BatchInfo.StreamArn = p.cfg.StreamArn
	if p.cfg.OnFailure != nil {
		if err := p.cfg.OnFailure(ctx, f); err != nil {
			return fmt.Errorf("harness: on-failure destination for %s..%s: %w", f.BatchInfo.StartSequenceNumber, f.BatchInfo.EndSequenceNumber, err)
		}
	}
	p.cfg.Logger.LogAttrs(ctx, slog.LevelError, "stream records discarded",
		slog.String("shard", sh.id), slog.String("condition", condition), slog.Int("records", len(recs)),
		slog.String("start_sequence_number", f.BatchInfo.StartSequenceNumber), slog.String("end_sequence_number", f.BatchInfo.EndSequenceNumber))
	p.stats.Discarded += len(recs)
	p.stats.Failures = append(p.stats.Failures, f)
	p.ack(sh, recs[len(recs)-1])
	return nil
}

func arrival(r types.Record) string {
	if t := r.Dynamodb.ApproximateCreationDateTime; t != nil {
		return t.UTC().Format(time.RFC3339Nano)
	}
	return ""
}

// lowestFailure returns the index of the lowest reported sequence number, or
// an error (a whole-batch failure, as Lambda treats it) for an empty or
// unknown identifier.
func lowestFailure(recs []types.Record, fails []events.DynamoDBBatchItemFailure) (int, error) {
	index := make(map[string]int, len(recs))
	for i, r := range recs {
		index[aws.ToString(r.Dynamodb.SequenceNumber)] = i
	}
	lowest := len(recs)
	for _, f := range fails {
		i, ok := index[f.ItemIdentifier]
		if !ok {
			return -1, fmt.Errorf("harness: batch item failure %q is not a record of the batch", f.ItemIdentifier)
		}
		lowest = min(lowest, i)
	}
	return lowest, nil
}

func invokeStream(ctx context.Context, h StreamHandler, ev events.DynamoDBEvent) (resp events.DynamoDBEventResponse, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("harness: stream handler panicked: %v", r)
		}
	}()
	return h(ctx, ev)
}

// lambdaEvent renders records as the JSON Lambda sends and decodes it into
// the aws-lambda-go type, so handlers meet the same decoder as in Lambda.
func lambdaEvent(recs []types.Record, streamArn, region string) (events.DynamoDBEvent, error) {
	type change struct {
		ApproximateCreationDateTime int64          `json:"ApproximateCreationDateTime,omitempty"`
		Keys                        map[string]any `json:"Keys,omitempty"`
		NewImage                    map[string]any `json:"NewImage,omitempty"`
		OldImage                    map[string]any `json:"OldImage,omitempty"`
		SequenceNumber              string         `json:"SequenceNumber"`
		SizeBytes                   int64          `json:"SizeBytes"`
		StreamViewType              string         `json:"StreamViewType"`
	}
	type identity struct {
		Type        string `json:"type"`
		PrincipalID string `json:"principalId"`
	}
	type record struct {
		EventID        string    `json:"eventID"`
		EventName      string    `json:"eventName"`
		EventVersion   string    `json:"eventVersion"`
		EventSource    string    `json:"eventSource"`
		AWSRegion      string    `json:"awsRegion"`
		Dynamodb       change    `json:"dynamodb"`
		EventSourceARN string    `json:"eventSourceARN"`
		UserIdentity   *identity `json:"userIdentity,omitempty"`
	}
	out := struct {
		Records []record `json:"Records"`
	}{}
	for _, r := range recs {
		d := r.Dynamodb
		c := change{
			Keys: image(d.Keys), NewImage: image(d.NewImage), OldImage: image(d.OldImage),
			SequenceNumber: aws.ToString(d.SequenceNumber), SizeBytes: aws.ToInt64(d.SizeBytes),
			StreamViewType: string(d.StreamViewType),
		}
		if d.ApproximateCreationDateTime != nil {
			c.ApproximateCreationDateTime = d.ApproximateCreationDateTime.Unix()
		}
		rec := record{
			EventID: aws.ToString(r.EventID), EventName: string(r.EventName), EventVersion: aws.ToString(r.EventVersion),
			EventSource: "aws:dynamodb", AWSRegion: region, Dynamodb: c, EventSourceARN: streamArn,
		}
		if u := r.UserIdentity; u != nil {
			rec.UserIdentity = &identity{Type: aws.ToString(u.Type), PrincipalID: aws.ToString(u.PrincipalId)}
		}
		out.Records = append(out.Records, rec)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return events.DynamoDBEvent{}, fmt.Errorf("harness: encode stream event: %w", err)
	}
	var ev events.DynamoDBEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		return events.DynamoDBEvent{}, fmt.Errorf("harness: decode stream event: %w", err)
	}
	return ev, nil
}

func image(m map[string]types.AttributeValue) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = attrJSON(v)
	}
	return out
}

// attrJSON renders one attribute value in DynamoDB's JSON form.
func attrJSON(v types.AttributeValue) any {
	switch a := v.(type) {
	case *types.AttributeValueMemberS:
		return map[string]any{"S": a.Value}
	case *types.AttributeValueMemberN:
		return map[string]any{"N": a.Value}
	case *types.AttributeValueMemberB:
		return map[string]any{"B": a.Value}
	case *types.AttributeValueMemberBOOL:
		return map[string]any{"BOOL": a.Value}
	case *types.AttributeValueMemberNULL:
		return map[string]any{"NULL": a.Value}
	case *types.AttributeValueMemberSS:
		return map[string]any{"SS": a.Value}
	case *types.AttributeValueMemberNS:
		return map[string]any{"NS": a.Value}
	case *types.AttributeValueMemberBS:
		return map[string]any{"BS": a.Value}
	case *types.AttributeValueMemberL:
		l := make([]any, len(a.Value))
		for i, x := range a.Value {
			l[i] = attrJSON(x)
		}
		return map[string]any{"L": l}
	case *types.AttributeValueMemberM:
		return map[string]any{"M": image(a.Value)}
	}
	return map[string]any{"NULL": true}
}
