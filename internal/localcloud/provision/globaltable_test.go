package provision_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncepay/oncepay/internal/localcloud/provision"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// A global table is made in this Region and in each replica Region the
// provisioner has a client for, under its one name, each with a stream of
// new and old images (what replication reads) and the template's TTL;
// its Ref is the name, as a table's. A second run changes nothing.
func TestAGlobalTableIsMadeInEveryReplicaRegion(t *testing.T) {
	testenv.AWS(t)
	ctx := context.Background()
	east, west := testenv.DynamoDB(t), testenv.R2DynamoDB(t)
	r2 := testenv.R2Region(t)
	name := "gt-" + testenv.RandomID(4)
	t.Cleanup(func() {
		for _, db := range []*dynamodb.Client{east, west} {
			_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name})
		}
	})
	tpl := &provision.Template{Resources: map[string]provision.Resource{"Claims": {
		Type: "AWS::DynamoDB::GlobalTable",
		Properties: map[string]any{
			"TableName":               name,
			"KeySchema":               []any{map[string]any{"AttributeName": "pk", "KeyType": "HASH"}},
			"AttributeDefinitions":    []any{map[string]any{"AttributeName": "pk", "AttributeType": "S"}},
			"BillingMode":             "PAY_PER_REQUEST",
			"StreamSpecification":     map[string]any{"StreamViewType": "NEW_AND_OLD_IMAGES"},
			"TimeToLiveSpecification": map[string]any{"AttributeName": "expires_at", "Enabled": true},
			"Replicas":                []any{map[string]any{"Region": r2}, map[string]any{"Region": "us-east-1"}},
		},
	}}}
	// No client for a replica Region: refused, nothing made.
	if _, err := (&provision.Provisioner{DynamoDB: east, Region: "us-east-1"}).Provision(ctx, tpl); err == nil {
		t.Fatalf("a global table with a replica in %s and no DynamoDB Local for it was provisioned", r2)
	}
	if _, err := east.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &name}); err == nil {
		t.Fatal("the refused global table was made anyway")
	}
	p := &provision.Provisioner{DynamoDB: east, Region: "us-east-1", Replicas: map[string]*dynamodb.Client{r2: west}}
	var stream string
	for run := range 2 {
		phys, err := p.Provision(ctx, tpl)
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		ph := phys["Claims"]
		if ph.Type != "AWS::DynamoDB::GlobalTable" || ph.Name != name || ph.StreamArn == "" {
			t.Fatalf("run %d: physical %+v, want the global table %s with its stream", run, ph, name)
		}
		if run == 1 && ph.StreamArn != stream {
			t.Errorf("the second run changed the stream: %s, then %s (the table was made again)", stream, ph.StreamArn)
		}
		stream = ph.StreamArn
	}
	for region, db := range map[string]*dynamodb.Client{"us-east-1": east, r2: west} {
		d, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &name})
		if err != nil {
			t.Fatalf("%s: no replica: %v", region, err)
		}
		if s := d.Table.StreamSpecification; s == nil || !aws.ToBool(s.StreamEnabled) || s.StreamViewType != ddbtypes.StreamViewTypeNewAndOldImages {
			t.Errorf("%s: replica stream %+v, want NEW_AND_OLD_IMAGES", region, s)
		}
		ttl, err := db.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: &name})
		if err != nil {
			t.Fatal(err)
		}
		if d := ttl.TimeToLiveDescription; d == nil || aws.ToString(d.AttributeName) != "expires_at" {
			t.Errorf("%s: replica TTL %+v, want expires_at", region, d)
		}
	}
}
