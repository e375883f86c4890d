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
// a function's session token, and refuses a wrong or missing token before
// reading any secret, as the real extension does; a function without the
// extension's layer gets no answer (on AWS its port is closed), and one
// whose role does not grant the secret gets AccessDeniedException and not
// the value.
func TestTheSecretsExtensionServesOnlyWhatTheCallersRoleGrants(t *testing.T) {
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
	srv := httptest.NewServer(&secretsext.Handler{Secrets: sm, Callers: map[string]secretsext.Caller{
		"the-session-token": {Function: "Migration", HasLayer: true, MayRead: func(arn string) bool { return arn == *out.ARN }},
		"api-token":         {Function: "Api", HasLayer: false, MayRead: func(string) bool { return true }},
		"worker-token":      {Function: "Worker", HasLayer: true, MayRead: func(string) bool { return false }},
	}})
	defer srv.Close()
	do := func(token, id string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/secretsmanager/get?secretId="+url.QueryEscape(id), nil)
		if token != "" {
			req.Header.Set(secretsext.TokenHeader, token)
		}
		return http.DefaultClient.Do(req)
	}
	get := func(token, id string) (int, string) {
		resp, err := do(token, id)
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
	// The API has no layer: no HTTP answer at all, as a closed port gives none.
	if resp, err := do("api-token", *out.ARN); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Errorf("a function without the layer got an answer: %d %s", resp.StatusCode, b)
	}
	// The worker's role does not grant it: AccessDeniedException, no value.
	code, body := get("worker-token", name)
	if code != http.StatusBadRequest || !strings.Contains(body, "AccessDeniedException") || strings.Contains(body, "p4ss") {
		t.Errorf("ungranted function: %d %s; want 400 AccessDeniedException without the secret", code, body)
	}
	code, body = get("the-session-token", *out.ARN)
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
