package oncepay

import (
	"fmt"

	"encoding/json"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2authorizers"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscognito"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// The routes of the payment API (docs/mechanism.md#design-2). The webhook
// route is added by whoever wires the webhook function
// (AddUnauthenticatedRoute).
const (
	RoutePayments = "/payments"
	RouteResolve  = "/payments/{key}/resolve"
	RouteRefund   = "/payments/{key}/refund"
	RouteWebhook  = "/webhooks/psp"
)

// Default throttling of the HTTP API's stage: far above a sandbox's needs,
// far below what would exhaust the ledger's connections.
const (
	DefaultRateLimit  = 50
	DefaultBurstLimit = 100
	// UnauthenticatedRateLimit and UnauthenticatedBurstLimit throttle each
	// route without an authorizer (the PSP's webhook), so junk there runs
	// at most that many functions a second: a burst within a new account's
	// Lambda quota of 10. A PSP retries a 429 for days, and nothing settles
	// only through a webhook (the resolver replays every open payment).
	UnauthenticatedRateLimit  = 10
	UnauthenticatedBurstLimit = 10
)

// AuthProps selects who may call the API. The caller is the token's `sub`.
type AuthProps struct {
	// Issuer and Audience of the JWTs to accept (any OIDC provider). Empty
	// Issuer: a Cognito user pool and an app client are created, and the
	// audience is that client.
	Issuer   string
	Audience []string
	// Mfa of a created user pool; "" means REQUIRED (TOTP).
	Mfa awscognito.Mfa
	// FeaturePlan of a created user pool; "" means PLUS (threat protection).
	FeaturePlan awscognito.FeaturePlan
	// OverrideUserPool sees the final user pool props.
	OverrideUserPool func(*awscognito.UserPoolProps)
}

// IdempotentApiProps configures the API. Only the zero value is needed for a
// working construct; each part can be handed in or overridden.
type IdempotentApiProps struct {
	// Protection of what the construct creates (claim table, user pool, logs).
	Protection
	// Claims is the claim table to use; nil creates one from ClaimsProps.
	Claims      *ClaimTable
	ClaimsProps ClaimTableProps
	// Outbox, when set, is where the api puts each final event (PutItem only).
	Outbox *OutboxTable
	// Ledger, when set, places the function in the ledger's VPC and lets it
	// log in as LedgerUser ("" means LedgerAppUser) with an IAM token.
	Ledger     *Ledger
	LedgerUser string
	// Psp, when set, gives the function the PSP's API key and URL.
	Psp *Psp
	// Timing: the deadline rules (nil: config.Default()). The function's
	// timeout is Timing.FunctionTimeout() and its environment carries Timing.
	Timing *Timing
	// Auth: JWT issuer/audience, or a Cognito user pool (default).
	Auth AuthProps
	// Throttle of the stage; nil means DefaultRateLimit/DefaultBurstLimit.
	Throttle *awsapigatewayv2.ThrottleSettings
	// LogRetention of the function's and the access logs; "" is one year.
	LogRetention awslogs.RetentionDays
	// Code of the api function (required): a directory with the
	// linux/arm64 bootstrap of lambdas/api.
	Code awslambda.Code
	// Sizing of the function; nil is 512 MB and Timing.FunctionTimeout(),
	// which is also the most it may be (the function must not outlive the
	// payment's deadline by more than the clock margin).
	Sizing *Sizing
	// Role the function runs as (imported mutable); nil creates one.
	Role awsiam.IRole
	// Vpc (with VpcSubnets, SecurityGroups) places the function in a VPC of
	// the caller's, when there is no Ledger.
	Vpc            awsec2.IVpc
	VpcSubnets     *awsec2.SubnetSelection
	SecurityGroups []awsec2.ISecurityGroup
	// Description of the function; "" is oncepay's.
	Description string
	// Alarms of the construct (on unless Disabled).
	Alarms AlarmProps
	// Environment adds variables (e.g. ONCEPAY_LEDGER_DSN when no Ledger).
	Environment map[string]string
	// OverrideFunction sees the final function props.
	OverrideFunction func(*awslambda.FunctionProps)
}

// IdempotentApi is the front door and the claim: an HTTP API with a JWT
// authorizer routing POST /payments (and resolve, refund) to the api
// function, which claims each idempotency key in the claim table.
type IdempotentApi struct {
	constructs.Construct
	Claims   *ClaimTable
	Function *GoFunction
	HttpApi  awsapigatewayv2.HttpApi
	Stage    awsapigatewayv2.HttpStage
	// Authorizer is the JWT authorizer every payment route uses.
	Authorizer awsapigatewayv2authorizers.HttpJwtAuthorizer
	// UserPool and UserPoolClient are nil with an external issuer.
	UserPool       awscognito.UserPool
	UserPoolClient awscognito.UserPoolClient
	AccessLogs     awslogs.LogGroup
	Routes         []awsapigatewayv2.HttpRoute
	Timing         Timing
	// Alarms by id (AlarmApi*); empty when AlarmProps.Disabled.
	Alarms map[string]awscloudwatch.Alarm
	// throttle is the stage's, which a route's own may not exceed.
	throttle struct{ rate, burst float64 }
}

// The IdempotentApi's own alarms (AlarmProps).
const (
	AlarmApiFnErrors     = "Errors"
	AlarmApiFnThrottles  = "Throttles"
	AlarmApi5xx          = "HttpApi5xx"
	AlarmApiKeyStoreDown = "KeyStoreDegraded"
)

// NewIdempotentApi creates the API.
func NewIdempotentApi(scope constructs.Construct, id string, props *IdempotentApiProps) *IdempotentApi {
	const what = "IdempotentApi"
	if props == nil || props.Code == nil {
		panic("oncepay: IdempotentApiProps.Code is required: the linux/arm64 bootstrap of lambdas/api, e.g. awslambda.Code_FromAsset(jsii.String(\"build/api\"), nil)")
	}
	exclusive(what, "Claims", props.Claims != nil, "ClaimsProps", !isZero(props.ClaimsProps), "ClaimsProps configures the table the api would create, and Claims replaces it")
	exclusive(what, "Ledger", props.Ledger != nil, "Vpc", props.Vpc != nil, "Ledger places the function in the ledger's VPC; set Vpc only without a Ledger")
	c := &IdempotentApi{Construct: constructs.NewConstruct(scope, jsii.String(id)), Timing: timingOrDefault(props.Timing)}

	c.Claims = props.Claims
	if c.Claims == nil {
		cp := props.ClaimsProps
		cp.Protection = cp.Protection.inherit(props.Protection)
		c.Claims = NewClaimTable(c.Construct, "Claims", &cp)
	}
	c.Claims.resolve(what)
	if props.Outbox != nil {
		props.Outbox.resolve(what)
	}
	sizing := SizingsFor(c.Timing).API
	if props.Sizing != nil {
		sizing = *props.Sizing
	}
	desc := props.Description
	if desc == "" {
		desc = "oncepay api: POST /payments with an Idempotency-Key (HTTP API or ALB events)"
	}

	vpc := props.Vpc
	if props.Ledger != nil {
		vpc = props.Ledger.Cluster.Vpc()
	}
	env := timingEnv(c.Timing)
	for k, v := range props.Environment {
		env[k] = v
	}
	c.Function = NewGoFunction(c.Construct, "Function", &GoFunctionProps{
		Name:           FnAPI,
		Code:           props.Code,
		Sizing:         sizing,
		Environment:    env,
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
	if max := c.Timing.FunctionTimeout(); fn.Timeout > max {
		panic(fmt.Sprintf("oncepay: %s: the api function's timeout %s is over Timing.FunctionTimeout() %s (the deadline %s plus the clock margin): a function that outlives the deadline answers after the caller gave up; raise Timing.Deadline instead", what, fn.Timeout, max, c.Timing.Deadline))
	}
	// The claim: conditional put, owner-conditional updates, a consistent
	// read of the record, and the delete that releases a claim.
	fn.Grant([]string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}, c.Claims.Table.TableArn())
	fn.grantKey(c.Claims.Key, kmsWrite)
	fn.SetEnv(map[string]*string{EnvIdemTable: c.Claims.Table.TableName()})
	if props.Outbox != nil {
		fn.Grant([]string{"dynamodb:PutItem"}, props.Outbox.Table.TableArn())
		fn.grantKey(props.Outbox.Key, kmsWrite)
		fn.SetEnv(map[string]*string{EnvOutboxTable: props.Outbox.Table.TableName()})
	}
	if props.Ledger != nil {
		props.Ledger.Connect(fn, props.LedgerUser)
	}
	if props.Psp != nil {
		props.Psp.GrantKeyRead(fn)
	}
	suppress(cfn(fn.Function), "Serverless-LambdaDLQ",
		"Invoked synchronously by API Gateway (or the ALB): the caller gets the error and retries with the same Idempotency-Key; Lambda never queues these events, so a DLQ would stay empty.")

	c.addFrontDoor(props)
	if a := newConstructAlarms(c.Construct, props.Alarms); a != nil {
		a.add(AlarmApiFnErrors, "The api function failed invocations (a crash or timeout: the caller got a 5xx; a retry with the same key is safe).", fn.Function.MetricErrors(periodOpts("Sum")), 1)
		a.add(AlarmApiFnThrottles, "The api function was throttled: callers got 429/503 and will retry.", fn.Function.MetricThrottles(periodOpts("Sum")), 1)
		a.add(AlarmApi5xx, "The HTTP API answered 5xx (integration errors, timeouts, the api's own 503s): see the api's logs by payment_id.", c.HttpApi.MetricServerError(periodOpts("Sum")), 1)
		a.add(AlarmApiKeyStoreDown, "The api answered without the claim table (the ledger's unique key alone guarded those payments).", handlerMetric(MetricKeyStoreDegraded, FnAPI, "Sum"), 1)
		c.Alarms = a.all()
	}
	return c
}

func (c *IdempotentApi) addFrontDoor(props *IdempotentApiProps) {
	issuer, audience := props.Auth.Issuer, props.Auth.Audience
	if issuer == "" {
		c.addUserPool(props)
		issuer = *c.UserPool.UserPoolProviderUrl()
		audience = []string{*c.UserPoolClient.UserPoolClientId()}
	}
	if len(audience) == 0 {
		panic("oncepay: AuthProps.Issuer needs an Audience")
	}
	c.Authorizer = awsapigatewayv2authorizers.NewHttpJwtAuthorizer(jsii.String("JwtAuthorizer"), jsii.String(issuer),
		&awsapigatewayv2authorizers.HttpJwtAuthorizerProps{
			JwtAudience:    jsii.Strings(audience...),
			IdentitySource: jsii.Strings("$request.header.Authorization"),
		})

	c.HttpApi = awsapigatewayv2.NewHttpApi(c.Construct, jsii.String("HttpApi"), &awsapigatewayv2.HttpApiProps{
		Description:        jsii.String("oncepay payment API"),
		CreateDefaultStage: jsii.Bool(false),
	})
	throttle := props.Throttle
	if throttle == nil {
		throttle = &awsapigatewayv2.ThrottleSettings{RateLimit: jsii.Number(DefaultRateLimit), BurstLimit: jsii.Number(DefaultBurstLimit)}
	}
	c.throttle.rate, c.throttle.burst = DefaultRateLimit, DefaultBurstLimit
	if throttle.RateLimit != nil {
		c.throttle.rate = *throttle.RateLimit
	}
	if throttle.BurstLimit != nil {
		c.throttle.burst = *throttle.BurstLimit
	}
	c.Stage = awsapigatewayv2.NewHttpStage(c.Construct, jsii.String("Stage"), &awsapigatewayv2.HttpStageProps{
		HttpApi:    c.HttpApi,
		StageName:  jsii.String("$default"),
		AutoDeploy: jsii.Bool(true),
		Throttle:   throttle,
	})
	retention := props.LogRetention
	if retention == "" {
		retention = awslogs.RetentionDays_ONE_YEAR
	}
	c.AccessLogs = awslogs.NewLogGroup(c.Construct, jsii.String("AccessLogs"), &awslogs.LogGroupProps{
		Retention:     retention,
		RemovalPolicy: props.removalPolicy(),
	})
	c.Stage.Node().DefaultChild().(awsapigatewayv2.CfnStage).SetAccessLogSettings(&awsapigatewayv2.CfnStage_AccessLogSettingsProperty{
		DestinationArn: c.AccessLogs.LogGroupArn(),
		Format:         jsii.String(AccessLogFormat),
	})

	integration := awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String("ApiIntegration"), c.Function.Function,
		&awsapigatewayv2integrations.HttpLambdaIntegrationProps{PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0()})
	for _, path := range []string{RoutePayments, RouteResolve, RouteRefund} {
		routes := c.HttpApi.AddRoutes(&awsapigatewayv2.AddRoutesOptions{
			Path:        jsii.String(path),
			Methods:     &[]awsapigatewayv2.HttpMethod{awsapigatewayv2.HttpMethod_POST},
			Integration: integration,
			Authorizer:  c.Authorizer,
		})
		c.Routes = append(c.Routes, *routes...)
	}
}

// AccessLogFormat is the stage's JSON access log line. It carries no
// caller identity and no client address: the request id joins it to the
// api function's log line, which carries the scope and payment_id.
var AccessLogFormat = func() string {
	b, err := json.Marshal(map[string]string{
		"requestId":          "$context.requestId",
		"requestTime":        "$context.requestTimeEpoch",
		"routeKey":           "$context.routeKey",
		"status":             "$context.status",
		"responseLength":     "$context.responseLength",
		"latencyMs":          "$context.responseLatency",
		"integrationLatency": "$context.integrationLatency",
		"integrationError":   "$context.integrationErrorMessage",
		"authorizerError":    "$context.authorizer.error",
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// addUserPool creates the Cognito user pool the JWT authorizer trusts, with
// an app client for the phone app (SRP) and the operator's smoke test
// (admin user/password auth, which needs IAM credentials to call).
func (c *IdempotentApi) addUserPool(props *IdempotentApiProps) {
	mfa := props.Auth.Mfa
	if mfa == "" {
		mfa = awscognito.Mfa_REQUIRED
	}
	plan := props.Auth.FeaturePlan
	if plan == "" {
		plan = awscognito.FeaturePlan_PLUS
	}
	up := &awscognito.UserPoolProps{
		SelfSignUpEnabled: jsii.Bool(false), // users are created by the operator
		SignInAliases:     &awscognito.SignInAliases{Username: jsii.Bool(true), Email: jsii.Bool(true)},
		Mfa:               mfa,
		MfaSecondFactor:   &awscognito.MfaSecondFactor{Otp: jsii.Bool(true), Sms: jsii.Bool(false)},
		PasswordPolicy: &awscognito.PasswordPolicy{
			MinLength: jsii.Number(12), RequireLowercase: jsii.Bool(true), RequireUppercase: jsii.Bool(true),
			RequireDigits: jsii.Bool(true), RequireSymbols: jsii.Bool(true),
		},
		AccountRecovery:    awscognito.AccountRecovery_EMAIL_ONLY,
		FeaturePlan:        plan,
		DeletionProtection: jsii.Bool(props.deletionProtection()),
		RemovalPolicy:      props.removalPolicy(),
	}
	if plan == awscognito.FeaturePlan_PLUS {
		up.StandardThreatProtectionMode = awscognito.StandardThreatProtectionMode_FULL_FUNCTION
	}
	if props.Auth.OverrideUserPool != nil {
		props.Auth.OverrideUserPool(up)
	}
	c.UserPool = awscognito.NewUserPool(c.Construct, jsii.String("UserPool"), up)
	c.UserPoolClient = c.UserPool.AddClient(jsii.String("AppClient"), &awscognito.UserPoolClientOptions{
		AuthFlows:                  &awscognito.AuthFlow{UserSrp: jsii.Bool(true), AdminUserPassword: jsii.Bool(true)},
		GenerateSecret:             jsii.Bool(false), // a phone app cannot keep a secret
		PreventUserExistenceErrors: jsii.Bool(true),
		AccessTokenValidity:        awscdk.Duration_Hours(jsii.Number(1)),
		IdTokenValidity:            awscdk.Duration_Hours(jsii.Number(1)),
		DisableOAuth:               jsii.Bool(true),
	})
	if mfa != awscognito.Mfa_REQUIRED {
		suppress(cfn(c.UserPool), "AwsSolutions-COG2",
			"MFA is optional only where the deployer chose it (the sandbox profile: test identities created by the operator for the curl smoke test); the construct's default and the prod profile require TOTP MFA.")
	}
	if plan != awscognito.FeaturePlan_PLUS {
		suppress(cfn(c.UserPool), "AwsSolutions-COG8",
			"Threat protection (the Plus plan, billed per active user) is off only where the deployer chose it (the sandbox profile, whose users are a handful of test identities); the construct's default and the prod profile turn it on.")
	}
}

// AddUnauthenticatedRoute routes POST path to fn with no authorizer, for a
// caller that proves itself in the request (a signed webhook). reason is
// recorded with the cdk-nag exception on that one route.
func (c *IdempotentApi) AddUnauthenticatedRoute(path string, fn awslambda.IFunction, reason string) awsapigatewayv2.HttpRoute {
	routes := *c.HttpApi.AddRoutes(&awsapigatewayv2.AddRoutesOptions{
		Path:    jsii.String(path),
		Methods: &[]awsapigatewayv2.HttpMethod{awsapigatewayv2.HttpMethod_POST},
		Integration: awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String(idFromPath(path)+"Integration"), fn,
			&awsapigatewayv2integrations.HttpLambdaIntegrationProps{PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0()}),
		Authorizer: awsapigatewayv2.NewHttpNoneAuthorizer(),
	})
	for _, r := range routes {
		suppress(cfn(r), "AwsSolutions-APIG4", reason)
		c.Routes = append(c.Routes, r)
		// A route anyone may call gets a throttle of its own, at most the
		// stage's: past it, junk is answered 429 before it runs a function
		// in the VPC.
		key := "POST " + path
		stage := c.Stage.Node().DefaultChild().(awsapigatewayv2.CfnStage)
		stage.AddPropertyOverride(jsii.String("RouteSettings."+key+".ThrottlingRateLimit"), jsii.Number(min(UnauthenticatedRateLimit, c.throttle.rate)))
		stage.AddPropertyOverride(jsii.String("RouteSettings."+key+".ThrottlingBurstLimit"), jsii.Number(min(UnauthenticatedBurstLimit, c.throttle.burst)))
		// CloudFormation refuses route settings for a route key the API
		// does not hold yet ("Unable to find Route by key"): the stage
		// waits for the route.
		c.Stage.Node().AddDependency(r)
	}
	return routes[0]
}

// Url is the API's base URL (the $default stage), ending in "/".
func (c *IdempotentApi) Url() *string { return c.Stage.Url() }

// idFromPath turns "/webhooks/psp" into "WebhooksPsp".
func idFromPath(path string) string {
	var b strings.Builder
	up := true
	for _, r := range path {
		switch {
		case r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9':
			if up {
				b.WriteString(strings.ToUpper(string(r)))
			} else {
				b.WriteRune(r)
			}
			up = false
		default:
			up = true
		}
	}
	return b.String()
}
