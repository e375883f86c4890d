package oncepay

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// StackProps configures the deployable stack. The zero value (with a
// Profile) is the sandbox the README deploys.
type StackProps struct {
	awscdk.StackProps
	// Profile: "" or "sandbox", or "prod". It sets removal policies, deletion
	// protection, NAT count, ledger readers and proxy, backup and log
	// retention, and the user pool's MFA and feature plan.
	Profile Profile
	// NatGateways overrides the profile's count (sandbox 1, prod 2).
	NatGateways *float64
	// DataPlane: fields left zero come from the profile.
	DataPlane DataPlaneProps
	// Timing: the deadline rules the api's timeout derives from (nil:
	// cdk/oncepay/config.Default()).
	Timing *Timing
	// Auth: an external JWT issuer/audience; empty creates a Cognito user
	// pool (MFA and feature plan from the profile unless set).
	Auth AuthProps
	// Alb adds the ALB front door; nil (or no CertificateArn) adds none.
	Alb *AlbProps
	// LedgerProxy overrides the profile's choice (sandbox off, prod on).
	LedgerProxy *bool
	// Psp: the Stripe secret (an existing one by ARN, or a created
	// placeholder) and an optional Stripe-compatible base URL.
	Psp PspProps
	// PlatformApplicationArns: SNS mobile push applications whose
	// endpoints the worker may publish to (the push topic is always there).
	PlatformApplicationArns []string
	// EmailFrom adds the email channel (InboxWorkerProps.EmailFrom).
	EmailFrom string
	// ResolverReservedConcurrency: nil is the profile's
	// (Profile.ResolverReservedConcurrency: 1 in prod, none in a sandbox);
	// 0 reserves none (accounts whose concurrency quota is under 100 cannot
	// reserve any).
	ResolverReservedConcurrency *int
	// AvailabilityZoneIds pins the VPC's AZs by id (NetworkProps); across
	// Regions each stack takes the two of its Region from the list.
	AvailabilityZoneIds []string
	// Throttle of the HTTP API's stage.
	Throttle *awsapigatewayv2.ThrottleSettings
	// Regions places the stack in a deployment across Regions (Regions.Here
	// is its Region; NewRegionStacks makes them all); nil is one Region.
	Regions *Regions
}

// Stack is the oncepay deployment.
type Stack struct {
	awscdk.Stack
	Profile   Profile
	Timing    Timing
	Data      *DataPlane
	Psp       *Psp
	Api       *IdempotentApi
	Relay     *OutboxRelay
	Worker    *InboxWorker
	Resolver  *GoFunction
	Webhook   *GoFunction
	Migration *LedgerMigration
	// Reconciliation is the daily reconciliation against the PSP's records
	// (its schedule only in the primary Region across Regions).
	Reconciliation *Reconciliation
	// Totals is the stream job (docs/stream-job.md).
	Totals *StreamTotals
	// Devices is the devices function (PUT/DELETE /devices/{device_id}).
	Devices *DeviceRegistry
	// Cache is the dedup cache of the logical messages; nil without the
	// email channel (StackProps.EmailFrom).
	Cache *DedupCache
	// ResolverSchedule runs the resolver every ResolverRate.
	ResolverSchedule awsevents.Rule
	// AsyncFailures receives failed asynchronous invocations of the
	// resolver, the reconciliation and the migration function, and their
	// schedule events EventBridge could not deliver.
	AsyncFailures awssqs.Queue
	// Alb is nil unless StackProps.Alb has a certificate.
	Alb        *AlbFrontDoor
	Monitoring *Monitoring
	// Regions is StackProps.Regions: nil in one Region.
	Regions *Regions
}

// Output ids: the local provisioner and the integration tests read these.
const (
	OutputIdemTableName   = "IdemTableName"
	OutputOutboxTableName = "OutboxTableName"
	OutputOutboxStreamArn = "OutboxStreamArn"
	OutputEventsQueueURL  = "EventsQueueUrl"
	OutputEventsQueueArn  = "EventsQueueArn"
	OutputEventsDlqURL    = "EventsDlqUrl"
	OutputEventsDlqArn    = "EventsDlqArn"
	OutputPushTopicArn    = "PushTopicArn"
	OutputLedgerSecretArn = "LedgerSecretArn"
	OutputLedgerEndpoint  = "LedgerEndpoint"
	OutputTotalsTableName = "TotalsTableName"
	OutputRecountQueueURL = "RecountQueueUrl"

	OutputHTTPAPIURL       = "HttpApiUrl"
	OutputWebhookURL       = "WebhookUrl"
	OutputUserPoolID       = "UserPoolId"
	OutputUserPoolClientID = "UserPoolClientId"
	OutputPSPKeySecretArn  = "PspKeySecretArn"
	OutputWebhookSecretArn = "WebhookSecretArn"
	OutputAlarmTopicArn    = "AlarmTopicArn"
	OutputDashboardName    = "DashboardName"
	OutputAlbURL           = "AlbUrl"
	OutputHomesTableName   = "HomesTableName"
)

// NewStack creates the stack. It panics on an unknown profile, as CDK
// constructs do on invalid props.
func NewStack(scope constructs.Construct, id string, props *StackProps) *Stack {
	if props == nil {
		props = &StackProps{}
	}
	profile, err := ParseProfile(string(props.Profile))
	if err != nil {
		panic(err)
	}
	sp := props.StackProps
	if sp.TerminationProtection == nil {
		sp.TerminationProtection = jsii.Bool(profile.IsProd())
	}
	if r := props.Regions; r != nil {
		sp.Env = regionalEnv(r, props)
	}
	s := &Stack{Stack: awscdk.NewStack(scope, jsii.String(id), &sp), Profile: profile, Regions: props.Regions}

	dp := props.DataPlane
	dp.Protection = dp.Protection.inherit(ProtectionFor(profile, nil))
	if dp.LogRetention == "" {
		dp.LogRetention = profile.LogRetention()
	}
	if dp.Network.NatGateways == nil {
		dp.Network.NatGateways = props.NatGateways
	}
	if dp.Network.NatGateways == nil {
		dp.Network.NatGateways = jsii.Number(profile.NatGateways())
	}
	if dp.Network.AvailabilityZoneIds == nil && props.AvailabilityZoneIds != nil {
		dp.Network.AvailabilityZoneIds = props.AvailabilityZoneIds
		if props.Regions != nil {
			dp.Network.AvailabilityZoneIds = AvailabilityZoneIdsIn(props.Regions.Here, props.AvailabilityZoneIds)
		}
	}
	if dp.Network.InterfaceEndpoints == nil {
		dp.Network.InterfaceEndpoints = profile.InterfaceEndpoints()
	}
	if dp.Ledger.Readers == 0 {
		dp.Ledger.Readers = profile.LedgerReaders()
	}
	if dp.Ledger.BackupRetention == nil {
		dp.Ledger.BackupRetention = days(profile.BackupRetentionDays())
	}
	switch {
	case props.LedgerProxy != nil:
		dp.Ledger.Proxy = *props.LedgerProxy
	case !dp.Ledger.Proxy:
		dp.Ledger.Proxy = profile.LedgerProxy()
	}
	dp.Regions = props.Regions
	s.Data = NewDataPlane(s.Stack, "Data", &dp)
	s.Timing = timingOrDefault(props.Timing)
	s.addFunctions(props)
	s.Monitoring = newMonitoring(s)
	s.addOutputs()
	return s
}

// addFunctions wires the functions (and the migration) to the data plane,
// each with only what it touches.
func (s *Stack) addFunctions(props *StackProps) {
	d := s.Data
	protection := ProtectionFor(s.Profile, d.Key)
	retention := props.DataPlane.LogRetention
	if retention == "" {
		retention = s.Profile.LogRetention()
	}
	removal := s.Profile.RemovalPolicy()
	sizes := SizingsFor(s.Timing)

	psp := props.Psp
	psp.Protection = psp.Protection.inherit(protection)
	s.Psp = NewPsp(s.Stack, "Psp", &psp)

	auth := props.Auth
	if auth.Issuer == "" {
		if auth.Mfa == "" {
			auth.Mfa = s.Profile.UserPoolMfa()
		}
		if auth.FeaturePlan == "" {
			auth.FeaturePlan = s.Profile.UserPoolFeaturePlan()
		}
	}
	timing := s.Timing
	// The stack watches every part from its Monitoring (one topic, one
	// dashboard): the constructs' own alarms would repeat those.
	own := AlarmProps{Disabled: true}
	s.Api = NewIdempotentApi(s.Stack, "Api", &IdempotentApiProps{
		Code:         CodeFromBuild(s.Stack, FnAPI),
		Alarms:       own,
		Protection:   protection,
		Claims:       d.Claims,
		Outbox:       d.Outbox,
		Ledger:       d.Ledger,
		Psp:          s.Psp,
		Timing:       &timing,
		Auth:         auth,
		Throttle:     props.Throttle,
		LogRetention: retention,
	})
	if d.Homes != nil {
		d.Homes.GrantRead(s.Api.Function) // it routes every request by its caller's home
	}
	s.Relay = NewOutboxRelay(s.Stack, "Relay", &OutboxRelayProps{
		Code:         CodeFromBuild(s.Stack, FnRelay),
		Alarms:       own,
		Protection:   protection,
		Outbox:       d.Outbox,
		Events:       d.Events,
		LogRetention: retention,
	})
	s.Worker = NewInboxWorker(s.Stack, "Worker", &InboxWorkerProps{
		Code:                    CodeFromBuild(s.Stack, FnWorker),
		Alarms:                  own,
		Protection:              protection,
		Events:                  d.Events,
		Push:                    d.Push,
		PlatformApplicationArns: props.PlatformApplicationArns,
		TopicFallback:           jsii.Bool(s.Profile.PushTopicFallback()),
		EmailFrom:               props.EmailFrom,
		Ledger:                  d.Ledger,
		LogRetention:            retention,
	})
	if props.EmailFrom != "" {
		// The card-declined reminder goes by email, once per card and
		// window: the dedup cache comes with the email channel.
		s.Cache = NewDedupCache(s.Stack, "DedupCache", &DedupCacheProps{
			Protection: protection, Vpc: d.Vpc, HighlyAvailable: s.Profile.IsProd(),
		})
		s.Cache.Connect(s.Worker.Function)
	}

	s.Devices = NewDeviceRegistry(s.Stack, "Devices", &DeviceRegistryProps{
		Code:                    CodeFromBuild(s.Stack, FnDevices),
		Protection:              protection,
		Api:                     s.Api,
		Ledger:                  d.Ledger,
		PlatformApplicationArns: props.PlatformApplicationArns,
		LogRetention:            retention,
	})

	s.Totals = NewStreamTotals(s.Stack, "Totals", &StreamTotalsProps{
		Code:         CodeFromBuild(s.Stack, FnTotals),
		RecountCode:  CodeFromBuild(s.Stack, FnRecount),
		Protection:   protection,
		Outbox:       d.Outbox,
		Ledger:       d.Ledger,
		LogRetention: retention,
	})

	s.AsyncFailures = newFailureQueue(s.Stack, "AsyncFailures", protection, nil)
	suppress(cfn(s.AsyncFailures), "Serverless-SQSRedrivePolicy",
		"This is the dead-letter queue of the resolver's, the reconciliation's and the migration's asynchronous invocations and of the resolver's and the reconciliation's schedule targets; an alarm fires on its depth.")

	// The resolver: a sweep a minute, one at a time in prod.
	reserved := props.Profile.ResolverReservedConcurrency()
	if props.ResolverReservedConcurrency != nil {
		reserved = *props.ResolverReservedConcurrency
	}
	s.Resolver = NewGoFunction(s.Stack, "Resolver", &GoFunctionProps{
		Name:                FnResolver,
		Code:                CodeFromBuild(s.Stack, FnResolver),
		Sizing:              sizes.Resolver,
		Environment:         timingEnv(timing),
		Vpc:                 d.Vpc,
		ReservedConcurrency: reserved,
		DeadLetterQueue:     s.AsyncFailures,
		LogRetention:        retention,
		RemovalPolicy:       removal,
		Description:         "oncepay resolver: settles UNKNOWN and stale PENDING payments by replaying the PSP call with the same key; re-drives events the worker has not processed",
	})
	d.Ledger.Connect(s.Resolver, LedgerAppUser)
	s.Psp.GrantKeyRead(s.Resolver) // the sweep's replays and the refund follower charge and refund
	s.grantOutboxPut(s.Resolver)
	// The outbox sweep's re-drive: an UpdateItem that rewrites an item the
	// worker has not processed, so its stream carries a new record.
	s.Resolver.Grant([]string{"dynamodb:UpdateItem"}, d.Outbox.Table.TableArn())
	// Finalize: a stored pointer becomes the final answer (conditional update).
	s.Resolver.Grant([]string{"dynamodb:UpdateItem"}, d.Claims.Table.TableArn())
	s.Resolver.grantKey(d.Claims.Key, kmsWrite)
	s.Resolver.SetEnv(map[string]*string{EnvIdemTable: d.Claims.Table.TableName()})
	if props.Regions != nil {
		// A standby's resolver and worker sweeps wait while its ledger is
		// read-only, instead of failing every minute until a promotion.
		for _, fn := range []*GoFunction{s.Resolver, s.Worker.Function} {
			fn.SetEnv(map[string]*string{EnvStandbyCheck: jsii.String("true")})
		}
		// Read-only in the Region that homes the callers is an outage; a
		// ledger that does not answer is a standby's wait elsewhere (a
		// global database's secondary serves nothing at its writer endpoint
		// until its promotion) and an outage there.
		d.Homes.GrantReadDefault(s.Resolver)
		d.Homes.GrantReadDefault(s.Worker.Function)
		// A failed Region's copy of a payment its lag lost gets its row.
		s.Worker.Function.SetEnv(map[string]*string{EnvAdoptLost: jsii.String("true")})
	}
	if r := props.Regions; r != nil && r.Strong() {
		// MRSC has no TTL: the resolver deletes expired key records (a
		// scan, and a delete conditional on the record still being expired).
		s.Resolver.Grant([]string{"dynamodb:Scan", "dynamodb:DeleteItem"}, d.Claims.Table.TableArn())
		s.Resolver.SetEnv(map[string]*string{EnvClaimsSweep: jsii.String("true")})
	}
	s.ResolverSchedule = awsevents.NewRule(s.Stack, jsii.String("ResolverSchedule"), &awsevents.RuleProps{
		Description: jsii.String("oncepay: run the resolver's sweep"),
		Schedule:    awsevents.Schedule_Rate(seconds(ResolverRate)),
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(s.Resolver.Function, &awseventstargets.LambdaFunctionProps{
			DeadLetterQueue: s.AsyncFailures,
			// A tick is worth nothing once the next one is due.
			MaxEventAge:   seconds(ResolverRate),
			RetryAttempts: jsii.Number(2),
		})},
	})

	// The reconciliation: daily, the last word on money. Across Regions a
	// standby's ledger is read-only, so only the primary's runs on its own;
	// a standby's function is there for an operator after a promotion.
	s.Reconciliation = NewReconciliation(s.Stack, "Reconcile", &ReconciliationProps{
		Code:            CodeFromBuild(s.Stack, FnReconcile),
		Alarms:          own,
		Protection:      protection,
		Ledger:          d.Ledger,
		Psp:             s.Psp,
		Outbox:          d.Outbox,
		NoSchedule:      props.Regions != nil && !props.Regions.IsPrimary(),
		DeadLetterQueue: s.AsyncFailures,
		Sizing:          &sizes.Reconcile,
		LogRetention:    retention,
	})

	// The webhook: the PSP's signed events, no JWT.
	s.Webhook = NewGoFunction(s.Stack, "Webhook", &GoFunctionProps{
		Name:          FnWebhook,
		Code:          CodeFromBuild(s.Stack, FnWebhook),
		Sizing:        sizes.Webhook,
		Vpc:           d.Vpc,
		LogRetention:  retention,
		RemovalPolicy: removal,
		Description:   "oncepay webhook: POST /webhooks/psp, Stripe-signed events -> inbox + allowed state moves",
	})
	d.Ledger.Connect(s.Webhook, LedgerAppUser)
	s.Psp.GrantWebhookSecretRead(s.Webhook) // the signing secret alone: never the API key
	s.grantOutboxPut(s.Webhook)
	suppress(cfn(s.Webhook.Function), "Serverless-LambdaDLQ",
		"Invoked synchronously by API Gateway (or the ALB): a failure answers the PSP with a 5xx and the PSP redelivers the event (Stripe retries for days); Lambda never queues these events.")
	s.Api.AddUnauthenticatedRoute(RouteWebhook, s.Webhook.Function,
		"The PSP cannot present a JWT: each webhook is authenticated by its Stripe-Signature (HMAC-SHA256 over the timestamp and body with the endpoint secret, timestamp tolerance enforced), verified by the webhook function before anything changes; a forged or stale one gets 400.")

	// A secondary of the global database is read-only and has no admin
	// login: the schema and the application user replicate from the
	// primary, where the migration runs.
	if r := props.Regions; r == nil || r.IsPrimary() {
		s.Migration = NewLedgerMigration(s.Stack, "Migration", &LedgerMigrationProps{
			Code:            CodeFromBuild(s.Stack, FnMigrate),
			Ledger:          d.Ledger,
			DeadLetterQueue: s.AsyncFailures,
			LogRetention:    retention,
			RemovalPolicy:   removal,
		})
		// Every trigger of a function that needs the ledger waits for the
		// schema (and so for the writer instance the migration waits for):
		// a tick before it errors, retries, parks in AsyncFailures and
		// holds its alarm on after a clean first deploy.
		for _, t := range s.ledgerTriggers() {
			t.Node().AddDependency(s.Migration.Resource)
		}
	}

	if props.Alb != nil && props.Alb.CertificateArn != "" {
		s.Alb = NewAlbFrontDoor(s.Stack, "Alb", &AlbFrontDoorProps{
			AlbProps:   *props.Alb,
			Protection: protection,
			Vpc:        d.Vpc,
			Api:        s.Api.Function.Function,
			Webhook:    s.Webhook.Function,
			UserPool:   s.Api.UserPool,
		})
		// The api takes an ALB event's caller only from claims this load
		// balancer signed (internal/albauth): it must know which one, and
		// where its keys are published in this partition.
		s.Api.Function.SetEnv(map[string]*string{
			EnvAlbArn:     s.Alb.LoadBalancer.LoadBalancerArn(),
			EnvAlbKeysURL: props.Alb.keysURL(),
		})
	}
}

// ledgerTriggers are the schedules and event-source mappings that run a
// function which reads or writes the ledger.
func (s *Stack) ledgerTriggers() []constructs.IConstruct {
	out := []constructs.IConstruct{s.ResolverSchedule, s.Worker.SweepSchedule, s.Worker.Mapping}
	if s.Reconciliation.Schedule != nil {
		out = append(out, s.Reconciliation.Schedule)
	}
	for _, m := range s.Totals.RecountMappings {
		out = append(out, m)
	}
	return out
}

// grantOutboxPut lets fn put outbox items (the event id is derived, so a
// re-put is the same item).
func (s *Stack) grantOutboxPut(fn *GoFunction) { s.Data.Outbox.grantPut(fn) }

// addOutputs: each value is a plain Ref or Fn::GetAtt so the local
// provisioner can resolve it.
func (s *Stack) addOutputs() {
	d := s.Data
	out := func(id, desc string, value *string) {
		awscdk.NewCfnOutput(s.Stack, jsii.String(id), &awscdk.CfnOutputProps{Value: value, Description: jsii.String(desc)})
	}
	out(OutputIdemTableName, "idem table (idempotency-key claims)", d.Claims.Table.TableName())
	out(OutputOutboxTableName, "outbox table", d.Outbox.Table.TableName())
	out(OutputOutboxStreamArn, "outbox table stream (NEW_IMAGE), read by the relay", d.Outbox.Table.TableStreamArn())
	out(OutputEventsQueueURL, "events FIFO queue URL", d.Events.Queue.QueueUrl())
	out(OutputEventsQueueArn, "events FIFO queue ARN", d.Events.Queue.QueueArn())
	out(OutputEventsDlqURL, "events DLQ URL", d.Events.Dlq.QueueUrl())
	out(OutputEventsDlqArn, "events DLQ ARN", d.Events.Dlq.QueueArn())
	out(OutputPushTopicArn, "push notifications topic", d.Push.Topic.TopicArn())
	if d.Ledger.Secret != nil { // a secondary of the global database has none
		out(OutputLedgerSecretArn, "ledger admin secret (Secrets Manager)", d.Ledger.Secret.SecretArn())
	}
	out(OutputLedgerEndpoint, "ledger writer endpoint (host)", d.Ledger.Cluster.ClusterEndpoint().Hostname())
	out(OutputTotalsTableName, "the stream job's totals table (merchants' daily totals, partial per shard)", s.Totals.Table.TableName())
	out(OutputRecountQueueURL, "the stream job's recount queue (late copies to recount)", s.Totals.Recount.QueueUrl())

	out(OutputHTTPAPIURL, "payment API base URL (POST payments with a JWT)", s.Api.Url())
	out(OutputWebhookURL, "PSP webhook endpoint (register it with Stripe)", awscdk.Fn_Join(jsii.String(""), jsii.Strings(*s.Api.Url(), "webhooks/psp")))
	if s.Api.UserPool != nil {
		out(OutputUserPoolID, "Cognito user pool of the API's callers", s.Api.UserPool.UserPoolId())
		out(OutputUserPoolClientID, "Cognito app client (the JWT audience)", s.Api.UserPoolClient.UserPoolClientId())
	}
	out(OutputPSPKeySecretArn, "PSP API key secret, read by the api, the resolver and the reconciliation: put {\"api_key\": the Stripe key} here", s.Psp.KeySecret.SecretArn())
	out(OutputWebhookSecretArn, "PSP webhook signing secret, read by the webhook: put {\"webhook_secret\": the endpoint's whsec_...} here", s.Psp.WebhookSecret.SecretArn())
	out(OutputAlarmTopicArn, "alarm notifications topic (subscribe to it)", s.Monitoring.Topic.TopicArn())
	out(OutputDashboardName, "CloudWatch dashboard", s.Monitoring.Dashboard.DashboardName())
	if d.Homes != nil {
		out(OutputHomesTableName, "home record table (a global table: each caller's home Region)", d.Homes.Table.TableName())
	}
	if s.Alb != nil {
		out(OutputAlbURL, "ALB front door (point the certificate's name at it)", awscdk.Fn_Join(jsii.String(""), jsii.Strings("https://", *s.Alb.LoadBalancer.LoadBalancerDnsName(), "/")))
	}
}

// regionalEnv checks a stack's place across Regions and returns its
// environment: Here's Region, and whatever account props name (none is
// fine: nothing here needs one).
func regionalEnv(r *Regions, props *StackProps) *awscdk.Environment {
	if r.Here == "" {
		panic("oncepay: StackProps.Regions.Here is empty: set this stack's Region, or make the stacks with NewRegionStacks")
	}
	if err := r.Validate(); err != nil {
		panic(err)
	}
	if err := props.checkRegionBound(); err != nil {
		panic(err)
	}
	env := awscdk.Environment{Region: jsii.String(r.Here)}
	if e := props.Env; e != nil {
		if e.Region != nil && *e.Region != r.Here {
			panic(fmt.Sprintf("oncepay: StackProps.Env.Region %s is not Regions.Here %s", *e.Region, r.Here))
		}
		env.Account = e.Account
	}
	return &env
}
