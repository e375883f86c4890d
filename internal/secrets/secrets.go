// Package secrets reads secrets from AWS Secrets Manager at run time and
// keeps each for a short while. A function's configuration then holds the
// secret's ARN, never its value (lambda:GetFunctionConfiguration shows
// nothing worth stealing), and a rotated value reaches warm functions
// within the TTL instead of at the next deploy.
//
// Why not the SDK's secretsmanager client: linking it costs a bootstrap
// 128 KiB (its generated shape registry, service/secretsmanager/schemas, is
// linked whole), which put the api at 10,485,886 bytes, 126 over the 10 MiB
// budget. GetSecretValue is one POST in the awsJson1.1 protocol, so Store
// makes it with the SDK's own parts instead: its SigV4 signer, the
// config's credentials and HTTP client, and its standard retryer's
// classification and backoff. What it leaves out: binary secrets, version
// ids and stages (it reads AWSCURRENT) and dual-stack endpoints. The
// endpoint comes from the stack (ONCEPAY_SECRETS_MANAGER_ENDPOINT, right in
// every partition), a guess from the Region serving only processes outside
// it. secrets_test.go checks the call
// against moto and against the SDK client's own request.
package secrets

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/awsclient"
)

// Defaults of Options.
const (
	// DefaultTTL is how long a value is used before it is read again: the
	// AWS Parameters and Secrets extension's default, and short next to
	// Stripe's overlap when a key is rolled.
	DefaultTTL = 5 * time.Minute
	// DefaultMaxStale is how long past its TTL a value is still used when
	// Secrets Manager cannot be read: an outage of the secret store should
	// not stop payments that the PSP would accept.
	DefaultMaxStale = time.Hour
)

// ErrNotFound: Secrets Manager has no such secret (or no current value).
var ErrNotFound = errors.New("secrets: not found")

// Options tune a Store; the zero value is the defaults.
type Options struct {
	TTL      time.Duration
	MaxStale time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Logger gets a line when a stale value is used (never the value).
	Logger *slog.Logger
	// Attempts bounds the calls per read (default 3, the SDK's standard).
	Attempts int
}

// Store reads secrets with cfg's region, credentials and HTTP client. Safe
// for concurrent use: one read of Secrets Manager at a time, and a caller
// waiting for it gives up when its own context ends.
type Store struct {
	cfg      aws.Config
	endpoint string
	signer   *v4.Signer
	retryer  *retry.Standard
	opts     Options

	lock  chan struct{} // a mutex a waiter can leave when its context ends
	cache map[string]entry
}

type entry struct {
	value  string
	read   time.Time
	failed time.Time // the last refresh that failed (zero: none since read)
}

// Refreshing a value the store already holds is capped at staleRefresh,
// and after a failed refresh the held value is used for retryPause before
// Secrets Manager is asked again: during an outage a payment must not
// spend its deadline (or a webhook its budget) on reads that will fail.
const (
	staleRefresh = 500 * time.Millisecond
	retryPause   = 15 * time.Second
)

// New returns a Store for cfg. The endpoint is AWS_ENDPOINT_URL_SECRETS_MANAGER,
// else cfg.BaseEndpoint, else the one the stack names in
// ONCEPAY_SECRETS_MANAGER_ENDPOINT, else Secrets Manager's public endpoint
// in cfg's Region (its FIPS endpoint when AWS_USE_FIPS_ENDPOINT is true).
func New(cfg aws.Config, opts Options) (*Store, error) {
	if cfg.Region == "" {
		return nil, errors.New("secrets: no region")
	}
	if cfg.Credentials == nil {
		return nil, errors.New("secrets: no credentials")
	}
	ep, err := awsclient.BaseEndpoint(cfg, "Secrets Manager")
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	if ep == "" {
		ep = defaultEndpoint(cfg.Region)
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.MaxStale < 0 {
		opts.MaxStale = 0
	} else if opts.MaxStale == 0 {
		opts.MaxStale = DefaultMaxStale
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Attempts <= 0 {
		opts.Attempts = cfg.RetryMaxAttempts // AWS_MAX_ATTEMPTS, as the SDK's clients honour it
	}
	if opts.Attempts <= 0 {
		opts.Attempts = retry.DefaultMaxAttempts
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	return &Store{
		cfg: cfg, endpoint: strings.TrimSuffix(ep, "/"), signer: v4.NewSigner(), opts: opts,
		// Short waits: the api reads inside a payment's deadline.
		retryer: retry.NewStandard(func(o *retry.StandardOptions) { o.MaxBackoff = 500 * time.Millisecond }),
		cache:   map[string]entry{},
		lock:    make(chan struct{}, 1),
	}, nil
}

// defaultEndpoint is the endpoint when the SDK's variables name none: the
// stack's (stackenv.SecretsManagerEndpoint, built from the partition's URL
// suffix), else one guessed from the Region, which knows only the aws and
// aws-cn partitions (for a process outside the stack). FIPS asks for the
// FIPS host, which the stack's variable does not name; FIPS endpoints are
// all in amazonaws.com partitions, which the guess knows.
func defaultEndpoint(region string) string {
	fips, _ := strconv.ParseBool(os.Getenv("AWS_USE_FIPS_ENDPOINT"))
	if ep := os.Getenv(stackenv.SecretsManagerEndpoint); ep != "" && !fips {
		return ep
	}
	host := "secretsmanager"
	if fips {
		host += "-fips"
	}
	suffix := "amazonaws.com"
	if strings.HasPrefix(region, "cn-") {
		suffix = "amazonaws.com.cn"
	}
	return "https://" + host + "." + region + "." + suffix
}

// String returns the SecretString of the secret id (a name or an ARN).
func (s *Store) String(ctx context.Context, id string) (string, error) {
	return s.read(ctx, id, false)
}

// Fresh is String past the cache: for a caller that has just been told the
// value it holds is no longer valid (the PSP answered 401 to a key that
// may have been rolled since it was read).
func (s *Store) Fresh(ctx context.Context, id string) (string, error) {
	return s.read(ctx, id, true)
}

func (s *Store) read(ctx context.Context, id string, fresh bool) (string, error) {
	select {
	case s.lock <- struct{}{}:
	case <-ctx.Done():
		return "", fmt.Errorf("secrets: get %s: %w", id, ctx.Err())
	}
	defer func() { <-s.lock }()
	now := s.opts.Now()
	e, ok := s.cache[id]
	if ok && !fresh && now.Sub(e.read) < s.opts.TTL {
		return e.value, nil
	}
	usable := ok && now.Sub(e.read) < s.opts.TTL+s.opts.MaxStale
	if usable && !fresh && !e.failed.IsZero() && now.Sub(e.failed) < retryPause {
		return e.value, nil
	}
	rctx := ctx
	if usable {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, staleRefresh)
		defer cancel()
	}
	v, err := s.get(rctx, id)
	if err != nil {
		// Only a store that could not answer falls back on the held value:
		// a refusal (AccessDenied, ResourceNotFound, DecryptionFailure) is
		// an operator's answer, and revoking a secret must stop its use.
		transient := s.retryer.IsErrorRetryable(err) || errors.Is(err, context.DeadlineExceeded)
		if usable && transient && fresh {
			return "", err // the caller holds that value already, and it failed
		}
		if usable && transient {
			e.failed = now
			s.cache[id] = e
			s.opts.Logger.Warn("secrets: Secrets Manager not read; using the value read earlier",
				"secret_id", id, "age", now.Sub(e.read).Round(time.Second).String(), "err", err)
			return e.value, nil
		}
		delete(s.cache, id) // refused, or too old to use
		return "", err
	}
	s.cache[id] = entry{value: v, read: now}
	return v, nil
}

// Field returns the string field of the JSON object the secret id holds
// (the PSP secret's api_key, the ledger secret's password).
func (s *Store) Field(ctx context.Context, id, field string) (string, error) {
	raw, err := s.String(ctx, id)
	if err != nil {
		return "", err
	}
	return FieldOf(raw, id, field)
}

// FreshField is Field past the cache (see Fresh).
func (s *Store) FreshField(ctx context.Context, id, field string) (string, error) {
	raw, err := s.Fresh(ctx, id)
	if err != nil {
		return "", err
	}
	return FieldOf(raw, id, field)
}

// FieldOf is the string field of a secret holding a JSON object (the
// shape Secrets Manager generates for RDS and the PSP secret). id names the
// secret in errors; the value never goes into one.
func FieldOf(raw, id, field string) (string, error) {
	var obj map[string]any
	if err := json.Unmarshal([]byte(raw), &obj); err != nil {
		return "", fmt.Errorf("secrets: %s does not hold a JSON object", id)
	}
	v, ok := obj[field].(string)
	if !ok || v == "" {
		return "", fmt.Errorf("secrets: %s has no string field %q", id, field)
	}
	return v, nil
}

// APIError is an error answer from Secrets Manager. It has the methods the
// SDK's retryer classifies by (HTTPStatusCode, ErrorCode).
type APIError struct {
	Status    int
	Code      string // ResourceNotFoundException, AccessDeniedException, ...
	Message   string
	RequestID string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("secrets manager answered %d %s: %s [%s]", e.Status, e.Code, e.Message, e.RequestID)
}

// HTTPStatusCode is the reply's status.
func (e *APIError) HTTPStatusCode() int { return e.Status }

// ErrorCode is the exception's name.
func (e *APIError) ErrorCode() string { return e.Code }

// Is makes errors.Is(err, ErrNotFound) hold for ResourceNotFoundException.
func (e *APIError) Is(target error) bool {
	return target == ErrNotFound && e.Code == "ResourceNotFoundException"
}

// get is GetSecretValue with the retryer's attempts and backoff.
func (s *Store) get(ctx context.Context, id string) (string, error) {
	var err error
	for attempt := 1; ; attempt++ {
		var v string
		v, err = s.call(ctx, id)
		if err == nil {
			return v, nil
		}
		if attempt >= s.opts.Attempts || ctx.Err() != nil || !s.retryer.IsErrorRetryable(err) {
			break
		}
		d, derr := s.retryer.RetryDelay(attempt, err)
		if derr != nil {
			break
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("secrets: get %s: %w", id, errors.Join(err, ctx.Err()))
		case <-t.C:
		}
	}
	return "", fmt.Errorf("secrets: get %s: %w", id, err)
}

// call is one signed GetSecretValue.
func (s *Store) call(ctx context.Context, id string) (string, error) {
	body, err := json.Marshal(struct{ SecretId string }{id})
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.endpoint+"/", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", "secretsmanager.GetSecretValue")
	creds, err := s.cfg.Credentials.Retrieve(ctx)
	if err != nil {
		return "", fmt.Errorf("credentials: %w", err)
	}
	sum := sha256.Sum256(body)
	if err := s.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "secretsmanager", s.cfg.Region, time.Now()); err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	resp, err := s.cfg.HTTPClient.Do(req)
	if err != nil {
		return "", err // the retryer knows connection errors
	}
	defer resp.Body.Close()
	// A secret is at most 64 KiB; the reply adds its ARN, name and stages.
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", apiError(resp, data)
	}
	var out struct {
		SecretString *string
		SecretBinary []byte
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return "", fmt.Errorf("reply: %w", err)
	}
	if out.SecretString == nil {
		if out.SecretBinary != nil {
			return "", fmt.Errorf("%s is a binary secret; only SecretString is read", id)
		}
		return "", fmt.Errorf("%w: %s has no SecretString", ErrNotFound, id)
	}
	return *out.SecretString, nil
}

// apiError reads an awsJson1.1 error: the code in __type (possibly
// "namespace#Code") or the X-Amzn-ErrorType header, the message in
// message or Message.
func apiError(resp *http.Response, data []byte) error {
	var e struct {
		Type     string `json:"__type"`
		Message  string `json:"message"`
		Message2 string `json:"Message"`
	}
	_ = json.Unmarshal(data, &e)
	code := e.Type
	if code == "" {
		code = resp.Header.Get("X-Amzn-ErrorType")
	}
	if i := strings.LastIndexByte(code, '#'); i >= 0 {
		code = code[i+1:]
	}
	if i := strings.IndexByte(code, ':'); i >= 0 {
		code = code[:i]
	}
	msg := e.Message
	if msg == "" {
		msg = e.Message2
	}
	if code == "" {
		code = http.StatusText(resp.StatusCode)
	}
	return &APIError{Status: resp.StatusCode, Code: code, Message: msg, RequestID: resp.Header.Get("X-Amzn-RequestId")}
}
