package oncepay

import (
	"sort"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awselasticloadbalancingv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/interfaces/interfacesawscloudwatch"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Metrics the handlers emit (EMF, namespace stackenv.MetricsNamespace, dimension
// Function) that the alarms watch.
const (
	// MetricUnknownOverHorizon: the resolver's count of UNKNOWN payments older
	// than its horizon — money in doubt that replays have not settled.
	MetricUnknownOverHorizon = "UnknownOverHorizon"
	// MetricKeyStoreDegraded: the api carried on without the claim table.
	MetricKeyStoreDegraded = "KeyStoreDegraded"
	// MetricHomeUnavailable: the api refused a request whose caller's home
	// it could not read, or whose home Region it has no URL for (across
	// Regions, docs/regions.md).
	MetricHomeUnavailable = "HomeUnavailable"
	// MetricResolveLostRow: a resolve found the PSP holding a payment the
	// ledger does not know: lost with a failed Region's last writes.
	MetricResolveLostRow = "ResolveLostRow"
	// MetricAdoptionRefused: the home inbox refused a failed Region's
	// leftover SUCCEEDED copy (the home row FAILED, VOID or other money):
	// a charge the ledger does not back, for the reconciliation to refund.
	MetricAdoptionRefused = "AdoptionRefused"
	// MetricHomeLedgerReadOnly: the resolver found its ledger read-only in
	// the Region that homes the callers (across Regions).
	MetricHomeLedgerReadOnly = "HomeLedgerReadOnly"
	// MetricClaimsSweepFailed: the resolver's sweep of the MRSC claim table
	// (which has no TTL) failed.
	MetricClaimsSweepFailed = "ClaimsSweepFailed"
	// MetricWebhookSucceededOnFailed: the PSP reported a charge for a
	// payment the ledger holds as FAILED or VOID (webhook.MetricSucceededOnFailed).
	MetricWebhookSucceededOnFailed = "WebhookSucceededOnFailed"
	// MetricWebhookSucceededUnknown: the PSP reported a charge carrying our
	// payment id that no ledger row holds (webhook.MetricSucceededUnknown).
	MetricWebhookSucceededUnknown = "WebhookSucceededUnknown"
	// MetricNotifStuck: the worker's count, on every sweep tick, of
	// notifications STUCK after the give-up horizon (inbox.NotifSweeper).
	MetricNotifStuck = "NotifStuck"
	// MetricOutboxRedriven: the resolver's sweep re-drove events the worker
	// had not processed a grace period after their commit (outbox.MetricRedriven).
	MetricOutboxRedriven = "OutboxRedriven"
	// The stream job's counts (package totals): copies rejected as late
	// (sent to the recount queue), states older than the sink refused,
	// unreadable records skipped.
	MetricTotalsLateCopies  = "TotalsLateCopies"
	MetricTotalsStaleStates = "TotalsStaleStates"
	MetricTotalsLostStates  = "TotalsLostStates"
	MetricTotalsUnreadable  = "TotalsUnreadable"
	MetricTotalsStateBytes  = "TotalsStateBytes"
	MetricDedupFailOpen     = "DedupFailOpen"
	// MetricPSPKeyUnreadable: the api or the resolver needed the PSP API key
	// and could not read its secret (and held no value to fall back on), so
	// it made no PSP call: payments wait as UNKNOWN, refunds as pending.
	MetricPSPKeyUnreadable = "PSPKeyUnreadable"
)

// AlarmPeriod is the evaluation period of every alarm.
const AlarmPeriod = 5 * time.Minute

// Alarm names (construct ids; CloudFormation names them).
const (
	AlarmEventsDlq           = "EventsDlqNotEmpty"
	AlarmRelayFailures       = "RelayFailuresNotEmpty"
	AlarmAsyncFailures       = "AsyncFailuresNotEmpty"
	AlarmRelayErrors         = "RelayErrors"
	AlarmWorkerErrors        = "WorkerErrors"
	AlarmResolverErrors      = "ResolverErrors"
	AlarmRelayIteratorAge    = "RelayIteratorAge"
	AlarmUnknownOverHorizon  = "UnknownOverHorizon"
	AlarmKeyStoreDegraded    = "KeyStoreDegraded"
	AlarmHomeUnavailable     = "HomeUnavailable"
	AlarmResolveLostRow      = "ResolveLostRow"
	AlarmHomeLedgerReadOnly  = "HomeLedgerReadOnly"
	AlarmClaimsSweepFailed   = "ClaimsSweepFailed"
	AlarmChargedButClosed    = "ChargedButClosed"
	AlarmChargedButUnknown   = "ChargedButUnknown"
	AlarmAdoptionRefused     = "AdoptionRefused"
	AlarmNotifStuck          = "NotifStuck"
	AlarmOutboxRedriven      = "OutboxRedriven"
	RelayIteratorAgeMaxMilli = 60_000 // a minute behind the outbox is an outage of the event path

	AlarmTotalsErrors       = "TotalsErrors"
	AlarmTotalsIteratorAge  = "TotalsIteratorAge"
	AlarmTotalsStateSize    = "TotalsStateSize"
	AlarmCacheMemory        = "DedupCacheMemory"
	AlarmCacheFailOpen      = "DedupFailOpen"
	AlarmTotalsLateCopies   = "TotalsLateCopies"
	AlarmTotalsStaleState   = "TotalsStaleState"
	AlarmTotalsLostState    = "TotalsLostState"
	AlarmTotalsUnreadable   = "TotalsUnreadable"
	AlarmTotalsFailures     = "TotalsFailuresNotEmpty"
	AlarmRecountStuck       = "RecountStuck"
	AlarmRecountErrors      = "RecountErrors"
	TotalsIteratorAgeMaxMin = 10 // minutes: totals a window or more behind (the window is a minute)
	// TotalsStateMaxBytes: three quarters of the 1 MB of state Lambda keeps
	// per shard; past the limit every window ends early.
	TotalsStateMaxBytes = 768 << 10

	AlarmApiErrors                = "ApiErrors"
	AlarmWebhookErrors            = "WebhookErrors"
	AlarmDevicesErrors            = "DevicesErrors"
	AlarmApiThrottles             = "ApiThrottles"
	AlarmWebhookThrottles         = "WebhookThrottles"
	AlarmWorkerThrottles          = "WorkerThrottles"
	AlarmHttpApi5xx               = "HttpApi5xx"
	AlarmHttpApiLatency           = "HttpApiLatencyP99"
	AlarmAlb5xx                   = "Alb5xx"
	AlarmAlbTarget5xx             = "AlbTarget5xx"
	AlarmApiPSPKeyUnreadable      = "ApiPSPKeyUnreadable"
	AlarmResolverPSPKeyUnreadable = "ResolverPSPKeyUnreadable"
	AlarmEventsOldest             = "EventsOldestMessageAge"
	AlarmLedgerCapacity           = "LedgerCapacity"
	AlarmLedgerConnections        = "LedgerConnections"
	AlarmClaimsReadThrottle       = "ClaimsReadThrottles"
	AlarmClaimsWriteThrottle      = "ClaimsWriteThrottles"
	AlarmOutboxWriteThrottle      = "OutboxWriteThrottles"

	// EventsOldestMaxSeconds: a FIFO group whose head waits five minutes
	// holds that merchant's credits back (a poison event retried, a worker
	// down); the DLQ takes it after five receives.
	EventsOldestMaxSeconds = 300
	// LedgerCapacityMaxPercent of the cluster's maximum ACUs: the next
	// burst has nowhere to scale to.
	LedgerCapacityMaxPercent = 90
)

// LedgerMaxConnections estimates Aurora PostgreSQL's max_connections for a
// Serverless v2 writer at maxACU from the provisioned formula,
// LEAST(DBInstanceClassMemory/9531392, 5000), at a nominal 2 GiB per ACU.
// An estimate, not AWS's table (which reserves memory and caps low minimums
// lower): check `SHOW max_connections` after a deploy and set
// LedgerProps.ConnectionsAlarm when they differ.
func LedgerMaxConnections(maxACU float64) float64 {
	return min(float64(int64(maxACU*2*(1<<30))/9531392), 5000)
}

// LedgerConnectionsAlarmFraction of LedgerMaxConnections: past it, a burst
// of cold starts is refused logins (each Lambda instance holds a pool).
const LedgerConnectionsAlarmFraction = 0.8

// HttpApiLatencyAlarm is the HTTP API's p99 that alarms: half the payment
// deadline, where a slow tail starts to turn into refusals and 202s.
func HttpApiLatencyAlarm(deadline time.Duration) float64 {
	return float64((deadline / 2).Milliseconds())
}

// Monitoring is the alarm topic, the alarms and the dashboard.
type Monitoring struct {
	constructs.Construct
	// Topic receives every alarm's ALARM and OK; subscribe to it.
	Topic     awssns.Topic
	Alarms    map[string]awscloudwatch.Alarm
	Dashboard awscloudwatch.Dashboard
}

// newMonitoring wires alarms for s (called by NewStack once every part exists).
func newMonitoring(s *Stack) *Monitoring {
	c := &Monitoring{Construct: constructs.NewConstruct(s.Stack, jsii.String("Monitoring")), Alarms: map[string]awscloudwatch.Alarm{}}
	key := s.Data.Key
	c.Topic = awssns.NewTopic(c.Construct, jsii.String("AlarmTopic"), &awssns.TopicProps{
		MasterKey:  key,
		EnforceSSL: jsii.Bool(true),
	})
	c.Topic.ApplyRemovalPolicy(s.Profile.RemovalPolicy())
	// The SSL-only statement EnforceSSL adds makes a topic policy, and a
	// topic policy replaces the default one whose account-wide allow is what
	// lets CloudWatch publish: without this statement every alarm action
	// fails ("not authorized to perform SNS:Publish"), visible only in each
	// alarm's history. Only this account's alarms in this Region may use it
	// (the confused-deputy conditions), on the topic and on its key.
	alarmsHere := alarmSourceConditions(s.Stack)
	c.Topic.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String("CloudWatchAlarmsPublish"),
		Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String("cloudwatch.amazonaws.com"), nil)},
		Actions:    jsii.Strings("sns:Publish"),
		Resources:  &[]*string{c.Topic.TopicArn()},
		Conditions: &alarmsHere,
	}))
	// CloudWatch publishes alarms to the KMS-encrypted topic with the key.
	key.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String("CloudWatchAlarmsPublishToTheEncryptedAlarmTopic"),
		Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String("cloudwatch.amazonaws.com"), nil)},
		Actions:    jsii.Strings("kms:Decrypt", "kms:GenerateDataKey"),
		Resources:  jsii.Strings("*"), // in a key policy, "*" is this key
		Conditions: &alarmsHere,
	}), nil)

	period := seconds(AlarmPeriod)
	depth := queueDepth
	errs := func(fn *GoFunction) awscloudwatch.IMetric { return fn.Function.MetricErrors(periodOpts("Sum")) }
	custom := handlerMetric
	atLeastOne := func(id, desc string, m awscloudwatch.IMetric) {
		c.alarm(id, desc, m, 1)
	}
	atLeastOne(AlarmEventsDlq, "Events parked in the events DLQ after 5 deliveries: a consumer-side failure (ledger, push) needs a look and a redrive.", depth(s.Data.Events.Dlq))
	atLeastOne(AlarmRelayFailures, "The relay mapping gave up on a stream batch. Its events are not lost: their intents stay unpublished in the ledger until the worker's inbox holds them, and the resolver's sweep re-drives each one (a new stream record with the same event id; after 30 s, then 5 min, doubling, at most hourly; see OutboxRedriven). The cause needs a look.", depth(s.Relay.FailureQueue))
	atLeastOne(AlarmAsyncFailures, "A scheduled resolver run, a reconciliation run or a migration run failed after its retries (a reconciliation run stays open in the ledger and the next invocation resumes it).", depth(s.AsyncFailures))
	atLeastOne(AlarmRelayErrors, "The relay function failed invocations (partial batch failures retry; errors mean whole batches).", errs(s.Relay.Function))
	atLeastOne(AlarmWorkerErrors, "The worker function failed invocations.", errs(s.Worker.Function))
	atLeastOne(AlarmResolverErrors, "The resolver's sweep failed.", errs(s.Resolver))
	for _, a := range reconcileAlarms(s.Reconciliation.Function) {
		c.alarm("Reconcile"+a.id, a.desc, a.metric, a.threshold)
	}
	atLeastOne(AlarmUnknownOverHorizon, "UNKNOWN payments older than the resolver's horizon: money in doubt that replays have not settled.", custom(MetricUnknownOverHorizon, FnResolver, "Maximum"))
	atLeastOne(AlarmNotifStuck, "Notifications still not sent after the sweep's give-up horizon, kept as STUCK: the push path (SNS, a platform certificate, the topic's key) needs a look; then re-arm them (inbox.NotifSweeper.Rearm, README).",
		custom(MetricNotifStuck, FnWorker, "Maximum"))
	atLeastOne(AlarmOutboxRedriven, "The resolver's sweep re-drove events the worker had not processed 30 s after their commit: the relay, the events queue or the worker is failing or slow (events parked in the events DLQ are re-driven too, so they return once the cause is fixed). The resolver logs each re-drive with its event id.", custom(MetricOutboxRedriven, FnResolver, "Sum"))
	atLeastOne(AlarmKeyStoreDegraded, "The api answered without the claim table (the ledger's unique key alone guarded those payments).", custom(MetricKeyStoreDegraded, FnAPI, "Sum"))
	if s.Regions != nil {
		atLeastOne(AlarmHomeUnavailable, "The api refused requests (503 home-unavailable): it could not read the caller's home record, or the record names a Region it has no URL for (docs/regions.md). Check the home table's replica in this Region and ONCEPAY_REGION_URLS.",
			custom(MetricHomeUnavailable, FnAPI, "Sum"))
		atLeastOne(AlarmAdoptionRefused, "The home inbox refused a failed Region's leftover SUCCEEDED copy: the home ledger holds the payment FAILED, VOID or with other money, so nothing was credited or told. The PSP holds a charge the ledger does not back: the daily reconciliation refunds it (a reversal, ReconcileReversed); the worker's log names the payment and the charge.",
			custom(MetricAdoptionRefused, FnWorker, "Sum"))
		atLeastOne(AlarmResolveLostRow, "A resolve found a payment the PSP knows (charged, declined or still open) that this Region's ledger does not: written in a failed Region's last replication lag and lost in the failover. The key is held open; reconcile the payment against the PSP (docs/regions.md, what an unplanned failover loses).",
			custom(MetricResolveLostRow, FnAPI, "Sum"))
		atLeastOne(AlarmHomeLedgerReadOnly, "The resolver found its ledger read-only in the Region that homes the callers (the default home record): nothing settles their open payments. Either the cluster lost its writer, or the callers were moved here before this Region's ledger was promoted (the runbook promotes first; docs/regions.md). A standby's read-only ledger before a failover does not count. Expected once in the old primary during a planned switchover (its ledger turns read-only at the promotion, seconds before the move of the default record reaches its replica), and in a recovered Region until its replica of the home table has caught up.",
			custom(MetricHomeLedgerReadOnly, FnResolver, "Sum"))
		if s.Regions.Strong() {
			atLeastOne(AlarmClaimsSweepFailed, "The resolver's sweep of the strongly consistent claim table (no TTL) failed; each run goes on where the last stopped. Expired key records are only space (the read path treats them as absent), but a sweep that keeps failing lets the table grow: the resolver's log names the error.",
				custom(MetricClaimsSweepFailed, FnResolver, "Sum"))
		}
	}
	// Without the key no PSP call is made: the api leaves each payment
	// UNKNOWN and the resolver cannot settle them, so money waits while
	// nothing else fails (no function error, no 5xx beyond the 202s).
	keyUnreadable := func(who string) string {
		return "The " + who + " could not read the PSP API key's secret (output PspKeySecretArn) and made no PSP call: payments wait as UNKNOWN. " +
			"Check the secret's resource policy and that the function's role may call secretsmanager:GetSecretValue on it, its KMS key's grant " +
			"(kms:Decrypt for the role: an imported secret needs oncepay:pspKeySecretKmsKey), and that the function reaches the Secrets Manager " +
			"endpoint (the VPC's interface endpoint in prod, the NAT in a sandbox); the function's log names the error."
	}
	atLeastOne(AlarmApiPSPKeyUnreadable, keyUnreadable("api"), custom(MetricPSPKeyUnreadable, FnAPI, "Sum"))
	atLeastOne(AlarmResolverPSPKeyUnreadable, keyUnreadable("resolver"), custom(MetricPSPKeyUnreadable, FnResolver, "Sum"))
	atLeastOne(AlarmChargedButUnknown, "The PSP reported a charge (payment_intent.succeeded) carrying a payment id of ours that the ledger has no row of: across Regions, a payment written in a failed Region's last replication lag and lost in the failover (docs/regions.md, what an unplanned failover loses). The webhook function's log names the payment and the charge; the daily reconciliation adopts it (ReconcileAdopted), or run it for the span at once.", custom(MetricWebhookSucceededUnknown, FnWebhook, "Sum"))
	atLeastOne(AlarmChargedButClosed, "The PSP reported a charge (payment_intent.succeeded) for a payment the ledger holds as FAILED or VOID: money taken with no payment behind it; the daily reconciliation refunds it (ReconcileReversed), or run it for the span at once.", custom(MetricWebhookSucceededOnFailed, FnWebhook, "Sum"))
	c.alarm(AlarmRelayIteratorAge, "The relay is more than a minute behind the outbox stream.",
		s.Relay.Function.Function.Metric(jsii.String("IteratorAge"), periodOpts("Maximum")),
		RelayIteratorAgeMaxMilli)

	t := s.Totals
	atLeastOne(AlarmTotalsErrors, "The stream job failed invocations: Lambda retries each from the last checkpoint (a restore; the job's flush keeps the totals right), then hands the batch to TotalsFailuresNotEmpty.", errs(t.Function))
	atLeastOne(AlarmTotalsFailures, "The totals mapping gave up on a stream batch after its retries (the cause needs a look: the function's log says it). Its totals are not lost: the recount function recounts every day the batch may have touched from the ledger once the day is over (docs/stream-job.md#recount).",
		t.FailureQueue.MetricNumberOfMessagesSent(periodOpts("Sum")))
	atLeastOne(AlarmTotalsStaleState, "The stream job was handed a state older than what committed runs wrote (a reset mapping, a lost window state) and stopped its shard rather than erase totals: recount the shard's days, then delete its ~meta item (docs/stream-job.md#stale-state).", custom(MetricTotalsStaleStates, FnTotals, "Sum"))
	atLeastOne(AlarmTotalsLostState, "The stream job found that Lambda dropped a window's state (a final invoke discarded after its retries): it kept the lost runs' totals from the sink and sent their merchants and days to the recount queue, which recounts them from the ledger once each day is over (docs/stream-job.md). Find why the batch kept failing in the totals function's log.", custom(MetricTotalsLostStates, FnTotals, "Sum"))
	atLeastOne(AlarmTotalsLateCopies, "The stream job rejected copies that came later than its two-hour horizon; each is in the recount queue.", custom(MetricTotalsLateCopies, FnTotals, "Sum"))
	c.alarm(AlarmTotalsStateSize, "A shard's stream-job state passed 768 KB of Lambda's 1 MB: past 1 MB every window ends early and a state that cannot shrink is not verified against Lambda; the merchants' open days or the ids seen within the two-hour horizon have outgrown one shard (docs/stream-job.md, limits).",
		custom(MetricTotalsStateBytes, FnTotals, "Maximum"), TotalsStateMaxBytes)
	atLeastOne(AlarmTotalsUnreadable, "The stream job skipped outbox records it could not read (the relay reports the same records): their totals are missing until recounted.", custom(MetricTotalsUnreadable, FnTotals, "Sum"))
	if t.RecountFunction != nil {
		atLeastOne(AlarmRecountStuck, "Recount requests parked in the recount DLQ after 10 deliveries: the recount could not read them or kept failing (the ledger, the totals table); the recount function's log names each message. Those merchants' day totals are short until the requests are redriven to their queues (docs/stream-job.md#recount).", depth(t.RecountDlq))
		atLeastOne(AlarmRecountErrors, "The recount function failed invocations: their requests return to their queues.", errs(t.RecountFunction))
	} else {
		atLeastOne(AlarmRecountStuck, "Without the recount function, late copies wait in the recount queue for an operator's recount of their merchant's day (docs/stream-job.md#recount).", depth(t.Recount))
	}
	c.alarm(AlarmTotalsIteratorAge, "The stream job is ten minutes or more behind the outbox stream: merchants' totals are stale.",
		t.Function.Function.Metric(jsii.String("IteratorAge"), periodOpts("Maximum")),
		TotalsIteratorAgeMaxMin*60_000)

	if s.Cache != nil {
		// Every node's memory, the fullest counting: with eviction off, a
		// full cache refuses new fingerprints and the gate fails open
		// (duplicates, counted). After a failover the primary is -002.
		c.alarm(AlarmCacheMemory, "The dedup cache is 80% full: with eviction off, a full cache refuses new fingerprints and every reminder goes out (DedupFailOpen); size the node up or shorten the window.",
			s.Cache.MemoryMetric(period), 80)
		atLeastOne(AlarmCacheFailOpen, "The dedup cache could not be reached and reminders went out without it (fail open): duplicates are possible until it answers again.",
			custom(MetricDedupFailOpen, FnWorker, "Sum"))
	}
	c.frontDoorAlarms(s, errs)
	c.storeAlarms(s, period)

	c.Dashboard = awscloudwatch.NewDashboard(c.Construct, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		DefaultInterval: awscdk.Duration_Hours(jsii.Number(3)),
	})
	fns := []*GoFunction{s.Api.Function, s.Webhook, s.Relay.Function, s.Worker.Function, s.Resolver, s.Totals.Function}
	if s.Totals.RecountFunction != nil {
		fns = append(fns, s.Totals.RecountFunction)
	}
	fns = append(fns, s.Devices.Function, s.Reconciliation.Function)
	var invocations, errors, durations []awscloudwatch.IMetric
	for _, fn := range fns {
		invocations = append(invocations, fn.Function.MetricInvocations(&awscloudwatch.MetricOptions{Period: period}))
		errors = append(errors, errs(fn))
		durations = append(durations, fn.Function.MetricDuration(periodOpts("p99")))
	}
	graph := func(title string, ms ...awscloudwatch.IMetric) awscloudwatch.IWidget {
		return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{Title: jsii.String(title), Left: &ms, Width: jsii.Number(8)})
	}
	c.Dashboard.AddWidgets(
		graph("Invocations", invocations...),
		graph("Errors", errors...),
		graph("Duration p99 (ms)", durations...),
	)
	c.Dashboard.AddWidgets(
		graph("Queue depth: events, events DLQ, relay failures, async failures",
			depth(s.Data.Events.Queue), depth(s.Data.Events.Dlq), depth(s.Relay.FailureQueue), depth(s.AsyncFailures)),
		graph("Money in doubt, degraded answers, stuck notifications, PSP key unreadable",
			custom(MetricUnknownOverHorizon, FnResolver, "Maximum"), custom(MetricKeyStoreDegraded, FnAPI, "Sum"),
			custom(MetricNotifStuck, FnWorker, "Maximum"),
			custom(MetricPSPKeyUnreadable, FnAPI, "Sum"), custom(MetricPSPKeyUnreadable, FnResolver, "Sum")),
		graph("Relay iterator age (ms)",
			s.Relay.Function.Function.Metric(jsii.String("IteratorAge"), periodOpts("Maximum"))),
	)
	var reconciled []awscloudwatch.IMetric
	for _, m := range []string{MetricReconcileNeedsHuman, MetricReconcileAdopted, MetricReconcileReversed, MetricReconcileReversalOpen,
		MetricReconcileSettled, MetricReconcileRefundSettled, MetricReconcileRefundFailed} {
		reconciled = append(reconciled, custom(m, FnReconcile, "Sum"))
	}
	c.Dashboard.AddWidgets(awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{
		Title: jsii.String("Reconciliation: what the last word moved or left to a human"), Left: &reconciled, Width: jsii.Number(24),
	}))
	var names []string
	for n := range c.Alarms {
		names = append(names, n)
	}
	sort.Strings(names)
	var alarms []interfacesawscloudwatch.IAlarmRef
	for _, n := range names {
		alarms = append(alarms, c.Alarms[n])
	}
	c.Dashboard.AddWidgets(awscloudwatch.NewAlarmStatusWidget(&awscloudwatch.AlarmStatusWidgetProps{
		Title: jsii.String("Alarms"), Alarms: &alarms, Width: jsii.Number(24),
	}))
	return c
}

// alarm fires when the metric reaches threshold in one period; no data is
// good news (no errors, no messages, nothing UNKNOWN reported).
func (c *Monitoring) alarm(id, desc string, m awscloudwatch.IMetric, threshold float64) {
	c.Alarms[id] = newAlarm(c.Construct, id, desc, m, threshold, c.Topic)
}

// frontDoorAlarms watch what a caller meets: the functions on the request
// path failing or throttled, the HTTP API's (or the ALB's) 5xx and its tail.
func (c *Monitoring) frontDoorAlarms(s *Stack, errs func(*GoFunction) awscloudwatch.IMetric) {
	throttles := func(fn *GoFunction) awscloudwatch.IMetric {
		return fn.Function.MetricThrottles(periodOpts("Sum"))
	}
	c.alarm(AlarmApiErrors, "The api function failed invocations (a crash or timeout: the caller got a 5xx from the front door; a retry with the same key is safe).", errs(s.Api.Function), 1)
	c.alarm(AlarmWebhookErrors, "The webhook function failed invocations: the PSP retries its events for days, but a settled outcome waits on them.", errs(s.Webhook), 1)
	if s.Devices != nil {
		c.alarm(AlarmDevicesErrors, "The devices function failed invocations: a registration or removal got a 5xx; the app retries with the same counter, and a device without an endpoint gets no push (PushUndeliverable).", errs(s.Devices.Function), 1)
	}
	c.alarm(AlarmApiThrottles, "The api function was throttled (the account's or its reserved concurrency): callers got 429/503 and will retry.", throttles(s.Api.Function), 1)
	c.alarm(AlarmWebhookThrottles, "The webhook function was throttled: the PSP's deliveries are retried later.", throttles(s.Webhook), 1)
	c.alarm(AlarmWorkerThrottles, "The worker function was throttled: credits and pushes wait in the events queue.", throttles(s.Worker.Function), 1)
	if h := s.Api.HttpApi; h != nil {
		c.alarm(AlarmHttpApi5xx, "The HTTP API answered 5xx (integration errors, timeouts, the api's own 503s): see the api's logs by payment_id.",
			h.MetricServerError(periodOpts("Sum")), 1)
		c.alarm(AlarmHttpApiLatency, "The HTTP API's p99 latency passed half the payment deadline: a slow ledger, PSP or claim table; next come refusals and 202s.",
			h.MetricLatency(periodOpts("p99")), HttpApiLatencyAlarm(s.Timing.Deadline))
	}
	if a := s.Alb; a != nil {
		sum := periodOpts("Sum")
		c.alarm(AlarmAlb5xx, "The ALB answered 5xx itself (a target failed, timed out or was throttled).",
			a.LoadBalancer.Metrics().HttpCodeElb(awselasticloadbalancingv2.HttpCodeElb_ELB_5XX_COUNT, sum), 1)
		// The api's own 5xx (503 ledger down or deadline passed, a stored
		// 502 replayed) reach the caller as the target's answer, which
		// HTTPCode_ELB_5XX_Count does not count.
		c.alarm(AlarmAlbTarget5xx, "The ALB's targets (the api, the webhook) answered 5xx: see their logs by status and payment_id; ApiErrors and WebhookErrors fire too when a function itself failed.",
			a.LoadBalancer.Metrics().HttpCodeTarget(awselasticloadbalancingv2.HttpCodeTarget_TARGET_5XX_COUNT, sum), 1)
	}
}

// storeAlarms watch the stores: the events queue's head waiting, the
// ledger near its capacity or connection limit, the tables throttled.
func (c *Monitoring) storeAlarms(s *Stack, period awscdk.Duration) {
	c.alarm(AlarmEventsOldest, "An event has waited five minutes in the events queue: its merchant's later credits wait behind it (FIFO). Look at the worker's errors; the DLQ takes it after five receives.",
		s.Data.Events.Queue.MetricApproximateAgeOfOldestMessage(periodOpts("Maximum")), EventsOldestMaxSeconds)
	l := s.Data.Ledger
	// The writer's own ACUUtilization: the cluster's figure averages in an
	// idle reader, behind which a writer at its maximum would hide.
	writer := l.Cluster.Node().FindChild(jsii.String("Writer")).Node().DefaultChild().(awscdk.CfnResource)
	c.alarm(AlarmLedgerCapacity, "The ledger's writer is at 90% of its maximum ACUs: raise MaxCapacity before a burst has nowhere to scale.",
		awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
			Namespace: jsii.String("AWS/RDS"), MetricName: jsii.String("ACUUtilization"),
			DimensionsMap: &map[string]*string{"DBInstanceIdentifier": writer.Ref()},
			Statistic:     jsii.String("Maximum"), Period: period,
		}), LedgerCapacityMaxPercent)
	c.alarm(AlarmLedgerConnections, "The ledger's connections passed 80% of max_connections (an estimate from its maximum ACUs unless LedgerProps.ConnectionsAlarm is set): cold starts will be refused logins. Use the proxy (prod) or fewer concurrent functions.",
		l.Cluster.MetricDatabaseConnections(periodOpts("Maximum")), l.connectionsAlarm())
	tableMetric := func(t awsdynamodb.ITable, name string) awscloudwatch.IMetric {
		return t.Metric(jsii.String(name), periodOpts("Sum"))
	}
	c.alarm(AlarmClaimsReadThrottle, "The claim table throttled reads: replays and status reads slowed or fell back to the ledger.", tableMetric(s.Data.Claims.Table, "ReadThrottleEvents"), 1)
	c.alarm(AlarmClaimsWriteThrottle, "The claim table throttled writes: first calls fell back to the ledger's unique key (KeyStoreDegraded) or were refused.", tableMetric(s.Data.Claims.Table, "WriteThrottleEvents"), 1)
	c.alarm(AlarmOutboxWriteThrottle, "The outbox table throttled writes: events wait in the ledger for the resolver's sweep.", tableMetric(s.Data.Outbox.Table, "WriteThrottleEvents"), 1)
}

// alarmSourceConditions limits a grant to cloudwatch.amazonaws.com to the
// alarms of this stack's account and Region.
func alarmSourceConditions(st awscdk.Stack) map[string]interface{} {
	return map[string]interface{}{
		"StringEquals": map[string]interface{}{"aws:SourceAccount": st.Account()},
		"ArnLike": map[string]interface{}{"aws:SourceArn": awscdk.Fn_Join(jsii.String(""), &[]*string{
			jsii.String("arn:"), st.Partition(), jsii.String(":cloudwatch:"), st.Region(), jsii.String(":"), st.Account(), jsii.String(":alarm:*"),
		})},
	}
}
