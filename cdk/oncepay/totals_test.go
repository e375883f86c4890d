package oncepay_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/oncepay/oncepay/cdk/oncepay"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/eventsource"
	"github.com/oncepay/oncepay/internal/recount"
	"github.com/oncepay/oncepay/internal/totals"
)

// TestStreamTotals: the stream job's table is the one the job's own tests
// run on (totals.TableSchema: keys, the strongly consistent tag LSI, the
// day GSI), with TTL, PITR and the customer key; its mapping has the
// tumbling window and one batch per shard; its role holds only what the
// job calls.
func TestStreamTotals(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	st := s.stack
	table := s.resource(t, s.logicalID(t, st.Totals.Table))["Properties"].(map[string]any)
	schema := totals.TableSchema("x")
	keys := func(v any) []string {
		var out []string
		for _, k := range v.([]any) {
			k := k.(map[string]any)
			out = append(out, fmt.Sprint(k["AttributeName"], " ", k["KeyType"]))
		}
		return out
	}
	var wantKeys []string
	for _, k := range schema.KeySchema {
		wantKeys = append(wantKeys, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
	}
	if got := keys(table["KeySchema"]); !jsonEqual(got, wantKeys) {
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
	if !jsonEqual(gotAttrs, wantAttrs) {
		t.Errorf("attributes %v, want %v", gotAttrs, wantAttrs)
	}
	lsis, _ := table["LocalSecondaryIndexes"].([]any)
	if len(lsis) != 1 {
		t.Fatalf("local indexes %s, want the tag index", show(lsis))
	}
	lsi := lsis[0].(map[string]any)
	l := schema.LocalSecondaryIndexes[0]
	var wantLSI []string
	for _, k := range l.KeySchema {
		wantLSI = append(wantLSI, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
	}
	if lsi["IndexName"] != aws.ToString(l.IndexName) || !jsonEqual(keys(lsi["KeySchema"]), wantLSI) ||
		lsi["Projection"].(map[string]any)["ProjectionType"] != string(l.Projection.ProjectionType) {
		t.Errorf("tag index %s, want %s %v %s", show(lsi), aws.ToString(l.IndexName), wantLSI, l.Projection.ProjectionType)
	}
	gsis, _ := table["GlobalSecondaryIndexes"].([]any)
	if len(gsis) != 1 {
		t.Fatalf("global indexes %s, want the day index", show(gsis))
	}
	gsi := gsis[0].(map[string]any)
	g := schema.GlobalSecondaryIndexes[0]
	var wantGSI []string
	for _, k := range g.KeySchema {
		wantGSI = append(wantGSI, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
	}
	if gsi["IndexName"] != aws.ToString(g.IndexName) || !jsonEqual(keys(gsi["KeySchema"]), wantGSI) ||
		!jsonEqual(gsi["Projection"], map[string]any{"ProjectionType": "INCLUDE", "NonKeyAttributes": []any{totals.AttrTotal}}) {
		t.Errorf("day index %s, want %s %v INCLUDE %s", show(gsi), aws.ToString(g.IndexName), wantGSI, totals.AttrTotal)
	}
	if !jsonEqual(table["TimeToLiveSpecification"], map[string]any{"AttributeName": totals.AttrExpiresAt, "Enabled": true}) {
		t.Errorf("TTL %s, want %s (superseded carry chunks)", show(table["TimeToLiveSpecification"]), totals.AttrExpiresAt)
	}
	if sse, _ := table["SSESpecification"].(map[string]any); sse["SSEEnabled"] != true || sse["KMSMasterKeyId"] == nil {
		t.Errorf("encryption %s, want the customer key", show(sse))
	}

	mapping := s.resource(t, s.logicalID(t, st.Totals.Mapping))["Properties"].(map[string]any)
	want := map[string]any{
		"EventSourceArn":             getAtt(s.logicalID(t, st.Data.Outbox.Table), "StreamArn"),
		"FunctionName":               ref(s.logicalID(t, st.Totals.Function.Function)),
		"StartingPosition":           "TRIM_HORIZON",
		"BatchSize":                  100,
		"BisectBatchOnFunctionError": false,
		"MaximumRetryAttempts":       10,
		"MaximumRecordAgeInSeconds":  -1,
		"ParallelizationFactor":      1,
		"TumblingWindowInSeconds":    60,
		"DestinationConfig": map[string]any{"OnFailure": map[string]any{
			"Destination": getAtt(s.logicalID(t, st.Totals.FailureQueue), "Arn"),
		}},
	}
	if !jsonEqual(mapping, want) {
		t.Errorf("totals mapping:\n got %s\nwant %s", show(mapping), show(want))
	}

	grants := grantsOf(s.json, s.logicalID(t, st.Totals.Function.Role))
	tbl := "${" + s.logicalID(t, st.Totals.Table) + ".Arn}"
	var actions []string
	for a, rs := range grants {
		for _, r := range rs {
			actions = append(actions, a+" "+render(r))
		}
	}
	sort.Strings(actions)
	for _, must := range []string{
		"dynamodb:BatchWriteItem " + tbl, "dynamodb:GetItem " + tbl, "dynamodb:PutItem " + tbl,
		"dynamodb:Query " + tbl, "dynamodb:Query " + tbl + "/index/" + totals.IndexByTag,
		"sqs:SendMessage ${" + s.logicalID(t, st.Totals.Recount) + ".Arn}",
	} {
		if !contains(actions, must) {
			t.Errorf("the totals role lacks %s; it has:\n%v", must, actions)
		}
	}
	for _, never := range []string{"dynamodb:DeleteItem", "dynamodb:UpdateItem", "dynamodb:Scan", "dynamodb:DeleteTable"} {
		if _, ok := grants[never]; ok {
			t.Errorf("the totals role may %s: the job never does (deletes go through BatchWriteItem)", never)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestStreamTotalsRefusesAMappingTheJobCannotRunOn: no window, more than
// one batch per shard, partial batch failures.
func TestStreamTotalsRefusesAMappingTheJobCannotRunOn(t *testing.T) {
	for name, mutate := range map[string]func(*eventsource.Stream){
		"no window":        func(s *eventsource.Stream) { s.TumblingWindow = 0 },
		"parallelization":  func(s *eventsource.Stream) { s.ParallelizationFactor = 2 },
		"partial failures": func(s *eventsource.Stream) { s.ReportBatchItemFailures = true },
		"window too long":  func(s *eventsource.Stream) { s.TumblingWindow = 16 * time.Minute },
	} {
		t.Run(name, func(t *testing.T) {
			settings := eventsource.Default().Totals
			mutate(&settings)
			defer func() {
				if recover() == nil {
					t.Errorf("NewStreamTotals accepted %+v", settings)
				}
			}()
			synthAlone(t, func(stack awscdk.Stack) {
				out := oncepay.NewOutboxTable(stack, "Outbox", nil)
				oncepay.NewStreamTotals(stack, "Totals", &oncepay.StreamTotalsProps{Outbox: out, Settings: &settings, Code: oncepay.CodeFromBuild(stack, oncepay.FnTotals)})
			})
		})
	}
}

// TestStreamTotalsRecount: with the ledger, the recount function consumes
// the recount queue and the mapping's on-failure queue with partial batch
// failures (a request whose day is open is held back, not deleted); both
// queues give a delivery six times the function's timeout and park what
// the recount cannot do in its DLQ after RecountMaxReceives deliveries,
// more than the holds a request waits through; its role writes the
// recount's rows and nothing else of the table.
func TestStreamTotalsRecount(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	st := s.stack.Totals
	fn := s.logicalID(t, st.RecountFunction.Function)
	dlq := getAtt(s.logicalID(t, st.RecountDlq), "Arn")
	timeout := oncepay.SizingsFor(config.Default()).Recount.Timeout
	// A request waits for its day to end in holds of at most MaxHold: the
	// DLQ must not take one that only waited.
	if holds := int((24*time.Hour+recount.DefaultSettle)/recount.MaxHold) + 2; oncepay.RecountMaxReceives <= holds {
		t.Errorf("RecountMaxReceives %d: a request that only waits for its day is delivered up to %d times", oncepay.RecountMaxReceives, holds)
	}
	for i, q := range []awssqs.Queue{st.Recount, st.FailureQueue} {
		qp := s.resource(t, s.logicalID(t, q))["Properties"].(map[string]any)
		if qp["VisibilityTimeout"] != 6*timeout.Seconds() ||
			!jsonEqual(qp["RedrivePolicy"], map[string]any{"deadLetterTargetArn": dlq, "maxReceiveCount": oncepay.RecountMaxReceives}) {
			t.Errorf("queue %d: visibility %v, redrive %s", i, qp["VisibilityTimeout"], show(qp["RedrivePolicy"]))
		}
		m := s.resource(t, s.logicalID(t, st.RecountMappings[i]))["Properties"].(map[string]any)
		want := map[string]any{"EventSourceArn": getAtt(s.logicalID(t, q), "Arn"), "FunctionName": ref(fn),
			"BatchSize": 10, "FunctionResponseTypes": []any{"ReportBatchItemFailures"}}
		if !jsonEqual(m, want) {
			t.Errorf("recount mapping %d:\n got %s\nwant %s", i, show(m), show(want))
		}
	}
	grants := grantsOf(s.json, s.logicalID(t, st.RecountFunction.Role))
	tbl := "${" + s.logicalID(t, st.Table) + ".Arn}"
	if rs := grants["dynamodb:PutItem"]; len(rs) != 1 || rs[0] != tbl {
		t.Errorf("the recount's PutItem on %v, want the totals table", rs)
	}
	for _, never := range []string{"dynamodb:DeleteItem", "dynamodb:BatchWriteItem", "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:GetItem"} {
		if _, ok := grants[never]; ok {
			t.Errorf("the recount role may %s: it never does", never)
		}
	}
	// A discarded batch read back; its open keys sent on.
	streamArn := "${" + s.logicalID(t, s.stack.Data.Outbox.Table) + ".StreamArn}"
	for _, a := range []string{"dynamodb:GetShardIterator", "dynamodb:GetRecords"} {
		if rs := grants[a]; len(rs) != 1 || rs[0] != streamArn {
			t.Errorf("the recount's %s on %v, want the outbox stream", a, rs)
		}
	}
	if rs := grants["sqs:SendMessage"]; len(rs) != 1 || rs[0] != "${"+s.logicalID(t, st.Recount)+".Arn}" {
		t.Errorf("the recount's SendMessage on %v, want its own queue", rs)
	}
	for _, q := range []awssqs.Queue{st.Recount, st.FailureQueue} {
		arn := "${" + s.logicalID(t, q) + ".Arn}"
		for _, a := range []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"} {
			if !contains(grants[a], arn) {
				t.Errorf("the recount role lacks %s on %s", a, arn)
			}
		}
	}
}
