// Package awsclient builds AWS SDK clients the same way in Lambda and against
// the local cloud. Endpoints come from the SDK's own environment variables
// (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_DYNAMODB, ...), so nothing here knows
// whether it talks to AWS, DynamoDB Local, moto or LocalStack.
//
// Config is deliberately minimal. The SDK's config.LoadDefaultConfig resolves
// shared config and credentials files, profiles, SSO, SSO-OIDC, STS
// assume-role and web identity, the console sign-in flow, process credentials
// and EC2/ECS metadata; linking it (and the STS, SSO, SSO-OIDC and sign-in
// clients it carries) costs every Lambda bootstrap megabytes. A Lambda
// function needs none of it: the runtime hands the function its region and
// its execution role's credentials in the environment (AWS_REGION,
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), and the local
// cloud sets the same variables in .local/env. The runtime sets those
// credentials for the life of the execution environment; the container
// credentials endpoint (AWS_CONTAINER_CREDENTIALS_FULL_URI) that SnapStart
// uses does not exist for the provided.al2023 runtime these functions run on.
// What Config gives up: no ~/.aws files, no profiles, no SSO, no role
// chaining, no container or instance metadata credentials, no custom CA
// bundle (AWS_CA_BUNDLE).
// A local tool that needs those (a developer's SSO profile against a
// deployed stack) uses the fullconfig subpackage, which keeps
// LoadDefaultConfig; Config and fullconfig.Load return the same aws.Config
// shape, so every client constructor here takes either.
package awsclient

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go/logging"
)

// Config returns the SDK configuration from the process environment alone:
//
//   - region: AWS_REGION, else AWS_DEFAULT_REGION;
//   - credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
//     AWS_SESSION_TOKEN (optional), with AWS_ACCOUNT_ID if set, read through
//     the SDK's credentials cache;
//   - endpoints: AWS_ENDPOINT_URL for every service and
//     AWS_ENDPOINT_URL_<SERVICE> (the SDK ID upper-cased, spaces as
//     underscores: DYNAMODB, DYNAMODB_STREAMS, SQS, SNS) per service, unless
//     AWS_IGNORE_CONFIGURED_ENDPOINT_URLS is true — the same precedence the
//     SDK's own environment configuration applies;
//   - retries: the SDK's standard retryer (AWS_MAX_ATTEMPTS and
//     AWS_RETRY_MODE are honoured as the SDK does).
//
// It fails when the region or the key pair is missing, instead of failing
// later at the first signed call.
func Config(_ context.Context) (aws.Config, error) {
	region := os.Getenv("AWS_REGION")
	if region == "" {
		region = os.Getenv("AWS_DEFAULT_REGION")
	}
	if region == "" {
		return aws.Config{}, errors.New("awsclient: AWS_REGION is not set")
	}
	if _, err := envCredentials(); err != nil {
		return aws.Config{}, err
	}
	env := envSource{}
	cfg := aws.Config{
		Region:        region,
		Credentials:   aws.NewCredentialsCache(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return envCredentials() })),
		Logger:        logging.NewStandardLogger(os.Stderr),
		ConfigSources: []any{env},
	}
	ignore, _, _ := env.GetIgnoreConfiguredEndpoints(context.Background())
	if u := os.Getenv("AWS_ENDPOINT_URL"); u != "" && !ignore {
		cfg.BaseEndpoint = aws.String(u)
	}
	if v := os.Getenv("AWS_MAX_ATTEMPTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return aws.Config{}, fmt.Errorf("awsclient: AWS_MAX_ATTEMPTS: %w", err)
		}
		cfg.RetryMaxAttempts = n
	}
	if v := os.Getenv("AWS_RETRY_MODE"); v != "" {
		m, err := aws.ParseRetryMode(v)
		if err != nil {
			return aws.Config{}, fmt.Errorf("awsclient: AWS_RETRY_MODE: %w", err)
		}
		cfg.RetryMode = m
	}
	return cfg, nil
}

// envCredentials reads the key pair the Lambda runtime (or .local/env) puts
// in the environment. The source is named as the SDK names it, so a request's
// credential source reads the same as under LoadDefaultConfig.
func envCredentials() (aws.Credentials, error) {
	id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if id == "" {
		id = os.Getenv("AWS_ACCESS_KEY")
	}
	if secret == "" {
		secret = os.Getenv("AWS_SECRET_KEY")
	}
	if id == "" || secret == "" {
		return aws.Credentials{}, errors.New("awsclient: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set (this build reads credentials from the environment only; see package doc)")
	}
	return aws.Credentials{
		AccessKeyID:     id,
		SecretAccessKey: secret,
		SessionToken:    os.Getenv("AWS_SESSION_TOKEN"),
		AccountID:       os.Getenv("AWS_ACCOUNT_ID"),
		Source:          "EnvConfigCredentials",
	}, nil
}

// envSource answers the SDK's per-service endpoint lookup
// (internal/configsources.ServiceBaseEndpointProvider) from the environment,
// exactly as the SDK's EnvConfig does.
type envSource struct{}

// GetServiceBaseEndpoint returns AWS_ENDPOINT_URL_<SDK ID> if set.
func (envSource) GetServiceBaseEndpoint(_ context.Context, sdkID string) (string, bool, error) {
	if u := os.Getenv(ServiceEndpointVar(sdkID)); u != "" {
		return u, true, nil
	}
	return "", false, nil
}

// GetIgnoreConfiguredEndpoints reports AWS_IGNORE_CONFIGURED_ENDPOINT_URLS.
func (envSource) GetIgnoreConfiguredEndpoints(context.Context) (bool, bool, error) {
	v := os.Getenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
	if v == "" {
		return false, false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, false, fmt.Errorf("awsclient: AWS_IGNORE_CONFIGURED_ENDPOINT_URLS: %w", err)
	}
	return b, true, nil
}

// ServiceEndpointVar names the service-specific endpoint variable for an SDK
// ID: "DynamoDB Streams" -> AWS_ENDPOINT_URL_DYNAMODB_STREAMS.
func ServiceEndpointVar(sdkID string) string {
	return "AWS_ENDPOINT_URL_" + strings.ReplaceAll(strings.ToUpper(sdkID), " ", "_")
}

// Emulated reports whether a custom endpoint is configured for the service
// (its variable suffix, e.g. "DYNAMODB"): the emulators' responses carry no
// CRC32, so response checksum validation must be off there.
func Emulated(service string) bool {
	return os.Getenv("AWS_ENDPOINT_URL") != "" || os.Getenv("AWS_ENDPOINT_URL_"+service) != ""
}

// BaseEndpoint is the endpoint configured for the service with SDK ID sdkID
// ("Secrets Manager"), as the SDK's own clients pick it: AWS_ENDPOINT_URL_<ID>,
// else cfg.BaseEndpoint (AWS_ENDPOINT_URL), unless
// AWS_IGNORE_CONFIGURED_ENDPOINT_URLS is true. "" means the service's
// public endpoint. For callers that make a service's call without its SDK
// client (internal/secrets).
func BaseEndpoint(cfg aws.Config, sdkID string) (string, error) {
	ignore, _, err := envSource{}.GetIgnoreConfiguredEndpoints(context.Background())
	if err != nil || ignore {
		return "", err
	}
	if u := os.Getenv(ServiceEndpointVar(sdkID)); u != "" {
		return u, nil
	}
	return aws.ToString(cfg.BaseEndpoint), nil
}
