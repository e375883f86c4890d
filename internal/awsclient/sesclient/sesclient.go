// Package sesclient builds the SES v2 client. It lives apart from the other
// services so a Lambda bootstrap links only the SDK clients it uses.
package sesclient

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"
)

// New returns an SES v2 client for cfg, with the SDK's retries: for
// calls that are safe to repeat (an identity's creation, a read).
func New(cfg aws.Config, opts ...func(*sesv2.Options)) *sesv2.Client {
	return sesv2.NewFromConfig(cfg, opts...)
}

// NewSender returns an SES v2 client for cfg that makes one attempt per
// call, for sending. SES takes no idempotency key: the SDK's retry of a
// send whose connection reset or that answered 5xx could be a second email
// no one counts, and one whose last attempt drew a 4xx would report a send
// that may have gone as refused. The caller's own retry (the worker's
// sweep) counts each one and follows the message type's policy
// (notify.Policies).
func NewSender(cfg aws.Config, opts ...func(*sesv2.Options)) *sesv2.Client {
	once := func(o *sesv2.Options) { o.RetryMaxAttempts = 1 }
	return sesv2.NewFromConfig(cfg, append([]func(*sesv2.Options){once}, opts...)...)
}
