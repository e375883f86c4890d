package oncepay

import (
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/internal/stackenv"
)

// PSP secret fields (JSON keys of the secret string).
const (
	PSPSecretAPIKey        = stackenv.PSPSecretAPIKey        // Stripe secret key, sk_test_… in a sandbox
	PSPSecretWebhookSecret = stackenv.PSPSecretWebhookSecret // Stripe endpoint signing secret, whsec_…
)

// PspProps configures how the functions reach the PSP.
type PspProps struct {
	Protection
	// SecretArn is the complete ARN of an existing secret holding api_key
	// and webhook_secret. "" creates a placeholder secret the deployer fills
	// in (aws secretsmanager put-secret-value).
	SecretArn string
	// SecretKeyArn is the customer-managed KMS key SecretArn is encrypted
	// with, if any: the readers get kms:Decrypt on it. ("" with a
	// customer-managed key: every read of the secret is refused at run
	// time, and every payment waits as UNKNOWN.)
	SecretKeyArn string
	// URL of a Stripe-compatible API (stripe-mock, the simulator); "" is
	// Stripe itself.
	URL string
}

// Psp is the PSP's credentials and address. A function given them
// (GrantRead) holds the secret's ARN in ONCEPAY_PSP_SECRET_ARN, never a
// value, and reads the fields it needs at run time through a five-minute
// cache (internal/secrets): the api and resolver the API key, the webhook
// the signing secret. So lambda:GetFunctionConfiguration shows no secret,
// and a value put into the secret reaches warm functions within the cache's
// five minutes, with no deploy.
type Psp struct {
	constructs.Construct
	Secret awssecretsmanager.ISecret
	// Key encrypts the secret: the stack's for a created one, the
	// deployer's SecretKeyArn for an imported one (nil: AWS-managed).
	Key awskms.IKey
	URL string
}

// EnvPSPSecretArn is the variable the secret's ARN is given in.
const EnvPSPSecretArn = stackenv.PSPSecretArn

// NewPsp creates the placeholder secret or imports the given one.
func NewPsp(scope constructs.Construct, id string, props *PspProps) *Psp {
	if props == nil {
		props = &PspProps{}
	}
	c := &Psp{Construct: constructs.NewConstruct(scope, jsii.String(id)), URL: props.URL}
	if props.SecretArn != "" {
		c.Secret = awssecretsmanager.Secret_FromSecretCompleteArn(c.Construct, jsii.String("Secret"), jsii.String(props.SecretArn))
		if props.SecretKeyArn != "" {
			c.Key = awskms.Key_FromKeyArn(c.Construct, jsii.String("SecretKey"), jsii.String(props.SecretKeyArn))
		}
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

// GrantRead lets fn read the PSP secret at run time: the ARN in its
// environment, secretsmanager:GetSecretValue on that one secret, and
// kms:Decrypt on its key (the stack's, or PspProps.SecretKeyArn for an
// imported one). The PSP's URL comes with it.
func (c *Psp) GrantRead(fn *GoFunction) {
	fn.Grant([]string{"secretsmanager:GetSecretValue"}, c.Secret.SecretArn())
	fn.grantKey(c.Key, []string{"kms:Decrypt"})
	env := map[string]*string{EnvPSPSecretArn: c.Secret.SecretArn()}
	if c.URL != "" {
		env[EnvPSPURL] = jsii.String(c.URL)
	}
	fn.SetEnv(env)
}
