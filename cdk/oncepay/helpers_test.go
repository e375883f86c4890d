package oncepay_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay"
	"github.com/oncepay/oncepay/cdk/oncepay/nag"
)

// assets is a folder of placeholder build/<fn>/bootstrap files: the tests
// read the template, never the binaries, so they need not depend on
// `make lambdas` having run.
var assets string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "oncepay-assets-")
	if err != nil {
		panic(err)
	}
	for _, fn := range oncepay.Functions {
		if err := os.MkdirAll(filepath.Join(dir, fn), 0o755); err != nil {
			panic(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fn, "bootstrap"), []byte("placeholder "+fn), 0o755); err != nil {
			panic(err)
		}
	}
	assets = dir
	code := m.Run()
	jsii.Close() // removes the jsii runtime's temp folder
	os.RemoveAll(dir)
	os.Exit(code)
}

// cdkContext is cdk.json's context, so tests synthesize what `cdk synth` does.
func cdkContext(t *testing.T, profile oncepay.Profile) *map[string]any {
	t.Helper()
	raw, err := os.ReadFile("../../cdk.json")
	if err != nil {
		t.Fatalf("read cdk.json: %v", err)
	}
	var cfg struct {
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("parse cdk.json: %v", err)
	}
	if cfg.Context == nil {
		t.Fatal("cdk.json has no context")
	}
	if profile != "" {
		cfg.Context[oncepay.ProfileContextKey] = string(profile)
	}
	if profile == oncepay.ProfileProd {
		// Prod pins its AZs by id: the two of each Region the tests use.
		cfg.Context[oncepay.ContextAvailabilityZoneIds] = prodAZIds
	}
	cfg.Context[oncepay.AssetsContextKey] = assets
	return &cfg.Context
}

// prodAZIds are the AZ ids the prod variant pins (none is use1-az3,
// where RDS Proxy does not run); prodRegionsAZIds the two-Region one's.
const (
	prodAZIds        = "use1-az1,use1-az2"
	prodRegionsAZIds = "use1-az1,use1-az2,usw2-az1,usw2-az2"
)

type synthesized struct {
	stack *oncepay.Stack
	tmpl  assertions.Template
	json  map[string]any
}

var synthCache = map[string]*synthesized{}

// synth builds the app the way cdk/main.go does (context -> props ->
// stack, nag packs on the app) and caches it per profile: a synth costs
// seconds and the tests only read it.
func synth(t *testing.T, profile oncepay.Profile) *synthesized {
	t.Helper()
	return synthVariant(t, string(profile), profile, nil)
}

// albCertificate is a certificate ARN for the ALB variant (never deployed).
const albCertificate = "arn:aws:acm:eu-west-1:111111111111:certificate/00000000-0000-0000-0000-000000000000"

// pushApp is a platform application ARN for the ALB variant.
const pushApp = "arn:aws:sns:eu-west-1:111111111111:app/APNS/oncepay"

// synthALB is the sandbox with the ALB front door, a push platform
// application and the email channel, chosen through context as `cdk deploy
// -c` would: the variant with every option on (make test-cfn lints it).
func synthALB(t *testing.T) *synthesized {
	t.Helper()
	return synthVariant(t, "alb", oncepay.ProfileSandbox, map[string]any{
		oncepay.ContextAlbCertificateArn:       albCertificate,
		oncepay.ContextAlbCognitoDomainPrefix:  "oncepay-test",
		oncepay.ContextAlbDomainName:           "pay.example.com",
		oncepay.ContextPlatformApplicationArns: pushApp,
		oncepay.ContextEmailFrom:               emailFrom,
	})
}

// emailFrom is the ALB variant's sender address.
const emailFrom = "receipts@pay.example.com"

// synthVariant synthesizes (once per name) the stack for profile with
// extra context.
func synthVariant(t *testing.T, name string, profile oncepay.Profile, extra map[string]any) *synthesized {
	t.Helper()
	if s, ok := synthCache[name]; ok {
		return s
	}
	ctx := cdkContext(t, profile)
	for k, v := range extra {
		(*ctx)[k] = v
	}
	app := awscdk.NewApp(&awscdk.AppProps{Context: ctx})
	props, err := oncepay.StackPropsFromContext(app)
	if err != nil {
		t.Fatal(err)
	}
	if props.Profile != profile {
		t.Fatalf("context gave profile %q, want %q", props.Profile, profile)
	}
	stack := oncepay.NewStack(app, props.Profile.StackName(), props) // as cdk/main.go names it
	nag.AddPacks(app)
	s := &synthesized{stack: stack}
	check(t, "synthesize", func() {
		s.tmpl = assertions.Template_FromStack(stack.Stack, nil)
		s.json = *s.tmpl.ToJSON()
	})
	if s.tmpl == nil {
		t.FailNow()
	}
	synthCache[name] = s
	writeTemplate(t, name, s.json)
	return s
}

// writeTemplate puts a variant's template in $ONCEPAY_TEMPLATES_OUT (make
// test-cfn lints them there): the test run's synth is the app's own, so the
// lint needs no second synth through the CLI.
func writeTemplate(t *testing.T, name string, tmpl map[string]any) {
	dir := os.Getenv("ONCEPAY_TEMPLATES_OUT")
	if dir == "" {
		return
	}
	b, err := json.MarshalIndent(tmpl, "", " ")
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name+".template.json"), b, 0o644)
	}
	if err != nil {
		t.Fatalf("write the %s template: %v", name, err)
	}
}

// synthAlone synthesizes one construct in an empty stack of its own, with
// the nag packs on, the way an architect would lift it.
func synthAlone(t *testing.T, build func(stack awscdk.Stack)) (awscdk.Stack, assertions.Template, map[string]any) {
	t.Helper()
	return synthAloneIn(t, nil, build)
}

// synthAloneIn is synthAlone in a given environment (nil: agnostic).
func synthAloneIn(t *testing.T, env *awscdk.Environment, build func(stack awscdk.Stack)) (awscdk.Stack, assertions.Template, map[string]any) {
	t.Helper()
	app := awscdk.NewApp(&awscdk.AppProps{Context: cdkContext(t, "")})
	stack := awscdk.NewStack(app, jsii.String("Alone"), &awscdk.StackProps{Env: env})
	build(stack)
	nag.AddPacks(app)
	var tmpl assertions.Template
	var js map[string]any
	check(t, "synthesize", func() {
		tmpl = assertions.Template_FromStack(stack, nil)
		js = *tmpl.ToJSON()
	})
	if tmpl == nil {
		t.FailNow()
	}
	return stack, tmpl, js
}

// check runs an assertions call; a failed match panics inside jsii, which
// would kill the test binary, so it becomes a t.Error here.
func check(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s: %v", what, r)
		}
	}()
	f()
}

// logicalID of the L1 resource behind an L2 construct.
func (s *synthesized) logicalID(t *testing.T, c constructs.IConstruct) string {
	t.Helper()
	return logicalIDIn(t, s.stack.Stack, c)
}

func logicalIDIn(t *testing.T, stack awscdk.Stack, c constructs.IConstruct) string {
	t.Helper()
	el, ok := c.(awscdk.CfnElement)
	if !ok {
		el, ok = c.Node().DefaultChild().(awscdk.CfnElement)
	}
	if !ok {
		t.Fatalf("%s has no CloudFormation resource", *c.Node().Path())
	}
	return *stack.GetLogicalId(el)
}

// resource returns the template's resource by logical id.
func (s *synthesized) resource(t *testing.T, id string) map[string]any {
	t.Helper()
	r, ok := s.json["Resources"].(map[string]any)[id].(map[string]any)
	if !ok {
		t.Fatalf("no resource %s", id)
	}
	return r
}

// resourcesOfType: logical id -> resource.
func (s *synthesized) resourcesOfType(typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range s.json["Resources"].(map[string]any) {
		if m := r.(map[string]any); m["Type"] == typ {
			out[id] = m
		}
	}
	return out
}

func ref(id string) map[string]any { return map[string]any{"Ref": id} }

func getAtt(id, attr string) map[string]any {
	return map[string]any{"Fn::GetAtt": []any{id, attr}}
}

func obj(m map[string]any) assertions.Matcher { return assertions.Match_ObjectLike(&m) }

func arr(items ...any) assertions.Matcher { return assertions.Match_ArrayWith(&items) }

func exact(items ...any) assertions.Matcher { return assertions.Match_ArrayEquals(&items) }

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// ofType: logical id -> resource, in a template's JSON.
func ofType(js map[string]any, typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range js["Resources"].(map[string]any) {
		if m := r.(map[string]any); m["Type"] == typ {
			out[id] = m
		}
	}
	return out
}

// props of a resource in a template's JSON.
func propsOf(t *testing.T, js map[string]any, id string) map[string]any {
	t.Helper()
	r, ok := js["Resources"].(map[string]any)[id].(map[string]any)
	if !ok {
		t.Fatalf("no resource %s", id)
	}
	p, _ := r["Properties"].(map[string]any)
	return p
}

// render turns a CloudFormation value into a readable string: Ref X is
// ${X}, GetAtt X.A is ${X.A}, Fn::Join concatenates, Fn::Sub is its string,
// anything else is ${?}.
func render(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return fmt.Sprint(x)
	case bool:
		return fmt.Sprint(x)
	case []any:
		out := ""
		for i, e := range x {
			if i > 0 {
				out += ","
			}
			out += render(e)
		}
		return "[" + out + "]"
	case map[string]any:
		if r, ok := x["Ref"].(string); ok {
			return "${" + r + "}"
		}
		if ga, ok := x["Fn::GetAtt"].([]any); ok && len(ga) == 2 {
			return fmt.Sprintf("${%v.%v}", ga[0], ga[1])
		}
		if sub, ok := x["Fn::Sub"].(string); ok {
			return sub // its ${...} are CloudFormation's own
		}
		if j, ok := x["Fn::Join"].([]any); ok && len(j) == 2 {
			sep, _ := j[0].(string)
			parts, _ := j[1].([]any)
			out := ""
			for i, p := range parts {
				if i > 0 {
					out += sep
				}
				out += render(p)
			}
			return out
		}
	}
	return "${?}"
}

func strs(v any) []string {
	switch x := v.(type) {
	case []any:
		var out []string
		for _, e := range x {
			out = append(out, render(e))
		}
		return out
	case nil:
		return nil
	default:
		return []string{render(x)}
	}
}

// grantsOf collects the Allow statements of every identity policy attached
// to role (by logical id) as action -> sorted, distinct resources.
func grantsOf(js map[string]any, role string) map[string][]string {
	out := map[string][]string{}
	for _, r := range ofType(js, "AWS::IAM::Policy") {
		p := r["Properties"].(map[string]any)
		attached := false
		for _, x := range p["Roles"].([]any) {
			if render(x) == "${"+role+"}" {
				attached = true
			}
		}
		if !attached {
			continue
		}
		for _, st := range p["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			st := st.(map[string]any)
			if st["Effect"] != "Allow" {
				continue
			}
			for _, a := range strs(st["Action"]) {
				out[a] = append(out[a], strs(st["Resource"])...)
			}
		}
	}
	for a, rs := range out {
		sort.Strings(rs)
		var uniq []string
		for i, r := range rs {
			if i == 0 || r != rs[i-1] {
				uniq = append(uniq, r)
			}
		}
		out[a] = uniq
	}
	return out
}
