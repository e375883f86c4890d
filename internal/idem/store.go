package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Store keeps key records in one DynamoDB table (partition key pk).
type Store struct {
	db    *dynamodb.Client
	table string
}

// NewStore returns a Store over table.
func NewStore(db *dynamodb.Client, table string) *Store { return &Store{db: db, table: table} }

// Attribute names of the item.
const (
	attrPK      = "pk"
	attrState   = "state"
	attrFP      = "fp"
	attrOwner   = "owner"
	attrPayment = "payment_id"
	attrUntil   = "in_progress_until" // epoch milliseconds
	attrExpires = "expires_at"        // epoch seconds: the TTL attribute
	attrAnswer  = "answer"            // JSON of Answer
	attrPointer = "pointer"           // BOOL
)

func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func key(scope string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: s(scope)}
}

// expiresAt rounds up to whole seconds, so a record never expires early.
func expiresAt(t time.Time) int64 {
	sec := t.Unix()
	if t.Nanosecond() > 0 {
		sec++
	}
	return sec
}

// Claim takes the scope if no unexpired record holds it (a conditional put
// that treats an expired record as absent). If one does, it returns an
// *ExistsError carrying that record.
func (st *Store) Claim(ctx context.Context, c Claim) error {
	_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &st.table,
		Item: map[string]types.AttributeValue{
			attrPK:      s(c.Scope),
			attrState:   s(string(InProgress)),
			attrFP:      s(c.Fingerprint),
			attrOwner:   s(c.Owner),
			attrPayment: s(c.PaymentID),
			attrUntil:   n(c.InProgressUntil.UnixMilli()),
			attrExpires: n(expiresAt(c.ExpiresAt)),
		},
		ConditionExpression:                 aws.String("attribute_not_exists(pk) OR expires_at < :now"),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now": n(c.Now.Unix())},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var rwc *types.ReplicatedWriteConflictException
	if errors.As(err, &rwc) {
		// A strongly consistent (MRSC) table refuses a write that meets one
		// in progress in another Region (docs/regions.md): someone else is
		// claiming this scope right now. Answered as a repeat in progress,
		// with this request's own lease, so the client retries the same key
		// and meets the winner's record.
		return &ExistsError{Record: Record{
			Scope: c.Scope, State: InProgress, Fingerprint: c.Fingerprint, PaymentID: c.PaymentID,
			InProgressUntil: c.InProgressUntil, ExpiresAt: c.ExpiresAt,
		}}
	}
	return st.conditional(err, "claim", c.Scope, true)
}

// conditional maps a conditional write's error: a failed condition becomes
// an *ExistsError with the old item (when withItem) or ErrNotOwner; anything
// else is ErrUnavailable.
func (st *Store) conditional(err error, op, scope string, withItem bool) error {
	if err == nil {
		return nil
	}
	var rwc *types.ReplicatedWriteConflictException
	if errors.As(err, &rwc) && !withItem {
		// MRSC: another Region's write to this record is in progress. The
		// takeover, completion or release lost a race, as with a failed
		// condition: the caller reads the record and answers what it holds
		// (never the store-down path, which would run on the durable guard
		// alone while the other Region runs too).
		return ErrNotOwner
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if !withItem {
			return ErrNotOwner
		}
		rec, derr := decode(ccf.Item)
		if derr != nil {
			return fmt.Errorf("idem: %s %s: %w", op, scope, derr)
		}
		return &ExistsError{Record: rec}
	}
	return fmt.Errorf("idem: %s: %w: %w", op, ErrUnavailable, err)
}

// Takeover moves an IN_PROGRESS record whose lease has passed to a new owner,
// only if the owner is still the one the caller read
// (docs/mechanism.md#seed-part-3). The record takes the new owner's
// fingerprint: the dead owner's was never checked against the durable guard
// (it may have been a key reuse), and a record that kept it would answer the
// real payment's repeats with 422.
func (st *Store) Takeover(ctx context.Context, scope, readOwner, newOwner, fingerprint string, until, expires time.Time) error {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           &st.table,
		Key:                 key(scope),
		UpdateExpression:    aws.String("SET #o = :new, fp = :fp, in_progress_until = :until, expires_at = :exp"),
		ConditionExpression: aws.String("#o = :old AND #s = :inprogress"),
		ExpressionAttributeNames: map[string]string{
			"#o": attrOwner, "#s": attrState,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":new": s(newOwner), ":old": s(readOwner), ":inprogress": s(string(InProgress)), ":fp": s(fingerprint),
			":until": n(until.UnixMilli()), ":exp": n(expiresAt(expires)),
		},
	})
	return st.conditional(err, "takeover", scope, false)
}

// Complete stores the final answer (a != nil) or a pointer to the payment (a
// == nil), only if owner still holds the record
// (docs/mechanism.md#seed-part-3). It returns ErrNotOwner if the owner
// changed.
func (st *Store) Complete(ctx context.Context, scope, owner string, a *Answer, expires time.Time) error {
	values := map[string]types.AttributeValue{
		":me": s(owner), ":completed": s(string(Completed)), ":exp": n(expiresAt(expires)),
	}
	update := "SET #s = :completed, expires_at = :exp"
	if a != nil {
		b, err := json.Marshal(a)
		if err != nil {
			return fmt.Errorf("idem: encode answer: %w", err)
		}
		values[":answer"] = s(string(b))
		update += ", answer = :answer REMOVE pointer"
	} else {
		values[":pointer"] = &types.AttributeValueMemberBOOL{Value: true}
		update += ", pointer = :pointer REMOVE answer"
	}
	in := &dynamodb.UpdateItemInput{
		TableName:                 &st.table,
		Key:                       key(scope),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String("#o = :me"),
		ExpressionAttributeNames:  map[string]string{"#o": attrOwner, "#s": attrState},
		ExpressionAttributeValues: values,
	}
	_, err := st.db.UpdateItem(ctx, in)
	// MRSC: a write to this record in progress in another Region refuses
	// the completion without saying who wins. The owner's answer is at
	// stake (it charged), so ask again once that write has landed: a
	// takeover there then fails the condition (ErrNotOwner, rightly), and
	// anything else lets the completion through.
	for try := 0; try < conflictRetries && isConflict(err); try++ {
		select {
		case <-ctx.Done():
			return st.conditional(err, "complete", scope, false)
		case <-time.After(conflictWait):
		}
		_, err = st.db.UpdateItem(ctx, in)
	}
	return st.conditional(err, "complete", scope, false)
}

// conflictRetries and conflictWait bound Complete's retries of an MRSC
// write conflict.
const (
	conflictRetries = 3
	conflictWait    = 50 * time.Millisecond
)

func isConflict(err error) bool {
	var rwc *types.ReplicatedWriteConflictException
	return errors.As(err, &rwc)
}

// MarkVoid turns the owner's record into a VOID record: the ledger said the
// key was voided, so repeats get 409 from here on.
func (st *Store) MarkVoid(ctx context.Context, scope, owner string, expires time.Time) error {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                &st.table,
		Key:                      key(scope),
		UpdateExpression:         aws.String("SET #s = :void, expires_at = :exp REMOVE fp, answer, pointer"),
		ConditionExpression:      aws.String("#o = :me"),
		ExpressionAttributeNames: map[string]string{"#o": attrOwner, "#s": attrState},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":me": s(owner), ":void": s(string(Void)), ":exp": n(expiresAt(expires)),
		},
	})
	return st.conditional(err, "void", scope, false)
}

// Release deletes the owner's IN_PROGRESS record: nothing ran (the ledger
// was unreachable, or it refused the request), so nothing is remembered.
func (st *Store) Release(ctx context.Context, scope, owner string) error {
	_, err := st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                &st.table,
		Key:                      key(scope),
		ConditionExpression:      aws.String("#o = :me AND #s = :inprogress"),
		ExpressionAttributeNames: map[string]string{"#o": attrOwner, "#s": attrState},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":me": s(owner), ":inprogress": s(string(InProgress)),
		},
	})
	return st.conditional(err, "release", scope, false)
}

// Void records "not found, and it never will be" for an absent (or expired)
// scope: the resolve call's insert-if-absent. If a record holds the scope it
// returns an *ExistsError with it.
func (st *Store) Void(ctx context.Context, scope, paymentID string, now, expires time.Time) error {
	_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &st.table,
		Item: map[string]types.AttributeValue{
			attrPK: s(scope), attrState: s(string(Void)), attrOwner: s("resolve"),
			attrPayment: s(paymentID), attrUntil: n(0), attrExpires: n(expiresAt(expires)),
		},
		ConditionExpression:                 aws.String("attribute_not_exists(pk) OR expires_at < :now"),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now": n(now.Unix())},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	return st.conditional(err, "void", scope, true)
}

// Get reads the record with a strongly consistent read. found is false when
// there is none, or when it has expired (it counts as absent).
func (st *Store) Get(ctx context.Context, scope string, now time.Time) (rec Record, found bool, err error) {
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &st.table, Key: key(scope), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Record{}, false, fmt.Errorf("idem: get: %w: %w", ErrUnavailable, err)
	}
	if len(out.Item) == 0 {
		return Record{}, false, nil
	}
	rec, err = decode(out.Item)
	if err != nil {
		return Record{}, false, fmt.Errorf("idem: get %s: %w", scope, err)
	}
	if rec.Expired(now) {
		return rec, false, nil
	}
	return rec, true, nil
}

func decode(item map[string]types.AttributeValue) (Record, error) {
	var r Record
	str := func(k string) string {
		if v, ok := item[k].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	num := func(k string) (int64, error) {
		v, ok := item[k].(*types.AttributeValueMemberN)
		if !ok {
			return 0, nil
		}
		return strconv.ParseInt(v.Value, 10, 64)
	}
	r.Scope = str(attrPK)
	r.State = State(str(attrState))
	r.Fingerprint = str(attrFP)
	r.Owner = str(attrOwner)
	r.PaymentID = str(attrPayment)
	until, err := num(attrUntil)
	if err != nil {
		return Record{}, fmt.Errorf("decode %s: %w", attrUntil, err)
	}
	exp, err := num(attrExpires)
	if err != nil {
		return Record{}, fmt.Errorf("decode %s: %w", attrExpires, err)
	}
	r.InProgressUntil = time.UnixMilli(until)
	r.ExpiresAt = time.Unix(exp, 0)
	if v, ok := item[attrPointer].(*types.AttributeValueMemberBOOL); ok {
		r.Pointer = v.Value
	}
	if a := str(attrAnswer); a != "" {
		r.Answer = &Answer{}
		if err := json.Unmarshal([]byte(a), r.Answer); err != nil {
			return Record{}, fmt.Errorf("decode answer: %w", err)
		}
	}
	if r.Scope == "" || r.State == "" {
		return Record{}, errors.New("decode: item lacks pk or state")
	}
	return r, nil
}
