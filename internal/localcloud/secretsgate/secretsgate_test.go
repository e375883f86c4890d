package secretsgate_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/oncepay/oncepay/internal/localcloud/provision"
	"github.com/oncepay/oncepay/internal/localcloud/secretsgate"
	"github.com/oncepay/oncepay/internal/secrets"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// The gate answers a function's GetSecretValue, made the way the functions
// make it (internal/secrets), from moto, and refuses what Secrets Manager
// would refuse that function on AWS: a session token that is no function's,
// a call signed for another Region, a secret its role does not grant (no
// value in the answer), and an operation the functions never make.
func TestTheGateServesOnlyWhatTheCallersRoleGrants(t *testing.T) {
	sm := testenv.SecretsManager(t)
	name := "t-secretsgate-" + testenv.RandomID(4)
	value := `{"username":"oncepay_admin","password":"p4ss"}`
	out, err := sm.CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{Name: &name, SecretString: aws.String(value)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = sm.DeleteSecret(context.Background(), &secretsmanager.DeleteSecretInput{SecretId: out.ARN, ForceDeleteWithoutRecovery: aws.Bool(true)})
	})
	srv := httptest.NewServer(&secretsgate.Handler{Secrets: sm, Region: "eu-west-1", Callers: map[string]secretsgate.Caller{
		"migration-token": {Function: "Migration", MayRead: func(arn string) bool { return arn == *out.ARN }},
		"worker-token":    {Function: "Worker", MayRead: func(string) bool { return false }},
		"any-token":       {Function: "Any", MayRead: func(string) bool { return true }},
	}})
	defer srv.Close()
	read := func(token, region, id string) (string, error) {
		cfg := aws.Config{Region: region, BaseEndpoint: aws.String(srv.URL),
			Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test", SessionToken: token}, nil
			})}
		s, err := secrets.New(cfg, secrets.Options{Attempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		return s.String(context.Background(), id)
	}
	code := func(err error) string {
		var api *secrets.APIError
		if errors.As(err, &api) {
			return api.Code
		}
		return ""
	}
	if v, err := read("migration-token", "eu-west-1", name); err != nil || v != value {
		t.Fatalf("the granted function: %q, %v", v, err)
	}
	for _, c := range []struct{ name, token, region, id, want string }{
		{"another function's token", "not-a-functions-token", "eu-west-1", *out.ARN, "UnrecognizedClientException"},
		{"no token", "", "eu-west-1", *out.ARN, "UnrecognizedClientException"},
		{"signed for another Region", "migration-token", "us-east-1", *out.ARN, "InvalidSignatureException"},
		{"a role without the grant", "worker-token", "eu-west-1", name, "AccessDeniedException"},
		{"no such secret, for a role that may read any", "any-token", "eu-west-1", name + "-gone", "ResourceNotFoundException"},
		{"no such secret, for a role without the grant", "migration-token", "eu-west-1", name + "-gone", "AccessDeniedException"},
	} {
		v, err := read(c.token, c.region, c.id)
		if code(err) != c.want || v != "" || (err != nil && strings.Contains(err.Error(), "p4ss")) {
			t.Errorf("%s: %q, %v; want %s and no value", c.name, v, err, c.want)
		}
	}
	// The SDK's own client, for an operation the functions never make.
	sdk := secretsmanager.NewFromConfig(aws.Config{Region: "eu-west-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test", SessionToken: "migration-token"}, nil
		})})
	if _, err := sdk.ListSecrets(context.Background(), &secretsmanager.ListSecretsInput{}); err == nil || !strings.Contains(err.Error(), "UnknownOperationException") {
		t.Errorf("ListSecrets: %v, want UnknownOperationException", err)
	}
}

// The PSP's two secrets through the gate, with the table the local cloud
// builds from the real template (provision.SecretCallers): the webhook
// function is refused the API key's secret and the api and the resolver
// the signing secret's, with AccessDeniedException and no value, as
// Secrets Manager refuses them on AWS; each reads its own.
func TestTheGateRefusesEachPSPSecretToTheOtherSidesFunctions(t *testing.T) {
	sm := testenv.SecretsManager(t)
	tpl := testenv.Template(t)
	const region = "us-east-1"
	ids := map[string]string{} // "key", "webhook" -> logical id in the template
	for _, id := range tpl.OfType("AWS::SecretsManager::Secret") {
		switch {
		case strings.HasPrefix(id, "PspKeySecret"):
			ids["key"] = id
		case strings.HasPrefix(id, "PspWebhookSecret"):
			ids["webhook"] = id
		}
	}
	if len(ids) != 2 {
		t.Fatalf("the template's PSP secrets: %v, want the key's and the signing secret's", ids)
	}
	values := map[string]string{"key": `{"api_key":"sk_test_gate"}`, "webhook": `{"webhook_secret":"whsec_gate"}`}
	phys := map[string]provision.Physical{}
	arns := map[string]string{}
	for which, value := range values {
		name := "t-secretsgate-" + which + "-" + testenv.RandomID(4)
		out, err := sm.CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{Name: &name, SecretString: aws.String(value)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_, _ = sm.DeleteSecret(context.Background(), &secretsmanager.DeleteSecretInput{SecretId: out.ARN, ForceDeleteWithoutRecovery: aws.Bool(true)})
		})
		arns[which] = *out.ARN
		phys[ids[which]] = provision.Physical{Type: "AWS::SecretsManager::Secret", Name: name, Arn: *out.ARN}
	}
	// The other secrets of the template, so its policies resolve.
	for _, id := range tpl.OfType("AWS::SecretsManager::Secret") {
		if _, ok := phys[id]; !ok {
			phys[id] = provision.Physical{Type: "AWS::SecretsManager::Secret", Arn: "arn:aws:secretsmanager:" + region + ":000000000000:secret:" + id + "-AbCdEf"}
		}
	}
	envs := map[string]map[string]string{}
	fn := map[string]string{} // "api", "resolver", "webhook" -> logical id
	for _, id := range tpl.OfType("AWS::Lambda::Function") {
		envs[id] = map[string]string{"AWS_SESSION_TOKEN": "token-" + id}
		for _, p := range []string{"Api", "Resolver", "Webhook"} {
			if strings.HasPrefix(id, p+"Function") {
				fn[strings.ToLower(p)] = id
			}
		}
	}
	ev := &provision.Evaluator{Template: tpl, Physical: phys, Region: region, AccountID: "000000000000", StackName: "Oncepay"}
	callers, err := provision.SecretCallers(tpl, ev, envs)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&secretsgate.Handler{Secrets: sm, Region: region, Callers: callers})
	defer srv.Close()
	read := func(function, secret string) (string, error) {
		cfg := aws.Config{Region: region, BaseEndpoint: aws.String(srv.URL),
			Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test", SessionToken: "token-" + fn[function]}, nil
			})}
		s, err := secrets.New(cfg, secrets.Options{Attempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		return s.String(context.Background(), arns[secret])
	}
	for _, c := range []struct {
		function, secret string
		refused          bool
	}{
		{"webhook", "key", true}, {"api", "webhook", true}, {"resolver", "webhook", true},
		{"api", "key", false}, {"resolver", "key", false}, {"webhook", "webhook", false},
	} {
		v, err := read(c.function, c.secret)
		var api *secrets.APIError
		switch {
		case c.refused && (!errors.As(err, &api) || api.Code != "AccessDeniedException" || v != ""):
			t.Errorf("the %s reading the %s secret: %q, %v; want AccessDeniedException and no value", c.function, c.secret, v, err)
		case !c.refused && (err != nil || v != values[c.secret]):
			t.Errorf("the %s reading its %s secret: %q, %v", c.function, c.secret, v, err)
		}
	}
}
