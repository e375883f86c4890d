package oncepay

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscognito"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awselasticloadbalancingv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awselasticloadbalancingv2actions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awselasticloadbalancingv2targets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// AlbProps configures the ALB front door, the alternative to the HTTP API.
type AlbProps struct {
	// CertificateArn of an ACM certificate for DomainName (required: the
	// listener is HTTPS only).
	CertificateArn string
	// DomainName the certificate covers, pointed at the ALB by the deployer
	// (the OAuth callback is https://DomainName/oauth2/idpresponse).
	DomainName string
	// CognitoDomainPrefix of the user pool's hosted sign-in, when the stack
	// owns the user pool (globally unique per region).
	CognitoDomainPrefix string
	// Oidc authenticates against any OpenID Connect provider instead of the
	// stack's user pool.
	Oidc *AlbOidcProps
	// KeysURL is where the api reads the public keys the load balancer
	// signs its claims with (ONCEPAY_ALB_KEYS_URL, the key id appended);
	// "" is AlbKeysURL's https://public-keys.auth.elb.<Region>.<URL suffix>.
	// GovCloud publishes them elsewhere
	// (https://s3-us-gov-west-1.amazonaws.com/aws-elb-public-keys-prod-us-gov-west-1,
	// and us-gov-east-1 likewise): set it there (docs/deploy.md).
	KeysURL string
}

// AlbKeysURL is the ALB public-key endpoint of the stack's Region and
// partition, resolved by CloudFormation: the api would otherwise build it
// from the Region alone, which is wrong in partitions it does not know.
func AlbKeysURL() *string {
	return awscdk.Fn_Sub(jsii.String("https://public-keys.auth.elb.${AWS::Region}.${AWS::URLSuffix}"), nil)
}

// keysURL is KeysURL, else AlbKeysURL.
func (p AlbProps) keysURL() *string {
	if p.KeysURL != "" {
		return jsii.String(p.KeysURL)
	}
	return AlbKeysURL()
}

// AlbOidcProps is an OpenID Connect provider for the ALB's authenticate
// action.
type AlbOidcProps struct {
	Issuer, AuthorizationEndpoint, TokenEndpoint, UserInfoEndpoint, ClientID string
	// ClientSecret, e.g. awscdk.SecretValue_SecretsManager(arn, …).
	ClientSecret awscdk.SecretValue
}

// AlbFrontDoorProps configures NewAlbFrontDoor.
type AlbFrontDoorProps struct {
	AlbProps
	Protection
	Vpc awsec2.IVpc
	// Api receives the payment routes; Webhook (optional) POST /webhooks/psp.
	Api, Webhook awslambda.IFunction
	// UserPool authenticates callers unless Oidc is set.
	UserPool awscognito.IUserPool
}

// AlbFrontDoor is an internet-facing ALB with one HTTPS listener. The
// payment routes pass an authenticate action (Cognito or OIDC) first: the
// load balancer then sends the user's claims signed (x-amzn-oidc-data,
// ES256), and the api takes the caller from them only after verifying the
// signature against the key the ALB publishes, the signer against this
// load balancer (ONCEPAY_ALB_ARN) and the expiry (internal/albauth); the
// unsigned x-amzn-oidc-identity is not read, since another load balancer of
// the account could set it. The webhook route has no authenticate action:
// the PSP's signature is its guard.
type AlbFrontDoor struct {
	constructs.Construct
	LoadBalancer   awselasticloadbalancingv2.ApplicationLoadBalancer
	SecurityGroup  awsec2.SecurityGroup
	Listener       awselasticloadbalancingv2.ApplicationListener
	ApiTargets     awselasticloadbalancingv2.ApplicationTargetGroup
	WebhookTargets awselasticloadbalancingv2.ApplicationTargetGroup
	// UserPoolClient and UserPoolDomain are nil with Oidc.
	UserPoolClient awscognito.UserPoolClient
	UserPoolDomain awscognito.UserPoolDomain
	// AccessLogs is nil in an environment-agnostic stack (see below).
	AccessLogs awss3.Bucket
}

// AlbNotFoundBody is the listener's answer to a request no rule takes.
const AlbNotFoundBody = `{"message":"Not Found"}`

// NewAlbFrontDoor creates the load balancer and its routes.
func NewAlbFrontDoor(scope constructs.Construct, id string, props *AlbFrontDoorProps) *AlbFrontDoor {
	if props == nil || props.Vpc == nil || props.Api == nil || props.CertificateArn == "" {
		panic("oncepay: NewAlbFrontDoor needs Vpc, Api and CertificateArn")
	}
	if props.Oidc == nil && (props.UserPool == nil || props.CognitoDomainPrefix == "") {
		panic("oncepay: NewAlbFrontDoor needs Oidc, or UserPool and CognitoDomainPrefix")
	}
	c := &AlbFrontDoor{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	c.SecurityGroup = awsec2.NewSecurityGroup(c.Construct, jsii.String("SecurityGroup"), &awsec2.SecurityGroupProps{
		Vpc:              props.Vpc,
		Description:      jsii.String("oncepay ALB: HTTPS from the internet"),
		AllowAllOutbound: jsii.Bool(false),
	})
	c.SecurityGroup.AddIngressRule(awsec2.Peer_AnyIpv4(), awsec2.Port_Tcp(jsii.Number(443)), jsii.String("HTTPS from payers' devices and the PSP"), nil)
	suppress(cfn(c.SecurityGroup), "AwsSolutions-EC23",
		"A public payment front door: HTTPS (443) only, TLS terminated with the deployer's certificate, every payment route behind an authenticate action, the webhook route behind the PSP's signature.")
	c.LoadBalancer = awselasticloadbalancingv2.NewApplicationLoadBalancer(c.Construct, jsii.String("LoadBalancer"), &awselasticloadbalancingv2.ApplicationLoadBalancerProps{
		Vpc:                     props.Vpc,
		InternetFacing:          jsii.Bool(true),
		VpcSubnets:              &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PUBLIC},
		SecurityGroup:           c.SecurityGroup,
		DropInvalidHeaderFields: jsii.Bool(true),
		DeletionProtection:      jsii.Bool(props.deletionProtection()),
	})
	c.addAccessLogs(props)

	c.Listener = c.LoadBalancer.AddListener(jsii.String("Https"), &awselasticloadbalancingv2.BaseApplicationListenerProps{
		Port:         jsii.Number(443),
		Protocol:     awselasticloadbalancingv2.ApplicationProtocol_HTTPS,
		Certificates: &[]awselasticloadbalancingv2.IListenerCertificate{awselasticloadbalancingv2.ListenerCertificate_FromArn(jsii.String(props.CertificateArn))},
		SslPolicy:    awselasticloadbalancingv2.SslPolicy_RECOMMENDED_TLS,
		// ELB accepts only text/plain, text/css, text/html,
		// application/javascript and application/json here, and refuses
		// problem+json at deploy time, not at synth. The body is the
		// published spec's application/json 404 (GatewayMessage), the shape
		// the HTTP API's own 404 has: a problem-shaped body under
		// application/json matches no answer the spec describes.
		DefaultAction: awselasticloadbalancingv2.ListenerAction_FixedResponse(jsii.Number(404), &awselasticloadbalancingv2.FixedResponseOptions{
			ContentType: jsii.String("application/json"),
			MessageBody: jsii.String(AlbNotFoundBody),
		}),
		Open: jsii.Bool(false), // the security group above opens 443
	})

	c.ApiTargets = awselasticloadbalancingv2.NewApplicationTargetGroup(c.Construct, jsii.String("ApiTargets"), &awselasticloadbalancingv2.ApplicationTargetGroupProps{
		Targets: &[]awselasticloadbalancingv2.IApplicationLoadBalancerTarget{awselasticloadbalancingv2targets.NewLambdaTarget(props.Api)},
	})
	scopeElbInvoke(props.Api)
	forward := awselasticloadbalancingv2.ListenerAction_Forward(&[]awselasticloadbalancingv2.IApplicationTargetGroup{c.ApiTargets}, nil)
	c.Listener.AddAction(jsii.String("Payments"), &awselasticloadbalancingv2.AddApplicationActionProps{
		Priority: jsii.Number(10),
		Conditions: &[]awselasticloadbalancingv2.ListenerCondition{
			awselasticloadbalancingv2.ListenerCondition_PathPatterns(jsii.Strings("/payments", "/payments/*/resolve", "/payments/*/refund")),
			awselasticloadbalancingv2.ListenerCondition_HttpRequestMethods(jsii.Strings("POST")),
		},
		Action: c.authenticate(props, forward),
	})
	if props.Webhook != nil {
		c.WebhookTargets = awselasticloadbalancingv2.NewApplicationTargetGroup(c.Construct, jsii.String("WebhookTargets"), &awselasticloadbalancingv2.ApplicationTargetGroupProps{
			Targets: &[]awselasticloadbalancingv2.IApplicationLoadBalancerTarget{awselasticloadbalancingv2targets.NewLambdaTarget(props.Webhook)},
		})
		scopeElbInvoke(props.Webhook)
		c.Listener.AddAction(jsii.String("Webhook"), &awselasticloadbalancingv2.AddApplicationActionProps{
			Priority: jsii.Number(20),
			Conditions: &[]awselasticloadbalancingv2.ListenerCondition{
				awselasticloadbalancingv2.ListenerCondition_PathPatterns(jsii.Strings(RouteWebhook)),
				awselasticloadbalancingv2.ListenerCondition_HttpRequestMethods(jsii.Strings("POST")),
			},
			Action: awselasticloadbalancingv2.ListenerAction_Forward(&[]awselasticloadbalancingv2.IApplicationTargetGroup{c.WebhookTargets}, nil),
		})
	}
	return c
}

// authenticate wraps next in the Cognito or OIDC authenticate action. An
// unauthenticated request is denied (401), never redirected: API clients
// cannot follow a sign-in page.
func (c *AlbFrontDoor) authenticate(props *AlbFrontDoorProps, next awselasticloadbalancingv2.ListenerAction) awselasticloadbalancingv2.ListenerAction {
	if o := props.Oidc; o != nil {
		return awselasticloadbalancingv2.ListenerAction_AuthenticateOidc(&awselasticloadbalancingv2.AuthenticateOidcOptions{
			Issuer: jsii.String(o.Issuer), AuthorizationEndpoint: jsii.String(o.AuthorizationEndpoint),
			TokenEndpoint: jsii.String(o.TokenEndpoint), UserInfoEndpoint: jsii.String(o.UserInfoEndpoint),
			ClientId: jsii.String(o.ClientID), ClientSecret: o.ClientSecret,
			OnUnauthenticatedRequest: awselasticloadbalancingv2.UnauthenticatedAction_DENY,
			Next:                     next,
		})
	}
	domain := props.DomainName
	if domain == "" {
		domain = *c.LoadBalancer.LoadBalancerDnsName()
	}
	c.UserPoolDomain = awscognito.NewUserPoolDomain(c.Construct, jsii.String("UserPoolDomain"), &awscognito.UserPoolDomainProps{
		UserPool:      props.UserPool,
		CognitoDomain: &awscognito.CognitoDomainOptions{DomainPrefix: jsii.String(props.CognitoDomainPrefix)},
	})
	c.UserPoolClient = awscognito.NewUserPoolClient(c.Construct, jsii.String("UserPoolClient"), &awscognito.UserPoolClientProps{
		UserPool:       props.UserPool,
		GenerateSecret: jsii.Bool(true), // the ALB is a confidential client
		OAuth: &awscognito.OAuthSettings{
			Flows:        &awscognito.OAuthFlows{AuthorizationCodeGrant: jsii.Bool(true)},
			Scopes:       &[]awscognito.OAuthScope{awscognito.OAuthScope_OPENID()},
			CallbackUrls: jsii.Strings("https://" + domain + "/oauth2/idpresponse"),
		},
		PreventUserExistenceErrors: jsii.Bool(true),
	})
	return awselasticloadbalancingv2actions.NewAuthenticateCognitoAction(&awselasticloadbalancingv2actions.AuthenticateCognitoActionProps{
		UserPool:                 props.UserPool,
		UserPoolClient:           c.UserPoolClient,
		UserPoolDomain:           c.UserPoolDomain,
		OnUnauthenticatedRequest: awselasticloadbalancingv2.UnauthenticatedAction_DENY,
		Next:                     next,
	})
}

// addAccessLogs sends access logs to a bucket of their own. ELB writes them
// as a regional AWS account, so the bucket policy needs the region: in an
// environment-agnostic stack (the default, no lookups at synth) they are
// off and the exception is recorded; pin env.region to turn them on.
func (c *AlbFrontDoor) addAccessLogs(props *AlbFrontDoorProps) {
	if *awscdk.Token_IsUnresolved(awscdk.Stack_Of(c.Construct).Region()) {
		suppress(cfn(c.LoadBalancer), "AwsSolutions-ELB2",
			"Access logs need the region's ELB log-delivery principal in the bucket policy, which an environment-agnostic stack cannot name; deploying with env.region set turns them on (AlbFrontDoor.AccessLogs).")
		return
	}
	c.AccessLogs = awss3.NewBucket(c.Construct, jsii.String("AccessLogs"), &awss3.BucketProps{
		Encryption:        awss3.BucketEncryption_S3_MANAGED, // the only encryption ELB log delivery writes with
		EnforceSSL:        jsii.Bool(true),
		BlockPublicAccess: awss3.BlockPublicAccess_BLOCK_ALL(),
		// Retained: a non-empty bucket cannot be deleted with the stack.
		RemovalPolicy:  awscdk.RemovalPolicy_RETAIN,
		LifecycleRules: &[]*awss3.LifecycleRule{{Expiration: days(90)}},
	})
	suppress(cfn(c.AccessLogs), "AwsSolutions-S1",
		"This bucket holds the ALB's access logs; logging access to it into another bucket would only move the question one bucket further.")
	c.LoadBalancer.LogAccessLogs(c.AccessLogs, jsii.String("alb"))
}

// scopeElbInvoke narrows the invoke permission LambdaTarget grants the
// load balancing service (any load balancer of any account) to target
// groups of this account and Region. Not to the one target group: its ARN
// in the permission would cycle (the target group waits for the
// permission). Which load balancer of the account signed a request is the
// api's check (internal/albauth); this keeps every other account out.
// Lambda compares SourceArn with StringLike, so the wildcard holds.
func scopeElbInvoke(fn awslambda.IFunction) {
	n := 0
	for _, child := range *fn.Node().Children() {
		p, ok := child.(awslambda.CfnPermission)
		if !ok || p.Principal() == nil || *p.Principal() != "elasticloadbalancing.amazonaws.com" {
			continue
		}
		p.SetSourceArn(awscdk.Fn_Sub(jsii.String("arn:${AWS::Partition}:elasticloadbalancing:${AWS::Region}:${AWS::AccountId}:targetgroup/*"), nil))
		p.SetSourceAccount(awscdk.Aws_ACCOUNT_ID())
		n++
	}
	if n == 0 {
		panic("oncepay: no load balancing invoke permission found on " + *fn.Node().Path())
	}
}
