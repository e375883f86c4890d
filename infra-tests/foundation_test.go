package infratests

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/awsclient"
	"github.com/oncepay/oncepay/internal/awsclient/dynamoclient"
	"github.com/oncepay/oncepay/internal/awsclient/sqsclient"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// The provisioned world is the template's: these read the tables and queues
// by the names the stack outputs carry (a deployed stack's outputs work too).
func TestProvisionedTablesMatchTheTemplate(t *testing.T) {
	env := testenv.AWS(t)
	ctx := context.Background()
	cfg, err := awsclient.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	db := dynamoclient.New(cfg)
	for _, tc := range []struct {
		name, pk string
		stream   bool
	}{
		{env.Get(stackenv.IdemTable), "pk", false},
		{env.Get(stackenv.OutboxTable), "event_id", true},
	} {
		d, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(tc.name)})
		if err != nil {
			t.Fatalf("describe %q: %v", tc.name, err)
		}
		ks := d.Table.KeySchema
		if len(ks) != 1 || aws.ToString(ks[0].AttributeName) != tc.pk || ks[0].KeyType != ddbtypes.KeyTypeHash {
			t.Errorf("%s key schema = %+v, want %s HASH", tc.name, ks, tc.pk)
		}
		s := d.Table.StreamSpecification
		hasStream := s != nil && aws.ToBool(s.StreamEnabled)
		if hasStream != tc.stream || (tc.stream && s.StreamViewType != ddbtypes.StreamViewTypeNewImage) {
			t.Errorf("%s stream = %+v, want stream=%v NEW_IMAGE", tc.name, s, tc.stream)
		}
		if tc.stream && aws.ToString(d.Table.LatestStreamArn) != env.Get(stackenv.OutboxStreamArn) {
			t.Errorf("stream arn %q != output %q", aws.ToString(d.Table.LatestStreamArn), env.Get(stackenv.OutboxStreamArn))
		}
		ttl, err := db.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(tc.name)})
		if err != nil {
			t.Fatal(err)
		}
		if d := ttl.TimeToLiveDescription; d == nil || d.TimeToLiveStatus != ddbtypes.TimeToLiveStatusEnabled || aws.ToString(d.AttributeName) != "expires_at" {
			t.Errorf("%s ttl = %+v, want expires_at enabled", tc.name, d)
		}
	}
}

func TestProvisionedQueueIsFIFOWithoutContentDedupAndRedrivesToTheDLQ(t *testing.T) {
	env := testenv.AWS(t)
	ctx := context.Background()
	cfg, err := awsclient.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q := sqsclient.New(cfg)
	a, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(env.Get(stackenv.EventsQueueURL)), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll},
	})
	if err != nil {
		t.Fatal(err)
	}
	if a.Attributes["FifoQueue"] != "true" || a.Attributes["ContentBasedDeduplication"] != "false" {
		t.Errorf("queue attributes = %v", a.Attributes)
	}
	var rp struct {
		Target string          `json:"deadLetterTargetArn"`
		Max    json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(a.Attributes["RedrivePolicy"]), &rp); err != nil {
		t.Fatalf("redrive policy %q: %v", a.Attributes["RedrivePolicy"], err)
	}
	if rp.Target != env.Get(stackenv.EventsDlqArn) {
		t.Errorf("redrive target %q, want the DLQ %q", rp.Target, env.Get(stackenv.EventsDlqArn))
	}
	if n, _ := strconv.Atoi(string(trimQuotes(rp.Max))); n < 1 {
		t.Errorf("maxReceiveCount = %s", rp.Max)
	}
	d, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(env.Get(stackenv.EventsDlqURL)), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameFifoQueue},
	})
	if err != nil || d.Attributes["FifoQueue"] != "true" {
		t.Errorf("DLQ is not FIFO: %v %v", d, err)
	}
}

func trimQuotes(b []byte) []byte {
	if len(b) >= 2 && b[0] == '"' {
		return b[1 : len(b)-1]
	}
	return b
}

// Expiry is checked in the read path and in every condition
// (docs/mechanism.md#seed-part-4); TTL only deletes, later. On the
// provisioned key record table.
func TestClaimConditionTreatsAnExpiredRecordAsAbsent(t *testing.T) {
	env := testenv.AWS(t)
	ctx := context.Background()
	cfg, err := awsclient.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	db := dynamoclient.New(cfg)
	table := env.Get(stackenv.IdemTable)
	now := time.Now().Unix()
	put := func(pk string, expires int64) error {
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(table),
			Item: map[string]ddbtypes.AttributeValue{
				"pk": &ddbtypes.AttributeValueMemberS{Value: pk}, "state": &ddbtypes.AttributeValueMemberS{Value: "IN_PROGRESS"},
				"expires_at": &ddbtypes.AttributeValueMemberN{Value: strconv.FormatInt(expires, 10)},
			},
			ConditionExpression:       aws.String("attribute_not_exists(pk) OR expires_at < :now"),
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":now": &ddbtypes.AttributeValueMemberN{Value: strconv.FormatInt(now, 10)}},
		})
		return err
	}
	live := "infra#" + testenv.RandomID(6)
	if err := put(live, now+3600); err != nil {
		t.Fatal(err)
	}
	var ccf *ddbtypes.ConditionalCheckFailedException
	if err := put(live, now+3600); !errors.As(err, &ccf) {
		t.Fatalf("a present, unexpired record did not block the claim: %v", err)
	}
	// An expired record that is still present: written unconditionally, then
	// claimed over at once (DynamoDB Local's TTL sweeper takes seconds).
	expired := "infra#" + testenv.RandomID(6)
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]ddbtypes.AttributeValue{
		"pk": &ddbtypes.AttributeValueMemberS{Value: expired}, "state": &ddbtypes.AttributeValueMemberS{Value: "COMPLETED"},
		"expires_at": &ddbtypes.AttributeValueMemberN{Value: strconv.FormatInt(now-10, 10)},
	}}); err != nil {
		t.Fatal(err)
	}
	got, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: expired}}, ConsistentRead: aws.Bool(true)})
	if err != nil || len(got.Item) == 0 {
		t.Fatalf("the expired record is not present (TTL raced the test): %v", err)
	}
	if err := put(expired, now+3600); err != nil {
		t.Fatalf("the claim over an expired, present record failed: %v", err)
	}
}
