package totals

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TableSchema is the sink table's shape: the stack declares the same keys
// and indexes, and the tests create their tables from it.
func TableSchema(name string) *dynamodb.CreateTableInput {
	s := func(n string) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(n), AttributeType: types.ScalarAttributeTypeS}
	}
	return &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(AttrShard), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(AttrSortKey), KeyType: types.KeyTypeRange},
		},
		AttributeDefinitions: []types.AttributeDefinition{
			s(AttrShard), s(AttrSortKey), s(AttrKey),
			{AttributeName: aws.String(AttrTag), AttributeType: types.ScalarAttributeTypeN},
		},
		LocalSecondaryIndexes: []types.LocalSecondaryIndex{{
			IndexName: aws.String(IndexByTag),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(AttrShard), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(AttrTag), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly},
		}},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
			IndexName: aws.String(IndexByKey),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(AttrKey), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(AttrShard), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: []string{AttrTotal}},
		}},
	}
}
