package oncepay

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// StackProps configures the deployable stack.
type StackProps struct {
	awscdk.StackProps
	// Profile: "" or "sandbox", or "prod". It sets removal policies, deletion
	// protection, NAT count, ledger readers, backup and log retention.
	Profile Profile
	// NatGateways overrides the profile's count (sandbox 1, prod 2).
	NatGateways *float64
	// DataPlane: fields left zero come from the profile.
	DataPlane DataPlaneProps
}

// Stack is the oncepay deployment. Later steps add the functions and the
// front door on top of Data.
type Stack struct {
	awscdk.Stack
	Profile Profile
	Data    *DataPlane
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
	s := &Stack{Stack: awscdk.NewStack(scope, jsii.String(id), &sp), Profile: profile}

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
	if dp.Ledger.Readers == 0 {
		dp.Ledger.Readers = profile.LedgerReaders()
	}
	if dp.Ledger.BackupRetention == nil {
		dp.Ledger.BackupRetention = days(profile.BackupRetentionDays())
	}
	s.Data = NewDataPlane(s.Stack, "Data", &dp)
	s.addOutputs()
	return s
}

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
	out(OutputLedgerSecretArn, "ledger admin secret (Secrets Manager)", d.Ledger.Secret.SecretArn())
	out(OutputLedgerEndpoint, "ledger writer endpoint (host)", d.Ledger.Cluster.ClusterEndpoint().Hostname())
}
