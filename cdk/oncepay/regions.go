package oncepay

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Across Regions (docs/regions.md, docs/mechanism.md#seed-part-9): one stack per Region, the
// first Region the primary. The primary's stack defines what the Regions
// share: the claim and home tables as DynamoDB global tables (a replica in
// every other Region) and the ledger's Aurora global database; each other
// Region's stack holds a secondary of that database and refers to the
// global tables by name. The stacks share physical names, never CloudFormation
// references: a reference across Regions would need CDK's cross-Region
// custom resources (a Node.js function per stack) and a fixed account.

// Context keys of the mode (cdk/main.go).
const (
	// ContextRegions lists the Regions, comma-separated, the first the
	// primary; absent, the app makes one stack in whatever Region the CLI
	// targets, as before.
	ContextRegions = "oncepay:regions"
	// ContextRegionURLs pairs each Region with its API's base URL:
	// region=https://…, comma-separated (required with ContextRegions).
	ContextRegionURLs = "oncepay:regionUrls"
	// ContextClaims is the claim table's consistency across Regions:
	// ClaimsEventual (default) or ClaimsStrong.
	ContextClaims = "oncepay:claims"
	// ContextWitnessRegion is the MRSC witness with two Regions and
	// ClaimsStrong.
	ContextWitnessRegion = "oncepay:witnessRegion"
)

// ClaimsConsistency is the claim table's mode across Regions.
type ClaimsConsistency string

const (
	// ClaimsEventual is a multi-Region eventually consistent global table
	// (MREC): a condition is checked against the local replica and the last
	// writer wins, so the api's home routing keeps a caller's claims in one
	// Region. The TTL stays.
	ClaimsEventual ClaimsConsistency = "eventual"
	// ClaimsStrong is DynamoDB multi-Region strong consistency (MRSC): a
	// condition is checked against the latest version in any Region. Three
	// Regions, or two and a witness; no TTL (the read path's expires_at <
	// now decides; nothing here deletes expired records) and no
	// transactions (the claim store makes none).
	ClaimsStrong ClaimsConsistency = "strong"
)

// Regions places a stack in a deployment across Regions; nil in StackProps
// is one Region, as before. NewRegionStacks makes the stacks of all of them.
type Regions struct {
	// Regions of the deployment (ContextRegions), the first the primary:
	// the global tables and the global cluster are defined in its stack,
	// its cluster is the ledger's writer, and it is the default home.
	Regions []string
	// Here is this stack's Region, one of Regions.
	Here string
	// URLs maps every Region to its API's https base URL
	// (ContextRegionURLs): the api's 421 names the home's.
	URLs map[string]string
	// Claims: ClaimsEventual ("" is eventual) or ClaimsStrong.
	Claims ClaimsConsistency
	// Witness is the MRSC witness Region (ContextWitnessRegion).
	Witness string
	// Name starts the physical names the Regions' stacks share, which a
	// standby finds by name: <Name>-claims, <Name>-homes (tables) and
	// <name>-ledger (the global cluster). "" is the profile's stack name.
	Name string
}

// regionPattern is the shape of a Region name (us-east-1, us-gov-west-1,
// eusc-de-east-1): a typo fails the synth, not the deploy.
var regionPattern = regexp.MustCompile(`^[a-z]{2,4}(-[a-z]+)+-[0-9]{1,2}$`)

// namePattern: letters, digits and single hyphens, starting with a letter,
// so <name>-ledger is a valid global cluster identifier (at most 63
// characters) and <Name>-claims a valid table name.
var namePattern = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9]|-[A-Za-z0-9])*$`)

// maxNameLength keeps <name>-ledger within 63 characters.
const maxNameLength = 56

// Primary is the first Region.
func (r *Regions) Primary() string { return r.Regions[0] }

// IsPrimary reports whether this stack is the primary's.
func (r *Regions) IsPrimary() bool { return r.Here == r.Primary() }

// Standbys are the Regions after the first.
func (r *Regions) Standbys() []string { return r.Regions[1:] }

// Strong reports whether the claim table is MRSC.
func (r *Regions) Strong() bool { return r.Claims == ClaimsStrong }

// ClaimsTableName is the claim table's name in every Region.
func (r *Regions) ClaimsTableName() string { return r.Name + "-claims" }

// HomesTableName is the home record table's name in every Region.
func (r *Regions) HomesTableName() string { return r.Name + "-homes" }

// GlobalClusterID is the ledger's global cluster identifier (RDS stores it
// in lower case; so does the template, so a redeploy sees no change).
func (r *Regions) GlobalClusterID() string { return strings.ToLower(r.Name) + "-ledger" }

// URLsJSON is ONCEPAY_REGION_URLS: the URLs as a JSON object (keys sorted).
func (r *Regions) URLsJSON() string {
	b, err := json.Marshal(r.URLs)
	if err != nil {
		panic(err) // a map of strings always marshals
	}
	return string(b)
}

// Validate checks the Regions, their URLs and the claim table's mode; each
// error names the context key to change.
func (r *Regions) Validate() error {
	if len(r.Regions) < 2 {
		return fmt.Errorf("oncepay: %s needs at least two Regions (got %q): for one Region leave it out", ContextRegions, strings.Join(r.Regions, ","))
	}
	for i, region := range r.Regions {
		if !regionPattern.MatchString(region) {
			return fmt.Errorf("oncepay: %s: %q is not a Region name (like us-east-1)", ContextRegions, region)
		}
		if slices.Index(r.Regions, region) != i {
			return fmt.Errorf("oncepay: %s names %s twice", ContextRegions, region)
		}
	}
	if r.Here != "" && !slices.Contains(r.Regions, r.Here) {
		return fmt.Errorf("oncepay: the stack's Region %s is not one of %s (%s)", r.Here, ContextRegions, strings.Join(r.Regions, ","))
	}
	if !namePattern.MatchString(r.Name) || len(r.Name) > maxNameLength {
		return fmt.Errorf("oncepay: across Regions: the name %q must be letters, digits and single hyphens, starting with a letter, at most %d characters: it names the global tables and the global cluster", r.Name, maxNameLength)
	}
	for region, raw := range r.URLs {
		if !slices.Contains(r.Regions, region) {
			return fmt.Errorf("oncepay: %s gives a URL for %s, which is not one of %s (%s)", ContextRegionURLs, region, ContextRegions, strings.Join(r.Regions, ","))
		}
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("oncepay: %s: %s=%s is not an https base URL (https://host[/path], no query): the api sends callers there", ContextRegionURLs, region, raw)
		}
	}
	for _, region := range r.Regions {
		if _, ok := r.URLs[region]; !ok {
			return fmt.Errorf("oncepay: %s has no URL for %s: every Region needs its API's base URL (region=https://…), which the api's 421 names", ContextRegionURLs, region)
		}
	}
	switch r.Claims {
	case "", ClaimsEventual:
		if r.Witness != "" {
			return fmt.Errorf("oncepay: %s is only for %s=%s (a witness serves DynamoDB's strong consistency; the claims are %s)", ContextWitnessRegion, ContextClaims, ClaimsStrong, ClaimsEventual)
		}
	case ClaimsStrong:
		if r.Witness != "" {
			if !regionPattern.MatchString(r.Witness) {
				return fmt.Errorf("oncepay: %s: %q is not a Region name", ContextWitnessRegion, r.Witness)
			}
			if slices.Contains(r.Regions, r.Witness) {
				return fmt.Errorf("oncepay: %s %s is one of %s: a witness holds no replica, so it must be a third Region", ContextWitnessRegion, r.Witness, ContextRegions)
			}
		}
		switch n := len(r.Regions); {
		case n == 3 && r.Witness != "":
			return fmt.Errorf("oncepay: %s=%s (DynamoDB multi-Region strong consistency) with three Regions takes no %s: it needs three replicas, or two and a witness", ContextClaims, ClaimsStrong, ContextWitnessRegion)
		case n == 2 && r.Witness == "":
			return fmt.Errorf("oncepay: %s=%s (DynamoDB multi-Region strong consistency) needs exactly three Regions, or two and %s: got two (%s) and no witness", ContextClaims, ClaimsStrong, ContextWitnessRegion, strings.Join(r.Regions, ","))
		case n != 2 && n != 3:
			return fmt.Errorf("oncepay: %s=%s (DynamoDB multi-Region strong consistency) needs exactly three Regions, or two and %s: got %d", ContextClaims, ClaimsStrong, ContextWitnessRegion, n)
		}
	default:
		return fmt.Errorf("oncepay: %s must be %s or %s, got %q", ContextClaims, ClaimsEventual, ClaimsStrong, r.Claims)
	}
	return nil
}

// checkRegionBound refuses what one Region's stack cannot share with
// another: a resource named by an ARN lives in one Region, and a Cognito
// user pool too.
func (p *StackProps) checkRegionBound() error {
	refuse := func(key string, set bool, why string) error {
		if set {
			return fmt.Errorf("oncepay: %s cannot be used with %s: %s; not built across Regions yet (docs/regions.md)", key, ContextRegions, why)
		}
		return nil
	}
	for _, err := range []error{
		refuse(ContextPSPKeySecretArn, p.Psp.KeySecret.Arn != "", "a secret's ARN names one Region; leave each Region's stack its own placeholder secret"),
		refuse(ContextWebhookSecretArn, p.Psp.WebhookSecret.Arn != "", "a secret's ARN names one Region; leave each Region's stack its own placeholder secret"),
		refuse(ContextAlbCertificateArn, p.Alb != nil, "an ACM certificate lives in one Region"),
		refuse(ContextPlatformApplicationArns, len(p.PlatformApplicationArns) > 0, "an SNS platform application lives in one Region, and the worker publishes in its own"),
	} {
		if err != nil {
			return err
		}
	}
	if p.Auth.Issuer == "" {
		return fmt.Errorf("oncepay: %s needs %s and %s: a Cognito user pool lives in one Region, so the other Regions' APIs would refuse its tokens, and a failover would leave every caller without a login; use an issuer all Regions trust", ContextRegions, ContextJWTIssuer, ContextJWTAudience)
	}
	return nil
}

// regionsFromContext reads the mode's context keys; nil without
// ContextRegions.
func regionsFromContext(get map[string]string, list func(string) []string, profile Profile) (*Regions, error) {
	if get[ContextRegions] == "" {
		for _, k := range []string{ContextRegionURLs, ContextClaims, ContextWitnessRegion} {
			if get[k] != "" {
				return nil, fmt.Errorf("oncepay: %s is set without %s", k, ContextRegions)
			}
		}
		return nil, nil
	}
	r := &Regions{
		Regions: list(get[ContextRegions]),
		URLs:    map[string]string{},
		Claims:  ClaimsConsistency(get[ContextClaims]),
		Witness: get[ContextWitnessRegion],
		Name:    profile.StackName(),
	}
	if r.Claims == "" {
		r.Claims = ClaimsEventual
	}
	for _, pair := range list(get[ContextRegionURLs]) {
		region, u, ok := strings.Cut(pair, "=")
		region, u = strings.TrimSpace(region), strings.TrimSpace(u)
		if !ok || region == "" || u == "" {
			return nil, fmt.Errorf("oncepay: %s: %q is not region=https://…", ContextRegionURLs, pair)
		}
		if _, dup := r.URLs[region]; dup {
			return nil, fmt.Errorf("oncepay: %s gives %s two URLs", ContextRegionURLs, region)
		}
		r.URLs[region] = u
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r, nil
}

// NewRegionStacks makes one stack per Region of props.Regions, named
// <Name>-<region>, each with Env.Region and props' account (nil: none; the
// stacks need no account, as they share names, not references). A
// standby's stack depends on the primary's, so `cdk deploy --all` deploys
// the primary first: its global cluster must exist before a secondary
// joins it.
func NewRegionStacks(scope constructs.Construct, props *StackProps) []*Stack {
	if props == nil || props.Regions == nil {
		panic("oncepay: NewRegionStacks needs StackProps.Regions")
	}
	shared := *props.Regions
	if shared.Name == "" {
		profile, err := ParseProfile(string(props.Profile))
		if err != nil {
			panic(err)
		}
		shared.Name = profile.StackName()
	}
	if err := shared.Validate(); err != nil {
		panic(err)
	}
	var stacks []*Stack
	for _, region := range shared.Regions {
		p := *props
		here := shared
		here.Here = region
		p.Regions = &here
		env := awscdk.Environment{Region: jsii.String(region)}
		if props.Env != nil {
			env.Account = props.Env.Account
		}
		p.Env = &env
		role := "standby"
		if here.IsPrimary() {
			role = "primary"
		}
		if props.Description != nil {
			p.Description = jsii.String(fmt.Sprintf("%s, %s: %s of %s", *props.Description, region, role, strings.Join(shared.Regions, ",")))
		}
		s := NewStack(scope, shared.Name+"-"+region, &p)
		if len(stacks) > 0 {
			s.AddStackDependency(stacks[0].Stack, jsii.String("its ledger is a secondary of the primary's global cluster, and its functions use the global tables the primary's stack defines"))
		}
		stacks = append(stacks, s)
	}
	return stacks
}

// GlobalTableProps configures a table the Regions share. Its encryption is
// DynamoDB's AWS-managed key (aws/dynamodb) in every Region: a
// customer-managed key would be needed in each replica's Region before the
// primary's stack creates the replica, while that Region's stack can only
// be deployed after the primary's (its ledger joins the primary's global
// cluster), so the keys would need a third stack per Region.
type GlobalTableProps struct {
	// Protection: RemovalPolicy and DeletionProtection (every replica);
	// EncryptionKey must be nil (above).
	Protection
	Regions *Regions
	// Override sees the final props before the primary's stack creates the
	// table (a standby's stack creates nothing).
	Override func(*awsdynamodb.TablePropsV2)
}

// newGlobalTable is the table named name: in the primary's stack a TableV2
// with a replica in every other Region, in a standby's the local replica
// by name. ttl and strong apply to the primary's.
func newGlobalTable(scope constructs.Construct, what, name, pk string, props *GlobalTableProps, ttl, strong bool) awsdynamodb.ITable {
	if props == nil || props.Regions == nil || props.Regions.Here == "" {
		panic(fmt.Sprintf("oncepay: %s needs props.Regions with Here set", what))
	}
	if props.EncryptionKey != nil {
		panic(fmt.Sprintf("oncepay: %s: a global table here uses DynamoDB's AWS-managed key (a customer-managed key needs a key per replica Region, made before the primary's stack; docs/regions.md): leave EncryptionKey nil, or set Encryption in Override with the replica key ARNs", what))
	}
	r := props.Regions
	if !r.IsPrimary() {
		return awsdynamodb.Table_FromTableName(scope, jsii.String("Table"), jsii.String(name))
	}
	var replicas []*awsdynamodb.ReplicaTableProps
	for _, region := range r.Standbys() {
		// PITR and deletion protection are per replica; CDK copies the
		// table's into each.
		replicas = append(replicas, &awsdynamodb.ReplicaTableProps{Region: jsii.String(region)})
	}
	tp := &awsdynamodb.TablePropsV2{
		TableName:    jsii.String(name),
		PartitionKey: &awsdynamodb.Attribute{Name: jsii.String(pk), Type: awsdynamodb.AttributeType_STRING},
		Billing:      awsdynamodb.Billing_OnDemand(nil),
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		Encryption:         awsdynamodb.TableEncryptionV2_AwsManagedKey(),
		RemovalPolicy:      props.removalPolicy(),
		DeletionProtection: jsii.Bool(props.deletionProtection()),
		Replicas:           &replicas,
	}
	if ttl {
		tp.TimeToLiveAttribute = jsii.String(ExpiresAtAttribute)
	}
	if strong {
		tp.MultiRegionConsistency = awsdynamodb.MultiRegionConsistency_STRONG
		if r.Witness != "" {
			tp.WitnessRegion = jsii.String(r.Witness)
		}
	}
	if props.Override != nil {
		props.Override(tp)
	}
	if tp.MultiRegionConsistency == awsdynamodb.MultiRegionConsistency_STRONG && tp.TimeToLiveAttribute != nil {
		panic(fmt.Sprintf("oncepay: %s: a table with multi-Region strong consistency (MRSC) supports no TTL; drop TimeToLiveAttribute (the claim store's read path treats expires_at < now as expired)", what))
	}
	return awsdynamodb.NewTableV2(scope, jsii.String("Table"), tp)
}

// NewGlobalClaimTable is the claim table across Regions: a global table
// named Regions.ClaimsTableName(), eventual (with its TTL) or MRSC (with
// the witness, without TTL) by Regions.Claims. The api's grants are the
// same as on a one-Region table; the key is AWS-managed (AwsManagedKey).
func NewGlobalClaimTable(scope constructs.Construct, id string, props *GlobalTableProps) *ClaimTable {
	c := &ClaimTable{Construct: constructs.NewConstruct(scope, jsii.String(id)), AwsManagedKey: true}
	if props == nil || props.Regions == nil {
		panic("oncepay: NewGlobalClaimTable needs props.Regions")
	}
	r := props.Regions
	c.Table = newGlobalTable(c.Construct, "NewGlobalClaimTable", r.ClaimsTableName(), ClaimPartitionKey, props, !r.Strong(), r.Strong())
	return c
}

// HomePartitionKey is the home record's key: the caller (the token's sub,
// or "*" for the deployment's default home). Its other attributes are
// region (S) and version (N), written by internal/home.
const HomePartitionKey = "caller"

// HomeEveryone is the default home record's key (internal/home.Everyone).
const HomeEveryone = "*"

// HomeTable holds each caller's home Region (internal/home): a global
// table with an eventually consistent replica in every Region, whatever
// the claim table's mode. A move is a conditional put of version + 1 in
// the Region that takes over; the api reads the record on every request.
// The stack writes no item: without a record, a caller is homed in
// ONCEPAY_HOME_DEFAULT (the primary).
type HomeTable struct {
	constructs.Construct
	Table   awsdynamodb.ITable
	Regions *Regions
}

// NewHomeTable creates the home record table (the primary's stack) or
// refers to the local replica (a standby's).
func NewHomeTable(scope constructs.Construct, id string, props *GlobalTableProps) *HomeTable {
	if props == nil || props.Regions == nil {
		panic("oncepay: NewHomeTable needs props.Regions")
	}
	c := &HomeTable{Construct: constructs.NewConstruct(scope, jsii.String(id)), Regions: props.Regions}
	c.Table = newGlobalTable(c.Construct, "NewHomeTable", props.Regions.HomesTableName(), HomePartitionKey, props, false, false)
	return c
}

// Env is what a function that routes by home reads: the table, the default
// home and every Region's URL.
func (c *HomeTable) Env() map[string]*string {
	return map[string]*string{
		EnvHomesTable:  c.Table.TableName(),
		EnvHomeDefault: jsii.String(c.Regions.Primary()),
		EnvRegionURLs:  jsii.String(c.Regions.URLsJSON()),
	}
}

// GrantReadDefault lets fn (the resolver, the worker) read the default home
// record ("*") alone, and sets the table and the default home in its
// environment: a sweep whose ledger is read-only or does not answer asks
// whether its Region homes the callers (HomeLedgerReadOnly, a standby's
// wait). The condition keeps every caller's own
// record out of its reach.
func (c *HomeTable) GrantReadDefault(fn *GoFunction) {
	r := fn.Role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("dynamodb:GetItem"),
		Resources: &[]*string{c.Table.TableArn()},
		Conditions: &map[string]any{
			"ForAllValues:StringEquals": map[string]any{"dynamodb:LeadingKeys": []string{HomeEveryone}},
		},
	}))
	if r == nil || r.StatementAdded == nil || !*r.StatementAdded {
		panic(fmt.Sprintf("oncepay: function %s: its role does not take the home table's read (import the role with Mutable true)", fn.Name))
	}
	fn.SetEnv(map[string]*string{
		EnvHomesTable:  c.Table.TableName(),
		EnvHomeDefault: jsii.String(c.Regions.Primary()),
	})
}

// GrantRead lets fn (the api) read records (two GetItems per request: the
// caller's and the default one) and sets its Env. It may not write one: a
// misrouted request must not move its caller. No function moves callers: a
// failover's moves are an operator's (cmd/failover, with the operator's
// credentials; docs/regions.md).
func (c *HomeTable) GrantRead(fn *GoFunction) {
	fn.Grant([]string{"dynamodb:GetItem"}, c.Table.TableArn())
	fn.SetEnv(c.Env())
}
