package oncepay

import (
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// PSP secret fields (JSON keys of the secret string).
const (
	PSPSecretAPIKey        = "api_key"        // Stripe secret key, sk_test_… in a sandbox
	PSPSecretWebhookSecret = "webhook_secret" // Stripe endpoint signing secret, whsec_…
)

// PspProps configures how the functions reach the PSP.
type PspProps struct {
	Protection
	// SecretArn is the complete ARN of an existing secret holding api_key
	// and webhook_secret. "" creates a placeholder secret the deployer fills
	// in (aws secretsmanager put-secret-value). A secret encrypted with a
	// key of its own needs kms:Decrypt granted to the functions' roles by
	// the deployer.
	SecretArn string
	// URL of a Stripe-compatible API (stripe-mock, the simulator); "" is
	// Stripe itself.
	URL string
	// Revision is any label; changing it makes CloudFormation update the
	// functions and so re-read the secret (see Psp).
	Revision string
}

// Psp is the PSP's credentials and address. The handlers read the API key
// from ONCEPAY_PSP_API_KEY and the webhook signing secret from
// ONCEPAY_WEBHOOK_SECRET (internal/boot, internal/webhook); CloudFormation
// fills both from the secret at deploy time with a dynamic reference, so the
// template and the cloud assembly never hold the values. The values do sit in
// the functions' configuration (encrypted at rest, readable by whoever may
// call lambda:GetFunctionConfiguration), and a new secret value reaches the
// functions on the next deploy that updates them: change Revision.
type Psp struct {
	constructs.Construct
	Secret awssecretsmanager.ISecret
	// Key encrypts a created secret; nil for an imported one.
	Key      awskms.IKey
	URL      string
	Revision string
}

// Environment variables the PSP values are injected as.
const (
	EnvPSPAPIKey         = "ONCEPAY_PSP_API_KEY"
	EnvWebhookSecret     = "ONCEPAY_WEBHOOK_SECRET"
	EnvPSPSecretRevision = "ONCEPAY_PSP_SECRET_REVISION"
)

// NewPsp creates the placeholder secret or imports the given one.
func NewPsp(scope constructs.Construct, id string, props *PspProps) *Psp {
	if props == nil {
		props = &PspProps{}
	}
	c := &Psp{Construct: constructs.NewConstruct(scope, jsii.String(id)), URL: props.URL, Revision: props.Revision}
	if c.Revision == "" {
		c.Revision = "1"
	}
	if props.SecretArn != "" {
		c.Secret = awssecretsmanager.Secret_FromSecretCompleteArn(c.Construct, jsii.String("Secret"), jsii.String(props.SecretArn))
		return c
	}
	c.Key = props.key(c.Construct)
	// The API key is a placeholder until the deployer sets a Stripe test key;
	// the webhook secret is random until Stripe's endpoint secret replaces it,
	// so no forged webhook verifies meanwhile. Nothing secret is in the
	// template.
	secret := awssecretsmanager.NewSecret(c.Construct, jsii.String("Secret"), &awssecretsmanager.SecretProps{
		Description:   jsii.String("oncepay PSP credentials: {\"api_key\": Stripe secret key, \"webhook_secret\": Stripe endpoint signing secret}"),
		EncryptionKey: c.Key,
		GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
			SecretStringTemplate: jsii.String(`{"` + PSPSecretAPIKey + `":"sk_test_replace_me"}`),
			GenerateStringKey:    jsii.String(PSPSecretWebhookSecret),
			ExcludePunctuation:   jsii.Bool(true),
			PasswordLength:       jsii.Number(40),
		},
		RemovalPolicy: props.removalPolicy(),
	})
	suppress(cfn(secret), "AwsSolutions-SMG4",
		"A third-party credential: Stripe issues and rolls the API key and the webhook signing secret in its dashboard; a rotation Lambda cannot mint them. The operator puts the new values here (docs/deploy.md).")
	c.Secret = secret
	return c
}

// InjectAPIKey gives fn the PSP's API key and URL.
func (c *Psp) InjectAPIKey(fn *GoFunction) { c.inject(fn, EnvPSPAPIKey, PSPSecretAPIKey) }

// InjectWebhookSecret gives fn the webhook signing secret.
func (c *Psp) InjectWebhookSecret(fn *GoFunction) {
	c.inject(fn, EnvWebhookSecret, PSPSecretWebhookSecret)
}

func (c *Psp) inject(fn *GoFunction, name, field string) {
	env := map[string]*string{
		name:                 c.Secret.SecretValueFromJson(jsii.String(field)).UnsafeUnwrap(),
		EnvPSPSecretRevision: jsii.String(c.Revision),
	}
	if c.URL != "" {
		env[EnvPSPURL] = jsii.String(c.URL)
	}
	fn.SetEnv(env)
}
