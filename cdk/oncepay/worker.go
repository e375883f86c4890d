package oncepay

import (
	"fmt"
	"net/mail"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsses"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/internal/eventsource"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/stackenv"
)

// InboxWorkerProps configures the worker. The zero value is a working
// worker with its own events queue (and DLQ) and push topic; it needs a
// ledger (Ledger, or ONCEPAY_LEDGER_DSN in Environment) to run, and a push
// target (PlatformApplicationArns, or the sandbox's TopicFallback): without
// either every notification is recorded UNDELIVERABLE.
type InboxWorkerProps struct {
	// Protection of what the construct creates.
	Protection
	// Events is the FIFO queue (with its DLQ) to consume; nil creates one.
	Events      *EventQueue
	EventsProps EventQueueProps
	// Push is the topic notifications go to; nil creates one.
	Push      *PushTopic
	PushProps PushTopicProps
	// PlatformApplicationArns (SNS mobile push, literal ARNs): the worker may
	// publish to the endpoints of these applications.
	PlatformApplicationArns []string
	// TopicFallback sends a push for a caller with no enabled device to the
	// Push topic, where every subscriber sees it: a sandbox's way to watch
	// pushes without a mobile platform application, a cross-caller leak in
	// production. nil is false; the stack sets Profile.PushTopicFallback().
	// Off, such a push is recorded UNDELIVERABLE and the function gets no
	// publish right on the topic.
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
	// Settings of the queue mapping; nil is eventsource.Default().Worker.
	Settings *eventsource.Queue
	// LogRetention of the function's logs; "" is one year.
	LogRetention awslogs.RetentionDays
	// Code of the worker function; nil is build/worker.
	Code             awslambda.Code
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
	Events   *EventQueue
	Push     *PushTopic
	Function *GoFunction
	Mapping  awslambda.EventSourceMapping
	// SweepSchedule invokes the function every SweepRate to finish the
	// PENDING notifications a failed push left (inbox.Function): their own
	// durable trigger, so a push outage never holds back a credit.
	SweepSchedule awsevents.Rule
	Settings      eventsource.Queue
	// TopicFallback is whether pushes with no device go to the topic.
	TopicFallback bool
	// EmailIdentity and EmailConfigurationSet exist when the props name
	// EmailFrom.
	EmailIdentity         awsses.EmailIdentity
	EmailConfigurationSet awsses.ConfigurationSet

	platformApps []string
}

// EnvPushTopicFallback carries InboxWorkerProps.TopicFallback to the
// functions that push ("true" or "false"; see package pushboot).
const EnvPushTopicFallback = notify.EnvTopicFallback

// NewInboxWorker creates the worker.
func NewInboxWorker(scope constructs.Construct, id string, props *InboxWorkerProps) *InboxWorker {
	if props == nil {
		props = &InboxWorkerProps{}
	}
	c := &InboxWorker{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	c.Settings = eventsource.Default().Worker
	if props.Settings != nil {
		c.Settings = *props.Settings
	}
	if err := c.Settings.Validate(); err != nil {
		panic(err)
	}
	sizing := SizingsFor(timingOrDefault(nil)).Worker
	if c.Settings.VisibilityTimeout < 6*sizing.Timeout {
		panic(fmt.Sprintf("oncepay: the events queue's visibility timeout %s is under 6x the worker timeout %s", c.Settings.VisibilityTimeout, sizing.Timeout))
	}
	c.Events = props.Events
	if c.Events == nil {
		ep := props.EventsProps
		ep.Protection = ep.Protection.inherit(props.Protection)
		c.Events = NewEventQueue(c.Construct, "Events", &ep)
	}
	c.Push = props.Push
	if c.Push == nil {
		pp := props.PushProps
		pp.Protection = pp.Protection.inherit(props.Protection)
		c.Push = NewPushTopic(c.Construct, "Push", &pp)
	}

	var vpc awsec2.IVpc
	if props.Ledger != nil {
		vpc = props.Ledger.Cluster.Vpc()
	}
	c.Function = NewGoFunction(c.Construct, "Function", &GoFunctionProps{
		Name:          FnWorker,
		Code:          props.Code,
		Sizing:        sizing,
		Environment:   props.Environment,
		Vpc:           vpc,
		LogRetention:  props.LogRetention,
		RemovalPolicy: props.removalPolicy(),
		Description:   "oncepay worker: events FIFO queue -> inbox, credit, notification",
		Override:      props.OverrideFunction,
	})
	fn := c.Function
	fn.Grant([]string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"}, c.Events.Queue.QueueArn())
	fn.grantKey(c.Events.Key, []string{"kms:Decrypt"})
	c.TopicFallback = props.TopicFallback != nil && *props.TopicFallback
	c.platformApps = props.PlatformApplicationArns
	c.GrantPush(fn)
	if props.Ledger != nil {
		user := props.LedgerUser
		if user == "" {
			user = LedgerAppUser
		}
		props.Ledger.Connect(fn, user)
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
	return c
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
		EnvPushTopicArn:      c.Push.Topic.TopicArn(),
		EnvPushTopicFallback: jsii.String(strconv.FormatBool(c.TopicFallback)),
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
		suppressApplies(fn.Role.Node().FindChild(jsii.String("DefaultPolicy")).Node().DefaultChild(), "AwsSolutions-IAM5",
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
