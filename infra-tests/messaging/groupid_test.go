package messaging_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/relay"
)

// likeSQS refuses, entry by entry and as the sender's fault, what SQS
// refuses and moto takes: a group or dedup id outside SQS's documented
// alphabet and length. Everything else goes to moto.
type likeSQS struct {
	next    relay.SendMessageBatchAPI
	refused int
}

func (s *likeSQS) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	var pass []sqstypes.SendMessageBatchRequestEntry
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		if relay.CheckMessageID(aws.ToString(e.MessageGroupId)) != nil || relay.CheckMessageID(aws.ToString(e.MessageDeduplicationId)) != nil {
			s.refused++
			out.Failed = append(out.Failed, sqstypes.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InvalidParameterValue"),
				Message: aws.String("Value for parameter MessageGroupId is invalid."), SenderFault: true})
			continue
		}
		pass = append(pass, e)
	}
	if len(pass) > 0 {
		got, err := s.next.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: in.QueueUrl, Entries: pass}, opts...)
		if err != nil {
			return nil, err
		}
		out.Successful = append(out.Successful, got.Successful...)
		out.Failed = append(out.Failed, got.Failed...)
	}
	return out, nil
}

// Issue 13, defect 3 on the whole path, with SQS's own rule in front of
// moto: an event whose merchant id holds a space (written before the API
// checked merchant ids) neither stalls its shard nor vanishes. The relay
// sends it under a derived group id; the worker credits "m 1" from the body;
// m1's event behind it flows. The old relay sent "m 1", SQS refused it on
// every retry, and the mapping dropped it after stalling the shard.
func TestAMerchantIDSQSWouldRefuseNeitherStallsTheShardNorLosesTheEvent(t *testing.T) {
	t.Parallel()
	var front *likeSQS
	w := newWorld(t, options{relaySQS: func(next relay.SendMessageBatchAPI) relay.SendMessageBatchAPI {
		front = &likeSQS{next: next}
		return front
	}})
	spaced, behind := pay("pay_sp", "m 1", inbox.Succeeded, 700), pay("pay_7", "m1", inbox.Succeeded, 3000)
	w.publish(spaced, behind)
	w.relayAll()
	w.work()
	if st := w.stream.Stats(); front.refused != 0 || st.FunctionErrors != 0 || st.PartialFailures != 0 || st.Discarded != 0 {
		t.Fatalf("SQS refused %d entries; relay stats %+v: want every record sent first time", front.refused, st)
	}
	if a, b := w.balance("m 1"), w.balance("m1"); a != 700 || b != 15000 {
		t.Fatalf(`"m 1" = %d, m1 = %d; want 700 and 12000 -> 15000`, a, b)
	}
	if got := w.emf.sum(relay.MetricIDDerived); got != 1 {
		t.Fatalf("%s = %v, want 1", relay.MetricIDDerived, got)
	}
	if got := w.collect(); len(got) != 2 {
		t.Fatalf("%d pushes, want 2", len(got))
	}
}
