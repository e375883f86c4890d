package oncepay

import (
	"fmt"
	"reflect"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
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
	addNagSuppression(resource, rule, reason, nil)
}

// cfn is the L1 resource behind an L2 construct.
func cfn(c constructs.IConstruct) constructs.IConstruct { return c.Node().DefaultChild() }

func days(n float64) awscdk.Duration { return awscdk.Duration_Days(jsii.Number(n)) }

// suppressApplies records a cdk-nag exception on one resource for the named
// findings only (e.g. "Resource::*"), not for the rule as a whole.
func suppressApplies(resource constructs.IConstruct, rule, reason string, appliesTo ...string) {
	addNagSuppression(resource, rule, reason, appliesTo)
}

// addNagSuppression writes the metadata cdk-nag's NagSuppressions API
// writes (cdk_nag.rules_to_suppress: id, reason, applies_to), so the
// constructs carry their reasons without depending on cdk-nag: a stack
// that runs cdk-nag reads them, one that does not pays nothing. The nag
// tests and examples/consumer run the real packs over them.
func addNagSuppression(resource constructs.IConstruct, rule, reason string, appliesTo []string) {
	r, ok := resource.(awscdk.CfnResource)
	if !ok {
		panic(fmt.Sprintf("oncepay: a nag suppression (%s) on %s, which is not a CloudFormation resource", rule, *resource.Node().Path()))
	}
	entry := map[string]any{"reason": reason, "id": rule}
	if len(appliesTo) > 0 {
		entry["applies_to"] = appliesTo
	}
	var rules []any
	if cur, ok := r.GetMetadata(jsii.String("cdk_nag")).(map[string]any); ok {
		if l, ok := cur["rules_to_suppress"].([]any); ok {
			rules = l
		}
	}
	r.AddMetadata(jsii.String("cdk_nag"), map[string]any{"rules_to_suppress": append(rules, entry)})
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
