// Package fullconfig loads the SDK's full default configuration (shared
// config and credentials files, profiles, SSO, assume-role, instance
// metadata) for local tools run by a person. Lambda functions use
// awsclient.Config instead: see that package for why, and what it gives up.
package fullconfig

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
)

// Load is config.LoadDefaultConfig with the retryer left at the SDK default.
func Load(ctx context.Context, opts ...func(*config.LoadOptions) error) (aws.Config, error) {
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("fullconfig: load config: %w", err)
	}
	return cfg, nil
}
