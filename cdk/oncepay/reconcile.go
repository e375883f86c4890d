package oncepay

import (
	"fmt"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// ReconcileSchedule is when EventBridge runs the reconciliation: daily at
// 00:30 UTC, once the previous UTC day is over. A scheduled run names no
// span, so the handler reconciles the previous two UTC days (the day
// before catches a refund or a settle the first run saw open).
const ReconcileSchedule = "cron(30 0 * * ? *)"

// ReconcileMaxEventAge: a scheduled event is worth delivering until the
// next one is due (EventBridge's own maximum, 24 h).
const ReconcileMaxEventAge = 24 * time.Hour

// Metrics the reconciliation emits (package reconcile: Reconcile + the
// outcome in CamelCase, dimension Function=reconcile).
const (
	// MetricReconcileNeedsHuman: a difference only a human may decide (a
	// row in the ledger's reconcile_findings, or a reversal's refund the
	// PSP refused or failed).
	MetricReconcileNeedsHuman = "ReconcileNeedsHuman"
	// MetricReconcileAdopted: a charge with no ledger row, its row written
	// from the charge's metadata.
	MetricReconcileAdopted = "ReconcileAdopted"
	// MetricReconcileReversed: a charge the ledger does not hold as its
	// payment's (FAILED or VOID row, a second charge), refunded.
	MetricReconcileReversed = "ReconcileReversed"
	// MetricReconcileReversalOpen: a reversal whose refund is still open.
	MetricReconcileReversalOpen = "ReconcileReversalOpen"
	// The outcomes the dashboard shows and no alarm watches.
	MetricReconcileSettled       = "ReconcileSettled"
	MetricReconcileRefundSettled = "ReconcileRefundSettled"
	MetricReconcileRefundFailed  = "ReconcileRefundFailed"
	MetricReconcileOpen          = "ReconcileOpen"
	MetricReconcileForeign       = "ReconcileForeign"
)

// ReconciliationProps configures the reconciliation.
type ReconciliationProps struct {
	// Protection of what the construct creates (the dead-letter queue and
	// the log group's removal policy).
	Protection
	// Code of the function (required): the bootstrap of lambdas/reconcile.
	Code awslambda.Code
	// Ledger (required): the function runs in its VPC and logs in as
	// LedgerUser ("" means LedgerAppUser) with an IAM token.
	Ledger     *Ledger
	LedgerUser string
	// Psp (required): the function reads the PSP API key (the list
	// endpoints, the reversals' refunds), never the webhook secret.
	Psp *Psp
	// Outbox, when set, is where the events of the moves a run makes are
	// put (PutItem only); without it they wait for the resolver's sweep.
	Outbox *OutboxTable
	// NoSchedule: no daily rule; the function runs only when invoked (an
	// operator's day or span). A standby Region's stack sets it: its
	// ledger is read-only.
	NoSchedule bool
	// DeadLetterQueue receives the event of an invocation that failed
	// Lambda's asynchronous retries, and a scheduled event EventBridge
	// could not deliver; nil creates one (exported as DeadLetterQueue).
	DeadLetterQueue awssqs.IQueue
	// Sizing of the function; nil is DefaultSizings().Reconcile (15 min,
	// 512 MB).
	Sizing *Sizing
	// Role the function runs as (imported mutable); nil creates one.
	Role awsiam.IRole
	// Description of the function; "" is oncepay's.
	Description string
	// Alarms of the construct (on unless Disabled).
	Alarms AlarmProps
	// LogRetention of the function's logs; "" is one year.
	LogRetention     awslogs.RetentionDays
	OverrideFunction func(*awslambda.FunctionProps)
}

// Reconciliation is the last word on money (package reconcile): a
// function that reads the PSP's PaymentIntents and refunds of a span,
// joins them to the ledger and settles every difference by an allowed
// move or a refund under a derived key, reporting what only a human may
// decide; EventBridge runs it daily.
type Reconciliation struct {
	constructs.Construct
	Function *GoFunction
	// Schedule runs the function daily (ReconcileSchedule); nil with
	// NoSchedule.
	Schedule awsevents.Rule
	// DeadLetterQueue is the given queue or the one made here.
	DeadLetterQueue awssqs.IQueue
	// Alarms by id (AlarmReconciliation*); empty when AlarmProps.Disabled.
	Alarms map[string]awscloudwatch.Alarm
}

// The Reconciliation's own alarms (AlarmProps).
const (
	AlarmReconciliationNeedsHuman   = "NeedsHuman"
	AlarmReconciliationAdopted      = "Adopted"
	AlarmReconciliationReversed     = "Reversed"
	AlarmReconciliationReversalOpen = "ReversalOpen"
	AlarmReconciliationErrors       = "Errors"
	// AlarmReconciliationFailed watches the dead-letter queue made here;
	// a given one is its owner's to watch.
	AlarmReconciliationFailed = "FailuresNotEmpty"
)

// The stack's Monitoring names the same alarms Reconcile + the construct's id.
const (
	AlarmReconcileNeedsHuman   = "Reconcile" + AlarmReconciliationNeedsHuman
	AlarmReconcileAdopted      = "Reconcile" + AlarmReconciliationAdopted
	AlarmReconcileReversed     = "Reconcile" + AlarmReconciliationReversed
	AlarmReconcileReversalOpen = "Reconcile" + AlarmReconciliationReversalOpen
	AlarmReconcileErrors       = "Reconcile" + AlarmReconciliationErrors
)

// ReconcileErrorsPerDay is the function's errors in a day that alarm: the
// run failed and Lambda's retry, which resumes it from its checkpoint,
// failed too. One failure the retry made good is no news.
const ReconcileErrorsPerDay = 2

// NewReconciliation creates the function, its daily schedule and alarms.
func NewReconciliation(scope constructs.Construct, id string, props *ReconciliationProps) *Reconciliation {
	const what = "Reconciliation"
	if props == nil || props.Code == nil {
		panic("oncepay: ReconciliationProps.Code is required: the linux/arm64 bootstrap of lambdas/reconcile, e.g. awslambda.Code_FromAsset(jsii.String(\"build/reconcile\"), nil)")
	}
	if props.Ledger == nil || props.Psp == nil {
		panic(fmt.Sprintf("oncepay: %s needs ReconciliationProps.Ledger and .Psp: it reads the ledger and the PSP's records", what))
	}
	if props.Outbox != nil {
		props.Outbox.resolve(what)
	}
	c := &Reconciliation{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	sizing := DefaultSizings().Reconcile
	if props.Sizing != nil {
		sizing = *props.Sizing
	}
	c.DeadLetterQueue = props.DeadLetterQueue
	made := c.DeadLetterQueue == nil
	if made {
		q := newFailureQueue(c.Construct, "DeadLetterQueue", props.Protection, nil)
		suppress(cfn(q), "Serverless-SQSRedrivePolicy",
			"This is the dead-letter queue of the reconciliation's asynchronous invocations and of its schedule target: the end of the line for a day's run that failed its retries (the run stays open in the ledger and the next invocation resumes it); an alarm fires on its depth.")
		c.DeadLetterQueue = q
	}
	desc := props.Description
	if desc == "" {
		desc = "oncepay reconcile: the ledger against the PSP's records, daily for the two previous UTC days; settles differences by allowed moves, reports what a human must decide"
	}
	// No reserved concurrency: reserving any breaks a new account whose
	// concurrency quota is under 100 (AWS keeps 100 unreserved), and nothing needs
	// it: two runs of one span at once share its run row, and every move
	// is a compare-and-set or an insert-if-absent, every refund under a
	// derived key.
	c.Function = NewGoFunction(c.Construct, "Function", &GoFunctionProps{
		Name:            FnReconcile,
		Code:            props.Code,
		Sizing:          sizing,
		Role:            props.Role,
		Vpc:             props.Ledger.Cluster.Vpc(),
		DeadLetterQueue: c.DeadLetterQueue,
		LogRetention:    props.LogRetention,
		RemovalPolicy:   props.removalPolicy(),
		Description:     desc,
		Override:        props.OverrideFunction,
	})
	fn := c.Function
	props.Ledger.Connect(fn, props.LedgerUser)
	props.Psp.GrantKeyRead(fn) // the lists and the reversals' refunds; no webhook secret
	if props.Outbox != nil {
		props.Outbox.grantPut(fn)
	}
	// Nothing of the claim table: a reconciliation never reads or writes
	// a key record.

	if !props.NoSchedule {
		c.Schedule = awsevents.NewRule(c.Construct, jsii.String("Schedule"), &awsevents.RuleProps{
			Description: jsii.String("oncepay: reconcile the previous two UTC days against the PSP's records"),
			Schedule:    awsevents.Schedule_Expression(jsii.String(ReconcileSchedule)),
			Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(fn.Function, &awseventstargets.LambdaFunctionProps{
				DeadLetterQueue: c.DeadLetterQueue,
				MaxEventAge:     seconds(ReconcileMaxEventAge),
				RetryAttempts:   jsii.Number(2),
			})},
		})
	}

	if a := newConstructAlarms(c.Construct, props.Alarms); a != nil {
		for _, s := range reconcileAlarms(fn) {
			a.add(s.id, s.desc, s.metric, s.threshold)
		}
		if made {
			a.add(AlarmReconciliationFailed, "A reconciliation run failed Lambda's retries (or its scheduled event could not be delivered): the run stays open in the ledger and the next invocation resumes it; the function's log names the error.",
				queueDepth(c.DeadLetterQueue), 1)
		}
		c.Alarms = a.all()
	}
	return c
}

// alarmSpec is one alarm before it is made.
type alarmSpec struct {
	id, desc  string
	metric    awscloudwatch.IMetric
	threshold float64
}

// reconcileAlarms are the reconciliation's alarms, for the construct's own
// and the stack's Monitoring alike.
func reconcileAlarms(fn *GoFunction) []alarmSpec {
	day := 24 * time.Hour
	return []alarmSpec{
		{AlarmReconciliationNeedsHuman, "The reconciliation found a difference only a human may decide (a SUCCEEDED payment with no charge, differing amounts, a charge with no row to adopt, a reversal's refund the PSP refused or failed): nothing was changed. The report rows are in the ledger's reconcile_findings (by run_id); the function's log names each payment.",
			handlerMetric(MetricReconcileNeedsHuman, FnReconcile, "Sum"), 1},
		{AlarmReconciliationReversed, "The reconciliation refunded a charge the ledger does not hold as its payment's (a payment the buyer was told failed or never ran, or a second charge of one payment); the buyer is told. Money moved by the last word: someone should know. The function's log names the payment and the refund.",
			handlerMetric(MetricReconcileReversed, FnReconcile, "Sum"), 1},
		{AlarmReconciliationAdopted, "The reconciliation wrote a ledger row for a charge the ledger had no row of (lost in a failover's replication lag, or never written), from the charge's metadata, with its journal and event. Money moved by the last word: someone should know. The function's log names the payment.",
			handlerMetric(MetricReconcileAdopted, FnReconcile, "Sum"), 1},
		// A day: the run is daily, and an alarm that cleared five minutes
		// after the run would be missed by whoever looks in the morning.
		{AlarmReconciliationReversalOpen, "A reversal's refund was still open at the end of a reconciliation run (the PSP holds it pending or did not answer): the next run looks it up and drives it. If it fires day after day, look at the refund at the PSP.",
			handlerMetricOver(MetricReconcileReversalOpen, FnReconcile, "Sum", day), 1},
		{AlarmReconciliationErrors, "A reconciliation run failed and so did Lambda's retry (each resumes the run from its checkpoint; the run stays open in the ledger): the PSP's lists could not be read whole, the ledger refused a move, or a day does not fit in the function's 15 minutes. The function's log names the error.",
			fn.Function.MetricErrors(&awscloudwatch.MetricOptions{Period: seconds(day), Statistic: jsii.String("Sum")}), ReconcileErrorsPerDay},
	}
}
