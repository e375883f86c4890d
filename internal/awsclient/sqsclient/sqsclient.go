// Package sqsclient builds the SQS client. It lives apart from the other
// services so a Lambda bootstrap links only the SDK clients it uses.
package sqsclient

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// New returns an SQS client for cfg.
func New(cfg aws.Config, opts ...func(*sqs.Options)) *sqs.Client {
	return sqs.NewFromConfig(cfg, opts...)
}
