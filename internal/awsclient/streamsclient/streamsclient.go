// Package streamsclient builds the DynamoDB Streams client. It lives apart
// from the other services so a Lambda bootstrap links only the SDK clients it
// uses.
package streamsclient

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
)

// New returns a DynamoDB Streams client for cfg.
func New(cfg aws.Config, opts ...func(*dynamodbstreams.Options)) *dynamodbstreams.Client {
	return dynamodbstreams.NewFromConfig(cfg, opts...)
}
