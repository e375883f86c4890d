package oncepay_test

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay"
)

func TestMain(m *testing.M) {
	code := m.Run()
	jsii.Close() // removes the jsii runtime's temp folder
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
	return &cfg.Context
}

type synthesized struct {
	stack *oncepay.Stack
	tmpl  assertions.Template
	json  map[string]any
}

var synthCache = map[oncepay.Profile]*synthesized{}

// synth builds the app the way cdk/main.go does (context -> profile ->
// stack, nag packs on the app) and caches it per profile: a synth costs
// seconds and the tests only read it.
func synth(t *testing.T, profile oncepay.Profile) *synthesized {
	t.Helper()
	if s, ok := synthCache[profile]; ok {
		return s
	}
	app := awscdk.NewApp(&awscdk.AppProps{Context: cdkContext(t, profile)})
	p, err := oncepay.ProfileFromContext(app)
	if err != nil {
		t.Fatal(err)
	}
	if p != profile {
		t.Fatalf("context gave profile %q, want %q", p, profile)
	}
	stack := oncepay.NewStack(app, "Oncepay", &oncepay.StackProps{Profile: p})
	oncepay.AddNagPacks(app)
	s := &synthesized{stack: stack}
	check(t, "synthesize", func() {
		s.tmpl = assertions.Template_FromStack(stack.Stack, nil)
		s.json = *s.tmpl.ToJSON()
	})
	if s.tmpl == nil {
		t.FailNow()
	}
	synthCache[profile] = s
	return s
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
	el, ok := c.Node().DefaultChild().(awscdk.CfnElement)
	if !ok {
		t.Fatalf("%s has no CloudFormation resource", *c.Node().Path())
	}
	return *s.stack.GetLogicalId(el)
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
