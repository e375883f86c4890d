package oncepay

import (
	"fmt"
	"net/mail"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsses"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
)

// InboxWorkerProps configures the worker. With Code alone it is a working
// worker with its own events queue (and DLQ) and push topic; it needs a
// ledger (Ledger, or ONCEPAY_LEDGER_DSN in Environment) to run, and a push
// target (PlatformApplicationArns, or the sandbox's TopicFallback): without
// either every push waits for a device and, after the sweep's device
// horizon, is recorded UNDELIVERABLE.
//
// A prop and the one it excludes (Events and EventsProps, Push and
// PushProps, Ledger and Vpc) panic when both are set, as does a setting the
// real resources contradict.
type InboxWorkerProps struct {
	// Protection of what the construct creates.
	Protection
	// Code of the worker function (required): a directory with the
	// linux/arm64 bootstrap of lambdas/worker.
	Code awslambda.Code
	// Events is the FIFO queue (with its DLQ) to consume: NewEventQueue's,
	// or a literal over a queue made elsewhere (EventQueue says what it
	// must state). nil creates one from EventsProps and Settings.
	Events      *EventQueue
	EventsProps EventQueueProps
	// Push is the topic notifications go to (NewPushTopic's, or a literal
	// over any awssns.ITopic); nil creates one from PushProps.
	Push      *PushTopic
	PushProps PushTopicProps
	// NoPushTopic: no topic at all (none made, none named to the
	// function). The worker pushes to the platform endpoints only, so it
	// excludes Push, PushProps and TopicFallback.
	NoPushTopic bool
	// PlatformApplicationArns (SNS mobile push, literal ARNs): the worker may
	// publish to the endpoints of these applications.
	PlatformApplicationArns []string
	// TopicFallback sends a push for a caller with no enabled device to the
	// Push topic, where every subscriber sees it: a sandbox's way to watch
	// pushes without a mobile platform application, a cross-caller leak in
	// production. nil is false; the stack sets Profile.PushTopicFallback().
	// Off, such a push waits for a device (the sweep's device horizon,
	// then UNDELIVERABLE) and the function gets no publish right on the
	// topic.
	TopicFallback *bool
	// EmailFrom, when set, adds the email channel: the payments' emails
	// (receipts, declines, refunds) to each payment's receipt address, from
	// this address, through SES under a configuration set of the
	// construct's own. The construct makes the address's SES identity,
	// which SES verifies by a mail to it: until then SES refuses the
	// sends, and the rows wait PENDING (then STUCK, alarmed).
	EmailFrom string
	// Ledger, when set, places the worker in the ledger's VPC and lets it
	// log in as LedgerUser ("" means LedgerAppUser) with an IAM token.
	Ledger     *Ledger
	LedgerUser string
	// Role the function runs as (a platform team's, imported mutable);
	// nil creates one. Every grant lands on it.
	Role awsiam.IRole
	// Vpc (with VpcSubnets, SecurityGroups) places the function in a VPC of
	// the caller's, when there is no Ledger.
	Vpc            awsec2.IVpc
	VpcSubnets     *awsec2.SubnetSelection
	SecurityGroups []awsec2.ISecurityGroup
	// Settings of the queue mapping; nil is DefaultWorkerSettings(). Its
	// VisibilityTimeout and MaxReceiveCount make the queue the worker
	// creates; for a queue it is given they must be zero or match it.
	Settings *QueueSettings
	// Sizing of the function; nil is DefaultSizings().Worker (30 s,
	// 256 MB). The queue's visibility timeout must be at least 6x the
	// timeout.
	Sizing *Sizing
	// Description of the function; "" is oncepay's.
	Description string
	// Alarms of the construct (on unless Disabled).
	Alarms AlarmProps
	// LogRetention of the function's logs; "" is one year.
	LogRetention     awslogs.RetentionDays
	Environment      map[string]string
	OverrideFunction func(*awslambda.FunctionProps)
}

// InboxWorker consumes the events FIFO queue: inbox row + credit +
// notification intent in one ledger transaction, then the push. Failed
// messages are retried by visibility timeout and park in the queue's DLQ
// after maxReceiveCount deliveries; a failed push is retried by the
// function's own schedule (SweepSchedule), never by failing the message.
type InboxWorker struct {
	constructs.Construct
	Events *EventQueue
	// Push is nil with NoPushTopic.
	Push     *PushTopic
	Function *GoFunction
	Mapping  awslambda.EventSourceMapping
	// SweepSchedule invokes the function every SweepRate to finish the
	// PENDING notifications a failed push left (inbox.Function): their own
	// durable trigger, so a push outage never holds back a credit.
	SweepSchedule awsevents.Rule
	// Settings as applied: VisibilityTimeout and MaxReceiveCount are the
	// queue's own.
	Settings QueueSettings
	// TopicFallback is whether pushes with no device go to the topic.
	TopicFallback bool
	// EmailIdentity and EmailConfigurationSet exist when the props name
	// EmailFrom.
	EmailIdentity         awsses.EmailIdentity
	EmailConfigurationSet awsses.ConfigurationSet
	// Alarms by id (AlarmWorker*); empty when AlarmProps.Disabled.
	Alarms map[string]awscloudwatch.Alarm

	platformApps []string
}

// The InboxWorker's own alarms (AlarmProps).
const (
	AlarmWorkerDlq         = "EventsDlqNotEmpty"
	AlarmWorkerFnErrors    = "Errors"
	AlarmWorkerFnThrottles = "Throttles"
	AlarmWorkerOldest      = "EventsOldestMessageAge"
	AlarmWorkerNotifStuck  = "NotifStuck"
)

// EnvPushTopicFallback carries InboxWorkerProps.TopicFallback to the
// functions that push ("true" or "false"; see package pushboot).
const EnvPushTopicFallback = stackenv.PushTopicFallback

// NewInboxWorker creates the worker.
func NewInboxWorker(scope constructs.Construct, id string, props *InboxWorkerProps) *InboxWorker {
	const what = "InboxWorker"
	if props == nil || props.Code == nil {
		panic("oncepay: InboxWorkerProps.Code is required: the linux/arm64 bootstrap of lambdas/worker, e.g. awslambda.Code_FromAsset(jsii.String(\"build/worker\"), nil)")
	}
	exclusive(what, "Events", props.Events != nil, "EventsProps", !isZero(props.EventsProps), "EventsProps configures the queue the worker would create, and Events replaces it")
	exclusive(what, "Push", props.Push != nil, "PushProps", !isZero(props.PushProps), "PushProps configures the topic the worker would create, and Push replaces it")
	exclusive(what, "Ledger", props.Ledger != nil, "Vpc", props.Vpc != nil, "Ledger places the function in the ledger's VPC; set Vpc only without a Ledger")
	c := &InboxWorker{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	c.Settings = DefaultWorkerSettings()
	if props.Settings != nil {
		c.Settings = *props.Settings
	}
	if err := c.Settings.Validate(); err != nil {
		panic(fmt.Errorf("oncepay: %s: %w", what, err))
	}
	sizing := DefaultSizings().Worker
	if props.Sizing != nil {
		sizing = *props.Sizing
	}
	c.Events = props.Events
	if c.Events == nil {
		ep := props.EventsProps
		ep.Protection = ep.Protection.inherit(props.Protection)
		ep.VisibilityTimeout = settingOr(what, "VisibilityTimeout", ep.VisibilityTimeout, c.Settings.VisibilityTimeout, props.Settings != nil)
		ep.MaxReceiveCount = settingOr(what, "MaxReceiveCount", ep.MaxReceiveCount, c.Settings.MaxReceiveCount, props.Settings != nil)
		c.Events = NewEventQueue(c.Construct, "Events", &ep)
	}
	c.Events.resolve(what)
	if v := c.Settings.VisibilityTimeout; props.Events != nil && props.Settings != nil && v != 0 && v != c.Events.VisibilityTimeout {
		panic(fmt.Sprintf("oncepay: %s: Settings.VisibilityTimeout %s differs from the given queue's %s: set it on the queue, or leave it zero", what, v, c.Events.VisibilityTimeout))
	}
	if n := c.Settings.MaxReceiveCount; props.Events != nil && props.Settings != nil && n != 0 && n != c.Events.MaxReceiveCount {
		panic(fmt.Sprintf("oncepay: %s: Settings.MaxReceiveCount %d differs from the given queue's %d: set it on the queue's redrive policy, or leave it zero", what, n, c.Events.MaxReceiveCount))
	}
	c.Settings.VisibilityTimeout, c.Settings.MaxReceiveCount = c.Events.VisibilityTimeout, c.Events.MaxReceiveCount
	if props.NoPushTopic {
		exclusive(what, "NoPushTopic", true, "Push", props.Push != nil, "there is no topic to use")
		exclusive(what, "NoPushTopic", true, "PushProps", !isZero(props.PushProps), "there is no topic to configure")
		exclusive(what, "NoPushTopic", true, "TopicFallback", props.TopicFallback != nil && *props.TopicFallback, "the fallback pushes to the topic")
	}
	c.Push = props.Push
	if c.Push == nil && !props.NoPushTopic {
		pp := props.PushProps
		pp.Protection = pp.Protection.inherit(props.Protection)
		c.Push = NewPushTopic(c.Construct, "Push", &pp)
	}
	if c.TopicFallback = props.TopicFallback != nil && *props.TopicFallback; c.TopicFallback {
		c.Push.resolve(what) // its key is granted only when the worker publishes to it
	} else if c.Push != nil && c.Push.Key == nil && c.Push.Topic != nil {
		c.Push.Key = c.Push.Topic.MasterKey()
	}

	vpc := props.Vpc
	if props.Ledger != nil {
		vpc = props.Ledger.Cluster.Vpc()
	}
	desc := props.Description
	if desc == "" {
		desc = "oncepay worker: events FIFO queue -> inbox, credit, notification"
	}
	c.Function = NewGoFunction(c.Construct, "Function", &GoFunctionProps{
		Name:           FnWorker,
		Code:           props.Code,
		Sizing:         sizing,
		Environment:    props.Environment,
		Role:           props.Role,
		Vpc:            vpc,
		VpcSubnets:     props.VpcSubnets,
		SecurityGroups: props.SecurityGroups,
		LogRetention:   props.LogRetention,
		RemovalPolicy:  props.removalPolicy(),
		Description:    desc,
		Override:       props.OverrideFunction,
	})
	fn := c.Function
	// AWS's advice for an SQS event source, checked on the real queue and
	// the function as the override left it: a message must not reappear
	// while a worker still holds it.
	if c.Events.VisibilityTimeout < 6*fn.Timeout {
		panic(fmt.Sprintf("oncepay: %s: the events queue's visibility timeout %s is under 6x the worker function's timeout %s: raise the queue's visibility timeout to at least %s, or lower the function's timeout (Sizing)",
			what, c.Events.VisibilityTimeout, fn.Timeout, 6*fn.Timeout))
	}
	fn.Grant([]string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"}, c.Events.Queue.QueueArn())
	fn.grantKey(c.Events.Key, []string{"kms:Decrypt"})
	c.platformApps = props.PlatformApplicationArns
	c.GrantPush(fn)
	if props.Ledger != nil {
		props.Ledger.Connect(fn, props.LedgerUser)
	}
	if props.EmailFrom != "" {
		c.addEmail(props.EmailFrom)
	}
	suppress(cfn(fn.Function), "Serverless-LambdaDLQ",
		"Invoked by the SQS event-source mapping (a failed message returns to the queue and, after maxReceiveCount deliveries, parks in the queue's own DLQ, EventQueue.Dlq) and by its sweep schedule, whose ticks carry nothing: a failed tick leaves the PENDING rows for the next one, a minute later.")
	c.SweepSchedule = awsevents.NewRule(c.Construct, jsii.String("SweepSchedule"), &awsevents.RuleProps{
		Description: jsii.String("oncepay: finish the PENDING notifications a failed push left"),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Seconds(jsii.Number(SweepRate.Seconds()))),
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(fn.Function, &awseventstargets.LambdaFunctionProps{
			// A tick is worth nothing once the next one is due.
			MaxEventAge:   awscdk.Duration_Seconds(jsii.Number(SweepRate.Seconds())),
			RetryAttempts: jsii.Number(0),
		})},
	})
	suppress(cfn(c.SweepSchedule), "Serverless-EventBusDLQ",
		"A sweep tick carries no data: a tick that fails to invoke the worker loses nothing a DLQ could keep, the PENDING rows stay for the next tick a minute later, and the NotifStuck alarm watches rows that never go out.")

	s := c.Settings
	mp := &awslambda.EventSourceMappingProps{
		Target:                  fn.Function,
		EventSourceArn:          c.Events.Queue.QueueArn(),
		BatchSize:               jsii.Number(float64(s.BatchSize)),
		ReportBatchItemFailures: jsii.Bool(s.ReportBatchItemFailures),
	}
	if s.MaxConcurrency > 0 {
		mp.MaxConcurrency = jsii.Number(float64(s.MaxConcurrency))
	}
	c.Mapping = awslambda.NewEventSourceMapping(c.Construct, jsii.String("Mapping"), mp)
	suppress(cfn(c.Mapping), "Serverless-LambdaEventSourceMappingDestination",
		"Lambda has no on-failure destination for SQS mappings: the queue's redrive policy moves a message that failed maxReceiveCount times to its DLQ, which an alarm watches.")

	if a := newConstructAlarms(c.Construct, props.Alarms); a != nil {
		if c.Events.Dlq != nil {
			a.add(AlarmWorkerDlq, "Events parked in the events DLQ after maxReceiveCount deliveries: a consumer-side failure (ledger, push) needs a look and a redrive.", queueDepth(c.Events.Dlq), 1)
		}
		a.add(AlarmWorkerFnErrors, "The worker function failed invocations.", fn.Function.MetricErrors(periodOpts("Sum")), 1)
		a.add(AlarmWorkerFnThrottles, "The worker function was throttled: credits and pushes wait in the events queue.", fn.Function.MetricThrottles(periodOpts("Sum")), 1)
		a.add(AlarmWorkerOldest, "An event has waited five minutes in the events queue: its merchant's later credits wait behind it (FIFO). Look at the worker's errors; the DLQ takes it after maxReceiveCount receives.",
			c.Events.Queue.MetricApproximateAgeOfOldestMessage(periodOpts("Maximum")), EventsOldestMaxSeconds)
		a.add(AlarmWorkerNotifStuck, "Notifications still not sent after the sweep's give-up horizon, kept as STUCK: the push or email path needs a look; then re-arm them (README).",
			handlerMetric(MetricNotifStuck, FnWorker, "Maximum"), 1)
		c.Alarms = a.all()
	}
	return c
}

// settingOr is the queue's value: the one EventsProps states, else the
// Settings' one; both stated and different is refused.
func settingOr[T comparable](what, name string, stated, setting T, settingsGiven bool) T {
	var zero T
	if stated == zero {
		return setting
	}
	if settingsGiven && setting != zero && setting != stated {
		panic(fmt.Sprintf("oncepay: %s: EventsProps.%s %v and Settings.%s %v disagree: state it once", what, name, stated, name, setting))
	}
	return stated
}

// addEmail adds the email channel: the sender's identity, a configuration
// set that suppresses addresses that bounced or complained and tracks
// reputation, and the right to send with both, nothing else of SES.
func (c *InboxWorker) addEmail(from string) {
	if a, err := mail.ParseAddress(from); err != nil || a.Address != from {
		panic(fmt.Sprintf("oncepay: InboxWorkerProps.EmailFrom %q is not a bare email address", from))
	}
	c.EmailIdentity = awsses.NewEmailIdentity(c.Construct, jsii.String("EmailIdentity"), &awsses.EmailIdentityProps{
		Identity: awsses.Identity_Email(jsii.String(from)),
	})
	c.EmailConfigurationSet = awsses.NewConfigurationSet(c.Construct, jsii.String("EmailConfigurationSet"), &awsses.ConfigurationSetProps{
		SuppressionReasons: awsses.SuppressionReasons_BOUNCES_AND_COMPLAINTS,
		ReputationMetrics:  jsii.Bool(true),
		SendingEnabled:     jsii.Bool(true),
	})
	set := awscdk.Stack_Of(c.Construct).FormatArn(&awscdk.ArnComponents{
		Service: jsii.String("ses"), Resource: jsii.String("configuration-set"), ResourceName: c.EmailConfigurationSet.ConfigurationSetName(),
	})
	c.Function.Grant([]string{"ses:SendEmail"}, c.EmailIdentity.EmailIdentityArn(), set)
	c.Function.SetEnv(map[string]*string{
		stackenv.EmailFrom:             jsii.String(from),
		stackenv.EmailConfigurationSet: c.EmailConfigurationSet.ConfigurationSetName(),
	})
}

// SweepRate is how often the worker's schedule finishes PENDING
// notifications (inbox.NotifSweeper backs off per row on top of it).
const SweepRate = time.Minute

// GrantPush gives fn what the worker pushes with: publish to the caller's
// platform endpoints, to the topic only when the fallback is on, and the
// variables that say so.
func (c *InboxWorker) GrantPush(fn *GoFunction) {
	env := map[string]*string{
		EnvPushTopicFallback: jsii.String(strconv.FormatBool(c.TopicFallback)),
	}
	if c.Push != nil {
		env[EnvPushTopicArn] = c.Push.Topic.TopicArn()
	}
	if c.TopicFallback {
		fn.Grant([]string{"sns:Publish"}, c.Push.Topic.TopicArn())
		fn.grantKey(c.Push.Key, kmsProduce)
	}
	if len(c.platformApps) > 0 {
		var endpoints []*string
		for _, app := range c.platformApps {
			endpoints = append(endpoints, jsii.String(PlatformEndpointsArn(app)))
		}
		fn.Grant([]string{"sns:Publish"}, endpoints...)
		env[EnvPushPlatformApps] = jsii.String(strings.Join(c.platformApps, ","))
		suppressApplies(fn.policy().Node().DefaultChild(), "AwsSolutions-IAM5",
			"sns:Publish to the endpoints of the configured platform applications only: SNS creates an endpoint ARN per device at registration, so the application's endpoint prefix is the narrowest name known at deploy time.",
			endpointFindings(c.platformApps)...)
	}
	fn.SetEnv(env)
}

// PlatformEndpointsArn is the ARN pattern of every endpoint of an SNS
// platform application: arn:…:app/APNS/name -> arn:…:endpoint/APNS/name/*.
func PlatformEndpointsArn(app string) string {
	if *awscdk.Token_IsUnresolved(jsii.String(app)) || !strings.Contains(app, ":app/") {
		panic(fmt.Sprintf("oncepay: platform application ARN must be a literal arn:…:app/<platform>/<name>, got %q", app))
	}
	return strings.Replace(app, ":app/", ":endpoint/", 1) + "/*"
}

func endpointFindings(apps []string) []string {
	var out []string
	for _, a := range apps {
		out = append(out, "Resource::"+PlatformEndpointsArn(a))
	}
	return out
}
