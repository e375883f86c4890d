package oncepay_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/eventsource"
)

// aloneConstructs builds each construct users copy in an empty stack, with
// nothing but its defaults.
var aloneConstructs = map[string]func(awscdk.Stack){
	"IdempotentApi": func(s awscdk.Stack) { oncepay.NewIdempotentApi(s, "Api", nil) },
	"OutboxRelay":   func(s awscdk.Stack) { oncepay.NewOutboxRelay(s, "Relay", nil) },
	"InboxWorker":   func(s awscdk.Stack) { oncepay.NewInboxWorker(s, "Worker", nil) },
}

func nagClean(t *testing.T, stack awscdk.Stack) {
	t.Helper()
	if f := findings(t, stack); len(f) > 0 {
		t.Errorf("%d cdk-nag findings:\n%s", len(f), strings.Join(f, "\n"))
	}
}

// The safe defaults of everything stateful a construct creates alone:
// retained, deletion-protected where the service has it.
func retainedAndProtected(t *testing.T, js map[string]any) {
	t.Helper()
	for _, typ := range []string{"AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::SNS::Topic", "AWS::KMS::Key", "AWS::Cognito::UserPool", "AWS::Logs::LogGroup"} {
		for id, r := range ofType(js, typ) {
			if r["DeletionPolicy"] != "Retain" {
				t.Errorf("%s %s: DeletionPolicy %v, want Retain by default", typ, id, r["DeletionPolicy"])
			}
		}
	}
	for id, r := range ofType(js, "AWS::DynamoDB::Table") {
		if p := r["Properties"].(map[string]any); p["DeletionProtectionEnabled"] != true {
			t.Errorf("table %s: deletion protection off by default", id)
		}
	}
}

func TestIdempotentApiAlone(t *testing.T) {
	var c *oncepay.IdempotentApi
	stack, tmpl, js := synthAlone(t, func(s awscdk.Stack) { c = oncepay.NewIdempotentApi(s, "Api", nil) })
	if c.Claims == nil || c.Function == nil || c.HttpApi == nil || c.Stage == nil || c.Authorizer == nil ||
		c.UserPool == nil || c.UserPoolClient == nil || c.AccessLogs == nil || len(c.Routes) != 3 {
		t.Fatalf("parts not exposed: %+v", c)
	}
	fn := logicalIDIn(t, stack, c.Function.Function)
	pool := logicalIDIn(t, stack, c.UserPool)
	client := logicalIDIn(t, stack, c.UserPoolClient)
	check(t, "claim table", func() {
		tmpl.ResourceCountIs(jsii.String("AWS::DynamoDB::Table"), jsii.Number(1))
		tmpl.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), obj(map[string]any{
			"KeySchema": exact(map[string]any{"AttributeName": "pk", "KeyType": "HASH"}),
		}))
	})
	check(t, "function", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
			"Architectures": exact("arm64"), "Runtime": "provided.al2023", "Handler": "bootstrap",
			"Timeout": config.Default().FunctionTimeout().Seconds(), "TracingConfig": map[string]any{"Mode": "Active"},
			"Environment": obj(map[string]any{"Variables": obj(map[string]any{
				"ONCEPAY_IDEM_TABLE": ref(logicalIDIn(t, stack, c.Claims.Table)),
				"ONCEPAY_DEADLINE":   "5s",
			})}),
		}))
	})
	check(t, "JWT authorizer on the user pool", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Authorizer"), obj(map[string]any{
			"AuthorizerType": "JWT",
			"JwtConfiguration": map[string]any{
				"Issuer": getAtt(pool, "ProviderURL"), "Audience": exact(ref(client)),
			},
		}))
	})
	check(t, "safe user pool", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Cognito::UserPool"), obj(map[string]any{
			"MfaConfiguration": "ON", "UserPoolTier": "PLUS",
			"AdminCreateUserConfig": obj(map[string]any{"AllowAdminCreateUserOnly": true}),
		}))
	})
	for _, route := range []string{"POST /payments", "POST /payments/{key}/resolve", "POST /payments/{key}/refund"} {
		check(t, route, func() {
			tmpl.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Route"), obj(map[string]any{
				"RouteKey": route, "AuthorizationType": "JWT",
			}))
		})
	}
	check(t, "integration to the function", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Integration"), obj(map[string]any{
			"IntegrationType": "AWS_PROXY", "IntegrationUri": getAtt(fn, "Arn"), "PayloadFormatVersion": "2.0",
		}))
	})
	retainedAndProtected(t, js)
	nagClean(t, stack)
}

func TestIdempotentApiWithAnExternalIssuer(t *testing.T) {
	stack, tmpl, _ := synthAlone(t, func(s awscdk.Stack) {
		oncepay.NewIdempotentApi(s, "Api", &oncepay.IdempotentApiProps{
			Auth: oncepay.AuthProps{Issuer: "https://login.example.com/", Audience: []string{"oncepay-app"}},
		})
	})
	check(t, "no user pool", func() {
		tmpl.ResourceCountIs(jsii.String("AWS::Cognito::UserPool"), jsii.Number(0))
	})
	check(t, "authorizer", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Authorizer"), obj(map[string]any{
			"JwtConfiguration": map[string]any{"Issuer": "https://login.example.com/", "Audience": exact("oncepay-app")},
		}))
	})
	nagClean(t, stack)
}

func TestOutboxRelayAlone(t *testing.T) {
	var c *oncepay.OutboxRelay
	stack, tmpl, js := synthAlone(t, func(s awscdk.Stack) { c = oncepay.NewOutboxRelay(s, "Relay", nil) })
	if c.Outbox == nil || c.Events == nil || c.Function == nil || c.Mapping == nil || c.FailureQueue == nil {
		t.Fatalf("parts not exposed: %+v", c)
	}
	table := logicalIDIn(t, stack, c.Outbox.Table)
	check(t, "stream mapping", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), obj(map[string]any{
			"EventSourceArn":             getAtt(table, "StreamArn"),
			"FunctionName":               ref(logicalIDIn(t, stack, c.Function.Function)),
			"StartingPosition":           "TRIM_HORIZON",
			"BisectBatchOnFunctionError": true,
			"FunctionResponseTypes":      exact("ReportBatchItemFailures"),
			"DestinationConfig": map[string]any{"OnFailure": map[string]any{
				"Destination": getAtt(logicalIDIn(t, stack, c.FailureQueue), "Arn"),
			}},
		}))
	})
	check(t, "FIFO queue with DLQ", func() {
		tmpl.ResourcePropertiesCountIs(jsii.String("AWS::SQS::Queue"), obj(map[string]any{"FifoQueue": true}), jsii.Number(2))
	})
	check(t, "relay sends to the queue", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
			"Environment": map[string]any{"Variables": map[string]any{
				"ONCEPAY_EVENTS_QUEUE_URL": ref(logicalIDIn(t, stack, c.Events.Queue)),
			}},
		}))
	})
	retainedAndProtected(t, js)
	nagClean(t, stack)
}

func TestInboxWorkerAlone(t *testing.T) {
	var c *oncepay.InboxWorker
	stack, tmpl, js := synthAlone(t, func(s awscdk.Stack) { c = oncepay.NewInboxWorker(s, "Worker", nil) })
	if c.Events == nil || c.Push == nil || c.Function == nil || c.Mapping == nil {
		t.Fatalf("parts not exposed: %+v", c)
	}
	queue, dlq := logicalIDIn(t, stack, c.Events.Queue), logicalIDIn(t, stack, c.Events.Dlq)
	check(t, "queue mapping", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), obj(map[string]any{
			"EventSourceArn":        getAtt(queue, "Arn"),
			"BatchSize":             10,
			"FunctionResponseTypes": exact("ReportBatchItemFailures"),
		}))
	})
	check(t, "DLQ by redrive", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::SQS::Queue"), obj(map[string]any{
			"RedrivePolicy": map[string]any{"deadLetterTargetArn": getAtt(dlq, "Arn"), "maxReceiveCount": 5},
		}))
	})
	check(t, "push topic", func() {
		tmpl.ResourceCountIs(jsii.String("AWS::SNS::Topic"), jsii.Number(1))
		tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
			"Timeout": eventsource.WorkerTimeout.Seconds(),
			"Environment": map[string]any{"Variables": map[string]any{
				"ONCEPAY_PUSH_TOPIC_ARN": ref(logicalIDIn(t, stack, c.Push.Topic)),
			}},
		}))
	})
	retainedAndProtected(t, js)
	nagClean(t, stack)
}

// TestConstructsRejectBadSettings: a setting Lambda would refuse, or a
// visibility timeout shorter than six worker timeouts, fails at synth.
func TestConstructsRejectBadSettings(t *testing.T) {
	for name, build := range map[string]func(awscdk.Stack){
		"relay batch 0": func(s awscdk.Stack) {
			st := eventsource.Default().Relay
			st.BatchSize = 0
			oncepay.NewOutboxRelay(s, "Relay", &oncepay.OutboxRelayProps{Settings: &st})
		},
		"worker batch 11": func(s awscdk.Stack) {
			q := eventsource.Default().Worker
			q.BatchSize = 11
			oncepay.NewInboxWorker(s, "Worker", &oncepay.InboxWorkerProps{Settings: &q})
		},
		"short visibility": func(s awscdk.Stack) {
			q := eventsource.Default().Worker
			q.VisibilityTimeout = eventsource.WorkerTimeout
			oncepay.NewInboxWorker(s, "Worker", &oncepay.InboxWorkerProps{Settings: &q})
		},
		"issuer without audience": func(s awscdk.Stack) {
			oncepay.NewIdempotentApi(s, "Api", &oncepay.IdempotentApiProps{Auth: oncepay.AuthProps{Issuer: "https://x/"}})
		},
	} {
		t.Run(name, func(t *testing.T) {
			app := awscdk.NewApp(&awscdk.AppProps{Context: cdkContext(t, "")})
			stack := awscdk.NewStack(app, jsii.String("Bad"), nil)
			defer func() {
				if recover() == nil {
					t.Errorf("%s was accepted", name)
				}
			}()
			build(stack)
		})
	}
}
