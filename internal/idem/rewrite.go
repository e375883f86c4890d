package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ErrNotPointer means a Finalize found no COMPLETED pointer to the payment
// under the scope (an IN_PROGRESS, final-answer or VOID record, another
// payment's, or none at all) and changed nothing.
var ErrNotPointer = errors.New("idem: the record is not a pointer to this payment")

// Finalize rewrites a stored pointer into the payment's final answer once
// the payment has become final (docs/mechanism.md#seed-part-5: the resolver
// rewrites the stored pointer into the final answer). It is conditional on
// the record still being a COMPLETED pointer to paymentID,
// so it never touches an IN_PROGRESS record (a takeover may be running), a
// final answer, a VOID record or an absent one (it never creates an item).
// The window (expires_at) and the owner are kept. a must be exactly the
// answer the API stores for the final payment. It returns ErrNotPointer when
// the condition fails.
func (st *Store) Finalize(ctx context.Context, scope, paymentID string, a *Answer) error {
	if a == nil {
		return fmt.Errorf("idem: finalize %s: no answer", scope)
	}
	b, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("idem: encode answer: %w", err)
	}
	_, err = st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           &st.table,
		Key:                 key(scope),
		UpdateExpression:    aws.String("SET answer = :answer REMOVE pointer"),
		ConditionExpression: aws.String("#s = :completed AND pointer = :true AND payment_id = :pid"),
		ExpressionAttributeNames: map[string]string{
			"#s": attrState,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":answer":    s(string(b)),
			":completed": s(string(Completed)),
			":true":      &types.AttributeValueMemberBOOL{Value: true},
			":pid":       s(paymentID),
		},
	})
	if err := st.conditional(err, "finalize", scope, false); err != nil {
		if errors.Is(err, ErrNotOwner) {
			return ErrNotPointer
		}
		return err
	}
	return nil
}
