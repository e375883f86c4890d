package secretsext_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/oncepay/oncepay/internal/localcloud/secretsext"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// The stand-in answers the extension's API from moto's Secrets Manager for
// the function's session token, and refuses a wrong or missing token before
// reading any secret, as the real extension does.
func TestTheSecretsExtensionRefusesAWrongToken(t *testing.T) {
	sm := testenv.SecretsManager(t)
	name := "t-secretsext-" + testenv.RandomID(4)
	value := `{"username":"oncepay_admin","password":"p4ss"}`
	out, err := sm.CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{Name: &name, SecretString: aws.String(value)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = sm.DeleteSecret(context.Background(), &secretsmanager.DeleteSecretInput{SecretId: out.ARN, ForceDeleteWithoutRecovery: aws.Bool(true)})
	})
	srv := httptest.NewServer(&secretsext.Handler{Secrets: sm, Token: "the-session-token"})
	defer srv.Close()
	get := func(token, id string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/secretsmanager/get?secretId="+url.QueryEscape(id), nil)
		if token != "" {
			req.Header.Set(secretsext.TokenHeader, token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for name, token := range map[string]string{"wrong": "another-functions-token", "missing": ""} {
		code, body := get(token, *out.ARN)
		if code != http.StatusUnauthorized || strings.Contains(body, "p4ss") {
			t.Errorf("%s token: %d %s; want 401 without the secret", name, code, body)
		}
	}
	code, body := get("the-session-token", *out.ARN)
	var got struct{ ARN, Name, SecretString string }
	if err := json.Unmarshal([]byte(body), &got); err != nil || code != http.StatusOK {
		t.Fatalf("right token: %d %s (%v)", code, body, err)
	}
	if got.SecretString != value || got.ARN != *out.ARN || got.Name != name {
		t.Errorf("answer %+v, want the secret %s", got, value)
	}
	if code, _ := get("the-session-token", "no-such-secret-"+testenv.RandomID(4)); code != http.StatusNotFound {
		t.Errorf("unknown secret: %d, want 404", code)
	}
}
