package oncepay

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscognito"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Profile selects how disposable a deployment is.
type Profile string

const (
	// ProfileSandbox is torn down with `cdk destroy`: nothing retained, no
	// deletion protection, one NAT gateway.
	ProfileSandbox Profile = "sandbox"
	// ProfileProd keeps data on stack deletion, protects tables and the
	// cluster from deletion and runs a NAT gateway per AZ.
	ProfileProd Profile = "prod"
)

// ParseProfile accepts "" (sandbox), "sandbox" or "prod".
func ParseProfile(s string) (Profile, error) {
	switch Profile(s) {
	case "", ProfileSandbox:
		return ProfileSandbox, nil
	case ProfileProd:
		return ProfileProd, nil
	}
	return "", fmt.Errorf("oncepay: unknown profile %q (want %q or %q)", s, ProfileSandbox, ProfileProd)
}

// StackName is the stack's name for the profile. The profile is part of the
// stack's identity: a deploy that leaves out -c oncepay:profile=prod names
// the sandbox stack, Oncepay, so it can never turn OncepayProd into a
// sandbox (protection off, Retain -> Delete, backups 35 -> 7 days, reader
// and proxy deleted) in place.
func (p Profile) StackName() string {
	if p.IsProd() {
		return "OncepayProd"
	}
	return "Oncepay"
}

// InterfaceEndpoints the VPC gets. The sandbox has none (about $7 a month
// per endpoint and AZ; its calls to SNS and Secrets Manager cross the NAT);
// prod takes SNS (the worker's pushes) and Secrets Manager (the api's and
// the resolver's PSP key, the webhook's signing secret, the migration's
// admin secret: read at run time), so neither waits on the NAT. In the
// sandbox a NAT outage also stops those reads; the held values carry a
// function an hour (internal/secrets).
func (p Profile) InterfaceEndpoints() []awsec2.InterfaceVpcEndpointAwsService {
	if p.IsProd() {
		return []awsec2.InterfaceVpcEndpointAwsService{awsec2.InterfaceVpcEndpointAwsService_SNS(), awsec2.InterfaceVpcEndpointAwsService_SECRETS_MANAGER()}
	}
	return []awsec2.InterfaceVpcEndpointAwsService{}
}

// IsProd reports whether data must survive the stack.
func (p Profile) IsProd() bool { return p == ProfileProd }

// RemovalPolicy for every stateful resource.
func (p Profile) RemovalPolicy() awscdk.RemovalPolicy {
	if p.IsProd() {
		return awscdk.RemovalPolicy_RETAIN
	}
	return awscdk.RemovalPolicy_DESTROY
}

// DeletionProtection for the tables and the cluster.
func (p Profile) DeletionProtection() bool { return p.IsProd() }

// NatGateways: one per AZ in prod so losing an AZ does not cut the PSP off.
func (p Profile) NatGateways() float64 {
	if p.IsProd() {
		return 2
	}
	return 1
}

// LedgerReaders: prod adds a reader in the other AZ as the failover target.
func (p Profile) LedgerReaders() int {
	if p.IsProd() {
		return 1
	}
	return 0
}

// BackupRetentionDays for the ledger's automated backups (PITR window).
func (p Profile) BackupRetentionDays() float64 {
	if p.IsProd() {
		return 35 // Aurora's maximum
	}
	return 7
}

// LogRetention for the log groups the stack creates.
func (p Profile) LogRetention() awslogs.RetentionDays {
	if p.IsProd() {
		return awslogs.RetentionDays_ONE_YEAR
	}
	return awslogs.RetentionDays_ONE_WEEK
}

// PushTopicFallback: a sandbox sends the push of a caller with no enabled
// device to the push topic, so a deploy with no mobile platform application
// still shows every push to a subscriber; prod never does (every subscriber
// would see every device-less caller's payments): such a push waits for
// the app's registration instead (UNDELIVERABLE after the sweep's device
// horizon).
func (p Profile) PushTopicFallback() bool { return !p.IsProd() }

// ProfileContextKey selects the profile: cdk synth -c oncepay:profile=prod.
const ProfileContextKey = "oncepay:profile"

// ProfileFromContext reads ProfileContextKey from the construct tree.
func ProfileFromContext(scope constructs.Construct) (Profile, error) {
	v := scope.Node().TryGetContext(jsii.String(ProfileContextKey))
	if v == nil {
		return ParseProfile("")
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("oncepay: context %s must be a string, got %v", ProfileContextKey, v)
	}
	return ParseProfile(s)
}

// LedgerProxy: prod pools connections through RDS Proxy; a sandbox's few
// functions connect to the writer directly (the proxy bills per vCPU hour).
func (p Profile) LedgerProxy() bool { return p.IsProd() }

// ResolverReservedConcurrency: prod reserves ResolverReservedConcurrency
// (one sweep at a time); a sandbox reserves none. A new account's Lambda
// concurrency quota is often 10 or 50, and AWS keeps 100 unreserved (the
// whole quota when it is smaller): the deploy would fail late, after
// Aurora, and its rollback wait on the VPC's network interfaces. Two
// overlapping sweeps only double the PSP replays (each settles through a
// conditional update), which a sandbox's traffic does not notice.
func (p Profile) ResolverReservedConcurrency() int {
	if p.IsProd() {
		return ResolverReservedConcurrency
	}
	return 0
}

// UserPoolMfa: prod requires TOTP; a sandbox's test users may skip it so the
// curl smoke test can sign in with a password.
func (p Profile) UserPoolMfa() awscognito.Mfa {
	if p.IsProd() {
		return awscognito.Mfa_REQUIRED
	}
	return awscognito.Mfa_OPTIONAL
}

// UserPoolFeaturePlan: prod turns threat protection on (Plus); a sandbox's
// handful of users stays on Essentials.
func (p Profile) UserPoolFeaturePlan() awscognito.FeaturePlan {
	if p.IsProd() {
		return awscognito.FeaturePlan_PLUS
	}
	return awscognito.FeaturePlan_ESSENTIALS
}

// Context keys cdk/main.go reads into StackProps (see StackPropsFromContext).
const (
	ContextPSPURL = "oncepay:pspUrl"
	// ContextPSPKeySecretArn imports the secret of the Stripe API key
	// ({"api_key": …}, read by the api, the resolver and the
	// reconciliation), and
	// ContextWebhookSecretArn the secret of the webhook signing secret
	// ({"webhook_secret": …}, read by the webhook): two secrets, so each
	// function reads only its own. Each needs its KMS key's context: the
	// ARN of the customer-managed key it is encrypted with (its readers
	// get kms:Decrypt), or AwsManagedKey.
	ContextPSPKeySecretArn     = "oncepay:pspKeySecretArn"
	ContextPSPKeySecretKmsKey  = "oncepay:pspKeySecretKmsKey"
	ContextWebhookSecretArn    = "oncepay:webhookSecretArn"
	ContextWebhookSecretKmsKey = "oncepay:webhookSecretKmsKey"
	// ContextPSPSecretArn and ContextPSPSecretKeyArn are refused: they
	// named one secret holding both fields, which let the webhook read the
	// API key. A context that does nothing must not look as if it did.
	ContextPSPSecretArn    = "oncepay:pspSecretArn"
	ContextPSPSecretKeyArn = "oncepay:pspSecretKeyArn"
	// ContextPSPSecretRevision is refused: it made the functions re-read a
	// secret CloudFormation had put in their environment; they read it at
	// run time now (Psp), and a context that does nothing must not look
	// as if it did.
	ContextPSPSecretRevision = "oncepay:pspSecretRevision"
	// ContextAlbKeysURL is where the ALB's public keys are read (the api's
	// ONCEPAY_ALB_KEYS_URL, without the key id): default
	// https://public-keys.auth.elb.<Region>.<URL suffix>; GovCloud
	// publishes them elsewhere and must set it.
	ContextAlbKeysURL              = "oncepay:albKeysUrl"
	ContextJWTIssuer               = "oncepay:jwtIssuer"
	ContextJWTAudience             = "oncepay:jwtAudience"
	ContextAlbCertificateArn       = "oncepay:albCertificateArn"
	ContextAlbDomainName           = "oncepay:albDomainName"
	ContextAlbCognitoDomainPrefix  = "oncepay:albCognitoDomainPrefix"
	ContextPlatformApplicationArns = "oncepay:platformApplicationArns"
	// ContextEmailFrom adds the email channel (InboxWorkerProps.EmailFrom).
	ContextEmailFrom           = "oncepay:emailFrom"
	ContextLedgerProxy         = "oncepay:ledgerProxy"
	ContextResolverConcurrency = "oncepay:resolverReservedConcurrency"
	// ContextAvailabilityZoneIds pins the VPC's two AZs by id, e.g.
	// use1-az1,use1-az2 (across Regions, two per Region in one list);
	// required by the prod profile.
	ContextAvailabilityZoneIds = "oncepay:availabilityZoneIds"
)

// StackPropsFromContext reads the profile and the deployment's choices from
// the construct tree's context (cdk.json or -c key=value).
func StackPropsFromContext(scope constructs.Construct) (*StackProps, error) {
	profile, err := ProfileFromContext(scope)
	if err != nil {
		return nil, err
	}
	str := func(key string) (string, error) {
		v := scope.Node().TryGetContext(jsii.String(key))
		if v == nil {
			return "", nil
		}
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("oncepay: context %s must be a string, got %v", key, v)
		}
		return strings.TrimSpace(s), nil
	}
	list := func(s string) []string {
		var out []string
		for _, x := range strings.Split(s, ",") {
			if x = strings.TrimSpace(x); x != "" {
				out = append(out, x)
			}
		}
		return out
	}
	if scope.Node().TryGetContext(jsii.String(ContextPSPSecretRevision)) != nil {
		return nil, fmt.Errorf("oncepay: context %s is gone: the functions read the PSP secret at run time (within 5 minutes of a put-secret-value), with no deploy", ContextPSPSecretRevision)
	}
	for _, k := range []string{ContextPSPSecretArn, ContextPSPSecretKeyArn} {
		if scope.Node().TryGetContext(jsii.String(k)) != nil {
			return nil, fmt.Errorf("oncepay: context %s is gone: the PSP's credentials are two secrets now, so the webhook cannot read the API key: "+
				"import them with %s and %s, each with its KMS key (%s, %s: a key ARN or %q); docs/deploy.md",
				k, ContextPSPKeySecretArn, ContextWebhookSecretArn, ContextPSPKeySecretKmsKey, ContextWebhookSecretKmsKey, AwsManagedKey)
		}
	}
	get := map[string]string{}
	for _, k := range []string{ContextPSPKeySecretArn, ContextPSPKeySecretKmsKey, ContextWebhookSecretArn, ContextWebhookSecretKmsKey, ContextPSPURL,
		ContextJWTIssuer, ContextJWTAudience, ContextAlbCertificateArn, ContextAlbDomainName, ContextAlbCognitoDomainPrefix, ContextAlbKeysURL,
		ContextPlatformApplicationArns, ContextLedgerProxy, ContextResolverConcurrency, ContextEmailFrom,
		ContextRegions, ContextRegionURLs, ContextClaims, ContextWitnessRegion, ContextAvailabilityZoneIds} {
		if get[k], err = str(k); err != nil {
			return nil, err
		}
	}
	psp := PspProps{
		KeySecret:     ImportedSecret{Arn: get[ContextPSPKeySecretArn], KmsKeyArn: get[ContextPSPKeySecretKmsKey]},
		WebhookSecret: ImportedSecret{Arn: get[ContextWebhookSecretArn], KmsKeyArn: get[ContextWebhookSecretKmsKey]},
		URL:           get[ContextPSPURL],
	}
	if err := psp.KeySecret.validate(ContextPSPKeySecretArn, ContextPSPKeySecretKmsKey); err != nil {
		return nil, err
	}
	if err := psp.WebhookSecret.validate(ContextWebhookSecretArn, ContextWebhookSecretKmsKey); err != nil {
		return nil, err
	}
	if psp.KeySecret.Arn != "" && psp.KeySecret.Arn == psp.WebhookSecret.Arn {
		return nil, fmt.Errorf("oncepay: %s and %s name one secret: the webhook could then read the API key", ContextPSPKeySecretArn, ContextWebhookSecretArn)
	}
	p := &StackProps{
		Profile:                 profile,
		Psp:                     psp,
		Auth:                    AuthProps{Issuer: get[ContextJWTIssuer], Audience: list(get[ContextJWTAudience])},
		PlatformApplicationArns: list(get[ContextPlatformApplicationArns]),
		EmailFrom:               get[ContextEmailFrom],
	}
	if p.Auth.Issuer != "" && len(p.Auth.Audience) == 0 {
		return nil, fmt.Errorf("oncepay: %s needs %s", ContextJWTIssuer, ContextJWTAudience)
	}
	if cert := get[ContextAlbCertificateArn]; cert != "" {
		p.Alb = &AlbProps{CertificateArn: cert, DomainName: get[ContextAlbDomainName], CognitoDomainPrefix: get[ContextAlbCognitoDomainPrefix], KeysURL: get[ContextAlbKeysURL]}
		if p.Auth.Issuer != "" {
			return nil, fmt.Errorf("oncepay: the ALB front door's authenticate action with an external issuer needs OIDC endpoints and a client secret: set StackProps.Alb.Oidc in code")
		}
		if p.Alb.CognitoDomainPrefix == "" {
			return nil, fmt.Errorf("oncepay: %s needs %s", ContextAlbCertificateArn, ContextAlbCognitoDomainPrefix)
		}
	}
	if get[ContextAlbKeysURL] != "" && p.Alb == nil {
		return nil, fmt.Errorf("oncepay: %s is set without the ALB front door (%s)", ContextAlbKeysURL, ContextAlbCertificateArn)
	}
	if v := get[ContextResolverConcurrency]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("oncepay: context %s must be a whole number >= 0, got %q", ContextResolverConcurrency, v)
		}
		p.ResolverReservedConcurrency = &n
	}
	switch v := get[ContextLedgerProxy]; v {
	case "":
	case "true", "false":
		p.LedgerProxy = jsii.Bool(v == "true")
	default:
		return nil, fmt.Errorf("oncepay: context %s must be true or false, got %q", ContextLedgerProxy, v)
	}
	if p.Regions, err = regionsFromContext(get, list, profile); err != nil {
		return nil, err
	}
	if p.Regions != nil {
		if err := p.checkRegionBound(); err != nil {
			return nil, err
		}
	}
	p.AvailabilityZoneIds = list(get[ContextAvailabilityZoneIds])
	regions := []string{""}
	if p.Regions != nil {
		regions = p.Regions.Regions
	}
	for _, r := range regions {
		ids := p.AvailabilityZoneIds
		if r != "" {
			ids = AvailabilityZoneIdsIn(r, ids)
		}
		switch {
		case len(ids) == 0 && profile.IsProd():
			where := "the Region"
			if r != "" {
				where = r
			}
			return nil, fmt.Errorf("oncepay: the prod profile pins its two AZs by id: set -c %s=<id>,<id> for %s (`make preflight` lists its ids and refuses the ones RDS Proxy does not run in)", ContextAvailabilityZoneIds, where)
		case len(ids) != 0 && !twoAZIds(ids):
			return nil, fmt.Errorf("oncepay: context %s: want two different AZ ids per Region such as use1-az1,use1-az2, got %q", ContextAvailabilityZoneIds, ids)
		}
	}
	return p, nil
}

// AvailabilityZoneIdsIn picks from ids the ones of region (an id starts with
// its Region's code: us-east-1 -> use1, ap-northeast-1 -> apne1,
// us-gov-west-1 -> usgw1).
func AvailabilityZoneIdsIn(region string, ids []string) []string {
	code := regionCode(region)
	var out []string
	for _, id := range ids {
		if strings.HasPrefix(id, code+"-az") {
			out = append(out, id)
		}
	}
	return out
}

func regionCode(region string) string {
	parts := strings.Split(region, "-")
	if len(parts) < 3 {
		return region
	}
	code := parts[0]
	for _, w := range parts[1 : len(parts)-1] {
		if short, ok := regionWords[w]; ok {
			w = short
		}
		code += w
	}
	return code + parts[len(parts)-1]
}

var regionWords = map[string]string{
	"north": "n", "south": "s", "east": "e", "west": "w", "central": "c",
	"northeast": "ne", "northwest": "nw", "southeast": "se", "southwest": "sw", "gov": "g",
}
