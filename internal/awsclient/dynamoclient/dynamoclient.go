// Package dynamoclient builds the DynamoDB client. It lives apart from the
// other services so a Lambda bootstrap links only the SDK clients it uses.
package dynamoclient

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncepay/oncepay/internal/awsclient"
)

// New returns a DynamoDB client for cfg. Against an emulator (a custom
// endpoint) response CRC32 validation is off: DynamoDB Local and moto send
// none.
func New(cfg aws.Config, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	if awsclient.Emulated("DYNAMODB") {
		opts = append([]func(*dynamodb.Options){func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true }}, opts...)
	}
	return dynamodb.NewFromConfig(cfg, opts...)
}
