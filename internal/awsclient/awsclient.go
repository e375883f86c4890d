// Package awsclient builds AWS SDK clients the same way in Lambda and against
// the local cloud. Endpoints come from the SDK's own environment variables
// (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_DYNAMODB, ...), so nothing here knows
// whether it talks to AWS, DynamoDB Local, moto or LocalStack.
package awsclient

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Config loads the default SDK configuration (region, credentials, endpoint
// variables) with the retryer left at the SDK default.
func Config(ctx context.Context, opts ...func(*config.LoadOptions) error) (aws.Config, error) {
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("awsclient: load config: %w", err)
	}
	return cfg, nil
}

// emulated reports whether a custom endpoint is configured: the emulators'
// responses carry no CRC32, so response checksum validation must be off there.
func emulated(service string) bool {
	return os.Getenv("AWS_ENDPOINT_URL") != "" || os.Getenv("AWS_ENDPOINT_URL_"+service) != ""
}

// DynamoDB returns a DynamoDB client for cfg.
func DynamoDB(cfg aws.Config, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	if emulated("DYNAMODB") {
		opts = append([]func(*dynamodb.Options){func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true }}, opts...)
	}
	return dynamodb.NewFromConfig(cfg, opts...)
}

// DynamoDBStreams returns a DynamoDB Streams client for cfg.
func DynamoDBStreams(cfg aws.Config, opts ...func(*dynamodbstreams.Options)) *dynamodbstreams.Client {
	return dynamodbstreams.NewFromConfig(cfg, opts...)
}

// SQS returns an SQS client for cfg.
func SQS(cfg aws.Config, opts ...func(*sqs.Options)) *sqs.Client {
	return sqs.NewFromConfig(cfg, opts...)
}

// SNS returns an SNS client for cfg.
func SNS(cfg aws.Config, opts ...func(*sns.Options)) *sns.Client {
	return sns.NewFromConfig(cfg, opts...)
}
