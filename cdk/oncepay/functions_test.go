package oncepay_test

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscognito"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay"
	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
)

// TestSizings: the numbers the stack derives, read from the one place.
func TestSizings(t *testing.T) {
	z := oncepay.SizingsFor(config.Default())
	if z.API.Timeout != 6*time.Second || z.API.Timeout != config.Default().FunctionTimeout() {
		t.Errorf("api timeout %s, want deadline + margin = 6s", z.API.Timeout)
	}
	if z.Webhook.Timeout != config.Default().FunctionTimeout() {
		t.Errorf("webhook timeout %s", z.Webhook.Timeout)
	}
	if z.Resolver.Timeout >= oncepay.ResolverRate {
		t.Errorf("resolver timeout %s does not end before the next tick (%s)", z.Resolver.Timeout, oncepay.ResolverRate)
	}
	// A day's run gets all Lambda allows, and no more (Lambda refuses it).
	if z.Reconcile.Timeout != 15*time.Minute {
		t.Errorf("reconcile timeout %s, want Lambda's maximum, 15m", z.Reconcile.Timeout)
	}
	w := eventsource.Default().Worker
	if z.Worker.Timeout != oncepay.WorkerTimeout || w.VisibilityTimeout != oncepay.EventsVisibilityTimeout ||
		oncepay.EventsVisibilityTimeout < 6*z.Worker.Timeout {
		t.Errorf("worker %s, visibility harness %s / stack %s: want visibility = 6 x worker timeout", z.Worker.Timeout, w.VisibilityTimeout, oncepay.EventsVisibilityTimeout)
	}
	if w.MaxReceiveCount != oncepay.EventsMaxReceiveCount {
		t.Errorf("maxReceiveCount harness %d, stack %d", w.MaxReceiveCount, oncepay.EventsMaxReceiveCount)
	}
	// A longer deadline lengthens the api's timeout with it.
	long := config.Default()
	long.Deadline = 7 * time.Second
	long.ClientTimeout = 12 * time.Second
	if got := oncepay.SizingsFor(long).API.Timeout; got != 8*time.Second {
		t.Errorf("api timeout with a 7s deadline = %s, want 8s", got)
	}
}

// TestFunctions: every function is arm64 provided.al2023 with a bootstrap,
// X-Ray active, a log group of its own with the profile's retention, its
// sizing, and a VPC only where it touches the ledger.
func TestFunctions(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	st := s.stack
	z := oncepay.SizingsFor(config.Default())
	cases := []struct {
		fn       *oncepay.GoFunction
		sizing   oncepay.Sizing
		vpc      bool
		reserved any
	}{
		{st.Api.Function, z.API, true, nil},
		{st.Relay.Function, z.Relay, false, nil},
		{st.Worker.Function, z.Worker, true, nil},
		// The sandbox reserves none (a new account's quota is 10); prod
		// reserves the resolver's one (TestTheSandboxReservesNoConcurrency).
		{st.Resolver, z.Resolver, true, nil},
		{st.Webhook, z.Webhook, true, nil},
		{st.Migration.Function, z.Migrate, true, nil},
		{st.Totals.Function, z.Totals, false, nil},
		{st.Totals.RecountFunction, z.Recount, true, nil},
		{st.Devices.Function, z.Devices, true, nil},
		// No reserved concurrency: two runs of a span at once are harmless,
		// and a reservation breaks accounts whose quota is 10.
		{st.Reconciliation.Function, z.Reconcile, true, nil},
	}
	if got := len(s.resourcesOfType("AWS::Lambda::Function")); got != len(cases) {
		t.Errorf("%d functions, want %d", got, len(cases))
	}
	for _, c := range cases {
		id := s.logicalID(t, c.fn.Function)
		t.Run(id, func(t *testing.T) {
			p := s.resource(t, id)["Properties"].(map[string]any)
			want := map[string]any{
				"Architectures": []any{"arm64"}, "Runtime": "provided.al2023", "Handler": "bootstrap",
				"Timeout": c.sizing.Timeout.Seconds(), "MemorySize": c.sizing.MemoryMB,
				"TracingConfig": map[string]any{"Mode": "Active"},
				"LoggingConfig": map[string]any{"LogGroup": ref(s.logicalID(t, c.fn.LogGroup))},
				"Role":          getAtt(s.logicalID(t, c.fn.Role), "Arn"),
			}
			for k, v := range want {
				if !jsonEqual(p[k], v) {
					t.Errorf("%s = %s, want %s", k, show(p[k]), show(v))
				}
			}
			if !jsonEqual(p["ReservedConcurrentExecutions"], c.reserved) {
				t.Errorf("reserved concurrency %v, want %v", p["ReservedConcurrentExecutions"], c.reserved)
			}
			vpc, inVpc := p["VpcConfig"].(map[string]any)
			if inVpc != c.vpc {
				t.Fatalf("in a VPC: %v, want %v", inVpc, c.vpc)
			}
			if c.vpc {
				private := []any{
					ref(s.logicalID(t, (*st.Data.Vpc.PrivateSubnets())[0])),
					ref(s.logicalID(t, (*st.Data.Vpc.PrivateSubnets())[1])),
				}
				if !jsonEqual(vpc["SubnetIds"], private) {
					t.Errorf("subnets %s, want the private ones", show(vpc["SubnetIds"]))
				}
				if !jsonEqual(vpc["SecurityGroupIds"], []any{getAtt(s.logicalID(t, c.fn.SecurityGroup), "GroupId")}) {
					t.Errorf("security groups %s", show(vpc["SecurityGroupIds"]))
				}
			}
			logs := s.resource(t, s.logicalID(t, c.fn.LogGroup))["Properties"].(map[string]any)
			if logs["RetentionInDays"] != float64(7) {
				t.Errorf("log retention %v, want the sandbox's 7 days", logs["RetentionInDays"])
			}
			code, _ := p["Code"].(map[string]any)
			if _, ok := code["S3Key"]; !ok {
				t.Errorf("code is not an asset: %s", show(code))
			}
		})
	}
}

// TestFunctionEnvironment: each function gets the variables its main reads
// (internal/localenv, cdk/oncepay/config, internal/boot, internal/webhook).
func TestFunctionEnvironment(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	st := s.stack
	env := func(fn *oncepay.GoFunction) map[string]string {
		vars := s.resource(t, s.logicalID(t, fn.Function))["Properties"].(map[string]any)["Environment"].(map[string]any)["Variables"].(map[string]any)
		out := map[string]string{}
		for k, v := range vars {
			out[k] = render(v)
		}
		return out
	}
	claims := "${" + s.logicalID(t, st.Data.Claims.Table) + "}"
	outbox := "${" + s.logicalID(t, st.Data.Outbox.Table) + "}"
	keySecret := "${" + s.logicalID(t, st.Psp.KeySecret) + "}"
	webhookSecret := "${" + s.logicalID(t, st.Psp.WebhookSecret) + "}"
	sm := "https://secretsmanager.${AWS::Region}.${AWS::URLSuffix}"
	host := "${" + s.logicalID(t, st.Data.Ledger.Cluster) + ".Endpoint.Address}"
	port := "${" + s.logicalID(t, st.Data.Ledger.Cluster) + ".Endpoint.Port}"
	dsn := "postgres://oncepay_app@" + host + ":" + port + "/oncepay?sslmode=require"
	ledger := map[string]string{stackenv.LedgerDSN: dsn, stackenv.LedgerEndpoint: host, oncepay.EnvLedgerAppUser: "oncepay_app"}
	timing := map[string]string{"ONCEPAY_DEADLINE": "5s", "ONCEPAY_CLOCK_MARGIN": "1s", "ONCEPAY_CLIENT_TIMEOUT": "10s",
		"ONCEPAY_PRESTAMP_WAIT": "500ms", "ONCEPAY_KEY_WINDOW": "1h0m0s"}
	apiKey := map[string]string{oncepay.EnvPSPKeySecretArn: keySecret, oncepay.EnvSecretsManagerEndpoint: sm}
	join := func(ms ...map[string]string) map[string]string {
		out := map[string]string{}
		for _, m := range ms {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	// The sandbox's topic fallback, for the worker and the resolver's sweep.
	push := map[string]string{stackenv.PushTopicArn: "${" + s.logicalID(t, st.Data.Push.Topic) + "}", oncepay.EnvPushTopicFallback: "true"}
	cases := map[string]struct {
		fn   *oncepay.GoFunction
		want map[string]string
	}{
		"api": {st.Api.Function, join(ledger, timing, apiKey, map[string]string{stackenv.IdemTable: claims, stackenv.OutboxTable: outbox})},
		"relay": {st.Relay.Function, map[string]string{
			stackenv.EventsQueueURL: "${" + s.logicalID(t, st.Data.Events.Queue) + "}"}},
		"worker":   {st.Worker.Function, join(ledger, push)},
		"resolver": {st.Resolver, join(ledger, timing, apiKey, map[string]string{stackenv.IdemTable: claims, stackenv.OutboxTable: outbox})},
		"totals": {st.Totals.Function, map[string]string{
			stackenv.TotalsTable:     "${" + s.logicalID(t, st.Totals.Table) + "}",
			stackenv.RecountQueueURL: "${" + s.logicalID(t, st.Totals.Recount) + "}",
			stackenv.TotalsVersion:   "2"}},
		"recount": {st.Totals.RecountFunction, join(ledger, map[string]string{
			stackenv.TotalsTable:           "${" + s.logicalID(t, st.Totals.Table) + "}",
			stackenv.RecountQueueURL:       "${" + s.logicalID(t, st.Totals.Recount) + "}",
			stackenv.TotalsFailureQueueURL: "${" + s.logicalID(t, st.Totals.FailureQueue) + "}",
			stackenv.TotalsVersion:         "2"})},
		"webhook": {st.Webhook, join(ledger, map[string]string{
			stackenv.OutboxTable: outbox, oncepay.EnvWebhookSecretArn: webhookSecret, oncepay.EnvSecretsManagerEndpoint: sm})},
		// No claim table, no timing: it reads the ledger and the PSP and
		// puts events.
		"reconcile": {st.Reconciliation.Function, join(ledger, apiKey, map[string]string{stackenv.OutboxTable: outbox})},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := env(c.fn); !jsonEqual(got, c.want) {
				t.Errorf("environment:\n got %s\nwant %s", show(got), show(c.want))
			}
		})
	}
	m := env(st.Migration.Function)
	if m[stackenv.LedgerSecretArn] != "${"+s.logicalID(t, st.Data.Ledger.Secret)+"}" || m[stackenv.LedgerEndpoint] != host ||
		m[oncepay.EnvLedgerAppUser] != "oncepay_app" || m[oncepay.EnvSecretsManagerEndpoint] != sm || len(m) != 4 {
		t.Errorf("migrate environment: %s", show(m))
	}
	for name, c := range cases {
		for k, v := range env(c.fn) {
			if strings.Contains(strings.ToLower(k), "password") || strings.Contains(v, "sk_") {
				t.Errorf("%s: %s looks like a secret in plain text: %s", name, k, v)
			}
		}
	}
}

// TestRoutesAndAuthorizer: the HTTP API's four routes, the JWT authorizer on
// the payment routes and none on the webhook.
func TestRoutesAndAuthorizer(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	st := s.stack
	api := s.logicalID(t, st.Api.HttpApi)
	authorizer := ""
	for id := range s.resourcesOfType("AWS::ApiGatewayV2::Authorizer") {
		authorizer = id
	}
	check(t, "authorizer", func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::ApiGatewayV2::Authorizer"), jsii.Number(1))
		s.tmpl.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Authorizer"), obj(map[string]any{
			"ApiId": ref(api), "AuthorizerType": "JWT",
			"IdentitySource": exact("$request.header.Authorization"),
			"JwtConfiguration": map[string]any{
				"Issuer":   getAtt(s.logicalID(t, st.Api.UserPool), "ProviderURL"),
				"Audience": exact(ref(s.logicalID(t, st.Api.UserPoolClient))),
			},
		}))
	})
	integrationOf := map[string]string{} // integration logical id -> function logical id
	for id, r := range s.resourcesOfType("AWS::ApiGatewayV2::Integration") {
		p := r["Properties"].(map[string]any)
		if p["PayloadFormatVersion"] != "2.0" || p["IntegrationType"] != "AWS_PROXY" {
			t.Errorf("integration %s: %s", id, show(p))
		}
		integrationOf[id] = strings.TrimSuffix(strings.TrimPrefix(render(p["IntegrationUri"]), "${"), ".Arn}")
	}
	apiFn, webhookFn := s.logicalID(t, st.Api.Function.Function), s.logicalID(t, st.Webhook.Function)
	devicesFn := s.logicalID(t, st.Devices.Function.Function)
	want := map[string][2]string{ // route key -> authorization, function
		"POST /payments":               {"JWT", apiFn},
		"POST /payments/{key}/resolve": {"JWT", apiFn},
		"POST /payments/{key}/refund":  {"JWT", apiFn},
		"POST /webhooks/psp":           {"NONE", webhookFn},
		"PUT /devices/{device_id}":     {"JWT", devicesFn},
		"DELETE /devices/{device_id}":  {"JWT", devicesFn},
	}
	routes := s.resourcesOfType("AWS::ApiGatewayV2::Route")
	if len(routes) != len(want) {
		t.Errorf("%d routes, want %d", len(routes), len(want))
	}
	for _, r := range routes {
		p := r["Properties"].(map[string]any)
		key, _ := p["RouteKey"].(string)
		w, ok := want[key]
		if !ok {
			t.Errorf("unexpected route %s", key)
			continue
		}
		if p["AuthorizationType"] != w[0] {
			t.Errorf("%s: authorization %v, want %s", key, p["AuthorizationType"], w[0])
		}
		if w[0] == "JWT" && !jsonEqual(p["AuthorizerId"], ref(authorizer)) {
			t.Errorf("%s: authorizer %s", key, show(p["AuthorizerId"]))
		}
		if w[0] == "NONE" && p["AuthorizerId"] != nil {
			t.Errorf("%s: has an authorizer", key)
		}
		target := strings.TrimSuffix(strings.TrimPrefix(render(p["Target"]), "integrations/${"), "}")
		if integrationOf[target] != w[1] {
			t.Errorf("%s: integration %s calls %s, want %s", key, target, integrationOf[target], w[1])
		}
	}
	check(t, "stage: throttled, JSON access logs", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Stage"), obj(map[string]any{
			"StageName": "$default", "AutoDeploy": true,
			"DefaultRouteSettings": map[string]any{"ThrottlingRateLimit": oncepay.DefaultRateLimit, "ThrottlingBurstLimit": oncepay.DefaultBurstLimit},
			"AccessLogSettings": map[string]any{
				"DestinationArn": getAtt(s.logicalID(t, st.Api.AccessLogs), "Arn"),
				"Format":         oncepay.AccessLogFormat,
			},
		}))
	})
	for _, personal := range []string{"sourceIp", "claims", "userAgent"} {
		if strings.Contains(oncepay.AccessLogFormat, personal) {
			t.Errorf("access log format carries %s", personal)
		}
	}
	check(t, "sandbox user pool", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::Cognito::UserPool"), obj(map[string]any{
			"MfaConfiguration": "OPTIONAL", "UserPoolTier": "ESSENTIALS",
			"Policies": obj(map[string]any{"PasswordPolicy": obj(map[string]any{"MinimumLength": 12, "RequireSymbols": true})}),
		}))
		s.tmpl.HasResourceProperties(jsii.String("AWS::Cognito::UserPoolClient"), obj(map[string]any{
			"ExplicitAuthFlows": assertions.Match_ArrayWith(&[]any{"ALLOW_ADMIN_USER_PASSWORD_AUTH", "ALLOW_USER_SRP_AUTH"}),
			"GenerateSecret":    false,
		}))
	})
	p := synth(t, oncepay.ProfileProd)
	check(t, "prod user pool", func() {
		p.tmpl.HasResourceProperties(jsii.String("AWS::Cognito::UserPool"), obj(map[string]any{
			"MfaConfiguration": "ON", "UserPoolTier": "PLUS",
		}))
	})
}

// TestEventSourceMappings: the relay's stream mapping and the worker's
// queue mapping carry cdk/oncepay/eventsource's numbers, which the local
// harness plays too.
func TestEventSourceMappings(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	st := s.stack
	r := eventsource.Default().Relay
	if r.StartingPosition != eventsource.TrimHorizon || r.BatchSize != 100 || !r.BisectOnError || r.MaxRetryAttempts != 10 ||
		r.MaxRecordAgeSeconds != eventsource.Forever || !r.ReportBatchItemFailures {
		t.Errorf("eventsource.Default().Relay changed: %+v (update this test and docs/deploy.md)", r)
	}
	relay := s.resource(t, s.logicalID(t, st.Relay.Mapping))["Properties"].(map[string]any)
	wantRelay := map[string]any{
		"EventSourceArn":             getAtt(s.logicalID(t, st.Data.Outbox.Table), "StreamArn"),
		"FunctionName":               ref(s.logicalID(t, st.Relay.Function.Function)),
		"StartingPosition":           "TRIM_HORIZON",
		"BatchSize":                  100,
		"BisectBatchOnFunctionError": true,
		"MaximumRetryAttempts":       10,
		"MaximumRecordAgeInSeconds":  -1,
		"ParallelizationFactor":      1,
		"FunctionResponseTypes":      []any{"ReportBatchItemFailures"},
		"DestinationConfig": map[string]any{"OnFailure": map[string]any{
			"Destination": getAtt(s.logicalID(t, st.Relay.FailureQueue), "Arn"),
		}},
	}
	if !jsonEqual(relay, wantRelay) {
		t.Errorf("relay mapping:\n got %s\nwant %s", show(relay), show(wantRelay))
	}
	worker := s.resource(t, s.logicalID(t, st.Worker.Mapping))["Properties"].(map[string]any)
	wantWorker := map[string]any{
		"EventSourceArn":        getAtt(s.logicalID(t, st.Data.Events.Queue), "Arn"),
		"FunctionName":          ref(s.logicalID(t, st.Worker.Function.Function)),
		"BatchSize":             10,
		"FunctionResponseTypes": []any{"ReportBatchItemFailures"},
	}
	if !jsonEqual(worker, wantWorker) {
		t.Errorf("worker mapping:\n got %s\nwant %s", show(worker), show(wantWorker))
	}
	if b := worker["BatchSize"].(float64); b > 10 {
		t.Errorf("FIFO batch size %v > 10", b)
	}
	failures := s.resource(t, s.logicalID(t, st.Relay.FailureQueue))["Properties"].(map[string]any)
	if failures["SqsManagedSseEnabled"] != true || failures["MessageRetentionPeriod"] != oncepay.DlqRetention.Seconds() {
		t.Errorf("relay failure queue: %s", show(failures))
	}
	// The mapping is created after the role can read the stream: the
	// function depends on its default policy.
	deps, _ := s.resource(t, s.logicalID(t, st.Relay.Function.Function))["DependsOn"].([]any)
	policy := s.logicalID(t, st.Relay.Function.Role.Node().FindChild(jsii.String("DefaultPolicy")))
	found := false
	for _, d := range deps {
		if d == policy {
			found = true
		}
	}
	if !found {
		t.Errorf("relay function does not depend on its policy %s: %v", policy, deps)
	}
}

// TestResolverSchedule: EventBridge runs the resolver every minute, with a
// DLQ and bounded retries, and may invoke nothing else.
func TestResolverSchedule(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	st := s.stack
	rule := s.logicalID(t, st.ResolverSchedule)
	fn := s.logicalID(t, st.Resolver.Function)
	dlq := s.logicalID(t, st.AsyncFailures)
	check(t, "rule", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::Events::Rule"), obj(map[string]any{
			"ScheduleExpression": "rate(1 minute)", "State": "ENABLED",
			"Targets": exact(obj(map[string]any{
				"Arn":              getAtt(fn, "Arn"),
				"DeadLetterConfig": map[string]any{"Arn": getAtt(dlq, "Arn")},
				"RetryPolicy":      map[string]any{"MaximumEventAgeInSeconds": 60, "MaximumRetryAttempts": 2},
			})),
		}))
	})
	check(t, "permission", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Permission"), obj(map[string]any{
			"Action": "lambda:InvokeFunction", "FunctionName": getAtt(fn, "Arn"),
			"Principal": "events.amazonaws.com", "SourceArn": getAtt(rule, "Arn"),
		}))
	})
	check(t, "async DLQ", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), obj(map[string]any{
			"DeadLetterConfig": map[string]any{"TargetArn": getAtt(dlq, "Arn")},
		}))
	})
}

// TestReconcileSchedule: EventBridge runs the reconciliation daily at
// 00:30 UTC with no input (the handler then takes the two previous UTC
// days), with the resolver's DLQ and retries, and may invoke nothing else;
// a failed run lands in the same DLQ after Lambda's retries.
func TestReconcileSchedule(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	st := s.stack
	rule := s.logicalID(t, st.Reconciliation.Schedule)
	fn := s.logicalID(t, st.Reconciliation.Function.Function)
	dlq := s.logicalID(t, st.AsyncFailures)
	p := s.resource(t, rule)["Properties"].(map[string]any)
	want := map[string]any{
		"ScheduleExpression": "cron(30 0 * * ? *)", "State": "ENABLED",
		"Targets": []any{map[string]any{
			"Arn":              getAtt(fn, "Arn"),
			"DeadLetterConfig": map[string]any{"Arn": getAtt(dlq, "Arn")},
			"RetryPolicy":      map[string]any{"MaximumEventAgeInSeconds": 86400, "MaximumRetryAttempts": 2},
		}},
	}
	for k, v := range want {
		got := p[k]
		if k == "Targets" {
			// The target's Id is CDK's; everything else is pinned.
			ts, _ := got.([]any)
			for _, tg := range ts {
				delete(tg.(map[string]any), "Id")
			}
		}
		if !jsonEqual(got, v) {
			t.Errorf("rule %s = %s, want %s", k, show(got), show(v))
		}
	}
	check(t, "permission", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Permission"), obj(map[string]any{
			"Action": "lambda:InvokeFunction", "FunctionName": getAtt(fn, "Arn"),
			"Principal": "events.amazonaws.com", "SourceArn": getAtt(rule, "Arn"),
		}))
	})
	// Only its own rule may invoke it.
	for id, perm := range s.resourcesOfType("AWS::Lambda::Permission") {
		pp := perm["Properties"].(map[string]any)
		if jsonEqual(pp["FunctionName"], getAtt(fn, "Arn")) && !jsonEqual(pp["SourceArn"], getAtt(rule, "Arn")) {
			t.Errorf("permission %s lets %s invoke the reconciliation", id, show(pp["SourceArn"]))
		}
	}
	fp := s.resource(t, fn)["Properties"].(map[string]any)
	if !jsonEqual(fp["DeadLetterConfig"], map[string]any{"TargetArn": getAtt(dlq, "Arn")}) {
		t.Errorf("async DLQ %s, want the stack's AsyncFailures", show(fp["DeadLetterConfig"]))
	}
	if fp["ReservedConcurrentExecutions"] != nil {
		t.Errorf("reserved concurrency %v: a new account's quota of 10 cannot take it", fp["ReservedConcurrentExecutions"])
	}
}

// TestAlarms: the alarms the design asks for, on the right metrics, each
// notifying the alarm topic.
func TestAlarms(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	st := s.stack
	topic := ref(s.logicalID(t, st.Monitoring.Topic))
	queueName := func(q constructs.IConstruct) any { return getAtt(s.logicalID(t, q), "QueueName") }
	fnName := func(fn *oncepay.GoFunction) any { return ref(s.logicalID(t, fn.Function)) }
	type want struct {
		namespace, metric, stat string
		dims                    map[string]any
		threshold               float64
	}
	cases := map[string]want{
		oncepay.AlarmEventsDlq:          {"AWS/SQS", "ApproximateNumberOfMessagesVisible", "Maximum", map[string]any{"QueueName": queueName(st.Data.Events.Dlq)}, 1},
		oncepay.AlarmRelayFailures:      {"AWS/SQS", "ApproximateNumberOfMessagesVisible", "Maximum", map[string]any{"QueueName": queueName(st.Relay.FailureQueue)}, 1},
		oncepay.AlarmAsyncFailures:      {"AWS/SQS", "ApproximateNumberOfMessagesVisible", "Maximum", map[string]any{"QueueName": queueName(st.AsyncFailures)}, 1},
		oncepay.AlarmRelayErrors:        {"AWS/Lambda", "Errors", "Sum", map[string]any{"FunctionName": fnName(st.Relay.Function)}, 1},
		oncepay.AlarmWorkerErrors:       {"AWS/Lambda", "Errors", "Sum", map[string]any{"FunctionName": fnName(st.Worker.Function)}, 1},
		oncepay.AlarmResolverErrors:     {"AWS/Lambda", "Errors", "Sum", map[string]any{"FunctionName": fnName(st.Resolver)}, 1},
		oncepay.AlarmRelayIteratorAge:   {"AWS/Lambda", "IteratorAge", "Maximum", map[string]any{"FunctionName": fnName(st.Relay.Function)}, oncepay.RelayIteratorAgeMaxMilli},
		oncepay.AlarmUnknownOverHorizon: {stackenv.MetricsNamespace, oncepay.MetricUnknownOverHorizon, "Maximum", map[string]any{"Function": oncepay.FnResolver}, 1},
		oncepay.AlarmKeyStoreDegraded:   {stackenv.MetricsNamespace, oncepay.MetricKeyStoreDegraded, "Sum", map[string]any{"Function": oncepay.FnAPI}, 1},
		oncepay.AlarmChargedButClosed:   {stackenv.MetricsNamespace, oncepay.MetricWebhookSucceededOnFailed, "Sum", map[string]any{"Function": oncepay.FnWebhook}, 1},
		oncepay.AlarmChargedButUnknown:  {stackenv.MetricsNamespace, oncepay.MetricWebhookSucceededUnknown, "Sum", map[string]any{"Function": oncepay.FnWebhook}, 1},
		oncepay.AlarmNotifStuck:         {stackenv.MetricsNamespace, oncepay.MetricNotifStuck, "Maximum", map[string]any{"Function": oncepay.FnWorker}, 1},
		oncepay.AlarmOutboxRedriven:     {stackenv.MetricsNamespace, oncepay.MetricOutboxRedriven, "Sum", map[string]any{"Function": oncepay.FnResolver}, 1},
		// Either function without the key makes no PSP call: one is enough.
		oncepay.AlarmApiPSPKeyUnreadable:      {stackenv.MetricsNamespace, "PSPKeyUnreadable", "Sum", map[string]any{"Function": oncepay.FnAPI}, 1},
		oncepay.AlarmResolverPSPKeyUnreadable: {stackenv.MetricsNamespace, "PSPKeyUnreadable", "Sum", map[string]any{"Function": oncepay.FnResolver}, 1},

		oncepay.AlarmApiErrors:        {"AWS/Lambda", "Errors", "Sum", map[string]any{"FunctionName": fnName(st.Api.Function)}, 1},
		oncepay.AlarmWebhookErrors:    {"AWS/Lambda", "Errors", "Sum", map[string]any{"FunctionName": fnName(st.Webhook)}, 1},
		oncepay.AlarmDevicesErrors:    {"AWS/Lambda", "Errors", "Sum", map[string]any{"FunctionName": fnName(st.Devices.Function)}, 1},
		oncepay.AlarmApiThrottles:     {"AWS/Lambda", "Throttles", "Sum", map[string]any{"FunctionName": fnName(st.Api.Function)}, 1},
		oncepay.AlarmWebhookThrottles: {"AWS/Lambda", "Throttles", "Sum", map[string]any{"FunctionName": fnName(st.Webhook)}, 1},
		oncepay.AlarmWorkerThrottles:  {"AWS/Lambda", "Throttles", "Sum", map[string]any{"FunctionName": fnName(st.Worker.Function)}, 1},
		oncepay.AlarmHttpApi5xx:       {"AWS/ApiGateway", "5xx", "Sum", map[string]any{"ApiId": ref(s.logicalID(t, st.Api.HttpApi))}, 1},
		// Half the 5 s payment deadline.
		oncepay.AlarmHttpApiLatency: {"AWS/ApiGateway", "Latency", "p99", map[string]any{"ApiId": ref(s.logicalID(t, st.Api.HttpApi))}, 2500},
		oncepay.AlarmEventsOldest:   {"AWS/SQS", "ApproximateAgeOfOldestMessage", "Maximum", map[string]any{"QueueName": queueName(st.Data.Events.Queue)}, oncepay.EventsOldestMaxSeconds},
		oncepay.AlarmLedgerCapacity: {"AWS/RDS", "ACUUtilization", "Maximum", map[string]any{"DBInstanceIdentifier": ref(s.logicalID(t, st.Data.Ledger.Cluster.Node().FindChild(jsii.String("Writer"))))}, 90},
		// 4 ACUs: 8 GiB / 9,531,392 = 901 connections; alarm at 80%.
		oncepay.AlarmLedgerConnections:   {"AWS/RDS", "DatabaseConnections", "Maximum", map[string]any{"DBClusterIdentifier": ref(s.logicalID(t, st.Data.Ledger.Cluster))}, 720},
		oncepay.AlarmClaimsReadThrottle:  {"AWS/DynamoDB", "ReadThrottleEvents", "Sum", map[string]any{"TableName": ref(s.logicalID(t, st.Data.Claims.Table))}, 1},
		oncepay.AlarmClaimsWriteThrottle: {"AWS/DynamoDB", "WriteThrottleEvents", "Sum", map[string]any{"TableName": ref(s.logicalID(t, st.Data.Claims.Table))}, 1},
		oncepay.AlarmOutboxWriteThrottle: {"AWS/DynamoDB", "WriteThrottleEvents", "Sum", map[string]any{"TableName": ref(s.logicalID(t, st.Data.Outbox.Table))}, 1},

		oncepay.AlarmTotalsErrors:      {"AWS/Lambda", "Errors", "Sum", map[string]any{"FunctionName": fnName(st.Totals.Function)}, 1},
		oncepay.AlarmTotalsIteratorAge: {"AWS/Lambda", "IteratorAge", "Maximum", map[string]any{"FunctionName": fnName(st.Totals.Function)}, 600_000},
		// Each discard: the recount takes its days, the cause needs a look.
		oncepay.AlarmTotalsFailures:   {"AWS/SQS", "NumberOfMessagesSent", "Sum", map[string]any{"QueueName": queueName(st.Totals.FailureQueue)}, 1},
		oncepay.AlarmRecountStuck:     {"AWS/SQS", "ApproximateNumberOfMessagesVisible", "Maximum", map[string]any{"QueueName": queueName(st.Totals.RecountDlq)}, 1},
		oncepay.AlarmRecountErrors:    {"AWS/Lambda", "Errors", "Sum", map[string]any{"FunctionName": fnName(st.Totals.RecountFunction)}, 1},
		oncepay.AlarmTotalsLateCopies: {stackenv.MetricsNamespace, "TotalsLateCopies", "Sum", map[string]any{"Function": oncepay.FnTotals}, 1},
		oncepay.AlarmTotalsStaleState: {stackenv.MetricsNamespace, "TotalsStaleStates", "Sum", map[string]any{"Function": oncepay.FnTotals}, 1},
		oncepay.AlarmTotalsLostState:  {stackenv.MetricsNamespace, "TotalsLostStates", "Sum", map[string]any{"Function": oncepay.FnTotals}, 1},
		oncepay.AlarmTotalsUnreadable: {stackenv.MetricsNamespace, "TotalsUnreadable", "Sum", map[string]any{"Function": oncepay.FnTotals}, 1},
		oncepay.AlarmTotalsStateSize:  {stackenv.MetricsNamespace, "TotalsStateBytes", "Maximum", map[string]any{"Function": oncepay.FnTotals}, 786432},

		// The reconciliation: what a human must decide, and money the last
		// word moved, at once; a reversal still open over a day; a run that
		// failed and whose retry failed too (2 errors in its day).
		oncepay.AlarmReconcileNeedsHuman:   {stackenv.MetricsNamespace, "ReconcileNeedsHuman", "Sum", map[string]any{"Function": oncepay.FnReconcile}, 1},
		oncepay.AlarmReconcileReversed:     {stackenv.MetricsNamespace, "ReconcileReversed", "Sum", map[string]any{"Function": oncepay.FnReconcile}, 1},
		oncepay.AlarmReconcileAdopted:      {stackenv.MetricsNamespace, "ReconcileAdopted", "Sum", map[string]any{"Function": oncepay.FnReconcile}, 1},
		oncepay.AlarmReconcileReversalOpen: {stackenv.MetricsNamespace, "ReconcileReversalOpen", "Sum", map[string]any{"Function": oncepay.FnReconcile}, 1},
		oncepay.AlarmReconcileErrors:       {"AWS/Lambda", "Errors", "Sum", map[string]any{"FunctionName": fnName(st.Reconciliation.Function)}, 2},
	}
	// Every alarm looks at one 5-minute period but these two, which look
	// at a day: the reconciliation runs daily.
	periods := map[string]time.Duration{oncepay.AlarmReconcileReversalOpen: 24 * time.Hour, oncepay.AlarmReconcileErrors: 24 * time.Hour}
	if stackenv.MetricsNamespace != "oncepay" {
		t.Errorf("EMF namespace %q", stackenv.MetricsNamespace)
	}
	if got := len(s.resourcesOfType("AWS::CloudWatch::Alarm")); got != len(cases) {
		t.Errorf("%d alarms, want %d", got, len(cases))
	}
	for name, w := range cases {
		t.Run(name, func(t *testing.T) {
			a, ok := st.Monitoring.Alarms[name]
			if !ok {
				t.Fatalf("no alarm %s", name)
			}
			p := s.resource(t, s.logicalID(t, a))["Properties"].(map[string]any)
			var dims []any
			for k, v := range w.dims {
				dims = append(dims, map[string]any{"Name": k, "Value": v})
			}
			got := map[string]any{
				"Namespace": p["Namespace"], "MetricName": p["MetricName"], "Statistic": firstOf(p["Statistic"], p["ExtendedStatistic"]),
				"Dimensions": p["Dimensions"], "Threshold": p["Threshold"], "ComparisonOperator": p["ComparisonOperator"],
				"EvaluationPeriods": p["EvaluationPeriods"], "Period": p["Period"], "TreatMissingData": p["TreatMissingData"],
				"AlarmActions": p["AlarmActions"], "OKActions": p["OKActions"],
			}
			period := oncepay.AlarmPeriod
			if p, ok := periods[name]; ok {
				period = p
			}
			exp := map[string]any{
				"Namespace": w.namespace, "MetricName": w.metric, "Statistic": w.stat,
				"Dimensions": dims, "Threshold": w.threshold, "ComparisonOperator": "GreaterThanOrEqualToThreshold",
				"EvaluationPeriods": 1, "Period": period.Seconds(), "TreatMissingData": "notBreaching",
				"AlarmActions": []any{topic}, "OKActions": []any{topic},
			}
			if !jsonEqual(got, exp) {
				t.Errorf("alarm %s:\n got %s\nwant %s", name, show(got), show(exp))
			}
			if w.metric == "PSPKeyUnreadable" {
				// What to look at when the key cannot be read.
				desc, _ := p["AlarmDescription"].(string)
				for _, what := range []string{"policy", "KMS key", "Secrets Manager endpoint"} {
					if !strings.Contains(desc, what) {
						t.Errorf("alarm %s: the description does not say to check the %s: %q", name, what, desc)
					}
				}
			}
		})
	}
	check(t, "dashboard", func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::CloudWatch::Dashboard"), jsii.Number(1))
	})
	check(t, "alarm topic encrypted, CloudWatch may use the key", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::SNS::Topic"), obj(map[string]any{
			"KmsMasterKeyId": getAtt(s.logicalID(t, st.Data.Key), "Arn"),
		}))
		s.tmpl.HasResourceProperties(jsii.String("AWS::KMS::Key"), obj(map[string]any{
			"KeyPolicy": obj(map[string]any{"Statement": arr(obj(map[string]any{
				"Principal": map[string]any{"Service": "cloudwatch.amazonaws.com"},
				"Action":    exact("kms:Decrypt", "kms:GenerateDataKey"),
			}))}),
		}))
	})
}

// firstOf is the first non-nil value: an alarm on a percentile has an
// ExtendedStatistic, not a Statistic.
func firstOf(vs ...any) any {
	for _, v := range vs {
		if v != nil {
			return v
		}
	}
	return nil
}

// TestLedgerAccess: IAM database auth for one user, the port open only from
// the functions that touch the ledger, the relay outside the VPC, and in
// prod everything through the proxy except the migration.
func TestLedgerAccess(t *testing.T) {
	ingress := func(s *synthesized, target string) map[string]bool {
		from := map[string]bool{}
		for _, r := range s.resourcesOfType("AWS::EC2::SecurityGroupIngress") {
			p := r["Properties"].(map[string]any)
			port := render(p["FromPort"])
			if jsonEqual(p["GroupId"], getAtt(target, "GroupId")) && (port == "5432" || strings.HasSuffix(port, ".Endpoint.Port}")) && render(p["ToPort"]) == port {
				from[render(p["SourceSecurityGroupId"])] = true
			}
		}
		return from
	}
	sgOf := func(s *synthesized, fn *oncepay.GoFunction) string {
		return "${" + s.logicalID(t, fn.SecurityGroup) + ".GroupId}"
	}
	t.Run("sandbox", func(t *testing.T) {
		s := synth(t, oncepay.ProfileSandbox)
		st := s.stack
		got := ingress(s, s.logicalID(t, st.Data.Ledger.SecurityGroup))
		want := map[string]bool{}
		for _, fn := range []*oncepay.GoFunction{st.Api.Function, st.Worker.Function, st.Resolver, st.Webhook, st.Migration.Function, st.Totals.RecountFunction, st.Devices.Function, st.Reconciliation.Function} {
			want[sgOf(s, fn)] = true
		}
		if !jsonEqual(got, want) {
			t.Errorf("ledger ingress from %v, want %v", got, want)
		}
		check(t, "no proxy", func() { s.tmpl.ResourceCountIs(jsii.String("AWS::RDS::DBProxy"), jsii.Number(0)) })
		g := grantsOf(s.json, s.logicalID(t, st.Api.Function.Role))["rds-db:connect"]
		if len(g) != 1 || !strings.HasSuffix(g[0], ":dbuser:${"+s.logicalID(t, st.Data.Ledger.Cluster)+".DBClusterResourceId}/oncepay_app") {
			t.Errorf("api rds-db:connect %v", g)
		}
		if !strings.Contains(show(propsOf(t, s.json, s.logicalID(t, st.Api.Function.Role))), "lambda.amazonaws.com") {
			t.Error("api role not assumable by Lambda")
		}
	})
	t.Run("prod", func(t *testing.T) {
		s := synth(t, oncepay.ProfileProd)
		st := s.stack
		l := st.Data.Ledger
		proxy := s.logicalID(t, l.Proxy)
		check(t, "proxy", func() {
			s.tmpl.HasResourceProperties(jsii.String("AWS::RDS::DBProxy"), obj(map[string]any{
				"EngineFamily": "POSTGRESQL", "RequireTLS": true, "DefaultAuthScheme": "IAM_AUTH",
				"RoleArn": getAtt(s.logicalID(t, l.ProxyRole), "Arn"),
			}))
		})
		got := ingress(s, s.logicalID(t, l.ProxySecurityGroup))
		want := map[string]bool{}
		for _, fn := range []*oncepay.GoFunction{st.Api.Function, st.Worker.Function, st.Resolver, st.Webhook, st.Totals.RecountFunction, st.Devices.Function, st.Reconciliation.Function} {
			want[sgOf(s, fn)] = true
		}
		if !jsonEqual(got, want) {
			t.Errorf("proxy ingress from %v, want %v", got, want)
		}
		cluster := ingress(s, s.logicalID(t, l.SecurityGroup))
		wantCluster := map[string]bool{"${" + s.logicalID(t, l.ProxySecurityGroup) + ".GroupId}": true, sgOf(s, st.Migration.Function): true}
		if !jsonEqual(cluster, wantCluster) {
			t.Errorf("cluster ingress from %v, want %v", cluster, wantCluster)
		}
		vars := propsOf(t, s.json, s.logicalID(t, st.Api.Function.Function))["Environment"].(map[string]any)["Variables"].(map[string]any)
		if !jsonEqual(vars[stackenv.LedgerEndpoint], getAtt(proxy, "Endpoint")) {
			t.Errorf("api connects to %s, want the proxy", show(vars[stackenv.LedgerEndpoint]))
		}
		if g := grantsOf(s.json, s.logicalID(t, l.ProxyRole))["rds-db:connect"]; len(g) != 1 || !strings.HasSuffix(g[0], "/oncepay_app") {
			t.Errorf("proxy role rds-db:connect %v", g)
		}
		if g := grantsOf(s.json, s.logicalID(t, st.Api.Function.Role))["rds-db:connect"]; len(g) != 1 || !strings.HasSuffix(g[0], "/oncepay_app") {
			t.Errorf("api rds-db:connect %v", g)
		}
	})
}

// TestMigration: the migrate function runs as a custom resource on every
// code change, after the cluster, its secret and the port are ready.
func TestMigration(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	st := s.stack
	m := st.Migration
	fn := s.logicalID(t, m.Function.Function)
	res := s.resourcesOfType(oncepay.MigrationResourceType)
	if len(res) != 1 {
		t.Fatalf("%d migration resources", len(res))
	}
	for id, r := range res {
		p := r["Properties"].(map[string]any)
		if !jsonEqual(p["ServiceToken"], getAtt(fn, "Arn")) || p["AppUser"] != "oncepay_app" || p["Database"] != "oncepay" {
			t.Errorf("%s: %s", id, show(p))
		}
		if v := render(p["Version"]); !strings.HasPrefix(v, "${"+fn[:len(fn)-8]) || !strings.HasSuffix(v, ".Version}") {
			t.Errorf("%s: Version %s is not the function's current version", id, v)
		}
		deps := show(r["DependsOn"])
		l := st.Data.Ledger
		for _, d := range []string{s.logicalID(t, l.Cluster), s.logicalID(t, l.Secret), s.logicalID(t, l.SecurityGroup),
			s.logicalID(t, l.Cluster.Node().FindChild(jsii.String("Writer"))),
			s.logicalID(t, l.Secret.Node().FindChild(jsii.String("Attachment")))} {
			if !strings.Contains(deps, `"`+d+`"`) {
				t.Errorf("migration does not wait for %s: %s", d, deps)
			}
		}
	}
	if layers, ok := propsOf(t, s.json, fn)["Layers"]; ok {
		t.Errorf("the migration function has layers (it reads its secret itself): %s", show(layers))
	}
}

// TestAlbFrontDoor: with a certificate, an HTTPS listener whose payment rule
// authenticates (Cognito) before forwarding to the api, and whose webhook
// rule does not; without one, no load balancer at all.
func TestAlbFrontDoor(t *testing.T) {
	check(t, "no ALB without a certificate", func() {
		synth(t, oncepay.ProfileSandbox).tmpl.ResourceCountIs(jsii.String("AWS::ElasticLoadBalancingV2::LoadBalancer"), jsii.Number(0))
	})
	s := synthALB(t)
	a := s.stack.Alb
	if a == nil {
		t.Fatal("no ALB with a certificate")
	}
	check(t, "load balancer", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::ElasticLoadBalancingV2::LoadBalancer"), obj(map[string]any{
			"Scheme":                 "internet-facing",
			"LoadBalancerAttributes": arr(map[string]any{"Key": "routing.http.drop_invalid_header_fields.enabled", "Value": "true"}),
		}))
	})
	check(t, "HTTPS listener", func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::ElasticLoadBalancingV2::Listener"), jsii.Number(1))
		s.tmpl.HasResourceProperties(jsii.String("AWS::ElasticLoadBalancingV2::Listener"), obj(map[string]any{
			"Port": 443, "Protocol": "HTTPS", "Certificates": exact(map[string]any{"CertificateArn": albCertificate}),
			"DefaultActions": exact(obj(map[string]any{"Type": "fixed-response"})),
		}))
	})
	apiTargets := ref(s.logicalID(t, a.ApiTargets))
	check(t, "payment rule authenticates first", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::ElasticLoadBalancingV2::ListenerRule"), obj(map[string]any{
			"Priority": 10,
			"Actions": exact(
				obj(map[string]any{"Type": "authenticate-cognito", "Order": 1, "AuthenticateCognitoConfig": obj(map[string]any{
					"OnUnauthenticatedRequest": "deny",
					"UserPoolArn":              getAtt(s.logicalID(t, s.stack.Api.UserPool), "Arn"),
					"UserPoolClientId":         ref(s.logicalID(t, a.UserPoolClient)),
				})}),
				obj(map[string]any{"Type": "forward", "Order": 2, "TargetGroupArn": apiTargets}),
			),
			"Conditions": arr(obj(map[string]any{"Field": "path-pattern", "PathPatternConfig": map[string]any{
				"Values": exact("/payments", "/payments/*/resolve", "/payments/*/refund"),
			}})),
		}))
	})
	check(t, "webhook rule has no authenticate action", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::ElasticLoadBalancingV2::ListenerRule"), obj(map[string]any{
			"Priority": 20,
			"Actions":  exact(obj(map[string]any{"Type": "forward", "TargetGroupArn": ref(s.logicalID(t, a.WebhookTargets))})),
		}))
	})
	check(t, "Lambda targets", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::ElasticLoadBalancingV2::TargetGroup"), obj(map[string]any{
			"TargetType": "lambda",
			"Targets":    exact(map[string]any{"Id": getAtt(s.logicalID(t, s.stack.Api.Function.Function), "Arn")}),
		}))
	})
	check(t, "OAuth callback on the certificate's name", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::Cognito::UserPoolClient"), obj(map[string]any{
			"GenerateSecret": true, "CallbackURLs": exact("https://pay.example.com/oauth2/idpresponse"),
		}))
	})
	check(t, "443 only", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::EC2::SecurityGroup"), obj(map[string]any{
			"SecurityGroupIngress": exact(obj(map[string]any{"CidrIp": "0.0.0.0/0", "FromPort": 443, "ToPort": 443, "IpProtocol": "tcp"})),
		}))
	})
	// Issue 17 item 4: the api knows its load balancer (whose signed claims
	// name the caller), and the load balancing service may invoke the api
	// and the webhook only for target groups of this account and Region.
	apiEnv := s.resource(t, s.logicalID(t, s.stack.Api.Function.Function))["Properties"].(map[string]any)["Environment"].(map[string]any)["Variables"].(map[string]any)
	if got := render(apiEnv[oncepay.EnvAlbArn]); got != "${"+s.logicalID(t, s.stack.Alb.LoadBalancer)+"}" {
		t.Errorf("api %s = %s, want the load balancer's Ref", oncepay.EnvAlbArn, got)
	}
	elb := 0
	for id, r := range s.resourcesOfType("AWS::Lambda::Permission") {
		p := r["Properties"].(map[string]any)
		if p["Principal"] != "elasticloadbalancing.amazonaws.com" {
			continue
		}
		elb++
		sub, _ := p["SourceArn"].(map[string]any)
		if got := show(sub["Fn::Sub"]); got != `"arn:${AWS::Partition}:elasticloadbalancing:${AWS::Region}:${AWS::AccountId}:targetgroup/*"` || render(p["SourceAccount"]) != "${AWS::AccountId}" {
			t.Errorf("%s: SourceArn %s SourceAccount %s, want this account's target groups", id, got, render(p["SourceAccount"]))
		}
	}
	if elb != 2 {
		t.Errorf("%d load balancing invoke permissions, want the api's and the webhook's", elb)
	}
	// The push platform application chosen in the same variant.
	g := grantsOf(s.json, s.logicalID(t, s.stack.Worker.Function.Role))["sns:Publish"]
	if !jsonEqual(g, []string{"${" + s.logicalID(t, s.stack.Data.Push.Topic) + "}", "arn:aws:sns:eu-west-1:111111111111:endpoint/APNS/oncepay/*"}) {
		t.Errorf("worker sns:Publish %v", g)
	}
}

// TestStackPropsFromContext: what `cdk deploy -c` can choose, and what it
// refuses.
func TestStackPropsFromContext(t *testing.T) {
	parse := func(extra map[string]any) (*oncepay.StackProps, error) {
		ctx := cdkContext(t, "")
		for k, v := range extra {
			(*ctx)[k] = v
		}
		return oncepay.StackPropsFromContext(awscdk.NewApp(&awscdk.AppProps{Context: ctx}))
	}
	p, err := parse(map[string]any{
		oncepay.ContextPSPKeySecretArn: "arn:aws:secretsmanager:eu-west-1:111111111111:secret:psp-AbCdEf", oncepay.ContextPSPKeySecretKmsKey: oncepay.AwsManagedKey,
		oncepay.ContextLedgerProxy: "true",
		oncepay.ContextJWTIssuer:   "https://login.example.com/", oncepay.ContextJWTAudience: "a, b",
		oncepay.ContextPlatformApplicationArns: pushApp, oncepay.ContextResolverConcurrency: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Profile != oncepay.ProfileSandbox || p.Psp.KeySecret.Arn == "" || p.Psp.WebhookSecret.Arn != "" || p.LedgerProxy == nil || !*p.LedgerProxy ||
		!jsonEqual(p.Auth.Audience, []string{"a", "b"}) || len(p.PlatformApplicationArns) != 1 || p.Alb != nil ||
		p.ResolverReservedConcurrency == nil || *p.ResolverReservedConcurrency != 0 {
		t.Errorf("parsed %+v", p)
	}
	for name, bad := range map[string]map[string]any{
		"issuer without audience": {oncepay.ContextJWTIssuer: "https://x/"},
		"proxy not a bool":        {oncepay.ContextLedgerProxy: "yes"},
		"alb without prefix":      {oncepay.ContextAlbCertificateArn: albCertificate},
		"not a string":            {oncepay.ContextPSPURL: 42},
		"negative concurrency":    {oncepay.ContextResolverConcurrency: "-1"},
		"ALB keys without an ALB": {oncepay.ContextAlbKeysURL: "https://keys.example/"},
	} {
		if _, err := parse(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestAlbAccessLogsWhenTheRegionIsKnown: with env.region pinned the ALB
// logs to a bucket of its own (the region names the log-delivery principal).
func TestAlbAccessLogsWhenTheRegionIsKnown(t *testing.T) {
	var a *oncepay.AlbFrontDoor
	stack, tmpl, _ := synthAloneIn(t, &awscdk.Environment{Region: jsii.String("eu-west-1")}, func(s awscdk.Stack) {
		vpc := awsec2.Vpc_FromVpcAttributes(s, jsii.String("Vpc"), &awsec2.VpcAttributes{
			VpcId:             jsii.String("vpc-0123456789abcdef0"),
			AvailabilityZones: jsii.Strings("eu-west-1a", "eu-west-1b"),
			PublicSubnetIds:   jsii.Strings("subnet-0000000000000000a", "subnet-0000000000000000b"),
		})
		pool := awscognito.NewUserPool(s, jsii.String("Pool"), &awscognito.UserPoolProps{
			Mfa: awscognito.Mfa_REQUIRED, FeaturePlan: awscognito.FeaturePlan_PLUS,
			MfaSecondFactor: &awscognito.MfaSecondFactor{Otp: jsii.Bool(true), Sms: jsii.Bool(false)},
			PasswordPolicy: &awscognito.PasswordPolicy{MinLength: jsii.Number(12), RequireUppercase: jsii.Bool(true),
				RequireDigits: jsii.Bool(true), RequireSymbols: jsii.Bool(true)},
		})
		api := oncepay.NewGoFunction(s, "Api", &oncepay.GoFunctionProps{Name: oncepay.FnAPI, Code: oncepay.CodeFromBuild(s, oncepay.FnAPI), Sizing: oncepay.SizingsFor(config.Default()).API})
		a = oncepay.NewAlbFrontDoor(s, "Alb", &oncepay.AlbFrontDoorProps{
			AlbProps: oncepay.AlbProps{CertificateArn: albCertificate, DomainName: "pay.example.com", CognitoDomainPrefix: "oncepay-test"},
			Vpc:      vpc, Api: api.Function, UserPool: pool,
		})
	})
	if a.AccessLogs == nil {
		t.Fatal("no access log bucket with a known region")
	}
	check(t, "access logs on", func() {
		tmpl.HasResourceProperties(jsii.String("AWS::ElasticLoadBalancingV2::LoadBalancer"), obj(map[string]any{
			"LoadBalancerAttributes": arr(
				map[string]any{"Key": "access_logs.s3.enabled", "Value": "true"},
				map[string]any{"Key": "access_logs.s3.bucket", "Value": ref(logicalIDIn(t, stack, a.AccessLogs))},
			),
		}))
	})
	// The fixture's function is the test's, not the construct's.
	for _, f := range findings(t, stack) {
		if strings.Contains(f, "/Alone/Alb/") {
			t.Errorf("cdk-nag: %s", f)
		}
	}
}
