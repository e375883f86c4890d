package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay"
)

// TestMain runs the app itself when asked: the jsii runtime reads its
// environment (CDK_CONTEXT_JSON, CDK_OUTDIR) once, when it starts, so each
// synth needs a process of its own, as `cdk synth` gives it.
func TestMain(m *testing.M) {
	if os.Getenv("ONCEPAY_TEST_RUN_APP") == "1" {
		os.Exit(run())
	}
	code := m.Run()
	jsii.Close() // the in-process synths' runtime (agree_test.go)
	os.Exit(code)
}

// The app names the stack after its profile, so a deploy that leaves out
// -c oncepay:profile=prod synthesizes Oncepay (a sandbox of its own) and
// never a sandbox version of OncepayProd.
func TestTheProfileNamesTheStack(t *testing.T) {
	out := t.TempDir()
	ctx := appContext(t)
	ctx["oncepay:profile"] = "prod"
	ctx["oncepay:availabilityZoneIds"] = "use1-az1,use1-az2"
	ctxJSON, err := json.Marshal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "ONCEPAY_TEST_RUN_APP=1", "CDK_OUTDIR="+out, "CDK_CONTEXT_JSON="+string(ctxJSON))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the app: %v\n%s", err, b)
	}
	if _, err := os.Stat(filepath.Join(out, "OncepayProd.template.json")); err != nil {
		t.Errorf("prod synthesized no OncepayProd stack: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "Oncepay.template.json")); err == nil {
		t.Error("prod synthesized the sandbox's stack name, Oncepay")
	}
}

// appContext is cdk.json's context (its feature flags), as the CLI would
// pass it, with a folder of placeholder bootstraps as the assets: the tests
// read templates, never the binaries.
func appContext(t *testing.T) map[string]any {
	t.Helper()
	assets := t.TempDir()
	for _, fn := range oncepay.Functions {
		if err := os.MkdirAll(filepath.Join(assets, fn), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(assets, fn, "bootstrap"), []byte("placeholder"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile("../cdk.json")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil || cfg.Context == nil {
		t.Fatalf("cdk.json context: %v", err)
	}
	cfg.Context[oncepay.AssetsContextKey] = assets
	return cfg.Context
}
