package oncepay_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay"
	"github.com/oncepay/oncepay/cdk/oncepay/nag"
)

// The deployment across Regions the tests synthesize: two Regions, their
// API URLs, and the external issuer the mode requires. None is deployed.
var (
	twoRegions  = []string{"us-east-1", "us-west-2"}
	regionURLs  = map[string]string{"us-east-1": "https://pay-use1.example.com", "us-west-2": "https://pay-usw2.example.com/api"}
	mrscRegions = []string{"us-east-1", "us-east-2"}
	mrscWitness = "us-west-2"
	mrscURLs    = map[string]string{"us-east-1": "https://pay-use1.example.com", "us-east-2": "https://pay-use2.example.com"}
)

const (
	regionsIssuer   = "https://login.example.com/"
	regionsAudience = "payments-app"
)

// urlsContext is oncepay:regionUrls for urls: region=url pairs.
func urlsContext(urls map[string]string) string {
	var pairs []string
	for _, r := range slices.Sorted(maps.Keys(urls)) {
		pairs = append(pairs, r+"="+urls[r])
	}
	return strings.Join(pairs, ",")
}

// regionsContext is the context of a deployment across regions.
func regionsContext(regions []string, urls map[string]string) map[string]any {
	return map[string]any{
		oncepay.ContextRegions:     strings.Join(regions, ","),
		oncepay.ContextRegionURLs:  urlsContext(urls),
		oncepay.ContextJWTIssuer:   regionsIssuer,
		oncepay.ContextJWTAudience: regionsAudience,
	}
}

// regionStacks is one synth of the app across Regions: a stack per Region,
// in the order of oncepay:regions.
type regionStacks struct {
	regions []string
	stacks  []*synthesized
}

func (r *regionStacks) primary() *synthesized            { return r.stacks[0] }
func (r *regionStacks) conf() *oncepay.Regions           { return r.primary().stack.Regions }
func (r *regionStacks) each() []*synthesized             { return r.stacks }
func (s *synthesized) region() string                    { return s.stack.Regions.Here }
func (s *synthesized) isPrimary() bool                   { return s.stack.Regions.IsPrimary() }
func (s *synthesized) String() string                    { return *s.stack.StackName() }
func (s *synthesized) homesTable() constructs.IConstruct { return s.stack.Data.Homes.Table }

var regionsCache = map[string]*regionStacks{}

// synthRegions builds the app across Regions as cdk/main.go does (context
// -> props -> NewRegionStacks, nag packs on the app), once per name, and
// writes each stack's template as <name>-<region> for make test-cfn.
func synthRegions(t *testing.T, name string, profile oncepay.Profile, extra map[string]any) *regionStacks {
	t.Helper()
	if r, ok := regionsCache[name]; ok {
		return r
	}
	ctx := cdkContext(t, profile)
	maps.Copy(*ctx, extra)
	app := awscdk.NewApp(&awscdk.AppProps{Context: ctx})
	props, err := oncepay.StackPropsFromContext(app)
	if err != nil {
		t.Fatal(err)
	}
	if props.Regions == nil {
		t.Fatal("the context made no deployment across Regions")
	}
	var stacks []*oncepay.Stack
	check(t, "construct", func() { stacks = oncepay.NewRegionStacks(app, props) })
	if len(stacks) == 0 {
		t.FailNow()
	}
	nag.AddPacks(app)
	out := &regionStacks{regions: props.Regions.Regions}
	for _, st := range stacks {
		s := &synthesized{stack: st}
		check(t, "synthesize "+*st.StackName(), func() {
			s.tmpl = assertions.Template_FromStack(st.Stack, nil)
			s.json = *s.tmpl.ToJSON()
		})
		if s.tmpl == nil {
			t.FailNow()
		}
		writeTemplate(t, name+"-"+s.region(), s.json)
		out.stacks = append(out.stacks, s)
	}
	regionsCache[name] = out
	return out
}

func synthTwoRegions(t *testing.T) *regionStacks {
	t.Helper()
	return synthRegions(t, "regions", oncepay.ProfileSandbox, regionsContext(twoRegions, regionURLs))
}

func synthTwoRegionsProd(t *testing.T) *regionStacks {
	t.Helper()
	ctx := regionsContext(twoRegions, regionURLs)
	ctx[oncepay.ContextAvailabilityZoneIds] = prodRegionsAZIds
	return synthRegions(t, "regions-prod", oncepay.ProfileProd, ctx)
}

// synthStrongRegions: MRSC claims in two Regions and a witness.
func synthStrongRegions(t *testing.T) *regionStacks {
	t.Helper()
	ctx := regionsContext(mrscRegions, mrscURLs)
	ctx[oncepay.ContextClaims] = string(oncepay.ClaimsStrong)
	ctx[oncepay.ContextWitnessRegion] = mrscWitness
	return synthRegions(t, "regions-strong", oncepay.ProfileSandbox, ctx)
}

// TestRegionsContext: what each context key of the mode refuses, with a
// message that names the key to change, and what it accepts.
func TestRegionsContext(t *testing.T) {
	base := func(mod func(map[string]any)) map[string]any {
		ctx := regionsContext(twoRegions, regionURLs)
		mod(ctx)
		return ctx
	}
	cases := []struct {
		name string
		ctx  map[string]any
		want string
	}{
		{"strong with two Regions and no witness", base(func(c map[string]any) { c[oncepay.ContextClaims] = "strong" }),
			"needs exactly three Regions, or two and " + oncepay.ContextWitnessRegion},
		{"strong with three Regions and a witness", base(func(c map[string]any) {
			c[oncepay.ContextRegions] = "us-east-1,us-east-2,us-west-2"
			c[oncepay.ContextRegionURLs] = "us-east-1=https://a.example.com,us-east-2=https://b.example.com,us-west-2=https://c.example.com"
			c[oncepay.ContextClaims] = "strong"
			c[oncepay.ContextWitnessRegion] = "us-west-1"
		}), "takes no " + oncepay.ContextWitnessRegion},
		{"strong with four Regions", base(func(c map[string]any) {
			c[oncepay.ContextRegions] = "us-east-1,us-east-2,us-west-2,us-west-1"
			c[oncepay.ContextRegionURLs] = "us-east-1=https://a.example.com,us-east-2=https://b.example.com,us-west-2=https://c.example.com,us-west-1=https://d.example.com"
			c[oncepay.ContextClaims] = "strong"
		}), "got 4"},
		{"a witness among the Regions", base(func(c map[string]any) {
			c[oncepay.ContextClaims] = "strong"
			c[oncepay.ContextWitnessRegion] = twoRegions[1]
		}), "must be a third Region"},
		{"a witness with eventual claims", base(func(c map[string]any) { c[oncepay.ContextWitnessRegion] = "us-east-2" }),
			oncepay.ContextWitnessRegion + " is only for"},
		{"an unknown claims mode", base(func(c map[string]any) { c[oncepay.ContextClaims] = "linearizable" }),
			oncepay.ContextClaims + " must be eventual or strong"},
		{"a missing URL", base(func(c map[string]any) {
			c[oncepay.ContextRegionURLs] = twoRegions[0] + "=" + regionURLs[twoRegions[0]]
		}), "has no URL for " + twoRegions[1]},
		{"a non-https URL", base(func(c map[string]any) {
			c[oncepay.ContextRegionURLs] = urlsContext(map[string]string{twoRegions[0]: regionURLs[twoRegions[0]], twoRegions[1]: "http://pay-usw2.example.com"})
		}), "is not an https base URL"},
		{"a URL without a host", base(func(c map[string]any) {
			c[oncepay.ContextRegionURLs] = urlsContext(map[string]string{twoRegions[0]: regionURLs[twoRegions[0]], twoRegions[1]: "https:///payments"})
		}), "is not an https base URL"},
		{"a URL for a Region not deployed", base(func(c map[string]any) {
			c[oncepay.ContextRegionURLs] = urlsContext(regionURLs) + ",eu-west-1=https://pay-euw1.example.com"
		}), "eu-west-1, which is not one of " + oncepay.ContextRegions},
		{"a pair without =", base(func(c map[string]any) { c[oncepay.ContextRegionURLs] = "https://pay.example.com" }),
			"is not region=https://"},
		{"two URLs for one Region", base(func(c map[string]any) {
			c[oncepay.ContextRegionURLs] = urlsContext(regionURLs) + "," + twoRegions[0] + "=https://other.example.com"
		}), "gives " + twoRegions[0] + " two URLs"},
		{"one Region", base(func(c map[string]any) {
			c[oncepay.ContextRegions] = twoRegions[0]
			c[oncepay.ContextRegionURLs] = twoRegions[0] + "=" + regionURLs[twoRegions[0]]
		}), "needs at least two Regions"},
		{"a Region twice", base(func(c map[string]any) { c[oncepay.ContextRegions] = twoRegions[0] + "," + twoRegions[0] }),
			"names " + twoRegions[0] + " twice"},
		{"a Region name with a typo", base(func(c map[string]any) { c[oncepay.ContextRegions] = twoRegions[0] + ",us-west2" }),
			`"us-west2" is not a Region name`},
		{"URLs without Regions", base(func(c map[string]any) { delete(c, oncepay.ContextRegions) }),
			oncepay.ContextRegionURLs + " is set without " + oncepay.ContextRegions},
		{"a witness without Regions", map[string]any{oncepay.ContextWitnessRegion: "us-east-2"},
			oncepay.ContextWitnessRegion + " is set without " + oncepay.ContextRegions},
		{"the stack's own user pool", base(func(c map[string]any) {
			delete(c, oncepay.ContextJWTIssuer)
			delete(c, oncepay.ContextJWTAudience)
		}), "needs " + oncepay.ContextJWTIssuer},
		{"an imported PSP key secret", base(func(c map[string]any) {
			c[oncepay.ContextPSPKeySecretArn] = importedKeySecret
			c[oncepay.ContextPSPKeySecretKmsKey] = oncepay.AwsManagedKey
		}), oncepay.ContextPSPKeySecretArn + " cannot be used with " + oncepay.ContextRegions},
		{"an imported webhook secret", base(func(c map[string]any) {
			c[oncepay.ContextWebhookSecretArn] = importedWebhookSecret
			c[oncepay.ContextWebhookSecretKmsKey] = oncepay.AwsManagedKey
		}), oncepay.ContextWebhookSecretArn + " cannot be used with " + oncepay.ContextRegions},
		{"the ALB's certificate", base(func(c map[string]any) {
			c[oncepay.ContextAlbCertificateArn] = albCertificate
			c[oncepay.ContextAlbCognitoDomainPrefix] = "oncepay-test"
			delete(c, oncepay.ContextJWTIssuer) // the ALB's authenticate action takes no external issuer
			delete(c, oncepay.ContextJWTAudience)
		}), oncepay.ContextAlbCertificateArn + " cannot be used with " + oncepay.ContextRegions},
		{"platform applications", base(func(c map[string]any) { c[oncepay.ContextPlatformApplicationArns] = pushApp }),
			oncepay.ContextPlatformApplicationArns + " cannot be used with " + oncepay.ContextRegions},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := cdkContext(t, oncepay.ProfileSandbox)
			maps.Copy(*ctx, c.ctx)
			_, err := oncepay.StackPropsFromContext(awscdk.NewApp(&awscdk.AppProps{Context: ctx}))
			if err == nil {
				t.Fatalf("accepted; want an error saying %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("refused with %q; want it to say %q", err, c.want)
			}
		})
	}

	// What the mode accepts: eventual in two Regions (the default), strong
	// in three, or in two with a witness.
	three := []string{"us-east-1", "us-east-2", "us-west-2"}
	threeURLs := map[string]string{}
	for _, r := range three {
		threeURLs[r] = "https://pay-" + r + ".example.com"
	}
	for name, c := range map[string]struct {
		ctx     map[string]any
		regions []string
		urls    map[string]string
		claims  oncepay.ClaimsConsistency
		witness string
	}{
		"eventual by default": {regionsContext(twoRegions, regionURLs), twoRegions, regionURLs, oncepay.ClaimsEventual, ""},
		"strong in three Regions": {func() map[string]any {
			c := regionsContext(three, threeURLs)
			c[oncepay.ContextClaims] = "strong"
			return c
		}(), three, threeURLs, oncepay.ClaimsStrong, ""},
		"strong in two and a witness": {func() map[string]any {
			c := regionsContext(mrscRegions, mrscURLs)
			c[oncepay.ContextClaims] = "strong"
			c[oncepay.ContextWitnessRegion] = mrscWitness
			return c
		}(), mrscRegions, mrscURLs, oncepay.ClaimsStrong, mrscWitness},
	} {
		t.Run("accepts "+name, func(t *testing.T) {
			ctx := cdkContext(t, oncepay.ProfileSandbox)
			maps.Copy(*ctx, c.ctx)
			p, err := oncepay.StackPropsFromContext(awscdk.NewApp(&awscdk.AppProps{Context: ctx}))
			if err != nil {
				t.Fatal(err)
			}
			r := p.Regions
			if r == nil || !slices.Equal(r.Regions, c.regions) || !maps.Equal(r.URLs, c.urls) || r.Claims != c.claims || r.Witness != c.witness {
				t.Errorf("Regions %+v; want %v %v %s witness %q", r, c.regions, c.urls, c.claims, c.witness)
			}
			if r != nil && r.Name != oncepay.ProfileSandbox.StackName() {
				t.Errorf("Regions.Name %q, want the profile's stack name %q", r.Name, oncepay.ProfileSandbox.StackName())
			}
		})
	}

	// Without oncepay:regions nothing changes: no Regions in the props.
	p, err := oncepay.StackPropsFromContext(awscdk.NewApp(&awscdk.AppProps{Context: cdkContext(t, oncepay.ProfileSandbox)}))
	if err != nil || p.Regions != nil {
		t.Errorf("one Region: Regions %+v, err %v", p.Regions, err)
	}
}

// TestTheRegionsStacks: one stack per Region, named after the profile's
// stack and the Region, pinned to the Region and to no account; the
// standbys depend on the primary, which the CLI then deploys first.
func TestTheRegionsStacks(t *testing.T) {
	for _, rs := range []*regionStacks{synthTwoRegions(t), synthTwoRegionsProd(t)} {
		if len(rs.stacks) != len(rs.regions) {
			t.Fatalf("%d stacks for %d Regions", len(rs.stacks), len(rs.regions))
		}
		for i, s := range rs.each() {
			st := s.stack.Stack
			if want := s.stack.Profile.StackName() + "-" + rs.regions[i]; *st.StackName() != want {
				t.Errorf("stack %d is %s, want %s", i, *st.StackName(), want)
			}
			if *st.Region() != rs.regions[i] || s.region() != rs.regions[i] {
				t.Errorf("%s: Region %s (Here %s), want %s", s, *st.Region(), s.region(), rs.regions[i])
			}
			if !*awscdk.Token_IsUnresolved(st.Account()) {
				t.Errorf("%s: pinned to account %s; the mode needs none", s, *st.Account())
			}
			var deps []string
			for _, d := range *st.Dependencies() {
				deps = append(deps, *d.StackName())
			}
			var want []string
			if i > 0 {
				want = []string{*rs.primary().stack.StackName()}
			}
			if !slices.Equal(deps, want) {
				t.Errorf("%s depends on %v, want %v", s, deps, want)
			}
			if s.isPrimary() != (i == 0) {
				t.Errorf("%s: primary %v", s, s.isPrimary())
			}
		}
	}
}

// globalTables: logical id -> properties of the template's global tables.
func (s *synthesized) globalTables() map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range s.resourcesOfType("AWS::DynamoDB::GlobalTable") {
		out[id], _ = r["Properties"].(map[string]any)
	}
	return out
}

// replicaRegions of a global table's properties, sorted.
func replicaRegions(p map[string]any) []string {
	var out []string
	for _, r := range p["Replicas"].([]any) {
		out = append(out, r.(map[string]any)["Region"].(string))
	}
	sort.Strings(out)
	return out
}

// TestTheGlobalTables: the primary's stack defines the claim table and the
// home record table as global tables with a replica in every Region,
// point-in-time recovery and the profile's deletion protection in each,
// DynamoDB's AWS-managed key; eventual claims keep their TTL. A standby's
// stack defines no table of its own for either.
func TestTheGlobalTables(t *testing.T) {
	for _, rs := range []*regionStacks{synthTwoRegions(t), synthTwoRegionsProd(t)} {
		r := rs.conf()
		p := rs.primary()
		tables := p.globalTables()
		claimsID, homesID := p.logicalID(t, p.stack.Data.Claims.Table), p.logicalID(t, p.homesTable())
		if len(tables) != 2 || tables[claimsID] == nil || tables[homesID] == nil {
			t.Fatalf("%s: global tables %v; want the claim table %s and the home table %s", p, slices.Collect(maps.Keys(tables)), claimsID, homesID)
		}
		all := slices.Sorted(slices.Values(rs.regions))
		for id, want := range map[string]struct{ name, key string }{
			claimsID: {r.ClaimsTableName(), oncepay.ClaimPartitionKey},
			homesID:  {r.HomesTableName(), oncepay.HomePartitionKey},
		} {
			props := tables[id]
			if props["TableName"] != want.name {
				t.Errorf("%s: %s is named %v, want %s (the standbys find it by name)", p, id, props["TableName"], want.name)
			}
			if got := replicaRegions(props); !slices.Equal(got, all) {
				t.Errorf("%s: %s has replicas in %v, want %v", p, id, got, all)
			}
			// The key alone: no sort key.
			if !jsonEqual(props["KeySchema"], []any{map[string]any{"AttributeName": want.key, "KeyType": "HASH"}}) ||
				!jsonEqual(props["AttributeDefinitions"], []any{map[string]any{"AttributeName": want.key, "AttributeType": "S"}}) {
				t.Errorf("%s: %s key %s %s, want %s (S) alone", p, id, show(props["KeySchema"]), show(props["AttributeDefinitions"]), want.key)
			}
			for _, rep := range props["Replicas"].([]any) {
				rep := rep.(map[string]any)
				if !jsonEqual(rep["PointInTimeRecoverySpecification"], map[string]any{"PointInTimeRecoveryEnabled": true}) {
					t.Errorf("%s: %s replica %v: PITR %s", p, id, rep["Region"], show(rep["PointInTimeRecoverySpecification"]))
				}
				if rep["DeletionProtectionEnabled"] != p.stack.Profile.DeletionProtection() {
					t.Errorf("%s: %s replica %v: deletion protection %v, the profile's is %v", p, id, rep["Region"], rep["DeletionProtectionEnabled"], p.stack.Profile.DeletionProtection())
				}
				if rep["SSESpecification"] != nil {
					t.Errorf("%s: %s replica %v has a key of its own: %s", p, id, rep["Region"], show(rep["SSESpecification"]))
				}
			}
			if !jsonEqual(props["SSESpecification"], map[string]any{"SSEEnabled": true, "SSEType": "KMS"}) {
				t.Errorf("%s: %s encryption %s, want the AWS-managed KMS key", p, id, show(props["SSESpecification"]))
			}
			if props["MultiRegionConsistency"] != nil || props["GlobalTableWitnesses"] != nil {
				t.Errorf("%s: %s is not eventually consistent: %v %v", p, id, props["MultiRegionConsistency"], props["GlobalTableWitnesses"])
			}
			res := p.resource(t, id)
			if want := map[bool]string{true: "Retain", false: "Delete"}[p.stack.Profile.IsProd()]; res["DeletionPolicy"] != want {
				t.Errorf("%s: %s DeletionPolicy %v, want %s", p, id, res["DeletionPolicy"], want)
			}
		}
		if got := tables[claimsID]["TimeToLiveSpecification"]; !jsonEqual(got, map[string]any{"AttributeName": oncepay.ExpiresAtAttribute, "Enabled": true}) {
			t.Errorf("%s: eventual claims' TTL %s, want %s", p, show(got), oncepay.ExpiresAtAttribute)
		}
		if got := tables[homesID]["TimeToLiveSpecification"]; got != nil {
			t.Errorf("%s: home records expire: %s", p, show(got))
		}
		for _, s := range rs.stacks[1:] {
			if n := len(s.globalTables()); n != 0 {
				t.Errorf("%s: %d global tables; the primary's stack defines them", s, n)
			}
			for id, tbl := range s.resourcesOfType("AWS::DynamoDB::Table") {
				for _, k := range tbl["Properties"].(map[string]any)["KeySchema"].([]any) {
					if name := k.(map[string]any)["AttributeName"]; name == oncepay.ClaimPartitionKey || name == oncepay.HomePartitionKey {
						t.Errorf("%s: a table of its own keyed %v (%s)", s, name, id)
					}
				}
			}
		}
	}
}

// TestTheStrongClaimTable: with oncepay:claims=strong the claim table is
// MRSC with the witness and no TTL; the home record table stays eventual.
func TestTheStrongClaimTable(t *testing.T) {
	rs := synthStrongRegions(t)
	p := rs.primary()
	tables := p.globalTables()
	claims, homes := tables[p.logicalID(t, p.stack.Data.Claims.Table)], tables[p.logicalID(t, p.homesTable())]
	if claims == nil || homes == nil {
		t.Fatalf("global tables %v", slices.Collect(maps.Keys(tables)))
	}
	if claims["MultiRegionConsistency"] != string(awsdynamodb.MultiRegionConsistency_STRONG) {
		t.Errorf("claims consistency %v, want STRONG", claims["MultiRegionConsistency"])
	}
	if !jsonEqual(claims["GlobalTableWitnesses"], []any{map[string]any{"Region": mrscWitness}}) {
		t.Errorf("claims witnesses %s, want %s", show(claims["GlobalTableWitnesses"]), mrscWitness)
	}
	if claims["TimeToLiveSpecification"] != nil {
		t.Errorf("an MRSC claim table with a TTL: %s", show(claims["TimeToLiveSpecification"]))
	}
	if got := replicaRegions(claims); !slices.Equal(got, slices.Sorted(slices.Values(mrscRegions))) {
		t.Errorf("claims replicas %v, want %v (the witness holds none)", got, mrscRegions)
	}
	if homes["MultiRegionConsistency"] != nil || homes["GlobalTableWitnesses"] != nil {
		t.Errorf("the home table is not eventual: %v %v", homes["MultiRegionConsistency"], homes["GlobalTableWitnesses"])
	}
	for _, s := range rs.each() {
		nagClean(t, s.stack.Stack)
	}
}

// TestAStrongGlobalTableRefusesATTL: MRSC supports no TTL, and the
// construct refuses one an Override adds, as it refuses a key of its own.
func TestAStrongGlobalTableRefusesATTL(t *testing.T) {
	regions := &oncepay.Regions{Regions: mrscRegions, Here: mrscRegions[0], URLs: mrscURLs, Claims: oncepay.ClaimsStrong, Witness: mrscWitness, Name: "Oncepay"}
	inRegion := func(build func(awscdk.Stack)) func(awscdk.Stack) {
		return func(awscdk.Stack) {
			app := awscdk.NewApp(&awscdk.AppProps{Context: cdkContext(t, "")})
			build(awscdk.NewStack(app, jsii.String("Alone"), &awscdk.StackProps{Env: &awscdk.Environment{Region: jsii.String(regions.Here)}}))
		}
	}
	panicsWith(t, "supports no TTL", inRegion(func(s awscdk.Stack) {
		oncepay.NewGlobalClaimTable(s, "Claims", &oncepay.GlobalTableProps{Regions: regions, Override: func(p *awsdynamodb.TablePropsV2) {
			p.TimeToLiveAttribute = jsii.String(oncepay.ExpiresAtAttribute)
		}})
	}))
	panicsWith(t, "AWS-managed key", inRegion(func(s awscdk.Stack) {
		oncepay.NewHomeTable(s, "Homes", &oncepay.GlobalTableProps{Regions: regions, Protection: oncepay.Protection{EncryptionKey: oncepay.NewDataKey(s, "Key", awscdk.RemovalPolicy_DESTROY)}})
	}))
}

// TestTheGlobalLedger: the primary's cluster is the source of an Aurora
// global cluster; each standby's is a secondary of it, with no login or
// database of its own, its storage encrypted with its own Region's key and
// IAM authentication on; only the primary runs the migration.
func TestTheGlobalLedger(t *testing.T) {
	for _, rs := range []*regionStacks{synthTwoRegions(t), synthTwoRegionsProd(t)} {
		id := rs.conf().GlobalClusterID()
		p := rs.primary()
		pl := p.stack.Data.Ledger
		globals := p.resourcesOfType("AWS::RDS::GlobalCluster")
		if len(globals) != 1 || pl.GlobalCluster == nil {
			t.Fatalf("%s: %d global clusters", p, len(globals))
		}
		gid := p.logicalID(t, pl.GlobalCluster)
		g := globals[gid]["Properties"].(map[string]any)
		clusterID := p.logicalID(t, pl.Cluster)
		if g["GlobalClusterIdentifier"] != id {
			t.Errorf("%s: global cluster %v, want %s", p, g["GlobalClusterIdentifier"], id)
		}
		if src := render(g["SourceDBClusterIdentifier"]); !strings.HasSuffix(src, ":rds:"+p.region()+":${AWS::AccountId}:cluster:${"+clusterID+"}") {
			t.Errorf("%s: the global cluster's source %s is not the ledger cluster %s's ARN", p, src, clusterID)
		}
		for _, k := range []string{"Engine", "EngineVersion", "StorageEncrypted"} {
			if _, ok := g[k]; ok {
				t.Errorf("%s: the global cluster states %s beside its source cluster (CloudFormation refuses it)", p, k)
			}
		}
		if g["DeletionProtection"] != p.stack.Profile.DeletionProtection() {
			t.Errorf("%s: the global cluster's deletion protection %v, the profile's is %v", p, g["DeletionProtection"], p.stack.Profile.DeletionProtection())
		}
		primaryCluster := p.resource(t, clusterID)["Properties"].(map[string]any)
		if primaryCluster["MasterUsername"] == nil || pl.Secret == nil || p.stack.Migration == nil {
			t.Errorf("%s: the primary lost its admin login or its migration", p)
		}
		for _, s := range rs.stacks[1:] {
			l := s.stack.Data.Ledger
			if n := len(s.resourcesOfType("AWS::RDS::GlobalCluster")); n != 0 || l.GlobalCluster != nil {
				t.Errorf("%s: %d global clusters; the primary's stack makes it", s, n)
			}
			c := s.resource(t, s.logicalID(t, l.Cluster))["Properties"].(map[string]any)
			if c["GlobalClusterIdentifier"] != id {
				t.Errorf("%s: the cluster joins %v, want %s", s, c["GlobalClusterIdentifier"], id)
			}
			for _, k := range []string{"MasterUsername", "MasterUserPassword", "DatabaseName"} {
				if v, ok := c[k]; ok {
					t.Errorf("%s: a secondary with %s %s (it takes the primary's)", s, k, show(v))
				}
			}
			if c["StorageEncrypted"] != true || !jsonEqual(c["KmsKeyId"], getAtt(s.logicalID(t, s.stack.Data.Key), "Arn")) {
				t.Errorf("%s: storage encrypted %v with %s, want its own Region's data key", s, c["StorageEncrypted"], show(c["KmsKeyId"]))
			}
			if c["EnableIAMDatabaseAuthentication"] != true {
				t.Errorf("%s: IAM authentication off", s)
			}
			for _, k := range []string{"Engine", "EngineVersion"} {
				if c[k] != primaryCluster[k] {
					t.Errorf("%s: %s %v, the primary's is %v", s, k, c[k], primaryCluster[k])
				}
			}
			if l.Secret != nil || len(s.resourcesOfType("AWS::SecretsManager::SecretTargetAttachment")) != 0 {
				t.Errorf("%s: a secondary with an admin secret", s)
			}
			if s.stack.Migration != nil || len(s.resourcesOfType("AWS::CloudFormation::CustomResource")) != 0 {
				t.Errorf("%s: a migration against a read-only secondary", s)
			}
			if _, ok := s.json["Outputs"].(map[string]any)[oncepay.OutputLedgerSecretArn]; ok {
				t.Errorf("%s: outputs a ledger secret it does not have", s)
			}
		}
	}
}

// TestTheHomeRoutingEnvironment: the api of every Region gets the home
// table, the default home (the primary) and every Region's
// URL; the api's claim table is the global one's local replica.
func TestTheHomeRoutingEnvironment(t *testing.T) {
	rs := synthTwoRegions(t)
	r := rs.conf()
	for _, s := range rs.each() {
		homes, claims := r.HomesTableName(), r.ClaimsTableName()
		if s.isPrimary() {
			homes, claims = "${"+s.logicalID(t, s.homesTable())+"}", "${"+s.logicalID(t, s.stack.Data.Claims.Table)+"}"
		}
		for _, fn := range []*oncepay.GoFunction{s.stack.Api.Function} {
			env := s.resource(t, s.logicalID(t, fn.Function))["Properties"].(map[string]any)["Environment"].(map[string]any)["Variables"].(map[string]any)
			if got := render(env[oncepay.EnvHomesTable]); got != homes {
				t.Errorf("%s %s: %s %s, want %s", s, fn.Name, oncepay.EnvHomesTable, got, homes)
			}
			if got := render(env[oncepay.EnvIdemTable]); got != claims {
				t.Errorf("%s %s: %s %s, want %s", s, fn.Name, oncepay.EnvIdemTable, got, claims)
			}
			if env[oncepay.EnvHomeDefault] != rs.regions[0] {
				t.Errorf("%s %s: %s %v, want the primary %s", s, fn.Name, oncepay.EnvHomeDefault, env[oncepay.EnvHomeDefault], rs.regions[0])
			}
			var urls map[string]string
			if raw, _ := env[oncepay.EnvRegionURLs].(string); json.Unmarshal([]byte(raw), &urls) != nil || !maps.Equal(urls, regionURLs) {
				t.Errorf("%s %s: %s %v, want %v", s, fn.Name, oncepay.EnvRegionURLs, env[oncepay.EnvRegionURLs], regionURLs)
			}
		}
		// The resolver and the worker know the table and the default home
		// (their sweeps ask whether their Region homes the callers), not
		// the URLs; no other function knows the table.
		for id, fn := range s.resourcesOfType("AWS::Lambda::Function") {
			if id == s.logicalID(t, s.stack.Api.Function.Function) {
				continue
			}
			vars, _ := fn["Properties"].(map[string]any)["Environment"].(map[string]any)["Variables"].(map[string]any)
			if id == s.logicalID(t, s.stack.Resolver.Function) || id == s.logicalID(t, s.stack.Worker.Function.Function) {
				if render(vars[oncepay.EnvHomesTable]) != homes || vars[oncepay.EnvHomeDefault] != rs.regions[0] || vars[oncepay.EnvRegionURLs] != nil {
					t.Errorf("%s %s: %s %s, %s %v, %s %v; want the table, the primary, no URLs", s, id,
						oncepay.EnvHomesTable, render(vars[oncepay.EnvHomesTable]), oncepay.EnvHomeDefault, vars[oncepay.EnvHomeDefault], oncepay.EnvRegionURLs, vars[oncepay.EnvRegionURLs])
				}
				continue
			}
			if _, ok := vars[oncepay.EnvHomesTable]; ok {
				t.Errorf("%s: function %s has %s", s, id, oncepay.EnvHomesTable)
			}
		}
	}
}

// TestTheHomeTableGrants: the api may only read home records (a misrouted
// request must not move its caller), the resolver and the worker only the
// default one; no other role touches the table (a
// failover's moves are an operator's). Every other grant is the one-Region stack's.
func TestTheHomeTableGrants(t *testing.T) {
	for _, rs := range []*regionStacks{synthTwoRegions(t), synthTwoRegionsProd(t)} {
		r := rs.conf()
		for _, s := range rs.each() {
			homes := "arn:${AWS::Partition}:dynamodb:" + s.region() + ":${AWS::AccountId}:table/" + r.HomesTableName()
			if s.isPrimary() {
				homes = "${" + s.logicalID(t, s.homesTable()) + ".Arn}"
			}
			want := map[string][]string{
				s.logicalID(t, s.stack.Api.Function.Role):    {"dynamodb:GetItem"},
				s.logicalID(t, s.stack.Resolver.Role):        {"dynamodb:GetItem"},
				s.logicalID(t, s.stack.Worker.Function.Role): {"dynamodb:GetItem"},
			}
			for role := range s.resourcesOfType("AWS::IAM::Role") {
				var got []string
				for action, resources := range grantsOf(s.json, role) {
					if slices.Contains(resources, homes) {
						got = append(got, action)
					}
				}
				sort.Strings(got)
				if !slices.Equal(got, want[role]) {
					t.Errorf("%s: role %s on the home table %s: %v, want %v", s, role, homes, got, want[role])
				}
			}
			if v := starViolations(s.json); len(v) > 0 {
				t.Errorf("%s: Resource * where a name is known:\n%s", s, strings.Join(v, "\n"))
			}
		}
	}
}

// TestTheRegionsStacksAreNagClean: cdk-nag's packs find nothing
// unsuppressed in any Region's stack, and the mode brings no suppression
// the one-Region stack does not have (the global tables and cluster
// carry none).
func TestTheRegionsStacksAreNagClean(t *testing.T) {
	known := map[string]bool{}
	for _, p := range []oncepay.Profile{oncepay.ProfileSandbox, oncepay.ProfileProd} {
		for _, rule := range suppressedRules(synth(t, p).json) {
			known[rule] = true
		}
	}
	for _, rs := range []*regionStacks{synthTwoRegions(t), synthTwoRegionsProd(t)} {
		for _, s := range rs.each() {
			nagClean(t, s.stack.Stack)
			for _, rule := range suppressedRules(s.json) {
				if !known[rule] {
					t.Errorf("%s: a suppression the one-Region stacks do not have: %s", s, rule)
				}
			}
			for _, typ := range []string{"AWS::DynamoDB::GlobalTable", "AWS::RDS::GlobalCluster"} {
				for id, r := range s.resourcesOfType(typ) {
					if md, _ := r["Metadata"].(map[string]any); md["cdk_nag"] != nil {
						t.Errorf("%s: %s carries a nag suppression: %s", s, id, show(md["cdk_nag"]))
					}
				}
			}
		}
	}
}

// suppressedRules: the rule ids a template's resources suppress, with
// their reasons.
func suppressedRules(js map[string]any) []string {
	var out []string
	for _, r := range js["Resources"].(map[string]any) {
		md, _ := r.(map[string]any)["Metadata"].(map[string]any)
		n, _ := md["cdk_nag"].(map[string]any)
		rules, _ := n["rules_to_suppress"].([]any)
		for _, x := range rules {
			rule := x.(map[string]any)
			out = append(out, fmt.Sprintf("%v: %v", rule["id"], rule["reason"]))
		}
	}
	return out
}

// TestTheStrongClaimTableIsSwept: MRSC has no TTL, so in the strong mode
// every Region's resolver sweeps expired key records (its env, and a Scan
// and a DeleteItem on its claim table's replica); in the eventual mode the
// TTL does, and the resolver may neither scan nor delete there.
func TestTheStrongClaimTableIsSwept(t *testing.T) {
	for _, rs := range []*regionStacks{synthStrongRegions(t), synthTwoRegions(t)} {
		r := rs.conf()
		for _, s := range rs.each() {
			claims := "arn:${AWS::Partition}:dynamodb:" + s.region() + ":${AWS::AccountId}:table/" + r.ClaimsTableName()
			if s.isPrimary() {
				claims = "${" + s.logicalID(t, s.stack.Data.Claims.Table) + ".Arn}"
			}
			env := s.resource(t, s.logicalID(t, s.stack.Resolver.Function))["Properties"].(map[string]any)["Environment"].(map[string]any)["Variables"].(map[string]any)
			var got []string
			for action, resources := range grantsOf(s.json, s.logicalID(t, s.stack.Resolver.Role)) {
				if (action == "dynamodb:Scan" || action == "dynamodb:DeleteItem") && slices.Contains(resources, claims) {
					got = append(got, action)
				}
			}
			sort.Strings(got)
			if r.Strong() {
				if env[oncepay.EnvClaimsSweep] != "true" || !slices.Equal(got, []string{"dynamodb:DeleteItem", "dynamodb:Scan"}) {
					t.Errorf("%s (strong): resolver sweep env %v, grants on the claims %v", s, env[oncepay.EnvClaimsSweep], got)
				}
			} else if env[oncepay.EnvClaimsSweep] != nil || len(got) != 0 {
				t.Errorf("%s (eventual): resolver sweep env %v, grants on the claims %v; want none", s, env[oncepay.EnvClaimsSweep], got)
			}
		}
	}
}

// TestTheRegionAlarms: across Regions every Region's stack alarms on the
// api's refusals for want of a home (HomeUnavailable), on a payment lost
// in a failover that a resolve found (ResolveLostRow), on a leftover copy
// the home inbox refused to credit (AdoptionRefused) and on a read-only
// ledger in the Region that homes the callers (HomeLedgerReadOnly); with
// the strong claims also on a failed sweep of the claim table
// (ClaimsSweepFailed), which the eventual claims' TTL makes needless. One
// Region has none of them (the sandbox's alarm count, TestAlarms, is
// unchanged).
func TestTheRegionAlarms(t *testing.T) {
	regionAlarms := map[string][2]string{
		oncepay.AlarmHomeUnavailable:    {oncepay.MetricHomeUnavailable, oncepay.FnAPI},
		oncepay.AlarmResolveLostRow:     {oncepay.MetricResolveLostRow, oncepay.FnAPI},
		oncepay.AlarmHomeLedgerReadOnly: {oncepay.MetricHomeLedgerReadOnly, oncepay.FnResolver},
		oncepay.AlarmAdoptionRefused:    {oncepay.MetricAdoptionRefused, oncepay.FnWorker},
	}
	strongAlarms := map[string][2]string{oncepay.AlarmClaimsSweepFailed: {oncepay.MetricClaimsSweepFailed, oncepay.FnResolver}}
	check := func(s *synthesized, want map[string][2]string, present bool) {
		for alarm, m := range want {
			a, ok := s.stack.Monitoring.Alarms[alarm]
			if ok != present {
				t.Errorf("%s: alarm %s present %v, want %v", s, alarm, ok, present)
				continue
			}
			if !ok {
				continue
			}
			p := s.resource(t, s.logicalID(t, a))["Properties"].(map[string]any)
			dims := show(p["Dimensions"])
			if p["MetricName"] != m[0] || p["Threshold"] != float64(1) || !strings.Contains(dims, m[1]) {
				t.Errorf("%s: alarm %s watches %v at %v in %s; want %s of %s at 1", s, alarm, p["MetricName"], p["Threshold"], dims, m[0], m[1])
			}
		}
	}
	for _, s := range synthTwoRegions(t).each() {
		check(s, regionAlarms, true)
		check(s, strongAlarms, false)
	}
	for _, s := range synthStrongRegions(t).each() {
		check(s, regionAlarms, true)
		check(s, strongAlarms, true)
	}
	one := synth(t, oncepay.ProfileSandbox)
	for alarm := range regionAlarms {
		if _, ok := one.stack.Monitoring.Alarms[alarm]; ok {
			t.Errorf("a one-Region stack has the %s alarm", alarm)
		}
	}
}

// TestTheResolverReadsOnlyTheDefaultHome: the resolver's read of the home
// table is bound to the "*" record by dynamodb:LeadingKeys, so it never
// reads a caller's own record.
func TestTheResolverReadsOnlyTheDefaultHome(t *testing.T) {
	for _, s := range synthTwoRegions(t).each() {
		found := false
		for _, r := range s.resourcesOfType("AWS::IAM::Policy") {
			p := r["Properties"].(map[string]any)
			if !strings.Contains(show(p["Roles"]), s.logicalID(t, s.stack.Resolver.Role)) {
				continue
			}
			for _, st := range p["PolicyDocument"].(map[string]any)["Statement"].([]any) {
				st := st.(map[string]any)
				if !slices.Contains(strs(st["Action"]), "dynamodb:GetItem") || !strings.Contains(show(st["Resource"]), "homes") && !strings.Contains(show(st["Resource"]), "Homes") {
					continue
				}
				found = true
				if got := show(st["Condition"]); got != `{"ForAllValues:StringEquals":{"dynamodb:LeadingKeys":["*"]}}` {
					t.Errorf("%s: the resolver's read of the home table has condition %s; want LeadingKeys [\"*\"]", s, got)
				}
			}
		}
		if !found {
			t.Errorf("%s: the resolver has no read of the home table", s)
		}
	}
}

// TestTheStandbyCheck: across Regions the resolver and the worker ask
// whether their ledger is a standby's before their scheduled work; one
// Region has no standby and no check.
func TestTheStandbyCheck(t *testing.T) {
	envOf := func(s *synthesized, fn *oncepay.GoFunction) map[string]any {
		return s.resource(t, s.logicalID(t, fn.Function))["Properties"].(map[string]any)["Environment"].(map[string]any)["Variables"].(map[string]any)
	}
	for _, s := range synthTwoRegions(t).each() {
		for _, fn := range []*oncepay.GoFunction{s.stack.Resolver, s.stack.Worker.Function} {
			if envOf(s, fn)[oncepay.EnvStandbyCheck] != "true" {
				t.Errorf("%s %s: no %s", s, fn.Name, oncepay.EnvStandbyCheck)
			}
		}
	}
	one := synth(t, oncepay.ProfileSandbox)
	for _, fn := range []*oncepay.GoFunction{one.stack.Resolver, one.stack.Worker.Function} {
		if v, ok := envOf(one, fn)[oncepay.EnvStandbyCheck]; ok {
			t.Errorf("one Region %s: %s = %v", fn.Name, oncepay.EnvStandbyCheck, v)
		}
	}
	// The worker adopts a failed Region's lost payments across Regions
	// only: in one Region every event comes from a row its ledger holds.
	for _, s := range synthTwoRegions(t).each() {
		if envOf(s, s.stack.Worker.Function)[oncepay.EnvAdoptLost] != "true" {
			t.Errorf("%s worker: no %s", s, oncepay.EnvAdoptLost)
		}
	}
	if v, ok := envOf(one, one.stack.Worker.Function)[oncepay.EnvAdoptLost]; ok {
		t.Errorf("one Region worker: %s = %v", oncepay.EnvAdoptLost, v)
	}
}
