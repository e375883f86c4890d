package secrets_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/secrets"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// motoSecret creates a secret in the local cloud's Secrets Manager (moto)
// with the SDK's own client, deleted when the test ends.
func motoSecret(t *testing.T, value string) (name, arn string) {
	t.Helper()
	sm := testenv.SecretsManager(t)
	name = "secrets-test-" + testenv.RandomID(8)
	out, err := sm.CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{Name: &name, SecretString: &value})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = sm.DeleteSecret(context.Background(), &secretsmanager.DeleteSecretInput{SecretId: &name, ForceDeleteWithoutRecovery: aws.Bool(true)})
	})
	return name, aws.ToString(out.ARN)
}

func TestReadsWhatTheSDKWroteByNameAndByARN(t *testing.T) {
	name, arn := motoSecret(t, `{"api_key":"sk_test_abc","webhook_secret":"whsec_1"}`)
	s, err := secrets.New(testenv.AWSConfig(t), secrets.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range []string{name, arn} {
		if v, err := s.Field(ctx, id, "api_key"); err != nil || v != "sk_test_abc" {
			t.Errorf("Field(%s, api_key) = %q, %v", id, v, err)
		}
		if v, err := s.Field(ctx, id, "webhook_secret"); err != nil || v != "whsec_1" {
			t.Errorf("Field(%s, webhook_secret) = %q, %v", id, v, err)
		}
	}
	if _, err := s.Field(ctx, arn, "password"); err == nil || strings.Contains(err.Error(), "sk_test_abc") {
		t.Errorf("a missing field: %v, want an error that does not show the value", err)
	}
	_, err = s.String(ctx, "secrets-test-none-"+testenv.RandomID(6))
	// Secrets Manager answers 400 (moto 404): the exception's name is what counts.
	var apiErr *secrets.APIError
	if !errors.Is(err, secrets.ErrNotFound) || !errors.As(err, &apiErr) || apiErr.Code != "ResourceNotFoundException" {
		t.Errorf("an unknown secret: %v, want ErrNotFound from a ResourceNotFoundException", err)
	}
}

// TestARotatedValueIsReadAfterTheTTL: within the TTL the value read first
// is used (one call per TTL); after it, the new value.
func TestARotatedValueIsReadAfterTheTTL(t *testing.T) {
	_, arn := motoSecret(t, `{"api_key":"sk_old"}`)
	now := time.Unix(1_800_000_000, 0)
	s, err := secrets.New(testenv.AWSConfig(t), secrets.Options{TTL: time.Minute, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if v, _ := s.Field(ctx, arn, "api_key"); v != "sk_old" {
		t.Fatalf("first read %q", v)
	}
	if _, err := testenv.SecretsManager(t).PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: &arn, SecretString: aws.String(`{"api_key":"sk_new"}`)}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(59 * time.Second)
	if v, _ := s.Field(ctx, arn, "api_key"); v != "sk_old" {
		t.Errorf("inside the TTL: %q, want the cached sk_old", v)
	}
	now = now.Add(2 * time.Second)
	if v, _ := s.Field(ctx, arn, "api_key"); v != "sk_new" {
		t.Errorf("past the TTL: %q, want sk_new", v)
	}
}

// TestTheCallIsTheSDKClientsCall: the SDK's secretsmanager client and Store
// send the same operation, content type and body, signed for the same
// service and region, with the session token; so what moto accepts from
// one, Secrets Manager accepts from the other.
func TestTheCallIsTheSDKClientsCall(t *testing.T) {
	type seen struct{ target, ctype, body, auth, token string }
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{r.Header.Get("X-Amz-Target"), r.Header.Get("Content-Type"), string(b), r.Header.Get("Authorization"), r.Header.Get("X-Amz-Security-Token")})
		mu.Unlock()
		if err := verifySigV4(r, b, "s"); err != nil {
			t.Errorf("%s: %v", r.Header.Get("User-Agent"), err)
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_, _ = io.WriteString(w, `{"ARN":"arn:aws:secretsmanager:eu-west-1:111111111111:secret:x-AbCdEf","Name":"x","SecretString":"v","VersionId":"1","VersionStages":["AWSCURRENT"]}`)
	}))
	defer srv.Close()
	cfg := aws.Config{
		Region: "eu-west-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "s", SessionToken: "tok"}, nil
		}),
	}
	ctx := context.Background()
	if _, err := secretsmanager.NewFromConfig(cfg).GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("x")}); err != nil {
		t.Fatal(err)
	}
	s, err := secrets.New(cfg, secrets.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.String(ctx, "x"); err != nil || v != "v" {
		t.Fatalf("Store: %q, %v", v, err)
	}
	if len(got) != 2 {
		t.Fatalf("%d requests, want 2", len(got))
	}
	sdk, ours := got[0], got[1]
	var a, b map[string]any
	_ = json.Unmarshal([]byte(sdk.body), &a)
	_ = json.Unmarshal([]byte(ours.body), &b)
	if sdk.target != ours.target || sdk.ctype != ours.ctype || a["SecretId"] != b["SecretId"] || len(a) != len(b) || ours.token != "tok" || sdk.token != ours.token {
		t.Errorf("the SDK sent %+v, Store sent %+v", sdk, ours)
	}
	scope := "/eu-west-1/secretsmanager/aws4_request"
	if !strings.Contains(sdk.auth, scope) || !strings.Contains(ours.auth, scope) {
		t.Errorf("credential scopes: SDK %q, Store %q, want both %s", sdk.auth, ours.auth, scope)
	}
}

// TestRetriesStaleValuesAndRefusals: a throttled or failing Secrets
// Manager is asked again (the SDK's standard retryer: three attempts); a
// refusal (AccessDenied) is not; when every attempt fails, a value read
// earlier is used up to MaxStale past its TTL, and not after.
func TestRetriesStaleValuesAndRefusals(t *testing.T) {
	static := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "s"}, nil
	})
	var calls atomic.Int32
	var mode atomic.Value
	mode.Store("ok")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		switch mode.Load() {
		case "throttle":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"__type":"ThrottlingException","message":"Rate exceeded"}`)
		case "down":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"__type":"InternalServiceError","message":"x"}`)
		case "denied":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"__type":"com.amazonaws.secretsmanager#AccessDeniedException","Message":"no"}`)
		default:
			_, _ = io.WriteString(w, `{"SecretString":"{\"k\":\"v1\"}"}`)
		}
	}))
	defer srv.Close()
	now := time.Unix(1_800_000_000, 0)
	cfg := aws.Config{Region: "eu-west-1", BaseEndpoint: aws.String(srv.URL), Credentials: static}
	s, err := secrets.New(cfg, secrets.Options{TTL: time.Minute, MaxStale: time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	mode.Store("throttle")
	if _, err := s.Field(ctx, "a", "k"); err == nil || calls.Load() != 3 {
		t.Errorf("throttled with nothing cached: %v after %d calls, want an error after 3", err, calls.Load())
	}
	calls.Store(0)
	mode.Store("denied")
	var apiErr *secrets.APIError
	if _, err := s.Field(ctx, "a", "k"); !errors.As(err, &apiErr) || apiErr.Code != "AccessDeniedException" || calls.Load() != 1 {
		t.Errorf("denied: %v after %d calls, want AccessDeniedException after 1", err, calls.Load())
	}
	mode.Store("ok")
	if v, err := s.Field(ctx, "a", "k"); err != nil || v != "v1" {
		t.Fatalf("ok: %q, %v", v, err)
	}
	mode.Store("down")
	now = now.Add(time.Minute + 59*time.Minute) // TTL + 59 min: stale, inside MaxStale
	if v, err := s.Field(ctx, "a", "k"); err != nil || v != "v1" {
		t.Errorf("down inside MaxStale: %q, %v, want the stale v1", v, err)
	}
	// Inside the pause after a failed refresh the held value is used with
	// no call; Fresh asks anyway.
	calls.Store(0)
	now = now.Add(5 * time.Second)
	if v, err := s.Field(ctx, "a", "k"); err != nil || v != "v1" || calls.Load() != 0 {
		t.Errorf("down, inside the pause: %q, %v after %d calls, want the stale v1 and no call", v, err, calls.Load())
	}
	if _, err := s.FreshField(ctx, "a", "k"); err == nil || calls.Load() == 0 {
		t.Errorf("Fresh while down: %v after %d calls, want an error from a real read", err, calls.Load())
	}
	now = now.Add(2 * time.Minute)
	if _, err := s.Field(ctx, "a", "k"); err == nil {
		t.Error("down past MaxStale: a value, want an error")
	}
	// A refusal is the operator's answer: a held value is not used past it.
	mode.Store("ok")
	now = now.Add(time.Hour)
	if v, err := s.Field(ctx, "a", "k"); err != nil || v != "v1" {
		t.Fatalf("ok again: %q, %v", v, err)
	}
	mode.Store("denied")
	now = now.Add(2 * time.Minute)
	if v, err := s.Field(ctx, "a", "k"); err == nil {
		t.Errorf("revoked (AccessDenied) with a value held: %q, want the refusal", v)
	}
}

// verifySigV4 recomputes the request's SigV4 signature as Secrets Manager
// does, from the headers it says it signed, with the secret key, and
// compares: moto and the gate check no signature, so a signing mistake
// would otherwise pass every local test and fail on AWS.
func verifySigV4(r *http.Request, body []byte, secretKey string) error {
	auth := r.Header.Get("Authorization")
	var signed, sig, scope string
	for _, part := range strings.Split(strings.TrimPrefix(auth, "AWS4-HMAC-SHA256 "), ", ") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "SignedHeaders":
			signed = v
		case "Signature":
			sig = v
		case "Credential":
			scope = v
		}
	}
	cred := strings.Split(scope, "/") // AKID/date/region/service/aws4_request
	if len(cred) != 5 || sig == "" || signed == "" {
		return fmt.Errorf("malformed Authorization %q", auth)
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return err
	}
	clone, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	for _, h := range strings.Split(signed, ";") {
		if h == "host" || h == "content-length" {
			continue
		}
		clone.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
	}
	if strings.Contains(";"+signed+";", ";content-length;") {
		clone.ContentLength = int64(len(body))
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: cred[0], SecretAccessKey: secretKey, SessionToken: r.Header.Get("X-Amz-Security-Token")}
	clone.Header.Del("X-Amz-Security-Token")
	clone.Header.Del("X-Amz-Date")
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, clone, hex.EncodeToString(sum[:]), cred[3], cred[2], at); err != nil {
		return err
	}
	if clone.Header.Get("Authorization") != auth {
		return fmt.Errorf("signature does not verify:\n sent %s\n want %s", auth, clone.Header.Get("Authorization"))
	}
	return nil
}

// The endpoint: the SDK's variables first (the local cloud points
// AWS_ENDPOINT_URL_SECRETS_MANAGER at its gate), then the one the stack
// names for its partition (issue 17 review: a host guessed from the Region
// is wrong in amazonaws.eu), then the guess; FIPS asks for the FIPS host,
// which the stack's variable does not name.
func TestTheStacksEndpointWinsOverTheGuessAndNotOverTheSDKs(t *testing.T) {
	const stack = "https://secretsmanager.eusc-de-east-1.amazonaws.eu"
	creds := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: "a", SecretAccessKey: "s"}, nil
	})
	for name, c := range map[string]struct {
		stackVar, sdkVar, base, fips string
		region, want                 string
	}{
		"the stack's":            {stackVar: stack, region: "eusc-de-east-1", want: stack},
		"the SDK's service var":  {stackVar: stack, sdkVar: "http://127.0.0.1:1", region: "eusc-de-east-1", want: "http://127.0.0.1:1"},
		"the SDK's base":         {stackVar: stack, base: "http://127.0.0.1:2", region: "eusc-de-east-1", want: "http://127.0.0.1:2"},
		"the guess":              {region: "eu-central-1", want: "https://secretsmanager.eu-central-1.amazonaws.com"},
		"the guess in China":     {region: "cn-north-1", want: "https://secretsmanager.cn-north-1.amazonaws.com.cn"},
		"FIPS asks for its host": {stackVar: "https://secretsmanager.us-east-1.amazonaws.com", fips: "true", region: "us-east-1", want: "https://secretsmanager-fips.us-east-1.amazonaws.com"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(stackenv.SecretsManagerEndpoint, c.stackVar)
			t.Setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", c.sdkVar)
			t.Setenv("AWS_USE_FIPS_ENDPOINT", c.fips)
			t.Setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "")
			cfg := aws.Config{Region: c.region, Credentials: creds}
			if c.base != "" {
				cfg.BaseEndpoint = aws.String(c.base)
			}
			s, err := secrets.New(cfg, secrets.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := secrets.EndpointOf(s); got != c.want {
				t.Errorf("endpoint %s, want %s", got, c.want)
			}
		})
	}
}
