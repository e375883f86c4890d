package oncepay

import (
	"fmt"
	"reflect"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// Protection is what every stateful construct here takes. Zero values are the
// safe choice: a new rotating key, RETAIN, deletion protection on.
type Protection struct {
	// EncryptionKey encrypts the resource at rest; nil creates one per construct.
	EncryptionKey awskms.IKey
	// RemovalPolicy on stack deletion or replacement; "" means RETAIN.
	RemovalPolicy awscdk.RemovalPolicy
	// DeletionProtection where the service has it (tables, cluster); nil means on.
	DeletionProtection *bool
}

// ProtectionFor is the profile's choice with the given key.
func ProtectionFor(p Profile, key awskms.IKey) Protection {
	return Protection{EncryptionKey: key, RemovalPolicy: p.RemovalPolicy(), DeletionProtection: jsii.Bool(p.DeletionProtection())}
}

// inherit fills p's zero fields from d.
func (p Protection) inherit(d Protection) Protection {
	if p.EncryptionKey == nil {
		p.EncryptionKey = d.EncryptionKey
	}
	if p.RemovalPolicy == "" {
		p.RemovalPolicy = d.RemovalPolicy
	}
	if p.DeletionProtection == nil {
		p.DeletionProtection = d.DeletionProtection
	}
	return p
}

func (p Protection) removalPolicy() awscdk.RemovalPolicy {
	if p.RemovalPolicy == "" {
		return awscdk.RemovalPolicy_RETAIN
	}
	return p.RemovalPolicy
}

func (p Protection) deletionProtection() bool {
	return p.DeletionProtection == nil || *p.DeletionProtection
}

// key returns p's key or a new one under scope.
func (p Protection) key(scope constructs.Construct) awskms.IKey {
	if p.EncryptionKey != nil {
		return p.EncryptionKey
	}
	return NewDataKey(scope, "Key", p.removalPolicy())
}

// NewDataKey is a customer-managed key with yearly rotation (AwsSolutions-KMS5).
func NewDataKey(scope constructs.Construct, id string, removal awscdk.RemovalPolicy) awskms.Key {
	return awskms.NewKey(scope, jsii.String(id), &awskms.KeyProps{
		Description:       jsii.String("oncepay data at rest: tables, streams, queues, topic, ledger"),
		EnableKeyRotation: jsii.Bool(true),
		RemovalPolicy:     removal,
	})
}

// suppress records a cdk-nag exception on one resource (not its children).
func suppress(resource constructs.IConstruct, rule, reason string) {
	cdknag.NagSuppressions_AddResourceSuppressions(resource,
		&[]*cdknag.NagPackSuppression{{Id: jsii.String(rule), Reason: jsii.String(reason)}},
		jsii.Bool(false))
}

// cfn is the L1 resource behind an L2 construct.
func cfn(c constructs.IConstruct) constructs.IConstruct { return c.Node().DefaultChild() }

func days(n float64) awscdk.Duration { return awscdk.Duration_Days(jsii.Number(n)) }

// AddNagPacks applies the cdk-nag packs the stack must pass: AWS Solutions
// and Serverless. Findings become errors and warnings on the construct tree.
func AddNagPacks(scope constructs.IConstruct) {
	verbose := &cdknag.NagPackProps{Verbose: jsii.Bool(true)}
	awscdk.Aspects_Of(scope).Add(cdknag.NewAwsSolutionsChecks(verbose), nil)
	awscdk.Aspects_Of(scope).Add(cdknag.NewServerlessChecks(verbose), nil)
}

// suppressApplies records a cdk-nag exception on one resource for the named
// findings only (e.g. "Resource::*"), not for the rule as a whole.
func suppressApplies(resource constructs.IConstruct, rule, reason string, appliesTo ...string) {
	var applies []interface{}
	for _, a := range appliesTo {
		applies = append(applies, a)
	}
	cdknag.NagSuppressions_AddResourceSuppressions(resource,
		&[]*cdknag.NagPackSuppression{{Id: jsii.String(rule), Reason: jsii.String(reason), AppliesTo: &applies}},
		jsii.Bool(false))
}

// exclusive panics when two props that exclude each other are both set.
// why says which to keep.
func exclusive(what, a string, aSet bool, b string, bSet bool, why string) {
	if aSet && bSet {
		panic(fmt.Sprintf("oncepay: %s: %s and %s exclude each other: %s", what, a, b, why))
	}
}

// isZero: v is its type's zero value (a props struct left alone).
func isZero(v any) bool { return reflect.ValueOf(v).IsZero() }
