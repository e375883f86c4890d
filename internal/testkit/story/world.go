package story

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/awsclient"
	"github.com/oncepay/oncepay/internal/awsclient/dynamoclient"
	"github.com/oncepay/oncepay/internal/awsclient/snsclient"
	"github.com/oncepay/oncepay/internal/awsclient/sqsclient"
	"github.com/oncepay/oncepay/internal/awsclient/streamsclient"
	"github.com/oncepay/oncepay/internal/clock"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/ledger/migrations"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/psp"
	"github.com/oncepay/oncepay/internal/relay"
	"github.com/oncepay/oncepay/internal/resolver"
	"github.com/oncepay/oncepay/internal/testkit/albsign"
	"github.com/oncepay/oncepay/internal/testkit/faultnet"
	"github.com/oncepay/oncepay/internal/webhook"
)

// templateDB is the migrated database a world's ledger is cloned from
// (localcloud.TemplateDB; testenv keeps the same name).
const templateDB = "oncepay_tmpl"

// SeedTiming is the story's timing (docs/mechanism.md#seed-part-4): a 5 s
// server deadline, a 10 s client timeout, a 1 s clock margin and a one-hour
// key window. The deadline is never waited out in real time: the fake clock
// jumps over it.
func SeedTiming() config.Timing {
	return config.Timing{Deadline: 5 * time.Second, ClientTimeout: 10 * time.Second, Margin: time.Second, KeyWindow: time.Hour}
}

// Options shape a World. The zero value is the story's world.
type Options struct {
	// Timing of the API; zero: SeedTiming().
	Timing config.Timing
	// Balances are the merchants' balances before the first tap (USD, minor
	// units); nil: the story's m1 = 12,000.
	Balances map[string]int64
	// WithoutNotifRecord switches the worker to Branch N
	// (docs/mechanism.md#seed-part-7; tests only): no notif row, so every
	// delivery pushes.
	WithoutNotifRecord bool
	// DuplicateOnlyAcks and WithoutNotifSweep together are Branch R's
	// counterfactual (tests only): the story's worker, for which an inbox row
	// means done. With DuplicateOnlyAcks the worker never reads its
	// notification record back (the read finds no row, as for an event
	// processed before notifications were recorded), so a redelivery that
	// finds the inbox row acknowledges without pushing. With
	// WithoutNotifSweep the world's sweep watches a channel no row is on and
	// finishes nothing; Settle then never comes quiet while a notification
	// is PENDING.
	DuplicateOnlyAcks bool
	WithoutNotifSweep bool
	// WrapLedger wraps the API's ledger (tests only: the Branch X
	// counterfactual replaces the durable guard).
	WrapLedger func(api.Ledger) api.Ledger
	// WrapClaims wraps the API's key store, and WrapPublisher its outbox
	// publisher (tests only: outages and failed writes injected in front of
	// the real stores).
	WrapClaims    func(api.Claims) api.Claims
	WrapPublisher func(api.Publisher) api.Publisher
	// Logger receives the handlers' JSON logs; nil: discarded.
	Logger *slog.Logger
	// Serial makes the resolver and the worker do one payment or message
	// group at a time, so a randomized schedule replays the same way, and
	// lets a relay drain end at its first empty poll.
	Serial bool

	// Fault injection (the chaos runner). All nil/false: the parts talk to
	// the local cloud directly.

	// FaultNet puts a faultnet proxy between the handlers' ledger pool and
	// PostgreSQL (World.Net), so a test can make a commit ambiguous. Pool
	// stays direct: what a checker reads is never faulted.
	FaultNet bool
	// WrapRelaySQS wraps the relay's SQS client.
	WrapRelaySQS func(relay.SendMessageBatchAPI) relay.SendMessageBatchAPI
	// WrapPush wraps the worker's SNS client.
	WrapPush func(notify.PublishAPI) notify.PublishAPI
	// FreshPSPConnections gives every PSP call a connection of its own.
	// net/http silently resends a request carrying an Idempotency-Key when
	// a reused keep-alive connection closes before any reply byte, so
	// whether a lost reply is seen would depend on the connections earlier
	// calls left idle: a schedule would not be a function of its seed.
	FreshPSPConnections bool
	// ClaimsClient options apply to the key-record store's own DynamoDB
	// client (an HTTP client that fails, a retryer that knows it).
	ClaimsClient []func(*dynamodb.Options)
	// PSPConfig adjusts the PSP simulator's configuration after the world
	// has filled in its webhook endpoint (the chaos runner subscribes it to
	// every event type and holds refused deliveries for a flush).
	PSPConfig func(*pspsim.Config)

	// Across Regions (internal/testkit/regions): a world is one Region's
	// functions over that Region's stores. Zero values: the local cloud's
	// one Region, as everywhere else.

	// Region is the AWS Region the world's clients sign with (moto keeps
	// each Region's queues and topics apart); "": the environment's.
	Region string
	// DynamoEndpoint is the world's DynamoDB (another Region's DynamoDB
	// Local); "": the environment's.
	DynamoEndpoint string
	// LedgerDSN names the PostgreSQL cluster the world's ledger database is
	// cloned in (another Region's cluster); "": the environment's.
	LedgerDSN string
	// Clock and T0 are shared by the Regions of one system: one timeline.
	// nil: a clock of the world's own, starting now.
	Clock *clock.Fake
	T0    time.Time
	// Sim and SimURL are the PSP, one for every Region (the PSP is one
	// company's API, and its idempotency keys are global); nil: a
	// simulator of the world's own.
	Sim    *pspsim.Sim
	SimURL string
	// ClaimStream gives the claim table a stream, which a global table's
	// replicator reads (internal/localcloud/globaltable).
	ClaimStream bool
	// Homes routes the API's callers to their home Region; nil: none.
	Homes api.Homes
	// Adopt is the workers' inbox.Config.Adopt (across Regions).
	Adopt bool
}

// World is the whole payment path over the local cloud's real parts, each
// resource its own (a fresh ledger database, a key-record table, an outbox
// table and stream, a FIFO queue with a DLQ, a push topic watched by a
// queue), on a fake clock. The handlers are the production ones; only the
// clock, the crash points and the event-source mappings are played.
type World struct {
	Clock  *clock.Fake
	T0     time.Time // the tap: 0.00 on the event table
	Timing config.Timing
	Table  *Table

	// Pool reaches the ledger database directly; LedgerPool is the pool
	// the handlers use (through Net when Options.FaultNet is set, else Pool).
	Pool       *pgxpool.Pool
	LedgerPool *pgxpool.Pool
	Net        *faultnet.Proxy
	Ledger     *ledger.Store
	Claims     *idem.Store
	Dynamo     *dynamodb.Client
	SQS        *sqs.Client
	Sim        *pspsim.Sim
	SimURL     string // the simulator's base URL (its admin API is under /_sim/)
	PSP        *psp.Client
	Outbox     *outbox.Publisher
	Sweeper    *outbox.Sweeper
	API        *api.Handler
	Webhook    *webhook.Handler
	Stream     *harness.StreamPoller
	Worker     *inbox.Worker
	// Notifs is the worker function's sweep schedule's work: the PENDING
	// notifications a failed push left (Settle runs it each round).
	Notifs *inbox.NotifSweeper
	Queue  *harness.QueuePoller
	Pushes *harness.PushQueue
	Phone  *harness.Phone
	EMF    *SyncBuffer

	// PushTopic is the world's push topic, for more subscribers (a phone).
	PushTopic string

	// Region is the Region the world's clients sign with; Streams reads its
	// DynamoDB's streams; ClaimTable is its claim table's name and
	// LedgerDSN its ledger database's (internal/testkit/regions
	// replicates both).
	Region     string
	Streams    *dynamodbstreams.Client
	ClaimTable string
	LedgerDSN  string

	// RelayCrashes is how many of the next relay invocations crash after
	// their messages were sent and before the batch is acknowledged.
	RelayCrashes atomic.Int32
	// sentinels counts RelayCaughtUp's markers; sentinelDone is the last
	// one a relay invocation acknowledged.
	sentinels    int64
	sentinelDone atomic.Int64
	outboxTable  string
	// Redriven counts the messages Settle moved back from the DLQ.
	Redriven atomic.Int64
	// OnPSP, when set, sees every PSP call as it returns (the story uses it
	// to let the fake clock show the time a lost reply cost).
	OnPSP func(key string, err error)

	log     *slog.Logger
	closers []func()
	serial  bool
	dlqURL  string
	// queueURL is the events queue the relay sends to; queueArn its ARN.
	queueURL string
	queueArn string
	// notifier is the worker's push sender.
	notifier *notify.Notifier
	// visibility is the events queue's visibility timeout: a receive whose
	// answer never reached the poller (a connection the emulator dropped
	// under load, retried by the SDK) leaves its messages invisible that
	// long, and Expire cannot release handles it never saw.
	visibility time.Duration
	adopt      bool // inbox.Config.Adopt of every worker of the world

	// The crash points are read at every call, so a scenario can set and
	// clear them between steps.
	hooksMu      sync.Mutex
	hookAPI      api.Hooks
	hookResolver resolver.Hooks
	hookWorker   inbox.Hooks

	pushMu  sync.Mutex
	pushLog []notify.Data
}

// SyncBuffer is a goroutine-safe sink for EMF metric lines.
type SyncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// Sum sums an EMF metric over everything written so far.
func (b *SyncBuffer) Sum(name string) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return metrics.Sum(b.buf, name)
}

// ErrUnavailable means the local cloud is not there (run `make up`).
var ErrUnavailable = errors.New("story: local cloud unavailable")

// New builds a World on the local cloud named by .local/env. Close removes
// everything it created.
func New(ctx context.Context, o Options) (w *World, err error) {
	env, err := localenv.Load()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if err := env.Export(); err != nil {
		return nil, err
	}
	if o.Timing == (config.Timing{}) {
		o.Timing = SeedTiming()
	}
	if o.Balances == nil {
		o.Balances = map[string]int64{"m1": 12000}
	}
	// The fake clock starts at the real time, so the ledger's own now()
	// (created_at, the resolver's key window) and ours agree.
	t0 := time.Now().UTC().Truncate(time.Second)
	fake := clock.NewFake(t0)
	if o.Clock != nil {
		fake, t0 = o.Clock, o.T0
	}
	quiet := slog.New(slog.NewJSONHandler(io.Discard, nil))
	w = &World{Clock: fake, T0: t0, Timing: o.Timing, EMF: &SyncBuffer{}, Phone: harness.NewPhone(), log: o.Logger, serial: o.Serial}
	if w.log == nil {
		w.log = quiet
	}
	w.Table = &Table{clock: w.Clock, t0: t0}
	// The world being built, kept apart from the named result: a failed
	// step returns nil, and closing that would panic instead of cleaning up.
	built := w
	defer func() {
		if err != nil {
			built.Close()
		}
	}()

	var ledgerDSN string
	ledgerBase := env.Get(stackenv.LedgerDSN)
	if o.LedgerDSN != "" {
		ledgerBase = o.LedgerDSN
	}
	if w.Pool, ledgerDSN, err = w.newLedger(ctx, ledgerBase); err != nil {
		return nil, err
	}
	w.LedgerPool = w.Pool
	w.LedgerDSN = ledgerDSN
	if o.FaultNet {
		if w.LedgerPool, err = w.faultyPool(ctx, ledgerDSN); err != nil {
			return nil, err
		}
	}
	for m, b := range o.Balances {
		if _, err := w.Pool.Exec(ctx, `INSERT INTO merchant_balances (merchant_id, currency, balance) VALUES ($1, 'USD', $2)`, m, b); err != nil {
			return nil, fmt.Errorf("story: seed %s's balance: %w", m, err)
		}
	}
	w.Ledger = ledger.New(w.LedgerPool)

	cfg, err := awsclient.Config(ctx)
	if err != nil {
		return nil, fmt.Errorf("story: aws config: %w", err)
	}
	if o.Region != "" {
		cfg.Region = o.Region
	}
	w.Region = cfg.Region
	var ddbOpts []func(*dynamodb.Options)
	var streamOpts []func(*dynamodbstreams.Options)
	if o.DynamoEndpoint != "" {
		ddbOpts = append(ddbOpts, func(d *dynamodb.Options) { d.BaseEndpoint = aws.String(o.DynamoEndpoint) })
		streamOpts = append(streamOpts, func(d *dynamodbstreams.Options) { d.BaseEndpoint = aws.String(o.DynamoEndpoint) })
	}
	w.Streams = streamsclient.New(cfg, streamOpts...)
	w.Dynamo, w.SQS = dynamoclient.New(cfg, ddbOpts...), sqsclient.New(cfg)
	snsClient := snsclient.New(cfg)
	claimTable, err := w.newTable(ctx, "pk", o.ClaimStream)
	if err != nil {
		return nil, err
	}
	w.ClaimTable = claimTable
	claimsDB := w.Dynamo
	if len(o.ClaimsClient) > 0 {
		claimsDB = dynamoclient.New(cfg, append(ddbOpts, o.ClaimsClient...)...)
	}
	w.Claims = idem.NewStore(claimsDB, claimTable)
	outboxTable, err := w.newTable(ctx, "event_id", true)
	if err != nil {
		return nil, err
	}
	w.outboxTable = outboxTable
	streamArn, err := w.streamArn(ctx, outboxTable)
	if err != nil {
		return nil, err
	}
	if w.Outbox, err = outbox.NewPublisher(w.Dynamo, outbox.Config{Table: outboxTable, Logger: quiet}); err != nil {
		return nil, err
	}
	if w.Sweeper, err = outbox.NewSweeper(w.Outbox, w.LedgerPool, outbox.SweepConfig{
		// On the database's clock, which the fake one does not move: no API
		// here races the sweep, and a re-drive the relay gave up on again
		// is re-driven within quiescence, not five real minutes later.
		Logger: quiet, Grace: time.Millisecond, RedriveAfter: 50 * time.Millisecond, RedriveMax: time.Second,
	}); err != nil {
		return nil, err
	}

	// The PSP simulator and the webhook endpoint it delivers to.
	secret := "whsec_story_" + randomID(8)
	var hook atomic.Pointer[webhook.Handler]
	hookSrv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if h := hook.Load(); h != nil {
			h.ServeHTTP(rw, r)
			return
		}
		http.NotFound(rw, r)
	}))
	w.closers = append(w.closers, hookSrv.Close)
	simCfg := pspsim.Config{Logger: quiet, WebhookURL: hookSrv.URL + webhook.Path, WebhookSecret: secret, ManualWebhooks: true}
	if o.PSPConfig != nil {
		o.PSPConfig(&simCfg)
	}
	if err := simCfg.Validate(); err != nil {
		return nil, fmt.Errorf("story: %w", err)
	}
	if o.Sim != nil {
		w.Sim, w.SimURL = o.Sim, o.SimURL
	} else {
		w.Sim = pspsim.New(simCfg)
		simSrv := httptest.NewServer(w.Sim)
		w.SimURL = simSrv.URL
		w.closers = append(w.closers, func() { simSrv.Close(); w.Sim.Close() })
	}
	if w.PSP, err = psp.New(psp.Config{APIKey: "sk_test_story", BaseURL: w.SimURL, Logger: quiet,
		HTTPClient: &http.Client{Timeout: 30 * time.Second, Transport: pspWire{w: w, next: pspTransport(o.FreshPSPConnections)}}}); err != nil {
		return nil, err
	}
	wh, err := webhook.New(webhook.Config{Secret: secret}, webhook.Deps{
		Ledger: w.Ledger, Publisher: w.Outbox, Clock: w.Clock, Log: w.log, Metrics: metrics.New(w.EMF, "webhook"),
	})
	if err != nil {
		return nil, err
	}
	w.Webhook = wh
	hook.Store(wh)

	var led api.Ledger = w.Ledger
	if o.WrapLedger != nil {
		led = o.WrapLedger(led)
	}
	var claims api.Claims = w.Claims
	if o.WrapClaims != nil {
		claims = o.WrapClaims(claims)
	}
	var pub api.Publisher = w.Outbox
	if o.WrapPublisher != nil {
		pub = o.WrapPublisher(pub)
	}
	w.API = api.New(api.Deps{
		Claims: claims, Ledger: led, PSP: w.PSP, Publisher: pub, Clock: w.Clock, Timing: w.Timing,
		Log: w.log, Metrics: metrics.New(w.EMF, "api"), Hooks: w.apiHooks(),
		ALB: albsign.Default.Verifier(w.Clock.Now), Homes: o.Homes,
	})

	// Messaging: the relay on the outbox stream, the FIFO queue, the worker,
	// the push topic and a queue that watches it (the phone's view).
	settings := eventsource.Default()
	settings.Worker.VisibilityTimeout = 30 * time.Second // the story's: the redelivery comes 30 s after the crash
	w.visibility = settings.Worker.VisibilityTimeout
	q, err := w.newQueue(ctx, "t-story-"+randomID(6), true, settings.Worker.VisibilityTimeout, settings.Worker.MaxReceiveCount)
	if err != nil {
		return nil, err
	}
	w.dlqURL, w.queueURL = q.dlqURL, q.url
	topic, watch, err := w.newTopic(ctx, snsClient)
	if err != nil {
		return nil, err
	}
	w.Pushes = harness.NewPushQueue(w.SQS, watch)
	w.PushTopic = topic
	var relaySQS relay.SendMessageBatchAPI = w.SQS
	if o.WrapRelaySQS != nil {
		relaySQS = o.WrapRelaySQS(relaySQS)
	}
	r, err := relay.New(relaySQS, relay.Config{QueueURL: q.url, Logger: quiet, Metrics: metrics.New(w.EMF, "relay")})
	if err != nil {
		return nil, err
	}
	sc := harness.StreamConfig{StreamArn: streamArn, Settings: settings.Relay, Logger: quiet}
	if o.Serial {
		// Many short drains: one empty poll ends one. Settle's in-transit
		// check, not the drain's patience, covers a lagging stream.
		sc.QuietPolls = 1
	}
	if w.Stream, err = harness.NewStreamPoller(w.Streams, w.relayHandler(r.Handle), sc); err != nil {
		return nil, err
	}
	m := metrics.New(w.EMF, "worker")
	var pushSNS notify.PublishAPI = snsClient
	if o.WrapPush != nil {
		pushSNS = o.WrapPush(pushSNS)
	}
	n, err := notify.New(pushSNS, nil, notify.Config{TopicArn: topic, Logger: quiet, Metrics: m})
	if err != nil {
		return nil, err
	}
	groups := 0 // the worker's default
	if o.Serial {
		groups = 1
	}
	var workerDB inbox.DB = w.LedgerPool
	if o.DuplicateOnlyAcks {
		workerDB = unreadNotifs{w.LedgerPool}
	}
	if w.Worker, err = inbox.New(workerDB, n, inbox.Config{
		MaxReceiveCount: settings.Worker.MaxReceiveCount, Logger: quiet, Metrics: m, Hooks: w.workerHooks(),
		WithoutNotifRecord: o.WithoutNotifRecord, GroupConcurrency: groups, RetryAfter: 10 * time.Millisecond, Adopt: o.Adopt,
	}); err != nil {
		return nil, err
	}
	// Backoff in milliseconds: the fake clock does not move the database's,
	// which the sweep's grace and backoff are measured on.
	sweepChannel := "" // the worker's: push
	if o.WithoutNotifSweep {
		sweepChannel = "branch-r-no-sweep"
	}
	if w.Notifs, err = inbox.NewNotifSweeper(w.LedgerPool, n, inbox.SweepConfig{
		Channel: sweepChannel, Logger: quiet, Metrics: m, Grace: time.Millisecond, Base: 10 * time.Millisecond, Max: 200 * time.Millisecond, Lease: time.Second,
	}); err != nil {
		return nil, err
	}
	if w.Queue, err = harness.NewQueuePoller(w.SQS, w.Worker.Handle, harness.QueueConfig{
		QueueURL: q.url, QueueArn: q.arn, Settings: settings.Worker, Logger: quiet,
	}); err != nil {
		return nil, err
	}
	w.queueArn, w.notifier, w.adopt = q.arn, n, o.Adopt
	return w, nil
}

// ConsumerOn returns the world's worker over another ledger, consuming the
// world's events queue and pushing to its topic: this Region's functions
// after a failover, when the ledger's writer endpoint names the Region that
// took over (Aurora Global Database's global writer endpoint).
func (w *World) ConsumerOn(db *pgxpool.Pool) (*harness.QueuePoller, error) {
	quiet := slog.New(slog.NewJSONHandler(io.Discard, nil))
	settings := eventsource.Default()
	settings.Worker.VisibilityTimeout = w.visibility
	worker, err := inbox.New(db, w.notifier, inbox.Config{
		MaxReceiveCount: settings.Worker.MaxReceiveCount, Logger: quiet, Metrics: metrics.New(w.EMF, "worker"),
		RetryAfter: 10 * time.Millisecond, Adopt: w.adopt,
	})
	if err != nil {
		return nil, err
	}
	return harness.NewQueuePoller(w.SQS, worker.Handle, harness.QueueConfig{
		QueueURL: w.queueURL, QueueArn: w.queueArn, Settings: settings.Worker, Logger: quiet,
	})
}

// Close removes everything New created, newest first.
func (w *World) Close() {
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
	w.closers = nil
}

// At returns the instant s seconds after the tap.
func (w *World) At(s float64) time.Time {
	return w.T0.Add(time.Duration(s * float64(time.Second)))
}

// SetClock moves the fake clock to s seconds after the tap (never back).
func (w *World) SetClock(s float64) {
	if t := w.At(s); t.After(w.Clock.Now()) {
		w.Clock.Set(t)
	}
}

// Resolver builds a resolver over the world's parts with a cap high enough
// not to slow a run down.
func (w *World) Resolver() (*resolver.Resolver, error) { return w.ResolverWith(nil) }

// ResolverWith is Resolver with its dependencies adjusted by adjust (the
// Regions' counterfactual switches: another PSP key, another event id).
func (w *World) ResolverWith(adjust func(*resolver.Deps)) (*resolver.Resolver, error) {
	c := resolver.DefaultConfig()
	c.Margin = w.Timing.Margin
	c.PSPRate = 1000
	c.Limit = 1000
	c.Concurrency = 8
	if w.serial {
		c.Concurrency = 1
	}
	d := resolver.Deps{
		Ledger: w.Ledger, PSP: w.PSP, Claims: w.Claims, Publisher: w.Outbox, Sweeper: w.Sweeper, Clock: w.Clock,
		Log: w.log, Metrics: metrics.New(w.EMF, "resolver"), Hooks: w.resolverHooks(),
	}
	if adjust != nil {
		adjust(&d)
	}
	return resolver.New(c, d)
}

// Pay sends POST /payments arriving at the given instant.
func (w *World) Pay(ctx context.Context, caller, key, body string, arrival time.Time) api.Response {
	return w.call(ctx, http.MethodPost, "/payments", caller, key, body, arrival)
}

// Resolve sends POST /payments/{key}/resolve ("did it go through?"), now.
func (w *World) Resolve(ctx context.Context, caller, key string) api.Response {
	return w.call(ctx, http.MethodPost, "/payments/"+url.PathEscape(key)+"/resolve", caller, "", "", w.Clock.Now())
}

// Refund sends POST /payments/{key}/refund with the refund's own
// Idempotency-Key, now.
func (w *World) Refund(ctx context.Context, caller, key, refundKey string) api.Response {
	return w.call(ctx, http.MethodPost, "/payments/"+url.PathEscape(key)+"/refund", caller, refundKey, "", w.Clock.Now())
}

func (w *World) call(ctx context.Context, method, path, caller, key, body string, arrival time.Time) api.Response {
	h := http.Header{}
	if key != "" {
		h.Set("Idempotency-Key", key)
	}
	h.Set("Content-Type", "application/json")
	return w.API.Serve(ctx, api.Request{Method: method, Path: path, Headers: h, Body: []byte(body), Caller: caller, Arrival: arrival})
}

// CollectPushes moves what the push topic delivered so far onto the phone
// and returns it.
func (w *World) CollectPushes(ctx context.Context) ([]notify.Data, error) {
	got, err := w.Pushes.Collect(ctx)
	w.deliver(got)
	return got, err
}

// AwaitPushes waits up to wait (whole seconds) for a push to land, then
// collects the rest as CollectPushes does. A test that expects no push uses
// it, so a push still on its way is counted, not missed.
func (w *World) AwaitPushes(ctx context.Context, wait time.Duration) ([]notify.Data, error) {
	got, err := w.Pushes.Await(ctx, wait)
	w.deliver(got)
	if err != nil {
		return got, err
	}
	rest, err := w.CollectPushes(ctx)
	return append(got, rest...), err
}

// deliver puts pushes onto the phone and into the push log.
func (w *World) deliver(got []notify.Data) {
	w.Phone.Receive(got...)
	w.pushMu.Lock()
	w.pushLog = append(w.pushLog, got...)
	w.pushMu.Unlock()
}

// PushLog returns every push collected so far, in arrival order.
func (w *World) PushLog() []notify.Data {
	w.pushMu.Lock()
	defer w.pushMu.Unlock()
	return append([]notify.Data(nil), w.pushLog...)
}

// Charges returns the simulator's charges under a PSP key ("": all).
func (w *World) Charges(key string) []pspsim.Charge {
	var out []pspsim.Charge
	for _, c := range w.Sim.Charges() {
		if key == "" || c.IdempotencyKey == key {
			out = append(out, c)
		}
	}
	return out
}

// Int runs a query that returns one integer.
func (w *World) Int(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := w.Pool.QueryRow(ctx, query, args...).Scan(&n)
	return n, err
}

// Balance is a merchant's USD balance.
func (w *World) Balance(ctx context.Context, merchant string) (int64, error) {
	return w.Int(ctx, `SELECT COALESCE((SELECT balance FROM merchant_balances WHERE merchant_id = $1 AND currency = 'USD'), 0)`, merchant)
}

// PaymentID is the derived payment id of (caller, key).
func PaymentID(caller, key string) string { return ids.PaymentID(ids.Scope(caller, key)) }

// --- crash points, read at call time ---

func (w *World) apiHooks() api.Hooks {
	get := func(pick func(api.Hooks) func(context.Context) error) func(context.Context) error {
		return func(ctx context.Context) error {
			w.hooksMu.Lock()
			f := pick(w.hookAPI)
			w.hooksMu.Unlock()
			if f == nil {
				return nil
			}
			return f(ctx)
		}
	}
	return api.Hooks{
		AfterClaim:         get(func(h api.Hooks) func(context.Context) error { return h.AfterClaim }),
		AfterPendingInsert: get(func(h api.Hooks) func(context.Context) error { return h.AfterPendingInsert }),
		AfterPSPReply:      get(func(h api.Hooks) func(context.Context) error { return h.AfterPSPReply }),
		BeforeComplete:     get(func(h api.Hooks) func(context.Context) error { return h.BeforeComplete }),
	}
}

// SetAPIHooks replaces the API's crash points.
func (w *World) SetAPIHooks(h api.Hooks) {
	w.hooksMu.Lock()
	defer w.hooksMu.Unlock()
	w.hookAPI = h
}

// SetWorkerHooks replaces the worker's crash points.
func (w *World) SetWorkerHooks(h inbox.Hooks) {
	w.hooksMu.Lock()
	defer w.hooksMu.Unlock()
	w.hookWorker = h
}

// SetResolverHooks replaces the resolver's crash point.
func (w *World) SetResolverHooks(h resolver.Hooks) {
	w.hooksMu.Lock()
	defer w.hooksMu.Unlock()
	w.hookResolver = h
}

func (w *World) workerHooks() inbox.Hooks {
	get := func(pick func(inbox.Hooks) func(context.Context, event.Event) error) func(context.Context, event.Event) error {
		return func(ctx context.Context, e event.Event) error {
			w.hooksMu.Lock()
			f := pick(w.hookWorker)
			w.hooksMu.Unlock()
			if f == nil {
				return nil
			}
			return f(ctx, e)
		}
	}
	return inbox.Hooks{
		BeforeEvent: get(func(h inbox.Hooks) func(context.Context, event.Event) error { return h.BeforeEvent }),
		AfterCommit: get(func(h inbox.Hooks) func(context.Context, event.Event) error { return h.AfterCommit }),
		AfterPush:   get(func(h inbox.Hooks) func(context.Context, event.Event) error { return h.AfterPush }),
	}
}

func (w *World) resolverHooks() resolver.Hooks {
	return resolver.Hooks{AfterPSPAnswer: func(ctx context.Context, pid string) error {
		w.hooksMu.Lock()
		f := w.hookResolver.AfterPSPAnswer
		w.hooksMu.Unlock()
		if f == nil {
			return nil
		}
		return f(ctx, pid)
	}}
}

// errRelayCrash is the relay dying after SendMessageBatch returned and
// before Lambda recorded the batch as done: the stream hands the same
// records over again.
var errRelayCrash = errors.New("story: relay died before its batch was acknowledged")

func (w *World) relayHandler(h harness.StreamHandler) harness.StreamHandler {
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		// RelayCaughtUp's markers are the test's, not events: the relay
		// never sees them (as a Lambda filter would keep them out).
		var marker int64
		kept := ev.Records[:0:0]
		for _, r := range ev.Records {
			if n, ok := sentinelOf(r); ok {
				marker = max(marker, n)
				continue
			}
			kept = append(kept, r)
		}
		if len(kept) == 0 {
			w.markerDone(marker)
			return events.DynamoDBEventResponse{}, nil
		}
		ev.Records = kept
		resp, err := h(ctx, ev)
		if err == nil && len(resp.BatchItemFailures) == 0 {
			for {
				n := w.RelayCrashes.Load()
				if n <= 0 {
					break
				}
				if w.RelayCrashes.CompareAndSwap(n, n-1) {
					return events.DynamoDBEventResponse{}, errRelayCrash
				}
			}
			w.markerDone(marker)
		}
		return resp, err
	}
}

// markerDone records that a relay invocation acknowledged marker (0: none
// in its batch). Markers are acknowledged in order; the step reads only the
// highest.
func (w *World) markerDone(marker int64) {
	if marker > w.sentinelDone.Load() {
		w.sentinelDone.Store(marker)
	}
}

const sentinelPrefix = "relay-caught-up#"

func sentinelOf(r events.DynamoDBEventRecord) (int64, bool) {
	k, ok := r.Change.Keys["event_id"]
	if !ok || k.DataType() != events.DataTypeString {
		return 0, false
	}
	rest, found := strings.CutPrefix(k.String(), sentinelPrefix)
	if !found {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	return n, err == nil
}

// RelayCaughtUp runs the relay until it has taken every stream record
// written before the call, and returns how many it acknowledged. A single
// poll is not enough to say so: DynamoDB Local's stream can hand over part
// of what was written (a record not yet readable under load, a shard that
// rolled over), so a schedule's trace would be the machine's, not its
// seed's. It writes a marker item to the outbox table and polls until a
// relay invocation has acknowledged the marker; the records the checkpoint
// passed on the way are the same whatever the batches were.
//
// Not safe for concurrent use (the chaos runner's steps run one at a time).
// A cost the trace's determinism pays: a crashed batch is redelivered inside
// the same step, so no other step runs between a relay's send and its resend.
func (w *World) RelayCaughtUp(ctx context.Context) (int, error) {
	w.sentinels++
	id := w.sentinels
	if _, err := w.Dynamo.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(w.outboxTable),
		Item: map[string]ddbtypes.AttributeValue{"event_id": &ddbtypes.AttributeValueMemberS{Value: sentinelPrefix + strconv.FormatInt(id, 10)}}}); err != nil {
		return 0, fmt.Errorf("story: relay marker: %w", err)
	}
	before := w.Stream.Stats().Acked
	// A minute, not a step count: a batch that keeps failing steps with
	// no pause, and a loaded machine's polls are slow. Only a relay whose
	// every invocation fails (the SQS outage step uses Drain) ends here.
	for end := time.Now().Add(time.Minute); time.Now().Before(end); {
		n, err := w.Stream.Step(ctx)
		if err != nil {
			return w.Stream.Stats().Acked - before, err
		}
		if w.sentinelDone.Load() >= id {
			return w.Stream.Stats().Acked - before - 1, nil
		}
		if n == 0 {
			select {
			case <-ctx.Done():
				return w.Stream.Stats().Acked - before, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return w.Stream.Stats().Acked - before, fmt.Errorf("story: the relay never reached marker %d", id)
}

func pspTransport(fresh bool) http.RoundTripper {
	if !fresh {
		return http.DefaultTransport
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableKeepAlives = true
	return t
}

// pspWire sees every PSP call as it returns.
type pspWire struct {
	w    *World
	next http.RoundTripper
}

func (p pspWire) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := p.next.RoundTrip(r)
	if f := p.w.OnPSP; f != nil {
		f(r.Header.Get("Idempotency-Key"), err)
	}
	return resp, err
}

// --- resources of the world's own ---

func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// faultyPool is a second pool on the world's ledger database that reaches
// it through a faultnet proxy (World.Net).
func (w *World) faultyPool(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("story: parse ledger dsn: %w", err)
	}
	if w.Net, err = faultnet.Listen(u.Host, w.log); err != nil {
		return nil, err
	}
	w.closers = append(w.closers, func() { _ = w.Net.Close() })
	u.Host = w.Net.Addr()
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("story: proxied ledger pool: %w", err)
	}
	w.closers = append(w.closers, pool.Close)
	return pool, nil
}

// newLedger clones a fresh database from the migrated template, applies any
// newer migration, and drops it on Close. It returns a pool and the DSN.
func (w *World) newLedger(ctx context.Context, dsn string) (*pgxpool.Pool, string, error) {
	if dsn == "" {
		return nil, "", fmt.Errorf("%w: %s not set", ErrUnavailable, stackenv.LedgerDSN)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, "", fmt.Errorf("story: parse ledger dsn: %w", err)
	}
	admin := *u
	admin.Path = "/postgres"
	name := "story_" + randomID(6)
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, admin.String())
	if err != nil {
		return nil, "", fmt.Errorf("%w: PostgreSQL: %v", ErrUnavailable, err)
	}
	defer conn.Close(cctx)
	for {
		// Cloning needs the template to have no other sessions; a parallel
		// clone holds it for a moment.
		_, err = conn.Exec(cctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+templateDB)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || cctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return nil, "", fmt.Errorf("story: create ledger database: %w", err)
	}
	w.closers = append(w.closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin.String())
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	own := *u
	own.Path = "/" + name
	if _, err := migrations.Apply(ctx, own.String()); err != nil {
		return nil, "", fmt.Errorf("story: migrate: %w", err)
	}
	pool, err := pgxpool.New(ctx, own.String())
	if err != nil {
		return nil, "", fmt.Errorf("story: ledger pool: %w", err)
	}
	w.closers = append(w.closers, pool.Close)
	return pool, own.String(), nil
}

// newTable creates a table keyed by pk (on-demand). The claim table has no
// TTL, so an expired key record stays present and the read path's own
// expiry check is what forgets it; the outbox table has a NEW_IMAGE stream.
func (w *World) newTable(ctx context.Context, pk string, stream bool) (string, error) {
	name := "t-story-" + randomID(6)
	in := &dynamodb.CreateTableInput{
		TableName:            &name,
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String(pk), KeyType: ddbtypes.KeyTypeHash}},
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String(pk), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		BillingMode:          ddbtypes.BillingModePayPerRequest,
	}
	if stream {
		in.StreamSpecification = &ddbtypes.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: ddbtypes.StreamViewTypeNewImage}
	}
	if _, err := w.Dynamo.CreateTable(ctx, in); err != nil {
		return "", fmt.Errorf("%w: create table: %v", ErrUnavailable, err)
	}
	w.closers = append(w.closers, func() {
		_, _ = w.Dynamo.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name})
	})
	return name, nil
}

func (w *World) streamArn(ctx context.Context, table string) (string, error) {
	out, err := w.Dynamo.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table})
	if err != nil {
		return "", fmt.Errorf("story: describe %s: %w", table, err)
	}
	return aws.ToString(out.Table.LatestStreamArn), nil
}

type queue struct{ url, arn, dlqURL string }

// RedriveDLQ moves every message in the events queue's DLQ back to the
// queue, as an operator does when the DLQ-depth alarm fires (a message
// lands there after five failed deliveries). The copy gets a dedup id of its
// own so the queue's window cannot drop it; the worker's inbox is the guard.
// It returns how many it moved.
func (w *World) RedriveDLQ(ctx context.Context) (int, error) {
	moved := 0
	for {
		out, err := w.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: &w.dlqURL, MaxNumberOfMessages: 10,
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
		})
		if err != nil {
			return moved, fmt.Errorf("story: receive from the DLQ: %w", err)
		}
		if len(out.Messages) == 0 {
			return moved, nil
		}
		for _, m := range out.Messages {
			group := m.Attributes[string(sqstypes.MessageSystemAttributeNameMessageGroupId)]
			dedup := m.Attributes[string(sqstypes.MessageSystemAttributeNameMessageDeduplicationId)] + "#redrive-" + randomID(4)
			if _, err := w.SQS.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &w.queueURL, MessageBody: m.Body,
				MessageGroupId: &group, MessageDeduplicationId: &dedup, MessageAttributes: m.MessageAttributes}); err != nil {
				return moved, fmt.Errorf("story: redrive: %w", err)
			}
			if _, err := w.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &w.dlqURL, ReceiptHandle: m.ReceiptHandle}); err != nil {
				return moved, fmt.Errorf("story: delete from the DLQ: %w", err)
			}
			moved++
		}
	}
}

// dlqDepth is how many messages the events queue's DLQ holds (-1: unknown).
func (w *World) dlqDepth(ctx context.Context) int {
	out, err := w.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: &w.dlqURL, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
	if err != nil {
		return -1
	}
	return n
}

// newQueue creates a queue; a FIFO one (content-based dedup off, like the
// template's) gets a FIFO DLQ taking a message after maxReceive receives.
func (w *World) newQueue(ctx context.Context, base string, fifo bool, visibility time.Duration, maxReceive int) (queue, error) {
	attrs := map[string]string{}
	name := base
	if fifo {
		dlq, err := w.createQueue(ctx, base+"-dlq.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "false"})
		if err != nil {
			return queue{}, err
		}
		policy, _ := json.Marshal(map[string]string{"deadLetterTargetArn": dlq.arn, "maxReceiveCount": strconv.Itoa(maxReceive)})
		attrs = map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "false",
			"VisibilityTimeout": strconv.Itoa(int(visibility / time.Second)), "RedrivePolicy": string(policy)}
		name = base + ".fifo"
		q, err := w.createQueue(ctx, name, attrs)
		q.dlqURL = dlq.url
		return q, err
	}
	if visibility > 0 {
		attrs["VisibilityTimeout"] = strconv.Itoa(int(visibility / time.Second))
	}
	return w.createQueue(ctx, name, attrs)
}

// WatchVisibility is the phone's queue's visibility timeout: short, so a
// push whose receive was lost on the wire is seen again within seconds.
const WatchVisibility = 2 * time.Second

func (w *World) createQueue(ctx context.Context, name string, attrs map[string]string) (queue, error) {
	out, err := w.SQS.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &name, Attributes: attrs})
	if err != nil {
		return queue{}, fmt.Errorf("%w: create queue %s: %v", ErrUnavailable, name, err)
	}
	u := aws.ToString(out.QueueUrl)
	w.closers = append(w.closers, func() { _, _ = w.SQS.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: &u}) })
	qa, err := w.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: &u, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return queue{}, fmt.Errorf("story: arn of %s: %w", name, err)
	}
	return queue{url: u, arn: qa.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]}, nil
}

// newTopic creates the push topic and a standard queue subscribed to it with
// raw delivery: every push lands there for the phone.
func (w *World) newTopic(ctx context.Context, c *sns.Client) (topic, watchURL string, err error) {
	name := "t-story-push-" + randomID(6)
	out, err := c.CreateTopic(ctx, &sns.CreateTopicInput{Name: &name})
	if err != nil {
		return "", "", fmt.Errorf("%w: create topic: %v", ErrUnavailable, err)
	}
	topic = aws.ToString(out.TopicArn)
	w.closers = append(w.closers, func() { _, _ = c.DeleteTopic(context.Background(), &sns.DeleteTopicInput{TopicArn: &topic}) })
	watch, err := w.newQueue(ctx, "t-story-watch-"+randomID(6), false, WatchVisibility, 0)
	if err != nil {
		return "", "", err
	}
	if _, err := c.Subscribe(ctx, &sns.SubscribeInput{TopicArn: &topic, Protocol: aws.String("sqs"), Endpoint: &watch.arn,
		Attributes: map[string]string{"RawMessageDelivery": "true"}}); err != nil {
		return "", "", fmt.Errorf("story: subscribe: %w", err)
	}
	return topic, watch.url, nil
}

// unreadNotifs is the worker's DB under Options.DuplicateOnlyAcks: every
// read of the notification record finds no row; everything else, and every
// write, reaches the ledger.
type unreadNotifs struct{ inbox.DB }

func (d unreadNotifs) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if strings.Contains(sql, "FROM notif") {
		return noRow{}
	}
	return d.DB.QueryRow(ctx, sql, args...)
}

type noRow struct{}

func (noRow) Scan(...any) error { return pgx.ErrNoRows }
