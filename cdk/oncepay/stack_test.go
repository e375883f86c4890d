package oncepay_test

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay"
	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
)

func TestClaimTable(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	key := s.logicalID(t, s.stack.Data.Key)
	table := s.logicalID(t, s.stack.Data.Claims.Table)
	check(t, "idem table", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), obj(map[string]any{
			// ArrayEquals: the partition key and nothing else (no sort key).
			"KeySchema":            exact(map[string]any{"AttributeName": "pk", "KeyType": "HASH"}),
			"AttributeDefinitions": exact(map[string]any{"AttributeName": "pk", "AttributeType": "S"}),
			"BillingMode":          "PAY_PER_REQUEST",
			"TimeToLiveSpecification": map[string]any{
				"AttributeName": "expires_at", "Enabled": true,
			},
			"PointInTimeRecoverySpecification": map[string]any{"PointInTimeRecoveryEnabled": true},
			"SSESpecification": map[string]any{
				"SSEEnabled": true, "SSEType": "KMS", "KMSMasterKeyId": getAtt(key, "Arn"),
			},
			"StreamSpecification": assertions.Match_Absent(),
		}))
	})
	if got := s.resource(t, table)["Properties"].(map[string]any)["KeySchema"]; !jsonEqual(got, []any{map[string]any{"AttributeName": "pk", "KeyType": "HASH"}}) {
		t.Errorf("stack.Data.Claims.Table is not the pk table: KeySchema %s", show(got))
	}
	check(t, "key rotation", func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::KMS::Key"), jsii.Number(1))
		s.tmpl.HasResourceProperties(jsii.String("AWS::KMS::Key"), obj(map[string]any{"EnableKeyRotation": true}))
	})
}

func TestOutboxTable(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	key := s.logicalID(t, s.stack.Data.Key)
	check(t, "outbox table", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), obj(map[string]any{
			"KeySchema":            exact(map[string]any{"AttributeName": "event_id", "KeyType": "HASH"}),
			"AttributeDefinitions": exact(map[string]any{"AttributeName": "event_id", "AttributeType": "S"}),
			"BillingMode":          "PAY_PER_REQUEST",
			"StreamSpecification":  map[string]any{"StreamViewType": "NEW_IMAGE"},
			"TimeToLiveSpecification": map[string]any{
				"AttributeName": "expires_at", "Enabled": true,
			},
			"PointInTimeRecoverySpecification": map[string]any{"PointInTimeRecoveryEnabled": true},
			"SSESpecification": map[string]any{
				"SSEEnabled": true, "SSEType": "KMS", "KMSMasterKeyId": getAtt(key, "Arn"),
			},
		}))
	})
}

func TestEventQueue(t *testing.T) {
	if oncepay.EventsVisibilityTimeout != 6*oncepay.WorkerTimeout {
		t.Errorf("visibility %v is not 6 x worker timeout %v", oncepay.EventsVisibilityTimeout, oncepay.WorkerTimeout)
	}
	s := synth(t, oncepay.ProfileSandbox)
	key := s.logicalID(t, s.stack.Data.Key)
	queue := s.logicalID(t, s.stack.Data.Events.Queue)
	dlq := s.logicalID(t, s.stack.Data.Events.Dlq)
	visibility := oncepay.EventsVisibilityTimeout.Seconds()
	if visibility != 180 {
		t.Errorf("EventsVisibilityTimeout = %vs, want 180s (6 x 30s)", visibility)
	}

	props := s.resource(t, queue)["Properties"].(map[string]any)
	want := map[string]any{
		"FifoQueue":                 true,
		"ContentBasedDeduplication": false,
		"VisibilityTimeout":         visibility,
		"KmsMasterKeyId":            getAtt(key, "Arn"),
		"RedrivePolicy": map[string]any{
			"deadLetterTargetArn": getAtt(dlq, "Arn"),
			"maxReceiveCount":     float64(oncepay.EventsMaxReceiveCount),
		},
	}
	for k, v := range want {
		if !jsonEqual(props[k], v) {
			t.Errorf("events queue %s = %s, want %s", k, show(props[k]), show(v))
		}
	}
	if oncepay.EventsMaxReceiveCount != 5 {
		t.Errorf("EventsMaxReceiveCount = %d, want 5", oncepay.EventsMaxReceiveCount)
	}

	dprops := s.resource(t, dlq)["Properties"].(map[string]any)
	dwant := map[string]any{
		"FifoQueue":                 true,
		"ContentBasedDeduplication": false,
		"VisibilityTimeout":         visibility,
		"KmsMasterKeyId":            getAtt(key, "Arn"),
		"MessageRetentionPeriod":    (14 * 24 * time.Hour).Seconds(),
	}
	for k, v := range dwant {
		if !jsonEqual(dprops[k], v) {
			t.Errorf("DLQ %s = %s, want %s", k, show(dprops[k]), show(v))
		}
	}
	if _, ok := dprops["RedrivePolicy"]; ok {
		t.Errorf("DLQ has a RedrivePolicy: %s", show(dprops["RedrivePolicy"]))
	}

	for name, id := range map[string]string{"queue": queue, "DLQ": dlq} {
		check(t, name+" TLS-only policy", func() {
			s.tmpl.HasResourceProperties(jsii.String("AWS::SQS::QueuePolicy"), obj(map[string]any{
				"Queues": exact(ref(id)),
				"PolicyDocument": obj(map[string]any{"Statement": arr(obj(map[string]any{
					"Effect":    "Deny",
					"Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
				}))}),
			}))
		})
	}
}

func TestPushTopic(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	key := s.logicalID(t, s.stack.Data.Key)
	topic := s.logicalID(t, s.stack.Data.Push.Topic)
	check(t, "topic KMS", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::SNS::Topic"), obj(map[string]any{
			"KmsMasterKeyId": getAtt(key, "Arn"),
		}))
	})
	check(t, "topic TLS-only policy", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::SNS::TopicPolicy"), obj(map[string]any{
			"Topics": exact(ref(topic)),
			"PolicyDocument": obj(map[string]any{"Statement": arr(obj(map[string]any{
				"Effect":    "Deny",
				"Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
			}))}),
		}))
	})
}

func TestLedger(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	key := s.logicalID(t, s.stack.Data.Key)
	secret := s.logicalID(t, s.stack.Data.Ledger.Secret)
	sg := s.logicalID(t, s.stack.Data.Ledger.SecurityGroup)
	check(t, "cluster", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::RDS::DBCluster"), obj(map[string]any{
			"Engine":                           "aurora-postgresql",
			"EngineVersion":                    assertions.Match_StringLikeRegexp(jsii.String(`^1[6-9]\.`)),
			"ServerlessV2ScalingConfiguration": map[string]any{"MinCapacity": 0.5, "MaxCapacity": 4},
			"EnableIAMDatabaseAuthentication":  true,
			"StorageEncrypted":                 true,
			"KmsKeyId":                         getAtt(key, "Arn"),
			"BackupRetentionPeriod":            7,
			"DatabaseName":                     "oncepay",
			"VpcSecurityGroupIds":              exact(getAtt(sg, "GroupId")),
		}))
	})
	check(t, "TLS forced", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::RDS::DBClusterParameterGroup"), obj(map[string]any{
			"Parameters": map[string]any{"rds.force_ssl": "1"},
		}))
	})
	check(t, "serverless v2 writer, private", func() {
		s.tmpl.ResourcePropertiesCountIs(jsii.String("AWS::RDS::DBInstance"), obj(map[string]any{
			"DBInstanceClass": "db.serverless", "Engine": "aurora-postgresql", "PubliclyAccessible": false,
		}), jsii.Number(1))
	})
	check(t, "secret", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::SecretsManager::Secret"), obj(map[string]any{
			"KmsKeyId":             getAtt(key, "Arn"),
			"GenerateSecretString": obj(map[string]any{"GenerateStringKey": "password"}),
		}))
		s.tmpl.HasResourceProperties(jsii.String("AWS::SecretsManager::SecretTargetAttachment"), obj(map[string]any{
			"SecretId": ref(secret), "TargetType": "AWS::RDS::DBCluster",
		}))
	})
	// The admin login comes from the secret, never from the template.
	props := s.resource(t, s.logicalID(t, s.stack.Data.Ledger.Cluster))["Properties"].(map[string]any)
	for _, k := range []string{"MasterUsername", "MasterUserPassword"} {
		if v := show(props[k]); !strings.Contains(v, "resolve:secretsmanager") || !strings.Contains(v, secret) {
			t.Errorf("%s does not resolve from the secret: %s", k, v)
		}
	}
	// No ingress: later constructs open the port to their functions.
	sgProps := s.resource(t, sg)["Properties"].(map[string]any)
	if in, ok := sgProps["SecurityGroupIngress"]; ok {
		t.Errorf("ledger security group has ingress: %s", show(in))
	}
	check(t, "in private subnets", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::RDS::DBSubnetGroup"), obj(map[string]any{
			"SubnetIds": exact(
				ref(s.logicalID(t, (*s.stack.Data.Vpc.PrivateSubnets())[0])),
				ref(s.logicalID(t, (*s.stack.Data.Vpc.PrivateSubnets())[1])),
			),
		}))
	})
}

func TestNetwork(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	vpc := s.logicalID(t, s.stack.Data.Vpc)
	check(t, "two AZs, public + private", func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::EC2::Subnet"), jsii.Number(4))
		s.tmpl.ResourcePropertiesCountIs(jsii.String("AWS::EC2::Subnet"), obj(map[string]any{"MapPublicIpOnLaunch": true}), jsii.Number(2))
	})
	check(t, "flow log", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::EC2::FlowLog"), obj(map[string]any{
			"ResourceId": ref(vpc), "ResourceType": "VPC", "TrafficType": "ALL",
		}))
		s.tmpl.HasResourceProperties(jsii.String("AWS::Logs::LogGroup"), obj(map[string]any{"RetentionInDays": 7}))
	})
}

func TestOutputs(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	d := s.stack.Data
	claims, outbox := s.logicalID(t, d.Claims.Table), s.logicalID(t, d.Outbox.Table)
	queue, dlq := s.logicalID(t, d.Events.Queue), s.logicalID(t, d.Events.Dlq)
	api := s.logicalID(t, s.stack.Api.HttpApi)
	url := "https://${" + api + "}.execute-api.${AWS::Region}.${AWS::URLSuffix}/"
	// The provisioner's contract (cdk/oncepay/stackenv.OutputVars): a plain Ref
	// or GetAtt it can resolve against the local cloud.
	want := map[string]any{
		"IdemTableName":   ref(claims),
		"OutboxTableName": ref(outbox),
		"OutboxStreamArn": getAtt(outbox, "StreamArn"),
		"EventsQueueUrl":  ref(queue),
		"EventsQueueArn":  getAtt(queue, "Arn"),
		"EventsDlqUrl":    ref(dlq),
		"EventsDlqArn":    getAtt(dlq, "Arn"),
		"PushTopicArn":    ref(s.logicalID(t, d.Push.Topic)),
		"LedgerSecretArn": ref(s.logicalID(t, d.Ledger.Secret)),
		"LedgerEndpoint":  getAtt(s.logicalID(t, d.Ledger.Cluster), "Endpoint.Address"),
		"TotalsTableName": ref(s.logicalID(t, s.stack.Totals.Table)),
		"RecountQueueUrl": ref(s.logicalID(t, s.stack.Totals.Recount)),
		// For a deployed stack's users (the local cloud has no API Gateway,
		// Cognito or dashboard, and skips them).
		"UserPoolId":       ref(s.logicalID(t, s.stack.Api.UserPool)),
		"UserPoolClientId": ref(s.logicalID(t, s.stack.Api.UserPoolClient)),
		"PspKeySecretArn":  ref(s.logicalID(t, s.stack.Psp.KeySecret)),
		"WebhookSecretArn": ref(s.logicalID(t, s.stack.Psp.WebhookSecret)),
		"AlarmTopicArn":    ref(s.logicalID(t, s.stack.Monitoring.Topic)),
		"DashboardName":    ref(s.logicalID(t, s.stack.Monitoring.Dashboard)),
	}
	rendered := map[string]string{
		"HttpApiUrl": url,
		"WebhookUrl": url + "webhooks/psp",
	}
	outputs, _ := s.json["Outputs"].(map[string]any)
	for id, value := range want {
		o, ok := outputs[id].(map[string]any)
		if !ok {
			t.Errorf("output %s missing", id)
			continue
		}
		if !jsonEqual(o["Value"], value) {
			t.Errorf("output %s = %s, want %s", id, show(o["Value"]), show(value))
		}
	}
	for id, value := range rendered {
		o, ok := outputs[id].(map[string]any)
		if !ok {
			t.Errorf("output %s missing", id)
			continue
		}
		if got := render(o["Value"]); got != value {
			t.Errorf("output %s = %s, want %s", id, got, value)
		}
	}
	for id, o := range outputs {
		if _, ok := o.(map[string]any)["Export"]; ok {
			t.Errorf("output %s is exported; exports pin the resource to this stack", id)
		}
		_, a := want[id]
		_, b := rendered[id]
		if !a && !b {
			t.Errorf("unexpected output %s: add it here (and to the provisioner's contract if the local cloud needs it)", id)
		}
	}
	for _, local := range []string{"IdemTableName", "OutboxTableName", "OutboxStreamArn", "EventsQueueUrl", "EventsQueueArn",
		"EventsDlqUrl", "EventsDlqArn", "PushTopicArn", "LedgerSecretArn", "LedgerEndpoint", "TotalsTableName", "RecountQueueUrl"} {
		if _, ok := stackenv.OutputVars[local]; !ok {
			t.Errorf("output %s is not in stackenv.OutputVars", local)
		}
	}
	if alb := synthALB(t); alb.stack.Alb != nil {
		o, _ := alb.json["Outputs"].(map[string]any)["AlbUrl"].(map[string]any)
		lb := alb.logicalID(t, alb.stack.Alb.LoadBalancer)
		if got := render(o["Value"]); got != "https://${"+lb+".DNSName}/" {
			t.Errorf("AlbUrl = %s", got)
		}
	}
}

// stateful are the resource types that hold data or keys to it.
var stateful = []string{
	"AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::SNS::Topic", "AWS::KMS::Key",
	"AWS::RDS::DBCluster", "AWS::RDS::DBInstance", "AWS::SecretsManager::Secret",
	"AWS::Logs::LogGroup", "AWS::Cognito::UserPool",
}

func TestProfiles(t *testing.T) {
	cases := []struct {
		profile              oncepay.Profile
		policy               string
		protect, termination bool
		nat, instances       float64
		backupDays           float64
	}{
		{oncepay.ProfileSandbox, "Delete", false, false, 1, 1, 7},
		{oncepay.ProfileProd, "Retain", true, true, 2, 2, 35},
	}
	for _, c := range cases {
		t.Run(string(c.profile), func(t *testing.T) {
			s := synth(t, c.profile)
			for _, typ := range stateful {
				rs := s.resourcesOfType(typ)
				if len(rs) == 0 {
					t.Errorf("no %s", typ)
				}
				for id, r := range rs {
					if r["DeletionPolicy"] != c.policy || r["UpdateReplacePolicy"] != c.policy {
						t.Errorf("%s %s: DeletionPolicy %v, UpdateReplacePolicy %v, want %s",
							typ, id, r["DeletionPolicy"], r["UpdateReplacePolicy"], c.policy)
					}
				}
			}
			if c.profile.IsProd() {
				// A retained cluster keeps what it needs to be usable.
				for _, typ := range []string{"AWS::RDS::DBClusterParameterGroup", "AWS::RDS::DBSubnetGroup"} {
					for id, r := range s.resourcesOfType(typ) {
						if r["DeletionPolicy"] != "Retain" {
							t.Errorf("prod %s %s: DeletionPolicy %v, want Retain", typ, id, r["DeletionPolicy"])
						}
					}
				}
				l := s.stack.Data.Ledger
				for _, sg := range []string{s.logicalID(t, l.SecurityGroup), s.logicalID(t, l.ProxySecurityGroup)} {
					if r := s.resource(t, sg); r["DeletionPolicy"] != "Retain" {
						t.Errorf("prod ledger security group %s: DeletionPolicy %v, want Retain", sg, r["DeletionPolicy"])
					}
				}
			}
			check(t, "user pool deletion protection", func() {
				s.tmpl.HasResourceProperties(jsii.String("AWS::Cognito::UserPool"), obj(map[string]any{
					"DeletionProtection": map[bool]string{true: "ACTIVE", false: "INACTIVE"}[c.protect],
				}))
			})
			check(t, "cluster deletion protection", func() {
				s.tmpl.HasResourceProperties(jsii.String("AWS::RDS::DBCluster"), obj(map[string]any{
					"DeletionProtection":    c.protect,
					"BackupRetentionPeriod": c.backupDays,
				}))
			})
			check(t, "table deletion protection", func() {
				s.tmpl.AllResourcesProperties(jsii.String("AWS::DynamoDB::Table"), obj(map[string]any{
					"DeletionProtectionEnabled": c.protect,
				}))
			})
			check(t, "NAT gateways", func() {
				s.tmpl.ResourceCountIs(jsii.String("AWS::EC2::NatGateway"), jsii.Number(c.nat))
			})
			check(t, "ledger instances", func() {
				s.tmpl.ResourceCountIs(jsii.String("AWS::RDS::DBInstance"), jsii.Number(c.instances))
			})
			if got := *s.stack.TerminationProtection(); got != c.termination {
				t.Errorf("termination protection %v, want %v", got, c.termination)
			}
		})
	}
}

func TestNatGatewaysOverride(t *testing.T) {
	app := awscdk.NewApp(&awscdk.AppProps{Context: cdkContext(t, "")})
	stack := oncepay.NewStack(app, "Oncepay", &oncepay.StackProps{
		Profile: oncepay.ProfileSandbox, NatGateways: jsii.Number(2),
	})
	check(t, "NAT gateways", func() {
		assertions.Template_FromStack(stack.Stack, nil).ResourceCountIs(jsii.String("AWS::EC2::NatGateway"), jsii.Number(2))
	})
}

func TestUnknownProfile(t *testing.T) {
	for _, in := range []string{"staging", "Prod", " sandbox"} {
		if _, err := oncepay.ParseProfile(in); err == nil {
			t.Errorf("ParseProfile(%q) accepted", in)
		}
	}
	if p, err := oncepay.ParseProfile(""); err != nil || p != oncepay.ProfileSandbox {
		t.Errorf(`ParseProfile("") = %q, %v; want sandbox`, p, err)
	}
	ctx := cdkContext(t, "staging")
	app := awscdk.NewApp(&awscdk.AppProps{Context: ctx})
	if _, err := oncepay.ProfileFromContext(app); err == nil {
		t.Error("ProfileFromContext accepted staging")
	}
	defer func() {
		if recover() == nil {
			t.Error("NewStack accepted profile staging")
		}
	}()
	oncepay.NewStack(app, "Bad", &oncepay.StackProps{Profile: "staging"})
}
