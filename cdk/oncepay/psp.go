package oncepay

import (
	"fmt"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
)

// PSP secret fields (JSON keys of the secret strings).
const (
	PSPSecretAPIKey        = stackenv.PSPSecretAPIKey        // the key secret's: Stripe secret key, sk_test_… in a sandbox
	PSPSecretWebhookSecret = stackenv.PSPSecretWebhookSecret // the webhook secret's: Stripe endpoint signing secret, whsec_…
)

// AwsManagedKey, as an ImportedSecret's KmsKeyArn, says the secret is
// encrypted with Secrets Manager's AWS-managed key (aws/secretsmanager),
// which needs no grant.
const AwsManagedKey = "aws-managed"

// ImportedSecret names an existing secret the stack reads instead of
// creating a placeholder.
type ImportedSecret struct {
	// Arn is the secret's complete ARN; "" creates a placeholder the
	// deployer fills in (aws secretsmanager put-secret-value).
	Arn string
	// KmsKeyArn is the customer-managed KMS key the secret is encrypted
	// with (its readers get kms:Decrypt on it), or AwsManagedKey. Required
	// with Arn: without the grant every read of a customer-managed secret
	// is refused at run time and every payment waits as UNKNOWN, which
	// nothing at synth or deploy would show.
	KmsKeyArn string
}

// PspProps configures how the functions reach the PSP.
type PspProps struct {
	Protection
	// KeySecret holds {"api_key": Stripe secret key}: the api, the
	// resolver and the reconciliation read it.
	KeySecret ImportedSecret
	// WebhookSecret holds {"webhook_secret": Stripe endpoint signing
	// secret}: the webhook reads it.
	WebhookSecret ImportedSecret
	// URL of a Stripe-compatible API (stripe-mock, the simulator); "" is
	// Stripe itself.
	URL string
}

// Psp is the PSP's credentials and address: two secrets, so that each
// function can read only its own. The api, the resolver (which also runs
// the refund follower) and the reconciliation (the PSP's lists, its
// reversals' refunds) read the API key, which charges and refunds;
// the internet-facing webhook reads only the signing secret. One secret
// with both fields let the webhook read the key and the key's readers
// forge webhooks. A function given a secret holds its ARN, never a value,
// and reads it at run time through a five-minute cache (internal/secrets):
// lambda:GetFunctionConfiguration shows no secret, and a value put into a
// secret reaches warm functions within five minutes, with no deploy.
type Psp struct {
	constructs.Construct
	// KeySecret and WebhookSecret are the two secrets.
	KeySecret, WebhookSecret awssecretsmanager.ISecret
	// KeySecretKey and WebhookSecretKey encrypt them: the stack's key for a
	// created one, the deployer's KmsKeyArn for an imported one (nil:
	// AWS-managed).
	KeySecretKey, WebhookSecretKey awskms.IKey
	URL                            string
}

// The variables the secrets' ARNs are given in, one per secret, so a
// function's environment names only the secret it may read.
const (
	EnvPSPKeySecretArn  = stackenv.PSPKeySecretArn
	EnvWebhookSecretArn = stackenv.WebhookSecretArn
	// EnvSecretsManagerEndpoint is Secrets Manager's endpoint in the
	// stack's partition, set on every function that reads a secret.
	EnvSecretsManagerEndpoint = stackenv.SecretsManagerEndpoint
)

// NewPsp creates the placeholder secrets or imports the given ones. It
// panics on an imported secret without KmsKeyArn, as constructs do on
// invalid props.
func NewPsp(scope constructs.Construct, id string, props *PspProps) *Psp {
	if props == nil {
		props = &PspProps{}
	}
	c := &Psp{Construct: constructs.NewConstruct(scope, jsii.String(id)), URL: props.URL}
	// The API key is random until the deployer sets a Stripe key (Stripe
	// refuses it, the simulator takes any); the webhook secret is random
	// until Stripe's endpoint secret replaces it, so no forged webhook
	// verifies meanwhile. Nothing secret is in the template.
	var key awskms.IKey // one for both created secrets: the stack's, or one of the construct's own
	keyOf := func() awskms.IKey {
		if key == nil {
			key = props.key(c.Construct)
		}
		return key
	}
	c.KeySecret, c.KeySecretKey = c.secret("KeySecret", props, keyOf, props.KeySecret, PSPSecretAPIKey,
		"oncepay PSP API key, read by the api, the resolver and the reconciliation: {\"api_key\": Stripe secret key}")
	c.WebhookSecret, c.WebhookSecretKey = c.secret("WebhookSecret", props, keyOf, props.WebhookSecret, PSPSecretWebhookSecret,
		"oncepay PSP webhook signing secret, read by the webhook function: {\"webhook_secret\": Stripe endpoint signing secret}")
	return c
}

// secret imports im, or creates a secret holding one random field.
func (c *Psp) secret(id string, props *PspProps, keyOf func() awskms.IKey, im ImportedSecret, field, desc string) (awssecretsmanager.ISecret, awskms.IKey) {
	if err := im.validate("PspProps."+id, "its KmsKeyArn"); err != nil {
		panic(err)
	}
	if im.Arn != "" {
		s := awssecretsmanager.Secret_FromSecretCompleteArn(c.Construct, jsii.String(id), jsii.String(im.Arn))
		if im.KmsKeyArn == AwsManagedKey {
			return s, nil
		}
		return s, awskms.Key_FromKeyArn(c.Construct, jsii.String(id+"Key"), jsii.String(im.KmsKeyArn))
	}
	key := keyOf()
	secret := awssecretsmanager.NewSecret(c.Construct, jsii.String(id), &awssecretsmanager.SecretProps{
		Description:   jsii.String(desc),
		EncryptionKey: key,
		GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
			SecretStringTemplate: jsii.String("{}"),
			GenerateStringKey:    jsii.String(field),
			ExcludePunctuation:   jsii.Bool(true),
			PasswordLength:       jsii.Number(40),
		},
		RemovalPolicy: props.removalPolicy(),
	})
	suppress(cfn(secret), "AwsSolutions-SMG4",
		"A third-party credential: Stripe issues and rolls the API key and the webhook signing secret in its dashboard; a rotation Lambda cannot mint them. The operator puts the new value here (docs/deploy.md).")
	return secret, key
}

// validate refuses an imported secret without its key's ARN, and a key
// without a secret (it would do nothing). what names the secret, keyWhat
// the setting that names its key, in the error.
func (im ImportedSecret) validate(what, keyWhat string) error {
	switch {
	case im.Arn == "" && im.KmsKeyArn != "":
		return fmt.Errorf("oncepay: %s is set without an imported secret (%s)", keyWhat, what)
	case im.Arn != "" && im.KmsKeyArn == "":
		return fmt.Errorf("oncepay: %s %s is imported without %s: give the ARN of the customer-managed KMS key it is encrypted with "+
			"(its readers need kms:Decrypt on it, and every read is refused without it), or %q if it uses the AWS-managed key", what, im.Arn, keyWhat, AwsManagedKey)
	case im.Arn != "" && im.KmsKeyArn != AwsManagedKey && !strings.Contains(im.KmsKeyArn, ":key/"):
		// An IAM grant on an alias ARN does not cover the key behind it.
		return fmt.Errorf("oncepay: %s %q is not a KMS key ARN (arn:…:kms:…:key/…; an alias grants nothing) nor %q", keyWhat, im.KmsKeyArn, AwsManagedKey)
	}
	return nil
}

// GrantKeyRead lets fn (the api, the resolver, the reconciliation) read the PSP API key at run
// time: the key secret's ARN in its environment, GetSecretValue on that
// secret alone, kms:Decrypt on its key. The PSP's URL comes with it.
func (c *Psp) GrantKeyRead(fn *GoFunction) {
	grantSecretRead(fn, c.KeySecret, c.KeySecretKey, EnvPSPKeySecretArn)
	if c.URL != "" {
		fn.SetEnv(map[string]*string{EnvPSPURL: jsii.String(c.URL)})
	}
}

// GrantWebhookSecretRead lets fn (the webhook) read the signing secret at
// run time, and nothing of the API key.
func (c *Psp) GrantWebhookSecretRead(fn *GoFunction) {
	grantSecretRead(fn, c.WebhookSecret, c.WebhookSecretKey, EnvWebhookSecretArn)
}

// grantSecretRead gives fn GetSecretValue on secret, kms:Decrypt on key
// (nil: AWS-managed), the secret's ARN in arnVar and Secrets Manager's
// endpoint for this stack's partition.
func grantSecretRead(fn *GoFunction, secret awssecretsmanager.ISecret, key awskms.IKey, arnVar string) {
	fn.Grant([]string{"secretsmanager:GetSecretValue"}, secret.SecretArn())
	fn.grantKey(key, []string{"kms:Decrypt"})
	fn.SetEnv(map[string]*string{arnVar: secret.SecretArn(), EnvSecretsManagerEndpoint: SecretsManagerEndpoint()})
}

// SecretsManagerEndpoint is https://secretsmanager.<Region>.<URL suffix>,
// resolved by CloudFormation: right in every partition (amazonaws.com.cn,
// amazonaws.eu), where a host the function built from the Region alone
// would not be.
func SecretsManagerEndpoint() *string {
	return awscdk.Fn_Sub(jsii.String("https://secretsmanager.${AWS::Region}.${AWS::URLSuffix}"), nil)
}
