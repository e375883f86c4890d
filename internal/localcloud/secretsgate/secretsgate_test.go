package secretsgate_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

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
