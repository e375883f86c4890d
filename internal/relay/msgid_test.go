package relay_test

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/relay"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// sqsPunctuation is the punctuation SQS's API reference lists for
// MessageGroupId and MessageDeduplicationId.
const sqsPunctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

// messageIDOracle is SQS's documented rule written a second way: 1 to 128
// of a-z, A-Z, 0-9 and the listed punctuation.
var messageIDOracle = regexp.MustCompile(`^[a-zA-Z0-9` + regexp.QuoteMeta(sqsPunctuation) + `]{1,128}$`)

func TestCheckMessageIDRefusesWhatSQSRefuses(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"m1", true},
		{"pay_7:SUCCEEDED", true},
		{sqsPunctuation, true},
		{strings.Repeat("a", 128), true},
		{"", false},
		{"m 1", false}, // issue 13, defect 3
		{" m1", false},
		{"m\t1", false},
		{"m\n1", false},
		{strings.Repeat("a", 129), false},
		{"mé", false},
		{"m\x7f", false},
		{"m\x00", false},
	} {
		err := relay.CheckMessageID(tc.id)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, relay.ErrInvalidMessageID)) {
			t.Errorf("CheckMessageID(%q) = %v, want ok=%v", tc.id, err, tc.ok)
		}
		if messageIDOracle.MatchString(tc.id) != tc.ok {
			t.Errorf("the oracle disagrees on %q", tc.id)
		}
	}
}

// FuzzCheckMessageID: CheckMessageID agrees with SQS's documented rule.
func FuzzCheckMessageID(f *testing.F) {
	for _, s := range []string{"m1", "m 1", "", sqsPunctuation, strings.Repeat("x", 129), "é", "\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if err := relay.CheckMessageID(id); (err == nil) != messageIDOracle.MatchString(id) {
			t.Fatalf("CheckMessageID(%q) = %v, the documented rule says valid=%v", id, err, messageIDOracle.MatchString(id))
		}
	})
}

// Issue 13, defect 3: a merchant id with a space is a MessageGroupId SQS
// refuses (the sender's fault, on every retry). The relay checks ids before
// sending and sends such an event under a group id derived from the
// merchant, the same for all its events: the shard does not stall, the
// event is not dropped, and the replacement is counted. The fake SQS here
// refuses what SQS refuses; the old relay sent "m 1" and had the first
// record of the batch refused as unsendable.
func TestAMerchantIDSQSWouldRefuseIsSentUnderADerivedGroupID(t *testing.T) {
	ev := batch(4)
	for _, i := range []int{0, 2} {
		ev.Records[i].Change.NewImage["merchant_id"] = item(i, "", "m 1").Change.NewImage["merchant_id"]
	}
	f := &fakeSQS{strict: true}
	var emf bytes.Buffer
	r, err := relay.New(f, relay.Config{QueueURL: "http://q/events.fifo", Logger: quiet, Metrics: metrics.New(&emf, "relay")})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := r.Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v; want every record sent", resp, err)
	}
	if got := f.sent(); len(got) != 4 {
		t.Fatalf("sent %v, want all four", got)
	}
	entries := f.calls[0]
	g0, g2 := aws.ToString(entries[0].MessageGroupId), aws.ToString(entries[2].MessageGroupId)
	if relay.CheckMessageID(g0) != nil || g0 != g2 || g0 == "m1" || g0 == "m 1" {
		t.Fatalf("group ids %q and %q: want one valid stand-in for both events of merchant \"m 1\"", g0, g2)
	}
	if g := aws.ToString(entries[1].MessageGroupId); g != "m1" {
		t.Fatalf("a valid merchant's group id became %q", g)
	}
	if aws.ToString(entries[0].MessageBody) != `{"event_id":"pay_00:SUCCEEDED"}` {
		t.Fatalf("body changed: %s", aws.ToString(entries[0].MessageBody))
	}
	if n := metrics.Sum(emf.Bytes(), relay.MetricIDDerived); n != 2 {
		t.Fatalf("%s = %v, want 2", relay.MetricIDDerived, n)
	}
}

// The same against moto, which takes any group id: what reaches the queue
// is only ever an id SQS would take too.
func TestOnlyIDsSQSAcceptsReachARealQueue(t *testing.T) {
	client := testenv.SQS(t)
	q := testenv.NewFIFOQueue(t, client, 30e9, 5)
	r, err := relay.New(client, relay.Config{QueueURL: q.URL, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ev := batch(2)
	ev.Records[0].Change.NewImage["merchant_id"] = item(0, "", "m 1").Change.NewImage["merchant_id"]
	ev.Records[1].Change.NewImage["event_id"] = item(0, "pay 01:SUCCEEDED", "").Change.NewImage["event_id"]
	if resp, err := r.Handle(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v", resp, err)
	}
	msgs := testenv.Messages(t, client, q.URL)
	if len(msgs) != 2 {
		t.Fatalf("queue holds %d messages, want 2", len(msgs))
	}
	for _, m := range msgs {
		for _, a := range []string{"MessageGroupId", "MessageDeduplicationId"} {
			if err := relay.CheckMessageID(m.Attributes[a]); err != nil {
				t.Errorf("message %s reached the queue with %s %q: %v", aws.ToString(m.MessageId), a, m.Attributes[a], err)
			}
		}
	}
}
