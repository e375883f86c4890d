package oncepay_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay"
	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
)

// aloneConstructs builds each construct users copy in an empty stack, with
// nothing but its defaults (and what it has none for).
var aloneConstructs = map[string]func(awscdk.Stack){
	"IdempotentApi": func(s awscdk.Stack) { oncepay.NewIdempotentApi(s, "Api", apiProps(s)) },
	"OutboxRelay":   func(s awscdk.Stack) { oncepay.NewOutboxRelay(s, "Relay", relayProps(s)) },
	"InboxWorker":   func(s awscdk.Stack) { oncepay.NewInboxWorker(s, "Worker", workerProps(s)) },
	// The reconciliation has no defaults for what it reads: the ledger and
	// the PSP's secrets come with it here.
	"Reconciliation": func(s awscdk.Stack) {
		oncepay.NewReconciliation(s, "Reconcile", newReconcileParts(s).props(s))
	},
}

// The props of each construct with nothing but its required Code (the
// tests' placeholder bootstraps).
func apiProps(s awscdk.Stack) *oncepay.IdempotentApiProps {
	return &oncepay.IdempotentApiProps{Code: oncepay.CodeFromBuild(s, oncepay.FnAPI)}
}

func relayProps(s awscdk.Stack) *oncepay.OutboxRelayProps {
	return &oncepay.OutboxRelayProps{Code: oncepay.CodeFromBuild(s, oncepay.FnRelay)}
}

func workerProps(s awscdk.Stack) *oncepay.InboxWorkerProps {
	return &oncepay.InboxWorkerProps{Code: oncepay.CodeFromBuild(s, oncepay.FnWorker)}
}

// panicsWith runs build in a fresh stack and wants a panic whose message
// holds want: the construct refused for the reason the test names, not
// another.
func panicsWith(t *testing.T, want string, build func(awscdk.Stack)) {
	t.Helper()
	app := awscdk.NewApp(&awscdk.AppProps{Context: cdkContext(t, "")})
	stack := awscdk.NewStack(app, jsii.String("Bad"), nil)
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Errorf("accepted; want a refusal saying %q", want)
			return
		}
		if msg := fmt.Sprint(r); !strings.Contains(msg, want) {
			t.Errorf("refused with %q; want it to say %q", msg, want)
		}
	}()
	build(stack)
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
	stack, tmpl, js := synthAlone(t, func(s awscdk.Stack) { c = oncepay.NewIdempotentApi(s, "Api", apiProps(s)) })
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
		p := apiProps(s)
		p.Auth = oncepay.AuthProps{Issuer: "https://login.example.com/", Audience: []string{"oncepay-app"}}
		oncepay.NewIdempotentApi(s, "Api", p)
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
	stack, tmpl, js := synthAlone(t, func(s awscdk.Stack) { c = oncepay.NewOutboxRelay(s, "Relay", relayProps(s)) })
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
	stack, tmpl, js := synthAlone(t, func(s awscdk.Stack) { c = oncepay.NewInboxWorker(s, "Worker", workerProps(s)) })
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
// visibility timeout shorter than six worker timeouts, fails at synth with
// a message that says what to change.
func TestConstructsRejectBadSettings(t *testing.T) {
	for name, c := range map[string]struct {
		want  string
		build func(awscdk.Stack)
	}{
		"relay batch 0": {"stream batch size 0", func(s awscdk.Stack) {
			st := oncepay.DefaultRelaySettings()
			st.BatchSize = 0
			p := relayProps(s)
			p.Settings = &st
			oncepay.NewOutboxRelay(s, "Relay", p)
		}},
		"worker batch 11": {"batch size 11", func(s awscdk.Stack) {
			q := oncepay.DefaultWorkerSettings()
			q.BatchSize = 11
			p := workerProps(s)
			p.Settings = &q
			oncepay.NewInboxWorker(s, "Worker", p)
		}},
		"short visibility": {"under 6x the worker function's timeout", func(s awscdk.Stack) {
			q := oncepay.DefaultWorkerSettings()
			q.VisibilityTimeout = eventsource.WorkerTimeout
			p := workerProps(s)
			p.Settings = &q
			oncepay.NewInboxWorker(s, "Worker", p)
		}},
		"issuer without audience": {"needs an Audience", func(s awscdk.Stack) {
			p := apiProps(s)
			p.Auth = oncepay.AuthProps{Issuer: "https://x/"}
			oncepay.NewIdempotentApi(s, "Api", p)
		}},
	} {
		t.Run(name, func(t *testing.T) { panicsWith(t, c.want, c.build) })
	}
}
