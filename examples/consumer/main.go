// Command consumer is a CDK app of someone else's, outside the oncepay
// module, that uses each oncepay construct alone in a stack of its own over
// what a platform team already runs: an events queue under the team's KMS
// key, the team's role for the function, an existing VPC and, for the
// relay and the api, existing tables.
//
//	go run . -assets ../../build -out cdk.out -check
//
// -assets is a directory holding <fn>/bootstrap for worker, relay and api
// (`make lambdas` builds them into build/). -check exits 1 on any error or
// warning the synth reports (cdk-nag's and CDK's own). make test-example runs it and cfn-lint on the output.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/oncepay/oncepay/cdk/oncepay"
)

// What the platform team hands over (ARNs of resources that exist).
const (
	account      = "111111111111"
	region       = "eu-west-1"
	keyArn       = "arn:aws:kms:eu-west-1:111111111111:key/11111111-2222-3333-4444-555555555555"
	roleArn      = "arn:aws:iam::111111111111:role/payments-functions"
	queueArn     = "arn:aws:sqs:eu-west-1:111111111111:payments-events.fifo"
	dlqArn       = "arn:aws:sqs:eu-west-1:111111111111:payments-events-dlq.fifo"
	topicArn     = "arn:aws:sns:eu-west-1:111111111111:payments-push"
	outboxArn    = "arn:aws:dynamodb:eu-west-1:111111111111:table/payments-outbox"
	outboxStream = outboxArn + "/stream/2026-01-01T00:00:00.000"
	claimsTable  = "payments-claims"
	opsTopicArn  = "arn:aws:sns:eu-west-1:111111111111:payments-ops"
)

// platform imports the team's resources into one stack.
type platform struct {
	key    awskms.IKey
	role   awsiam.IRole
	vpc    awsec2.IVpc
	events *oncepay.EventQueue
	ops    awssns.ITopic
}

func importPlatform(s constructs.Construct) platform {
	key := awskms.Key_FromKeyArn(s, jsii.String("Key"), jsii.String(keyArn))
	return platform{
		key:  key,
		role: awsiam.Role_FromRoleArn(s, jsii.String("Role"), jsii.String(roleArn), nil),
		vpc: awsec2.Vpc_FromVpcAttributes(s, jsii.String("Vpc"), &awsec2.VpcAttributes{
			VpcId:                      jsii.String("vpc-0123456789abcdef0"),
			AvailabilityZones:          jsii.Strings("eu-west-1a", "eu-west-1b"),
			PrivateSubnetIds:           jsii.Strings("subnet-0000000000000000c", "subnet-0000000000000000d"),
			PrivateSubnetRouteTableIds: jsii.Strings("rtb-0000000000000000c", "rtb-0000000000000000d"),
		}),
		// The queue's own settings cannot be read from a template: they
		// are stated, and the worker checks them (6x its timeout).
		events: &oncepay.EventQueue{
			Queue: awssqs.Queue_FromQueueAttributes(s, jsii.String("Events"), &awssqs.QueueAttributes{
				QueueArn: jsii.String(queueArn), KeyArn: jsii.String(keyArn), Fifo: jsii.Bool(true),
			}),
			Dlq:               awssqs.Queue_FromQueueArn(s, jsii.String("EventsDlq"), jsii.String(dlqArn)),
			VisibilityTimeout: 3 * time.Minute,
			MaxReceiveCount:   5,
		},
		ops: awssns.Topic_FromTopicArn(s, jsii.String("Ops"), jsii.String(opsTopicArn)),
	}
}

func main() {
	assets := flag.String("assets", "", "directory holding <fn>/bootstrap for worker, relay and api (required)")
	out := flag.String("out", "cdk.out", "cloud assembly directory")
	check := flag.Bool("check", false, "exit 1 on any error or warning of the synth (cdk-nag's and CDK's)")
	flag.Parse()
	if *assets == "" {
		fmt.Fprintln(os.Stderr, "consumer: -assets is required (make lambdas builds build/<fn>/bootstrap)")
		os.Exit(2)
	}
	dir, err := filepath.Abs(*assets)
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(2)
	}
	code := func(fn string) awslambda.Code {
		return awslambda.Code_FromAsset(jsii.String(filepath.Join(dir, fn)), nil)
	}

	app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(*out)})
	env := &awscdk.Environment{Account: jsii.String(account), Region: jsii.String(region)}
	stack := func(id string) awscdk.Stack {
		return awscdk.NewStack(app, jsii.String(id), &awscdk.StackProps{Env: env})
	}

	// The worker over the team's queue, topic, role and VPC; its alarms to
	// the team's ops topic.
	ws := stack("PaymentsWorker")
	p := importPlatform(ws)
	oncepay.NewInboxWorker(ws, "Worker", &oncepay.InboxWorkerProps{
		Code:   code("worker"),
		Events: p.events,
		Push:   &oncepay.PushTopic{Topic: awssns.Topic_FromTopicArn(ws, jsii.String("Push"), jsii.String(topicArn)), Key: p.key},
		Role:   p.role,
		Vpc:    p.vpc,
		Alarms: oncepay.AlarmProps{Topic: p.ops},
		Environment: map[string]string{
			// The team's ledger; the construct's Ledger prop is for oncepay's own.
			"ONCEPAY_LEDGER_DSN": "postgres://payments@ledger.internal:5432/payments?sslmode=verify-full",
		},
	})

	// The relay from the team's outbox table (stream and key stated) to
	// the same queue.
	rs := stack("PaymentsRelay")
	p = importPlatform(rs)
	oncepay.NewOutboxRelay(rs, "Relay", &oncepay.OutboxRelayProps{
		Code: code("relay"),
		Outbox: &oncepay.OutboxTable{Table: awsdynamodb.Table_FromTableAttributes(rs, jsii.String("Outbox"), &awsdynamodb.TableAttributes{
			TableArn: jsii.String(outboxArn), TableStreamArn: jsii.String(outboxStream), EncryptionKey: p.key,
		})},
		Events: p.events,
		Role:   p.role,
		Alarms: oncepay.AlarmProps{Topic: p.ops},
	})

	// The api on the team's claim table (a TableV2 reference), role and
	// VPC, behind its own HTTP API and user pool.
	as := stack("PaymentsApi")
	p = importPlatform(as)
	oncepay.NewIdempotentApi(as, "Api", &oncepay.IdempotentApiProps{
		Code: code("api"),
		Claims: &oncepay.ClaimTable{Table: awsdynamodb.TableV2_FromTableAttributes(as, jsii.String("Claims"), &awsdynamodb.TableAttributesV2{
			TableName: jsii.String(claimsTable), EncryptionKey: p.key,
		})},
		Role:   p.role,
		Vpc:    p.vpc,
		Alarms: oncepay.AlarmProps{Topic: p.ops},
	})

	// The team's own choice of checks: the constructs ship their reasons.
	verbose := &cdknag.NagPackProps{Verbose: jsii.Bool(true)}
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(verbose), nil)
	awscdk.Aspects_Of(app).Add(cdknag.NewServerlessChecks(verbose), nil)

	app.Synth(nil)
	findings, err := warnings(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
	for _, f := range findings {
		fmt.Fprintln(os.Stderr, f)
	}
	jsii.Close()
	if *check && len(findings) > 0 {
		fmt.Fprintf(os.Stderr, "consumer: %d findings\n", len(findings))
		os.Exit(1)
	}
}

type entry struct {
	Type string `json:"type"`
	Data any    `json:"data"`
}

// warnings reads the errors and warnings the synth left in the cloud
// assembly's manifest (cdk-nag's findings among them), stack by stack.
func warnings(out string) ([]string, error) {
	raw, err := os.ReadFile(filepath.Join(out, "manifest.json"))
	if err != nil {
		return nil, err
	}
	var m struct {
		Artifacts map[string]struct {
			Type       string `json:"type"`
			Properties struct {
				TemplateFile string `json:"templateFile"`
			} `json:"properties"`
			Metadata               map[string][]entry `json:"metadata"`
			AdditionalMetadataFile string             `json:"additionalMetadataFile"`
		} `json:"artifacts"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("read %s: %w", out, err)
	}
	var found []string
	names := make([]string, 0, len(m.Artifacts))
	for name := range m.Artifacts {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		a := m.Artifacts[name]
		if a.Type != "aws:cloudformation:stack" {
			continue
		}
		fmt.Printf("consumer: %s -> %s\n", name, filepath.Join(out, a.Properties.TemplateFile))
		meta := a.Metadata
		if a.AdditionalMetadataFile != "" {
			// Newer CLIs' assemblies keep a stack's metadata in a file
			// of its own.
			raw, err := os.ReadFile(filepath.Join(out, a.AdditionalMetadataFile))
			if err != nil {
				return nil, err
			}
			if err := json.Unmarshal(raw, &meta); err != nil {
				return nil, fmt.Errorf("read %s: %w", a.AdditionalMetadataFile, err)
			}
		}
		if meta == nil {
			return nil, fmt.Errorf("stack %s: no metadata in the assembly, so no findings could be read", name)
		}
		for path, entries := range meta {
			for _, e := range entries {
				if e.Type == "aws:cdk:error" || e.Type == "aws:cdk:warning" {
					found = append(found, fmt.Sprintf("%s %s %s: %v", name, e.Type, path, e.Data))
				}
			}
		}
	}
	sort.Strings(found)
	return found, nil
}
