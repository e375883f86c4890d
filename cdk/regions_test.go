package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/cdk/oncepay"
)

// runApp runs the app in a process of its own with ctx, as `cdk synth -c`
// does, into out; it returns the app's combined output and its error.
func runApp(t *testing.T, ctx map[string]any, out string) ([]byte, error) {
	t.Helper()
	ctxJSON, err := json.Marshal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "ONCEPAY_TEST_RUN_APP=1", "CDK_OUTDIR="+out, "CDK_CONTEXT_JSON="+string(ctxJSON))
	return cmd.CombinedOutput()
}

// The app across Regions: a stack per Region, <profile's stack>-<region>,
// each pinned to its Region and to no account, the standby's depending on
// the primary's (the CLI deploys the primary first), and no one-Region
// stack beside them.
func TestTheAppMakesAStackPerRegion(t *testing.T) {
	regions := []string{"us-east-1", "us-west-2"}
	out := t.TempDir()
	ctx := appContext(t)
	ctx[oncepay.ContextRegions] = strings.Join(regions, ",")
	ctx[oncepay.ContextRegionURLs] = regions[0] + "=https://pay-a.example.com," + regions[1] + "=https://pay-b.example.com"
	ctx[oncepay.ContextJWTIssuer] = "https://login.example.com/"
	ctx[oncepay.ContextJWTAudience] = "payments-app"
	if b, err := runApp(t, ctx, out); err != nil {
		t.Fatalf("the app: %v\n%s", err, b)
	}
	raw, err := os.ReadFile(filepath.Join(out, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Artifacts map[string]struct {
			Type         string   `json:"type"`
			Environment  string   `json:"environment"`
			Dependencies []string `json:"dependencies"`
		} `json:"artifacts"`
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	base := oncepay.ProfileSandbox.StackName()
	var stacks []string
	for name, a := range manifest.Artifacts {
		if a.Type == "aws:cloudformation:stack" {
			stacks = append(stacks, name)
		}
	}
	slices.Sort(stacks)
	want := []string{base + "-" + regions[0], base + "-" + regions[1]}
	if !slices.Equal(stacks, want) {
		t.Fatalf("stacks %v, want %v", stacks, want)
	}
	for i, name := range want {
		a := manifest.Artifacts[name]
		if a.Environment != "aws://unknown-account/"+regions[i] {
			t.Errorf("%s: environment %s, want its Region and no account", name, a.Environment)
		}
		if dependsOnPrimary := slices.Contains(a.Dependencies, want[0]); dependsOnPrimary != (i > 0) {
			t.Errorf("%s: dependencies %v", name, a.Dependencies)
		}
	}
}

// A context the mode refuses stops the app with the reason, before any
// stack is made.
func TestTheAppRefusesABadRegionsContext(t *testing.T) {
	out := t.TempDir()
	ctx := appContext(t)
	ctx[oncepay.ContextRegions] = "us-east-1,us-west-2"
	ctx[oncepay.ContextRegionURLs] = "us-east-1=https://pay-a.example.com,us-west-2=https://pay-b.example.com"
	ctx[oncepay.ContextJWTIssuer] = "https://login.example.com/"
	ctx[oncepay.ContextJWTAudience] = "payments-app"
	ctx[oncepay.ContextClaims] = string(oncepay.ClaimsStrong)
	b, err := runApp(t, ctx, out)
	if err == nil {
		t.Fatalf("the app accepted strong claims in two Regions with no witness:\n%s", b)
	}
	if !strings.Contains(string(b), oncepay.ContextWitnessRegion) {
		t.Errorf("the app's refusal does not name %s:\n%s", oncepay.ContextWitnessRegion, b)
	}
	if m, _ := filepath.Glob(filepath.Join(out, "*.template.json")); len(m) > 0 {
		t.Errorf("templates written after a refusal: %v", m)
	}
}

// MRSC supports no transactions (oncepay:claims=strong): the claim store
// must make none. A synth cannot see the handlers' calls, so this reads
// the store's source, which the constructs' module cannot.
func TestTheClaimStoreMakesNoTransactions(t *testing.T) {
	files, err := filepath.Glob("../internal/idem/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("the claim store's source: %v (%d files)", err, len(files))
	}
	transaction := regexp.MustCompile(`\b(TransactWriteItems|TransactGetItems|ExecuteTransaction)\b`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := transaction.Find(src); m != nil {
			t.Errorf("%s calls %s: a claim table with multi-Region strong consistency refuses transactions (docs/regions.md)", f, m)
		}
	}
}
