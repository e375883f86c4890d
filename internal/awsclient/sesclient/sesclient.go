// Package sesclient builds the SES v2 client. It lives apart from the other
// services so a Lambda bootstrap links only the SDK clients it uses.
package sesclient

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"
)

// New returns an SES v2 client for cfg.
func New(cfg aws.Config, opts ...func(*sesv2.Options)) *sesv2.Client {
	return sesv2.NewFromConfig(cfg, opts...)
}
