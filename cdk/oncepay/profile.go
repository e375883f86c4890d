package oncepay

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Profile selects how disposable a deployment is.
type Profile string

const (
	// ProfileSandbox is torn down with `cdk destroy`: nothing retained, no
	// deletion protection, one NAT gateway.
	ProfileSandbox Profile = "sandbox"
	// ProfileProd keeps data on stack deletion, protects tables and the
	// cluster from deletion and runs a NAT gateway per AZ.
	ProfileProd Profile = "prod"
)

// ParseProfile accepts "" (sandbox), "sandbox" or "prod".
func ParseProfile(s string) (Profile, error) {
	switch Profile(s) {
	case "", ProfileSandbox:
		return ProfileSandbox, nil
	case ProfileProd:
		return ProfileProd, nil
	}
	return "", fmt.Errorf("oncepay: unknown profile %q (want %q or %q)", s, ProfileSandbox, ProfileProd)
}

// IsProd reports whether data must survive the stack.
func (p Profile) IsProd() bool { return p == ProfileProd }

// RemovalPolicy for every stateful resource.
func (p Profile) RemovalPolicy() awscdk.RemovalPolicy {
	if p.IsProd() {
		return awscdk.RemovalPolicy_RETAIN
	}
	return awscdk.RemovalPolicy_DESTROY
}

// DeletionProtection for the tables and the cluster.
func (p Profile) DeletionProtection() bool { return p.IsProd() }

// NatGateways: one per AZ in prod so losing an AZ does not cut the PSP off.
func (p Profile) NatGateways() float64 {
	if p.IsProd() {
		return 2
	}
	return 1
}

// LedgerReaders: prod adds a reader in the other AZ as the failover target.
func (p Profile) LedgerReaders() int {
	if p.IsProd() {
		return 1
	}
	return 0
}

// BackupRetentionDays for the ledger's automated backups (PITR window).
func (p Profile) BackupRetentionDays() float64 {
	if p.IsProd() {
		return 35 // Aurora's maximum
	}
	return 7
}

// LogRetention for the log groups the stack creates.
func (p Profile) LogRetention() awslogs.RetentionDays {
	if p.IsProd() {
		return awslogs.RetentionDays_ONE_YEAR
	}
	return awslogs.RetentionDays_ONE_WEEK
}

// ProfileContextKey selects the profile: cdk synth -c oncepay:profile=prod.
const ProfileContextKey = "oncepay:profile"

// ProfileFromContext reads ProfileContextKey from the construct tree.
func ProfileFromContext(scope constructs.Construct) (Profile, error) {
	v := scope.Node().TryGetContext(jsii.String(ProfileContextKey))
	if v == nil {
		return ParseProfile("")
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("oncepay: context %s must be a string, got %v", ProfileContextKey, v)
	}
	return ParseProfile(s)
}
