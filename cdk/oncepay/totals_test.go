package oncepay_test

import (
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"

	"github.com/oncepay/oncepay/cdk/oncepay"
	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
	"github.com/oncepay/oncepay/cdk/oncepay/totalstable"
)

// TestStreamTotals: the stream job's table has the customer key (that it is
// the one the job's own tests run on is cdk/agree_test.go's check); its mapping has the
// tumbling window and one batch per shard; its role holds only what the
// job calls.
func TestStreamTotals(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	st := s.stack
	table := s.resource(t, s.logicalID(t, st.Totals.Table))["Properties"].(map[string]any)
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
		"MaximumRetryAttempts":       -1,    // a window's final invoke is retried (docs/stream-job.md#lost-state)
		"MaximumRecordAgeInSeconds":  82800, // an hour short of the stream's retention
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
		"dynamodb:Query " + tbl, "dynamodb:Query " + tbl + "/index/" + totalstable.IndexByTag,
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
