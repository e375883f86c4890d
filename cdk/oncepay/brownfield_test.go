package oncepay_test

// The constructs in someone else's stack (issue 21): resources made
// elsewhere, a platform team's role, an existing VPC, a key of their own,
// and the checks that refuse at synth what would fail at run time.

import (
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay"
)

const (
	platformKeyArn  = "arn:aws:kms:eu-west-1:111111111111:key/11111111-2222-3333-4444-555555555555"
	platformRoleArn = "arn:aws:iam::111111111111:role/platform-worker"
	eventsQueueArn  = "arn:aws:sqs:eu-west-1:111111111111:payments-events.fifo"
	eventsDlqArn    = "arn:aws:sqs:eu-west-1:111111111111:payments-events-dlq.fifo"
	pushTopicArn    = "arn:aws:sns:eu-west-1:111111111111:payments-push"
	outboxTableArn  = "arn:aws:dynamodb:eu-west-1:111111111111:table/payments-outbox"
	outboxStreamArn = outboxTableArn + "/stream/2026-01-01T00:00:00.000"
)

var brownfieldEnv = &awscdk.Environment{Account: jsii.String("111111111111"), Region: jsii.String("eu-west-1")}

// platform is what a platform team hands an architect: a key, a role, a
// VPC with private subnets, and the events queue with its DLQ.
type platform struct {
	key    awskms.IKey
	role   awsiam.IRole
	vpc    awsec2.IVpc
	events *oncepay.EventQueue
}

func newPlatform(s awscdk.Stack) platform {
	key := awskms.Key_FromKeyArn(s, jsii.String("PlatformKey"), jsii.String(platformKeyArn))
	return platform{
		key:  key,
		role: awsiam.Role_FromRoleArn(s, jsii.String("PlatformRole"), jsii.String(platformRoleArn), nil),
		vpc: awsec2.Vpc_FromVpcAttributes(s, jsii.String("PlatformVpc"), &awsec2.VpcAttributes{
			VpcId:             jsii.String("vpc-0123456789abcdef0"),
			AvailabilityZones: jsii.Strings("eu-west-1a", "eu-west-1b"),
			PrivateSubnetIds:  jsii.Strings("subnet-0000000000000000c", "subnet-0000000000000000d"),
		}),
		events: &oncepay.EventQueue{
			Queue: awssqs.Queue_FromQueueAttributes(s, jsii.String("PlatformEvents"), &awssqs.QueueAttributes{
				QueueArn: jsii.String(eventsQueueArn), KeyArn: jsii.String(platformKeyArn), Fifo: jsii.Bool(true),
			}),
			Dlq:               awssqs.Queue_FromQueueArn(s, jsii.String("PlatformEventsDlq"), jsii.String(eventsDlqArn)),
			VisibilityTimeout: 3 * time.Minute,
			MaxReceiveCount:   5,
		},
	}
}

// policyFor collects, from every IAM policy attached to the role named
// role, each action and the resources it is granted on (rendered).
func policyFor(js map[string]any, role string) map[string][]string {
	out := map[string][]string{}
	for _, p := range ofType(js, "AWS::IAM::Policy") {
		props := p["Properties"].(map[string]any)
		if !strings.Contains(render(props["Roles"]), role) {
			continue
		}
		doc := props["PolicyDocument"].(map[string]any)
		for _, st := range doc["Statement"].([]any) {
			st := st.(map[string]any)
			for _, a := range strs(st["Action"]) {
				res := st["Resource"]
				if l, ok := res.([]any); ok {
					for _, r := range l {
						out[a] = append(out[a], render(r))
					}
				} else {
					out[a] = append(out[a], render(res))
				}
			}
		}
	}
	return out
}

func wantGrant(t *testing.T, grants map[string][]string, action, resource string) {
	t.Helper()
	for _, r := range grants[action] {
		if r == resource || (resource != "*" && strings.Contains(r, resource)) {
			return
		}
	}
	t.Errorf("%s on %s not granted; granted on %v", action, resource, grants[action])
}

// TestInboxWorkerInAPlatformTeamsStack: an imported queue under the
// platform's key, an imported topic, the platform's role, an existing VPC.
// The grants land on that role (kms:Decrypt on the platform's key among
// them), the function sits in the VPC's subnets, the construct makes no
// role, and its alarms watch the DLQ; nag is clean.
func TestInboxWorkerInAPlatformTeamsStack(t *testing.T) {
	var c *oncepay.InboxWorker
	stack, tmpl, js := synthAloneIn(t, brownfieldEnv, func(s awscdk.Stack) {
		p := newPlatform(s)
		props := workerProps(s)
		props.Events = p.events
		props.Push = &oncepay.PushTopic{Topic: awssns.Topic_FromTopicArn(s, jsii.String("PlatformPush"), jsii.String(pushTopicArn)), Key: p.key}
		props.Role, props.Vpc = p.role, p.vpc
		props.TopicFallback = jsii.Bool(true)
		c = oncepay.NewInboxWorker(s, "Worker", props)
	})
	check(t, "no role made", func() { tmpl.ResourceCountIs(jsii.String("AWS::IAM::Role"), jsii.Number(0)) })
	grants := policyFor(js, "platform-worker")
	wantGrant(t, grants, "sqs:ReceiveMessage", eventsQueueArn)
	wantGrant(t, grants, "kms:Decrypt", platformKeyArn)
	wantGrant(t, grants, "sns:Publish", pushTopicArn)
	wantGrant(t, grants, "kms:GenerateDataKey", platformKeyArn)
	wantGrant(t, grants, "ec2:CreateNetworkInterface", "*")
	wantGrant(t, grants, "logs:PutLogEvents", "Logs")
	check(t, "in the VPC's private subnets, as the platform's role", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
			"Role":      platformRoleArn,
			"VpcConfig": obj(map[string]any{"SubnetIds": exact("subnet-0000000000000000c", "subnet-0000000000000000d")}),
		}))
	})
	check(t, "the mapping reads the imported queue", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), obj(map[string]any{"EventSourceArn": eventsQueueArn}))
	})
	if c.Settings.VisibilityTimeout != 3*time.Minute || c.Settings.MaxReceiveCount != 5 {
		t.Errorf("Settings %+v: want the queue's own visibility and receive count", c.Settings)
	}
	if _, ok := c.Alarms[oncepay.AlarmWorkerDlq]; !ok {
		t.Errorf("alarms %v: no DLQ alarm over the given DLQ", keys(c.Alarms))
	}
	nagClean(t, stack)
}

// TestOutboxRelayInAPlatformTeamsStack: an imported outbox table (with its
// stream ARN and key) and an imported queue; the grants on the platform's
// role name the stream, the key and the queue.
func TestOutboxRelayInAPlatformTeamsStack(t *testing.T) {
	stack, tmpl, js := synthAloneIn(t, brownfieldEnv, func(s awscdk.Stack) {
		p := newPlatform(s)
		props := relayProps(s)
		props.Outbox = &oncepay.OutboxTable{Table: awsdynamodb.Table_FromTableAttributes(s, jsii.String("PlatformOutbox"), &awsdynamodb.TableAttributes{
			TableArn: jsii.String(outboxTableArn), TableStreamArn: jsii.String(outboxStreamArn), EncryptionKey: p.key,
		})}
		props.Events = p.events
		props.Role = p.role
		oncepay.NewOutboxRelay(s, "Relay", props)
	})
	check(t, "no role made", func() { tmpl.ResourceCountIs(jsii.String("AWS::IAM::Role"), jsii.Number(0)) })
	grants := policyFor(js, "platform-worker")
	wantGrant(t, grants, "dynamodb:GetRecords", outboxStreamArn)
	wantGrant(t, grants, "kms:Decrypt", platformKeyArn)
	wantGrant(t, grants, "sqs:SendMessage", eventsQueueArn)
	check(t, "the mapping reads the imported stream", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), obj(map[string]any{"EventSourceArn": outboxStreamArn}))
	})
	nagClean(t, stack)
}

// TestIdempotentApiInAPlatformTeamsStack: an imported claim table (a
// TableV2 reference) under the platform's key, the platform's role and VPC.
func TestIdempotentApiInAPlatformTeamsStack(t *testing.T) {
	stack, tmpl, js := synthAloneIn(t, brownfieldEnv, func(s awscdk.Stack) {
		p := newPlatform(s)
		props := apiProps(s)
		props.Claims = &oncepay.ClaimTable{Table: awsdynamodb.TableV2_FromTableAttributes(s, jsii.String("PlatformClaims"), &awsdynamodb.TableAttributesV2{
			TableName: jsii.String("payments-claims"), EncryptionKey: p.key,
		})}
		props.Role, props.Vpc = p.role, p.vpc
		oncepay.NewIdempotentApi(s, "Api", props)
	})
	check(t, "no function role made", func() {
		for id := range ofType(js, "AWS::IAM::Role") {
			if strings.Contains(id, "Function") {
				t.Errorf("role %s made beside the given one", id)
			}
		}
	})
	grants := policyFor(js, "platform-worker")
	wantGrant(t, grants, "dynamodb:PutItem", "payments-claims")
	wantGrant(t, grants, "kms:GenerateDataKey", platformKeyArn)
	wantGrant(t, grants, "ec2:CreateNetworkInterface", "*")
	check(t, "VPC", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
			"VpcConfig": obj(map[string]any{"SubnetIds": exact("subnet-0000000000000000c", "subnet-0000000000000000d")}),
		}))
	})
	nagClean(t, stack)
}

// TestAnOverridesRoleAndVpcGetTheWiring: a role and a VPC set in the
// function override (the escape hatch) still get every grant and the
// network-interface permissions, and no orphaned role is left behind.
func TestAnOverridesRoleAndVpcGetTheWiring(t *testing.T) {
	var c *oncepay.InboxWorker
	var role awsiam.Role
	stack, _, js := synthAlone(t, func(s awscdk.Stack) {
		role = awsiam.NewRole(s, jsii.String("TheirRole"), &awsiam.RoleProps{AssumedBy: awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil)})
		vpc := awsec2.NewVpc(s, jsii.String("TheirVpc"), &awsec2.VpcProps{MaxAzs: jsii.Number(2), NatGateways: jsii.Number(1)})
		props := workerProps(s)
		props.OverrideFunction = func(fp *awslambda.FunctionProps) {
			fp.Role = role
			fp.Vpc = vpc
		}
		c = oncepay.NewInboxWorker(s, "Worker", props)
	})
	if *c.Function.Role.RoleArn() != *role.RoleArn() {
		t.Errorf("the function's Role is not the override's")
	}
	if c.Function.Node().TryFindChild(jsii.String("Role")) != nil {
		t.Error("an orphaned role was made beside the override's")
	}
	theirs := logicalIDIn(t, stack, role)
	grants := policyFor(js, theirs)
	wantGrant(t, grants, "sqs:ReceiveMessage", "Events")
	wantGrant(t, grants, "ec2:CreateNetworkInterface", "*")
	wantGrant(t, grants, "logs:PutLogEvents", "Logs")
	if c.Function.SecurityGroup == nil {
		t.Error("no security group for the override's VPC")
	}
}

// TestARoleThatRefusesGrantsFailsTheSynth: an immutable imported role would
// deploy a function without its permissions; the synth says so instead.
func TestARoleThatRefusesGrantsFailsTheSynth(t *testing.T) {
	panicsWith(t, "does not take the statements", func(s awscdk.Stack) {
		props := workerProps(s)
		props.Role = awsiam.Role_FromRoleArn(s, jsii.String("Locked"), jsii.String(platformRoleArn), &awsiam.FromRoleArnOptions{Mutable: jsii.Bool(false)})
		oncepay.NewInboxWorker(s, "Worker", props)
	})
}

// TestCodeIsRequired: no construct falls back to a path relative to the
// working directory.
func TestCodeIsRequired(t *testing.T) {
	panicsWith(t, "InboxWorkerProps.Code is required", func(s awscdk.Stack) { oncepay.NewInboxWorker(s, "W", nil) })
	panicsWith(t, "OutboxRelayProps.Code is required", func(s awscdk.Stack) { oncepay.NewOutboxRelay(s, "R", &oncepay.OutboxRelayProps{}) })
	panicsWith(t, "IdempotentApiProps.Code is required", func(s awscdk.Stack) { oncepay.NewIdempotentApi(s, "A", nil) })
	panicsWith(t, "needs Code", func(s awscdk.Stack) {
		oncepay.NewGoFunction(s, "F", &oncepay.GoFunctionProps{Name: "x", Sizing: oncepay.Sizing{Timeout: time.Second, MemoryMB: 128}})
	})
}

// TestAQueueMadeElsewhereMustStateWhatCannotBeRead: its key (else no kms
// grant), its visibility timeout and receive count (else no 6x check), and
// it must be FIFO.
func TestAQueueMadeElsewhereMustStateWhatCannotBeRead(t *testing.T) {
	imported := func(s awscdk.Stack, arn string) awssqs.IQueue {
		return awssqs.Queue_FromQueueArn(s, jsii.String("Q"), jsii.String(arn))
	}
	for name, c := range map[string]struct {
		want string
		q    func(awscdk.Stack) *oncepay.EventQueue
	}{
		"no key": {"its key is unknown", func(s awscdk.Stack) *oncepay.EventQueue {
			return &oncepay.EventQueue{Queue: imported(s, eventsQueueArn), VisibilityTimeout: 3 * time.Minute, MaxReceiveCount: 5}
		}},
		"no visibility": {"state its visibility timeout", func(s awscdk.Stack) *oncepay.EventQueue {
			return &oncepay.EventQueue{Queue: imported(s, eventsQueueArn), SqsManagedEncryption: true, MaxReceiveCount: 5}
		}},
		"no receive count": {"maxReceiveCount", func(s awscdk.Stack) *oncepay.EventQueue {
			return &oncepay.EventQueue{Queue: imported(s, eventsQueueArn), SqsManagedEncryption: true, VisibilityTimeout: 3 * time.Minute}
		}},
		"standard queue": {"must be FIFO", func(s awscdk.Stack) *oncepay.EventQueue {
			return &oncepay.EventQueue{Queue: imported(s, strings.TrimSuffix(eventsQueueArn, ".fifo")), SqsManagedEncryption: true, VisibilityTimeout: 3 * time.Minute, MaxReceiveCount: 5}
		}},
		"no DLQ on a queue of the app": {"no redrive policy", func(s awscdk.Stack) *oncepay.EventQueue {
			return &oncepay.EventQueue{Queue: awssqs.NewQueue(s, jsii.String("Q"), &awssqs.QueueProps{Fifo: jsii.Bool(true), VisibilityTimeout: awscdk.Duration_Minutes(jsii.Number(3))})}
		}},
	} {
		t.Run(name, func(t *testing.T) {
			panicsWith(t, c.want, func(s awscdk.Stack) {
				props := workerProps(s)
				props.Events = c.q(s)
				oncepay.NewInboxWorker(s, "Worker", props)
			})
		})
	}
}

// TestAQueueOfTheAppIsReadAsIs: a literal over a queue made in the same
// app needs nothing stated: its key and settings are read from it.
func TestAQueueOfTheAppIsReadAsIs(t *testing.T) {
	var c *oncepay.InboxWorker
	var key awskms.Key
	stack, _, js := synthAlone(t, func(s awscdk.Stack) {
		key = awskms.NewKey(s, jsii.String("TheirKey"), &awskms.KeyProps{EnableKeyRotation: jsii.Bool(true)})
		dlq := awssqs.NewQueue(s, jsii.String("TheirDlq"), &awssqs.QueueProps{Fifo: jsii.Bool(true), EncryptionMasterKey: key})
		q := awssqs.NewQueue(s, jsii.String("TheirQueue"), &awssqs.QueueProps{
			Fifo: jsii.Bool(true), EncryptionMasterKey: key, VisibilityTimeout: awscdk.Duration_Minutes(jsii.Number(4)),
			DeadLetterQueue: &awssqs.DeadLetterQueue{Queue: dlq, MaxReceiveCount: jsii.Number(7)},
		})
		props := workerProps(s)
		props.Events = &oncepay.EventQueue{Queue: q, Dlq: dlq}
		c = oncepay.NewInboxWorker(s, "Worker", props)
	})
	if c.Settings.VisibilityTimeout != 4*time.Minute || c.Settings.MaxReceiveCount != 7 {
		t.Errorf("Settings %+v: want the queue's 4m and 7", c.Settings)
	}
	if c.Events.Key == nil {
		t.Fatal("the queue's key was not read")
	}
	wantGrant(t, grantsOf(js, logicalIDIn(t, stack, c.Function.Role)), "kms:Decrypt", logicalIDIn(t, stack, key))
}

// TestWorkerSettingsMakeItsQueue: the visibility timeout and the receive
// count in Settings are the queue's (they were validated and dropped).
func TestWorkerSettingsMakeItsQueue(t *testing.T) {
	_, tmpl, _ := synthAlone(t, func(s awscdk.Stack) {
		q := oncepay.DefaultWorkerSettings()
		q.VisibilityTimeout, q.MaxReceiveCount = 10*time.Minute, 3
		props := workerProps(s)
		props.Settings = &q
		oncepay.NewInboxWorker(s, "Worker", props)
	})
	check(t, "visibility and redrive from Settings", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::SQS::Queue"), obj(map[string]any{
			"VisibilityTimeout": 600,
			"RedrivePolicy":     obj(map[string]any{"maxReceiveCount": 3}),
		}))
	})
}

// TestTheSixTimesCheckReadsTheRealQueueAndFunction: a given queue's own
// visibility, a timeout raised by the override or by Sizing, and Settings
// that contradict the given queue each fail the synth.
func TestTheSixTimesCheckReadsTheRealQueueAndFunction(t *testing.T) {
	shortQueue := func(s awscdk.Stack) *oncepay.EventQueue {
		return oncepay.NewEventQueue(s, "Short", &oncepay.EventQueueProps{VisibilityTimeout: time.Minute})
	}
	for name, c := range map[string]struct {
		want  string
		build func(awscdk.Stack, *oncepay.InboxWorkerProps)
	}{
		"given queue": {"visibility timeout 1m0s is under 6x", func(s awscdk.Stack, p *oncepay.InboxWorkerProps) { p.Events = shortQueue(s) }},
		"override timeout": {"under 6x the worker function's timeout 1m0s", func(_ awscdk.Stack, p *oncepay.InboxWorkerProps) {
			p.OverrideFunction = func(fp *awslambda.FunctionProps) { fp.Timeout = awscdk.Duration_Minutes(jsii.Number(1)) }
		}},
		"sizing": {"under 6x the worker function's timeout 1m0s", func(_ awscdk.Stack, p *oncepay.InboxWorkerProps) {
			p.Sizing = &oncepay.Sizing{Timeout: time.Minute, MemoryMB: 256}
		}},
		"settings against the given queue": {"differs from the given queue's", func(s awscdk.Stack, p *oncepay.InboxWorkerProps) {
			p.Events = oncepay.NewEventQueue(s, "Q", nil)
			q := oncepay.DefaultWorkerSettings()
			q.VisibilityTimeout = time.Hour
			p.Settings = &q
		}},
	} {
		t.Run(name, func(t *testing.T) {
			panicsWith(t, c.want, func(s awscdk.Stack) {
				props := workerProps(s)
				c.build(s, props)
				oncepay.NewInboxWorker(s, "Worker", props)
			})
		})
	}
}

// TestSizingAndDescriptionAreApplied.
func TestSizingAndDescriptionAreApplied(t *testing.T) {
	_, tmpl, _ := synthAlone(t, func(s awscdk.Stack) {
		props := relayProps(s)
		props.Sizing = &oncepay.Sizing{Timeout: 20 * time.Second, MemoryMB: 512}
		props.Description = "payments relay"
		oncepay.NewOutboxRelay(s, "Relay", props)
	})
	check(t, "sizing", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
			"Timeout": 20, "MemorySize": 512, "Description": "payments relay",
		}))
	})
}

// TestTheApiMayNotOutliveTheDeadline: a Sizing over the payment's
// function timeout is refused.
func TestTheApiMayNotOutliveTheDeadline(t *testing.T) {
	panicsWith(t, "over Timing.FunctionTimeout()", func(s awscdk.Stack) {
		props := apiProps(s)
		props.Sizing = &oncepay.Sizing{Timeout: time.Minute, MemoryMB: 512}
		oncepay.NewIdempotentApi(s, "Api", props)
	})
}

// TestPropsThatExcludeEachOtherAreRefused: both set used to keep one
// silently.
func TestPropsThatExcludeEachOtherAreRefused(t *testing.T) {
	panicsWith(t, "Events and EventsProps exclude each other", func(s awscdk.Stack) {
		props := workerProps(s)
		props.Events = oncepay.NewEventQueue(s, "Q", nil)
		props.EventsProps = oncepay.EventQueueProps{MaxReceiveCount: 3}
		oncepay.NewInboxWorker(s, "Worker", props)
	})
	panicsWith(t, "Outbox and OutboxProps exclude each other", func(s awscdk.Stack) {
		props := relayProps(s)
		props.Outbox = oncepay.NewOutboxTable(s, "T", nil)
		props.OutboxProps = oncepay.OutboxTableProps{Protection: oncepay.Protection{RemovalPolicy: awscdk.RemovalPolicy_DESTROY}}
		oncepay.NewOutboxRelay(s, "Relay", props)
	})
}

// TestARelayOnATableWithoutAStreamSaysSo: in place of jsii's unreadable
// error on a nil stream ARN.
func TestARelayOnATableWithoutAStreamSaysSo(t *testing.T) {
	panicsWith(t, "has no stream with new images", func(s awscdk.Stack) {
		props := relayProps(s)
		props.Outbox = &oncepay.OutboxTable{Table: awsdynamodb.NewTable(s, jsii.String("T"), &awsdynamodb.TableProps{
			PartitionKey: &awsdynamodb.Attribute{Name: jsii.String("event_id"), Type: awsdynamodb.AttributeType_STRING},
		})}
		oncepay.NewOutboxRelay(s, "Relay", props)
	})
	panicsWith(t, "without its stream ARN", func(s awscdk.Stack) {
		props := relayProps(s)
		props.Outbox = &oncepay.OutboxTable{Table: awsdynamodb.Table_FromTableArn(s, jsii.String("T"), jsii.String(outboxTableArn)), AwsManagedKey: true}
		oncepay.NewOutboxRelay(s, "Relay", props)
	})
}

// TestAConstructAloneHasItsAlarms: each construct used alone is watched
// (the nag reasons on its queues say an alarm fires), with actions on a
// given topic, and none when disabled.
func TestAConstructAloneHasItsAlarms(t *testing.T) {
	var w *oncepay.InboxWorker
	var r *oncepay.OutboxRelay
	var a *oncepay.IdempotentApi
	var topic awssns.Topic
	stack, tmpl, _ := synthAlone(t, func(s awscdk.Stack) {
		topic = awssns.NewTopic(s, jsii.String("Ops"), &awssns.TopicProps{EnforceSSL: jsii.Bool(true), MasterKey: awskms.NewKey(s, jsii.String("OpsKey"), &awskms.KeyProps{EnableKeyRotation: jsii.Bool(true)})})
		wp := workerProps(s)
		wp.Alarms.Topic = topic
		w = oncepay.NewInboxWorker(s, "Worker", wp)
		r = oncepay.NewOutboxRelay(s, "Relay", relayProps(s))
		a = oncepay.NewIdempotentApi(s, "Api", apiProps(s))
	})
	for name, got := range map[string][]string{"worker": keys(w.Alarms), "relay": keys(r.Alarms), "api": keys(a.Alarms)} {
		want := map[string][]string{
			"worker": {oncepay.AlarmWorkerFnErrors, oncepay.AlarmWorkerDlq, oncepay.AlarmWorkerOldest, oncepay.AlarmWorkerNotifStuck, oncepay.AlarmWorkerFnThrottles},
			"relay":  {oncepay.AlarmRelayFnErrors, oncepay.AlarmRelayFailed, oncepay.AlarmRelayIteratorOld},
			"api":    {oncepay.AlarmApi5xx, oncepay.AlarmApiFnErrors, oncepay.AlarmApiKeyStoreDown, oncepay.AlarmApiFnThrottles},
		}[name]
		sort.Strings(want)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s alarms %v, want %v", name, got, want)
		}
	}
	check(t, "12 alarms, the worker's acting on the topic", func() {
		tmpl.ResourceCountIs(jsii.String("AWS::CloudWatch::Alarm"), jsii.Number(12))
		tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), obj(map[string]any{
			"AlarmActions": exact(ref(logicalIDIn(t, stack, topic))),
		}))
	})
	_, off, _ := synthAlone(t, func(s awscdk.Stack) {
		p := workerProps(s)
		p.Alarms.Disabled = true
		oncepay.NewInboxWorker(s, "Worker", p)
	})
	check(t, "none when disabled", func() { off.ResourceCountIs(jsii.String("AWS::CloudWatch::Alarm"), jsii.Number(0)) })
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestTheConstructsDependOnTheCDKAlone: the package a consumer imports
// compiles nothing of the handlers' (their SDK clients, pgx, stripe), no
// package of the project's module, and no cdk-nag (the suppressions are
// metadata; the packs are package nag). Its public types are therefore
// all nameable from outside, and a consumer's module graph holds the CDK
// and this module only.
func TestTheConstructsDependOnTheCDKAlone(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("only %d dependencies listed: %v", len(deps), deps)
	}
	for _, d := range deps {
		for _, banned := range []string{"github.com/oncepay/oncepay/internal", "github.com/aws/aws-sdk-go-v2", "github.com/jackc/", "github.com/stripe/", "github.com/gomodule/", "cdk-nag"} {
			if strings.HasPrefix(d, banned) || strings.Contains(d, banned) {
				t.Errorf("the constructs depend on %s", d)
			}
		}
		if strings.HasPrefix(d, "github.com/oncepay/") && !strings.HasPrefix(d, "github.com/oncepay/oncepay/cdk/oncepay") {
			t.Errorf("the constructs depend on %s, outside their module", d)
		}
	}
}

// TestTheLedgerOpensToTheSecurityGroupsGiven: a worker on the ledger with
// security groups of the team's own gets PostgreSQL's port from each of
// them (the ledger used to need the construct's own group, and refused).
func TestTheLedgerOpensToTheSecurityGroupsGiven(t *testing.T) {
	var sg awsec2.SecurityGroup
	var ledger *oncepay.Ledger
	stack, tmpl, _ := synthAlone(t, func(s awscdk.Stack) {
		vpc := awsec2.NewVpc(s, jsii.String("Vpc"), &awsec2.VpcProps{MaxAzs: jsii.Number(2), NatGateways: jsii.Number(1)})
		ledger = oncepay.NewLedger(s, "Ledger", &oncepay.LedgerProps{Vpc: vpc})
		sg = awsec2.NewSecurityGroup(s, jsii.String("Theirs"), &awsec2.SecurityGroupProps{Vpc: vpc})
		props := workerProps(s)
		props.Ledger, props.SecurityGroups = ledger, []awsec2.ISecurityGroup{sg}
		oncepay.NewInboxWorker(s, "Worker", props)
	})
	check(t, "5432 from their group to the ledger's", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::EC2::SecurityGroupIngress"), obj(map[string]any{
			"FromPort": 5432, "ToPort": 5432,
			"SourceSecurityGroupId": getAtt(logicalIDIn(t, stack, sg), "GroupId"),
			"GroupId":               getAtt(logicalIDIn(t, stack, ledger.SecurityGroup), "GroupId"),
		}))
	})
}

// TestAKeySwappedInAnOverrideIsTheOneGranted: the key the queue really has
// after EventsProps.Override, not the construct's own.
func TestAKeySwappedInAnOverrideIsTheOneGranted(t *testing.T) {
	var c *oncepay.InboxWorker
	var theirs awskms.Key
	stack, _, js := synthAlone(t, func(s awscdk.Stack) {
		theirs = awskms.NewKey(s, jsii.String("Theirs"), &awskms.KeyProps{EnableKeyRotation: jsii.Bool(true)})
		props := workerProps(s)
		props.EventsProps.Override = func(qp *awssqs.QueueProps) { qp.EncryptionMasterKey = theirs }
		c = oncepay.NewInboxWorker(s, "Worker", props)
	})
	wantGrant(t, grantsOf(js, logicalIDIn(t, stack, c.Function.Role)), "kms:Decrypt", logicalIDIn(t, stack, theirs))
}

// TestAKeyGivenAsAnAlias: an alias of this app is granted on its target
// key (IAM never matches an alias ARN); one made elsewhere is refused.
func TestAKeyGivenAsAnAlias(t *testing.T) {
	var c *oncepay.InboxWorker
	var key awskms.Key
	stack, _, js := synthAlone(t, func(s awscdk.Stack) {
		key = awskms.NewKey(s, jsii.String("Target"), &awskms.KeyProps{EnableKeyRotation: jsii.Bool(true)})
		alias := awskms.NewAlias(s, jsii.String("Alias"), &awskms.AliasProps{AliasName: jsii.String("alias/payments"), TargetKey: key})
		props := workerProps(s)
		props.EventsProps.EncryptionKey = alias
		c = oncepay.NewInboxWorker(s, "Worker", props)
	})
	grants := grantsOf(js, logicalIDIn(t, stack, c.Function.Role))
	wantGrant(t, grants, "kms:Decrypt", logicalIDIn(t, stack, key))
	for _, r := range grants["kms:Decrypt"] {
		if strings.Contains(r, "alias/") {
			t.Errorf("kms:Decrypt on an alias ARN %s, which IAM never matches", r)
		}
	}
	panicsWith(t, "alias made elsewhere", func(s awscdk.Stack) {
		props := workerProps(s)
		props.EventsProps.EncryptionKey = awskms.Alias_FromAliasName(s, jsii.String("A"), jsii.String("alias/payments"))
		oncepay.NewInboxWorker(s, "Worker", props)
	})
}

// TestEventsPropsMakeTheWorkersQueue: what EventsProps states is the
// queue's (it was overwritten by the settings' defaults); stated twice
// and different is refused.
func TestEventsPropsMakeTheWorkersQueue(t *testing.T) {
	_, tmpl, _ := synthAlone(t, func(s awscdk.Stack) {
		props := workerProps(s)
		props.EventsProps = oncepay.EventQueueProps{MaxReceiveCount: 2, VisibilityTimeout: 10 * time.Minute}
		props.Sizing = &oncepay.Sizing{Timeout: 90 * time.Second, MemoryMB: 256}
		oncepay.NewInboxWorker(s, "Worker", props)
	})
	check(t, "EventsProps' visibility and receive count", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::SQS::Queue"), obj(map[string]any{
			"VisibilityTimeout": 600, "RedrivePolicy": obj(map[string]any{"maxReceiveCount": 2}),
		}))
	})
	panicsWith(t, "disagree", func(s awscdk.Stack) {
		props := workerProps(s)
		q := oncepay.DefaultWorkerSettings()
		props.Settings = &q
		props.EventsProps = oncepay.EventQueueProps{MaxReceiveCount: 2}
		oncepay.NewInboxWorker(s, "Worker", props)
	})
}

// TestStreamTotalsChecksItsOutbox: the stream job resolves its table like
// the relay (stream, key), instead of jsii's unreadable nil error.
func TestStreamTotalsChecksItsOutbox(t *testing.T) {
	panicsWith(t, "without its stream ARN", func(s awscdk.Stack) {
		oncepay.NewStreamTotals(s, "Totals", &oncepay.StreamTotalsProps{
			Code:   oncepay.CodeFromBuild(s, oncepay.FnTotals),
			Outbox: &oncepay.OutboxTable{Table: awsdynamodb.Table_FromTableArn(s, jsii.String("T"), jsii.String(outboxTableArn)), AwsManagedKey: true},
		})
	})
}

// TestAnUnusedTopicNeedsNoKey: without the topic fallback the worker never
// publishes to the topic, so an imported topic's key is not demanded.
func TestAnUnusedTopicNeedsNoKey(t *testing.T) {
	synthAloneIn(t, brownfieldEnv, func(s awscdk.Stack) {
		props := workerProps(s)
		props.Push = &oncepay.PushTopic{Topic: awssns.Topic_FromTopicArn(s, jsii.String("P"), jsii.String(pushTopicArn))}
		oncepay.NewInboxWorker(s, "Worker", props)
	})
}

// TestTheWorkerWithoutATopic: NoPushTopic makes none and names none to
// the function (it pushes to platform endpoints only); with the topic
// fallback, which pushes to the topic, it is refused.
func TestTheWorkerWithoutATopic(t *testing.T) {
	stack, tmpl, js := synthAloneIn(t, brownfieldEnv, func(s awscdk.Stack) {
		props := workerProps(s)
		props.NoPushTopic = true
		props.PlatformApplicationArns = []string{"arn:aws:sns:eu-west-1:111111111111:app/APNS/payments"}
		oncepay.NewInboxWorker(s, "Worker", props)
	})
	check(t, "no topic", func() { tmpl.ResourceCountIs(jsii.String("AWS::SNS::Topic"), jsii.Number(0)) })
	for id, fn := range ofType(js, "AWS::Lambda::Function") {
		if strings.Contains(render(fn["Properties"]), "ONCEPAY_PUSH_TOPIC_ARN") {
			t.Errorf("%s is named a topic", id)
		}
	}
	nagClean(t, stack)
	panicsWith(t, "NoPushTopic and TopicFallback exclude each other", func(s awscdk.Stack) {
		props := workerProps(s)
		props.NoPushTopic, props.TopicFallback = true, jsii.Bool(true)
		oncepay.NewInboxWorker(s, "Worker", props)
	})
	panicsWith(t, "NoPushTopic and Push exclude each other", func(s awscdk.Stack) {
		props := workerProps(s)
		props.NoPushTopic = true
		props.Push = &oncepay.PushTopic{Topic: awssns.Topic_FromTopicArn(s, jsii.String("P"), jsii.String(pushTopicArn)), Unencrypted: true}
		oncepay.NewInboxWorker(s, "Worker", props)
	})
	panicsWith(t, "NoPushTopic and PushProps exclude each other", func(s awscdk.Stack) {
		props := workerProps(s)
		props.NoPushTopic = true
		props.PushProps = oncepay.PushTopicProps{Protection: oncepay.Protection{RemovalPolicy: awscdk.RemovalPolicy_DESTROY}}
		oncepay.NewInboxWorker(s, "Worker", props)
	})
}

// TestARoleOfAnotherStackIsRefused: in place of CDK's DependencyCycle,
// which names neither the role nor the fix.
func TestARoleOfAnotherStackIsRefused(t *testing.T) {
	panicsWith(t, "import the role into", func(s awscdk.Stack) {
		platform := awscdk.NewStack(awscdk.Stage_Of(s), jsii.String("Platform"), nil)
		role := awsiam.NewRole(platform, jsii.String("Role"), &awsiam.RoleProps{AssumedBy: awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil)})
		props := workerProps(s)
		props.Role = role
		oncepay.NewInboxWorker(s, "Worker", props)
	})
}
