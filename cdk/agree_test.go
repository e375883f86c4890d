package main

// The constructs' module (cdk/oncepay) depends on nothing of the handlers':
// what the two must agree on beyond the shared names in cdk/oncepay's
// stackenv, eventsource, config and totalstable is checked here, in the
// root module, which sees both.

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncepay/oncepay/cdk/oncepay"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/reconcile"
	"github.com/oncepay/oncepay/internal/recount"
	"github.com/oncepay/oncepay/internal/totals"
)

// synthSandbox builds the app's sandbox stack in this process, from
// cdk.json's context, and returns its template.
func synthSandbox(t *testing.T) (*oncepay.Stack, map[string]any) {
	t.Helper()
	ctx := appContext(t)
	app := awscdk.NewApp(&awscdk.AppProps{Context: &ctx})
	props, err := oncepay.StackPropsFromContext(app)
	if err != nil {
		t.Fatal(err)
	}
	s := oncepay.NewStack(app, "Agree", props)
	var js map[string]any
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("synth: %v", r)
			}
		}()
		js = *assertions.Template_FromStack(s.Stack, nil).ToJSON()
	}()
	return s, js
}

func resourceProps(t *testing.T, js map[string]any, id string) map[string]any {
	t.Helper()
	r, ok := js["Resources"].(map[string]any)[id].(map[string]any)
	if !ok {
		t.Fatalf("no resource %s", id)
	}
	return r["Properties"].(map[string]any)
}

func jsonEq(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestTheTotalsTableIsTheJobs: the stack's totals table is the one the
// job's own tests run on (totals.TableSchema: keys, the strongly
// consistent tag LSI, the day GSI) with the TTL the carry chunks use.
func TestTheTotalsTableIsTheJobs(t *testing.T) {
	s, js := synthSandbox(t)
	id := *s.Stack.GetLogicalId(s.Totals.Table.Node().DefaultChild().(awscdk.CfnElement))
	table := resourceProps(t, js, id)
	schema := totals.TableSchema("x")
	keys := func(v any) []string {
		var out []string
		for _, k := range v.([]any) {
			k := k.(map[string]any)
			out = append(out, fmt.Sprint(k["AttributeName"], " ", k["KeyType"]))
		}
		return out
	}
	wantKeys := sdkKeys(schema.KeySchema)
	if got := keys(table["KeySchema"]); !jsonEq(got, wantKeys) {
		t.Errorf("key schema %v, want %v", got, wantKeys)
	}
	var gotAttrs, wantAttrs []string
	for _, a := range table["AttributeDefinitions"].([]any) {
		a := a.(map[string]any)
		gotAttrs = append(gotAttrs, fmt.Sprint(a["AttributeName"], " ", a["AttributeType"]))
	}
	for _, a := range schema.AttributeDefinitions {
		wantAttrs = append(wantAttrs, aws.ToString(a.AttributeName)+" "+string(a.AttributeType))
	}
	sort.Strings(gotAttrs)
	sort.Strings(wantAttrs)
	if !jsonEq(gotAttrs, wantAttrs) {
		t.Errorf("attributes %v, want %v", gotAttrs, wantAttrs)
	}
	lsis, _ := table["LocalSecondaryIndexes"].([]any)
	if len(lsis) != 1 {
		t.Fatalf("local indexes %v, want the tag index", lsis)
	}
	lsi := lsis[0].(map[string]any)
	l := schema.LocalSecondaryIndexes[0]
	wantLSI := sdkKeys(l.KeySchema)
	if lsi["IndexName"] != aws.ToString(l.IndexName) || !jsonEq(keys(lsi["KeySchema"]), wantLSI) ||
		lsi["Projection"].(map[string]any)["ProjectionType"] != string(l.Projection.ProjectionType) {
		t.Errorf("tag index %v, want %s %v %s", lsi, aws.ToString(l.IndexName), wantLSI, l.Projection.ProjectionType)
	}
	gsis, _ := table["GlobalSecondaryIndexes"].([]any)
	if len(gsis) != 1 {
		t.Fatalf("global indexes %v, want the day index", gsis)
	}
	gsi := gsis[0].(map[string]any)
	g := schema.GlobalSecondaryIndexes[0]
	wantGSI := sdkKeys(g.KeySchema)
	if gsi["IndexName"] != aws.ToString(g.IndexName) || !jsonEq(keys(gsi["KeySchema"]), wantGSI) ||
		!jsonEq(gsi["Projection"], map[string]any{"ProjectionType": "INCLUDE", "NonKeyAttributes": []any{totals.AttrTotal}}) {
		t.Errorf("day index %v, want %s %v INCLUDE %s", gsi, aws.ToString(g.IndexName), wantGSI, totals.AttrTotal)
	}
	if !jsonEq(table["TimeToLiveSpecification"], map[string]any{"AttributeName": totals.AttrExpiresAt, "Enabled": true}) {
		t.Errorf("TTL %v, want %s (superseded carry chunks)", table["TimeToLiveSpecification"], totals.AttrExpiresAt)
	}
}

// sdkKeys renders a key schema as the template's keys are: "name TYPE".
func sdkKeys(ks []ddbtypes.KeySchemaElement) []string {
	var out []string
	for _, k := range ks {
		out = append(out, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
	}
	return out
}

// TestTheRecountQueuesOutwaitADay: a recount request waits for its day to
// end in holds of at most recount.MaxHold; the DLQ must not take one that
// only waited.
func TestTheRecountQueuesOutwaitADay(t *testing.T) {
	if holds := int((24*time.Hour+recount.DefaultSettle)/recount.MaxHold) + 2; oncepay.RecountMaxReceives <= holds {
		t.Errorf("RecountMaxReceives %d: a request that only waits for its day is delivered up to %d times", oncepay.RecountMaxReceives, holds)
	}
}

// TestTheAlarmsWatchWhatTheHandlersEmit: metric names the constructs'
// alarms watch and the handlers emit.
func TestTheAlarmsWatchWhatTheHandlersEmit(t *testing.T) {
	if oncepay.MetricOutboxRedriven != outbox.MetricRedriven {
		t.Errorf("the alarm watches %q, the sweep emits %q", oncepay.MetricOutboxRedriven, outbox.MetricRedriven)
	}
}

// TestTheReconcileAlarmsWatchWhatItEmits: each reconciliation metric the
// stack names (alarms, dashboard) is the one the handler emits for its
// outcome.
func TestTheReconcileAlarmsWatchWhatItEmits(t *testing.T) {
	for stack, o := range map[string]reconcile.Outcome{
		oncepay.MetricReconcileNeedsHuman:    reconcile.NeedsHuman,
		oncepay.MetricReconcileAdopted:       reconcile.Adopted,
		oncepay.MetricReconcileReversed:      reconcile.Reversed,
		oncepay.MetricReconcileReversalOpen:  reconcile.ReversalOpen,
		oncepay.MetricReconcileSettled:       reconcile.Settled,
		oncepay.MetricReconcileRefundSettled: reconcile.RefundSettled,
		oncepay.MetricReconcileRefundFailed:  reconcile.RefundReopen,
		oncepay.MetricReconcileOpen:          reconcile.Open,
		oncepay.MetricReconcileForeign:       reconcile.Foreign,
	} {
		if h := reconcile.MetricOf(o); h != stack {
			t.Errorf("the stack watches %q, the handler emits %q for %s", stack, h, o)
		}
	}
}

// TestTheReconcileScheduleReconcilesTheTwoPreviousDays: the rule sends
// EventBridge's own scheduled event (no Input), which names no span, so the
// handler takes the two previous UTC days; a run at 00:30 UTC covers the
// day just over.
func TestTheReconcileScheduleReconcilesTheTwoPreviousDays(t *testing.T) {
	s, js := synthSandbox(t)
	id := *s.Stack.GetLogicalId(s.Reconciliation.Schedule.Node().DefaultChild().(awscdk.CfnElement))
	targets := resourceProps(t, js, id)["Targets"].([]any)
	if len(targets) != 1 {
		t.Fatalf("targets %v", targets)
	}
	for _, k := range []string{"Input", "InputPath", "InputTransformer"} {
		if v, ok := targets[0].(map[string]any)[k]; ok {
			t.Errorf("the target sets %s (%v): the handler reads a span from it", k, v)
		}
	}
	event := `{"version":"0","id":"1","detail-type":"Scheduled Event","source":"aws.events","account":"111111111111",` +
		`"time":"2026-12-08T00:30:00Z","region":"eu-west-1","resources":["arn:aws:events:eu-west-1:111111111111:rule/r"],"detail":{}}`
	var q reconcile.Request
	if err := json.Unmarshal([]byte(event), &q); err != nil {
		t.Fatal(err)
	}
	spans, err := q.Spans(time.Date(2026, 12, 8, 0, 30, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	day := func(d int) time.Time { return time.Date(2026, 12, d, 0, 0, 0, 0, time.UTC) }
	if want := [][2]time.Time{{day(7), day(8)}, {day(6), day(7)}}; !jsonEq(spans, want) {
		t.Errorf("a scheduled run reconciles %v, want %v", spans, want)
	}
	if oncepay.ReconcileSchedule != "cron(30 0 * * ? *)" {
		t.Errorf("schedule %s: the test above assumes 00:30 UTC", oncepay.ReconcileSchedule)
	}
}

// TestBothModulesBuildWithTheSameCDK: the app (this module) and the
// constructs' tests (their module, which synthesizes the prod and ALB
// templates make test-cfn lints) select the same CDK, jsii and cdk-nag;
// an upgrade in one go.mod alone would let them drift.
func TestBothModulesBuildWithTheSameCDK(t *testing.T) {
	mods := []string{"github.com/aws/aws-cdk-go/awscdk/v2", "github.com/aws/constructs-go/constructs/v10", "github.com/aws/jsii-runtime-go", "github.com/cdklabs/cdk-nag-go/cdknag/v2"}
	selected := func(dir string) string {
		cmd := exec.Command("go", append([]string{"list", "-m", "-f", "{{.Path}} {{.Version}}"}, mods...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -m in %s: %v\n%s", dir, err, out)
		}
		return string(out)
	}
	if app, constructs := selected("."), selected("oncepay"); app != constructs {
		t.Errorf("the app selects\n%s\nthe constructs' module\n%s", app, constructs)
	}
}
