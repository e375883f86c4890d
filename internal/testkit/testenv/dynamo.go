package testenv

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncepay/oncepay/internal/awsclient"
	"github.com/oncepay/oncepay/internal/awsclient/dynamoclient"
)

// DynamoDB returns a client for the local cloud's DynamoDB (or the endpoint
// the environment names), failing or skipping per the CI rule.
func DynamoDB(t testing.TB) *dynamodb.Client {
	t.Helper()
	AWS(t)
	cfg, err := awsclient.Config(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return dynamoclient.New(cfg)
}

// NewTable creates a table of the test's own (partition key pk of type S,
// on-demand) and deletes it when the test ends. TTL is deliberately left off:
// a test that needs an expired record to still be present gets one.
func NewTable(t testing.TB, db *dynamodb.Client, pk string) string {
	t.Helper()
	return newTable(t, db, pk, nil)
}

// NewStreamTable is NewTable with a stream of the given view (a replicator
// or a relay reads it).
func NewStreamTable(t testing.TB, db *dynamodb.Client, pk string, view types.StreamViewType) string {
	t.Helper()
	return newTable(t, db, pk, &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: view})
}

func newTable(t testing.TB, db *dynamodb.Client, pk string, stream *types.StreamSpecification) string {
	t.Helper()
	name := "t-" + RandomID(6)
	_, err := db.CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName:            &name,
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(pk), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(pk), AttributeType: types.ScalarAttributeTypeS}},
		BillingMode:          types.BillingModePayPerRequest,
		StreamSpecification:  stream,
	})
	if err != nil {
		t.Fatalf("create table %s: %v", name, err)
	}
	t.Cleanup(func() {
		_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name})
	})
	return name
}
