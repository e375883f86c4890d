package lambdarun_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/invoke"
	"github.com/oncepay/oncepay/internal/localcloud/lambdarun"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

func byPrefix(t *testing.T, fns []lambdarun.Function, prefix string) lambdarun.Function {
	t.Helper()
	for _, f := range fns {
		if strings.HasPrefix(f.LogicalID, prefix) {
			return f
		}
	}
	t.Fatalf("no function %s* in %d", prefix, len(fns))
	return lambdarun.Function{}
}

// Every function of the synthesized template maps to the lambdas/ package
// its asset was built from (Migration runs lambdas/migrate: the construct's
// name is not the package's), with its timeout and memory; the resolver's
// reserved concurrency of 1 is its cap, the others get the local default.
func TestFromTemplateMapsEveryFunctionToItsPackageAndConcurrency(t *testing.T) {
	tpl := testenv.TemplatePath(t)
	var b struct {
		Resources map[string]struct{ Type string }
	}
	raw, err := os.ReadFile(tpl)
	if err != nil || json.Unmarshal(raw, &b) != nil {
		t.Fatalf("read template: %v", err)
	}
	api := ""
	for id, r := range b.Resources {
		if r.Type == "AWS::Lambda::Function" && strings.HasPrefix(id, "Api") {
			api = id
		}
	}
	envs := map[string]map[string]string{api: {"ONCEPAY_IDEM_TABLE": "claims-local", "AWS_REGION": "eu-west-1"}}
	fns, err := lambdarun.FromTemplate(tpl, envs, lambdarun.Config{Bootstraps: "/x/lambdas", Logs: "/x/logs"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"Api": "lambdas/api", "Relay": "lambdas/relay", "Worker": "lambdas/worker",
		"Resolver": "lambdas/resolver", "Webhook": "lambdas/webhook", "Migration": "lambdas/migrate", "TotalsFunction": "lambdas/totals",
		"TotalsRecountFunction": "lambdas/recount", "DevicesFunction": "lambdas/devices", "ReconcileFunction": "lambdas/reconcile"}
	if len(fns) != len(want) {
		t.Errorf("%d functions, want %d", len(fns), len(want))
	}
	for prefix, pkg := range want {
		f := byPrefix(t, fns, prefix)
		if f.Package != pkg {
			t.Errorf("%s runs %s, want %s", f.LogicalID, f.Package, pkg)
		}
		if f.Bootstrap != filepath.Join("/x/lambdas", filepath.Base(pkg), "bootstrap") || f.Log != filepath.Join("/x/logs", "fn-"+filepath.Base(pkg)+".log") {
			t.Errorf("%s: bootstrap %s, log %s", f.LogicalID, f.Bootstrap, f.Log)
		}
		// The sandbox reserves no concurrency (a new account's quota may be
		// 10): every function takes the default cap.
		wantMax := lambdarun.DefaultMaxEnvironments
		if f.MaxEnvironments != wantMax {
			t.Errorf("%s: %d environments (reserved %d), want %d", f.LogicalID, f.MaxEnvironments, f.Reserved, wantMax)
		}
	}
	a := byPrefix(t, fns, "Api")
	if a.Timeout != 6*time.Second || a.MemoryMB != 512 || a.Reserved != -1 {
		t.Errorf("api: timeout %s, memory %d, reserved %d", a.Timeout, a.MemoryMB, a.Reserved)
	}
	for k, v := range map[string]string{
		"ONCEPAY_IDEM_TABLE":              "claims-local",
		"AWS_REGION":                      "eu-west-1",
		"AWS_DEFAULT_REGION":              "eu-west-1",
		"AWS_ACCESS_KEY_ID":               "test",
		"AWS_LAMBDA_FUNCTION_NAME":        api,
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
		"AWS_LAMBDA_FUNCTION_TIMEOUT":     "6",
		"AWS_LAMBDA_FUNCTION_VERSION":     "$LATEST",
		"AWS_LAMBDA_LOG_GROUP_NAME":       "/aws/lambda/" + api,
	} {
		if a.Env[k] != v {
			t.Errorf("api env %s = %q, want %q", k, a.Env[k], v)
		}
	}
	if r := byPrefix(t, fns, "Relay"); r.Env["ONCEPAY_IDEM_TABLE"] != "" || r.Env["AWS_REGION"] != "us-east-1" {
		t.Errorf("the relay got the api's environment: %v", r.Env)
	}

	more, err := lambdarun.FromTemplate(tpl, nil, lambdarun.Config{DefaultMaxEnvironments: 7})
	if err != nil {
		t.Fatal(err)
	}
	if byPrefix(t, more, "Api").MaxEnvironments != 7 || byPrefix(t, more, "Resolver").MaxEnvironments != 7 {
		t.Error("DefaultMaxEnvironments is not the cap of a function without reserved concurrency")
	}

	// The runtime's own variables win over the resolved environment's.
	owned, err := lambdarun.FromTemplate(tpl, map[string]map[string]string{api: {"AWS_LAMBDA_FUNCTION_NAME": "x", "AWS_LAMBDA_FUNCTION_TIMEOUT": "300"}}, lambdarun.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if e := byPrefix(t, owned, "Api").Env; e["AWS_LAMBDA_FUNCTION_NAME"] != api || e["AWS_LAMBDA_FUNCTION_TIMEOUT"] != "6" {
		t.Errorf("the resolved environment overrode the runtime's: %s, %s", e["AWS_LAMBDA_FUNCTION_NAME"], e["AWS_LAMBDA_FUNCTION_TIMEOUT"])
	}
}

// writeTemplate writes a one-function template whose asset directory holds
// bootstrap (none when empty).
func writeTemplate(t *testing.T, bootstrap string, props map[string]any) string {
	t.Helper()
	dir := t.TempDir()
	asset := "asset.0123"
	if err := os.MkdirAll(filepath.Join(dir, asset), 0o755); err != nil {
		t.Fatal(err)
	}
	if bootstrap != "" {
		b, err := os.ReadFile(bootstrap)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, asset, "bootstrap"), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tpl := map[string]any{"Resources": map[string]any{
		"ProbeFunction": map[string]any{"Type": "AWS::Lambda::Function", "Properties": props,
			"Metadata": map[string]any{"aws:asset:path": asset}},
		"Queue": map[string]any{"Type": "AWS::SQS::Queue"},
	}}
	b, _ := json.Marshal(tpl)
	p := filepath.Join(dir, "Probe.template.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A function whose asset was not built from a lambdas/ package of this
// module, or has no bootstrap, is an error naming it: the runner never
// guesses what to run.
func TestFromTemplateRefusesAFunctionThatMapsToNoLambdasPackage(t *testing.T) {
	_, err := lambdarun.FromTemplate(writeTemplate(t, probeBootstrap(t), nil), nil, lambdarun.Config{})
	if err == nil || !strings.Contains(err.Error(), "ProbeFunction") || !strings.Contains(err.Error(), "testdata/probe") {
		t.Errorf("a testdata bootstrap: %v", err)
	}
	_, err = lambdarun.FromTemplate(writeTemplate(t, "", nil), nil, lambdarun.Config{})
	if err == nil || !strings.Contains(err.Error(), "ProbeFunction") {
		t.Errorf("no bootstrap in the asset: %v", err)
	}
	if _, err := lambdarun.FromTemplate(filepath.Join(t.TempDir(), "none.template.json"), nil, lambdarun.Config{}); err == nil {
		t.Error("a missing template read")
	}
}

// A real function from the template, built by Build and run by the runner:
// the relay given an event that is not a stream batch answers its
// handler's decoding error; a second Build changes nothing.
func TestRealBootstrapFromTheTemplateAnswersItsHandlerError(t *testing.T) {
	tpl := testenv.TemplatePath(t)
	cfg := lambdarun.Config{Bootstraps: t.TempDir(), Logs: t.TempDir()}
	var relayID string
	{
		fns, err := lambdarun.FromTemplate(tpl, nil, cfg)
		if err != nil {
			t.Fatal(err)
		}
		relayID = byPrefix(t, fns, "Relay").LogicalID
	}
	fns, err := lambdarun.FromTemplate(tpl, map[string]map[string]string{relayID: {"ONCEPAY_EVENTS_QUEUE_URL": "http://127.0.0.1:9/queue"}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	relay := byPrefix(t, fns, "Relay")
	changed, err := lambdarun.Build(context.Background(), root(t), []lambdarun.Function{relay})
	if err != nil || len(changed) != 1 {
		t.Fatalf("Build = %v, %v", changed, err)
	}
	st, err := os.Stat(relay.Bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := lambdarun.Build(context.Background(), root(t), []lambdarun.Function{relay}); err != nil || len(again) != 0 {
		t.Errorf("a second Build of unchanged source changed %v (%v)", again, err)
	}
	if st2, err := os.Stat(relay.Bootstrap); err != nil || !st2.ModTime().Equal(st.ModTime()) {
		t.Errorf("a second Build rewrote the bootstrap")
	}
	r := newRunner(t, relay)
	_, err = r.Invoke(context.Background(), relay.LogicalID, []byte(`"not a stream batch"`))
	fe := functionError(t, err, "UnmarshalTypeError")
	if !strings.Contains(fe.Message, "DynamoDBEvent") {
		t.Errorf("message %q", fe.Message)
	}
	out, err := r.Invoke(context.Background(), relay.LogicalID, []byte(`{"Records":[]}`))
	if err != nil || !strings.Contains(string(out), "batchItemFailures") {
		t.Errorf("an empty batch: %s, %v", out, err)
	}
	if s := r.Status()[0]; len(s.Environments) != 1 || s.Environments[0].Served != 2 {
		t.Errorf("status %+v", s)
	}
}

// A template's own numbers: FunctionName names the function, numbers may be
// strings, and a reserved concurrency of 0 throttles every invocation (as
// on Lambda) without starting anything.
func TestReservedConcurrencyZeroThrottlesEveryInvocation(t *testing.T) {
	tpl := testenv.TemplatePath(t)
	fns, err := lambdarun.FromTemplate(tpl, nil, lambdarun.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// The relay's asset: a bootstrap built from lambdas/relay (for Lambda's
	// arm64; it is never started here).
	var raw struct {
		Resources map[string]struct {
			Metadata map[string]any
		}
	}
	b, _ := os.ReadFile(tpl)
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	asset := raw.Resources[byPrefix(t, fns, "Relay").LogicalID].Metadata["aws:asset:path"].(string)
	p := writeTemplate(t, filepath.Join(filepath.Dir(tpl), asset, "bootstrap"),
		map[string]any{"FunctionName": "relay-local", "Timeout": "7", "MemorySize": 1024, "ReservedConcurrentExecutions": 0})
	cfg := lambdarun.Config{Bootstraps: filepath.Join(filepath.Dir(p), "bootstraps"), Logs: t.TempDir()}
	got, err := lambdarun.FromTemplate(p, nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d functions", len(got))
	}
	f := got[0]
	if f.Package != "lambdas/relay" || f.Name != "relay-local" || f.Env["AWS_LAMBDA_FUNCTION_NAME"] != "relay-local" ||
		f.Timeout != 7*time.Second || f.MemoryMB != 1024 || f.Reserved != 0 || f.MaxEnvironments != 0 {
		t.Fatalf("function %+v", f)
	}
	// A reservation caps the environments (prod's resolver reserves 1).
	one := writeTemplate(t, filepath.Join(filepath.Dir(tpl), asset, "bootstrap"),
		map[string]any{"FunctionName": "relay-one", "Timeout": "7", "MemorySize": 1024, "ReservedConcurrentExecutions": 1})
	if got, err := lambdarun.FromTemplate(one, nil, cfg); err != nil || len(got) != 1 || got[0].Reserved != 1 || got[0].MaxEnvironments != 1 {
		t.Fatalf("reserved 1: %+v, %v", got, err)
	}
	if err := os.MkdirAll(filepath.Dir(f.Bootstrap), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Bootstrap, []byte("never run"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, f)
	if _, err := r.Invoke(context.Background(), f.LogicalID, []byte(`{}`)); !errors.Is(err, invoke.ErrThrottled) {
		t.Errorf("an invocation of a function reserved at 0: %v", err)
	}
	if s := r.Status()[0]; len(s.Environments) != 0 || s.Invocations != 0 || s.MaxEnvironments != 0 {
		t.Errorf("status %+v", s)
	}
}
