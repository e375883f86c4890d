package relay_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncepay/oncepay/internal/relay"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// fakeSQS records every entry sent and fails the entries or calls it is told to.
type fakeSQS struct {
	calls    [][]sqstypes.SendMessageBatchRequestEntry
	failCall map[int]error   // call index -> error
	failID   map[string]bool // dedup id -> fail that entry (receiver's fault)
	sender   map[string]bool // dedup id -> fail that entry as the sender's fault
	strict   bool            // refuse, as SQS does, group and dedup ids outside its alphabet
}

func (f *fakeSQS) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	n := len(f.calls)
	f.calls = append(f.calls, in.Entries)
	if err := f.failCall[n]; err != nil {
		return nil, err
	}
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		id := aws.ToString(e.MessageDeduplicationId)
		switch {
		case f.strict && (relay.CheckMessageID(id) != nil || relay.CheckMessageID(aws.ToString(e.MessageGroupId)) != nil):
			out.Failed = append(out.Failed, sqstypes.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InvalidParameterValue"),
				Message: aws.String("Value for parameter MessageGroupId is invalid."), SenderFault: true})
		case f.failID[id]:
			out.Failed = append(out.Failed, sqstypes.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError"), Message: aws.String("try again")})
		case f.sender[id]:
			out.Failed = append(out.Failed, sqstypes.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InvalidParameterValue"), Message: aws.String("no"), SenderFault: true})
		default:
			out.Successful = append(out.Successful, sqstypes.SendMessageBatchResultEntry{Id: e.Id})
		}
	}
	return out, nil
}

func (f *fakeSQS) sent() []string {
	var ids []string
	for _, c := range f.calls {
		for _, e := range c {
			ids = append(ids, aws.ToString(e.MessageDeduplicationId))
		}
	}
	return ids
}

func item(seq int, eventID, merchant string) events.DynamoDBEventRecord {
	return events.DynamoDBEventRecord{
		EventName: "INSERT",
		Change: events.DynamoDBStreamRecord{
			SequenceNumber: strconv.Itoa(100 + seq),
			NewImage: map[string]events.DynamoDBAttributeValue{
				"event_id":    events.NewStringAttribute(eventID),
				"merchant_id": events.NewStringAttribute(merchant),
				"payload":     events.NewStringAttribute(`{"event_id":"` + eventID + `"}`),
				"expires_at":  events.NewNumberAttribute("1999999999"),
			},
		},
	}
}

func batch(n int) events.DynamoDBEvent {
	var ev events.DynamoDBEvent
	for i := range n {
		ev.Records = append(ev.Records, item(i, fmt.Sprintf("pay_%02d:SUCCEEDED", i), fmt.Sprintf("m%d", i%3)))
	}
	return ev
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newRelay(t *testing.T, f *fakeSQS) *relay.Relay {
	t.Helper()
	r, err := relay.New(f, relay.Config{QueueURL: "http://q/events.fifo", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSendsInStreamOrderTenPerCallWithTheItemsIDs(t *testing.T) {
	f := &fakeSQS{}
	resp, err := newRelay(t, f).Handle(context.Background(), batch(23))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v", resp, err)
	}
	if len(f.calls) != 3 || len(f.calls[0]) != 10 || len(f.calls[2]) != 3 {
		t.Fatalf("calls of %d, %d, %d entries; want 10, 10, 3", len(f.calls[0]), len(f.calls[1]), len(f.calls[2]))
	}
	for i, id := range f.sent() {
		if want := fmt.Sprintf("pay_%02d:SUCCEEDED", i); id != want {
			t.Fatalf("entry %d has dedup id %s, want %s (stream order)", i, id, want)
		}
	}
	e := f.calls[0][4]
	if aws.ToString(e.MessageGroupId) != "m1" || aws.ToString(e.MessageBody) != `{"event_id":"pay_04:SUCCEEDED"}` {
		t.Fatalf("entry 4 = group %s body %s", aws.ToString(e.MessageGroupId), aws.ToString(e.MessageBody))
	}
}

func TestRemoveRecordsFromTTLAreIgnoredAndModifyIsSent(t *testing.T) {
	ev := batch(3)
	ev.Records[0].EventName = "REMOVE"
	ev.Records[0].Change.NewImage = nil
	ev.Records[2].EventName = "MODIFY"
	f := &fakeSQS{}
	resp, err := newRelay(t, f).Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v", resp, err)
	}
	if got := f.sent(); len(got) != 2 || got[0] != "pay_01:SUCCEEDED" || got[1] != "pay_02:SUCCEEDED" {
		t.Fatalf("sent %v, want the INSERT and the MODIFY", got)
	}
}

func TestAFailedEntryIsReportedAndNothingAfterItIsSent(t *testing.T) {
	f := &fakeSQS{failID: map[string]bool{"pay_13:SUCCEEDED": true, "pay_15:SUCCEEDED": true}}
	resp, err := newRelay(t, f).Handle(context.Background(), batch(25))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "113" {
		t.Fatalf("failures = %+v, want only the first failed record's sequence number 113", resp.BatchItemFailures)
	}
	if len(f.calls) != 2 {
		t.Fatalf("%d calls, want 2: the relay stops at the chunk holding the failure", len(f.calls))
	}
}

func TestAFailedCallReportsTheFirstRecordOfItsChunk(t *testing.T) {
	f := &fakeSQS{failCall: map[int]error{1: errors.New("connection reset")}}
	resp, err := newRelay(t, f).Handle(context.Background(), batch(25))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "110" {
		t.Fatalf("failures = %+v, want record 10 (sequence 110)", resp.BatchItemFailures)
	}
}

func TestAnUnsendableRecordFirstInTheBatchFailsTheInvocationSoBisectIsolatesIt(t *testing.T) {
	ev := batch(4)
	delete(ev.Records[0].Change.NewImage, "merchant_id")
	f := &fakeSQS{}
	_, err := newRelay(t, f).Handle(context.Background(), ev)
	if !errors.Is(err, relay.ErrUnsendable) {
		t.Fatalf("err = %v, want ErrUnsendable", err)
	}
	if len(f.calls) != 0 {
		t.Fatalf("sent %v before the bad first record", f.sent())
	}
}

func TestAnUnsendableRecordAfterGoodOnesIsReportedAfterTheyAreSent(t *testing.T) {
	ev := batch(4)
	delete(ev.Records[2].Change.NewImage, "payload")
	f := &fakeSQS{}
	resp, err := newRelay(t, f).Handle(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "102" {
		t.Fatalf("failures = %+v, want record 2", resp.BatchItemFailures)
	}
	if got := f.sent(); len(got) != 2 {
		t.Fatalf("sent %v, want the two records before it", got)
	}
}

func TestAnEntryRefusedAsTheSendersFaultIsUnsendable(t *testing.T) {
	f := &fakeSQS{sender: map[string]bool{"pay_00:SUCCEEDED": true}}
	_, err := newRelay(t, f).Handle(context.Background(), batch(3))
	if !errors.Is(err, relay.ErrUnsendable) {
		t.Fatalf("err = %v, want ErrUnsendable for a sender-fault refusal of the first record", err)
	}
}

// Against moto: the FIFO queue gets the item's ids as dedup and group ids,
// and a re-send within the window is dropped by the queue.
func TestSendsToARealFIFOQueue(t *testing.T) {
	client := testenv.SQS(t)
	q := testenv.NewFIFOQueue(t, client, 30e9, 5)
	r, err := relay.New(client, relay.Config{QueueURL: q.URL})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second Handle is a retried batch: same ids
		resp, err := r.Handle(context.Background(), batch(3))
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("Handle = %+v, %v", resp, err)
		}
	}
	msgs := testenv.Messages(t, client, q.URL)
	if len(msgs) != 3 {
		t.Fatalf("queue holds %d messages, want 3 (the re-send dropped by the dedup window)", len(msgs))
	}
	for i, m := range msgs {
		if got := m.Attributes["MessageDeduplicationId"]; got != fmt.Sprintf("pay_%02d:SUCCEEDED", i) {
			t.Errorf("message %d dedup id %s", i, got)
		}
		if got := m.Attributes["MessageGroupId"]; got != fmt.Sprintf("m%d", i%3) {
			t.Errorf("message %d group id %s", i, got)
		}
	}
}
