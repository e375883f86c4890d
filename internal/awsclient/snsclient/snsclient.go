// Package snsclient builds the SNS client. It lives apart from the other
// services so a Lambda bootstrap links only the SDK clients it uses.
package snsclient

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
)

// New returns an SNS client for cfg.
func New(cfg aws.Config, opts ...func(*sns.Options)) *sns.Client {
	return sns.NewFromConfig(cfg, opts...)
}
