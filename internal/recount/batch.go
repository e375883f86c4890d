package recount

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/totals"
)

// StreamAPI is the DynamoDB Streams calls that read a discarded batch back.
type StreamAPI interface {
	GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, opts ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

// Batch names a discarded stream batch, as Lambda's on-failure record does.
type Batch struct {
	StreamArn, ShardID string
	Start, End         string // sequence numbers, inclusive
}

// ErrBatchGone is a batch whose records the stream no longer holds (it
// keeps them 24 hours).
var ErrBatchGone = errors.New("recount: the stream no longer holds the batch")

// maxBatchReads bounds the reads of one batch: a mapping's batch is at most
// 10,000 records, and a read returns up to 1,000 (fewer past empty pages of
// an open shard, which the bound also ends).
const maxBatchReads = 64

// BatchKeys reads a discarded batch back from the stream and returns the
// key of every outbox event in it: the keys whose totals it may have
// changed, exactly, whatever their events' times (a copy late by its
// arrival included). It must run within the stream's 24 hours; past them it
// answers ErrBatchGone.
func BatchKeys(ctx context.Context, api StreamAPI, b Batch) ([]totals.Key, error) {
	it, err := api.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
		StreamArn: aws.String(b.StreamArn), ShardId: aws.String(b.ShardID),
		ShardIteratorType: types.ShardIteratorTypeAtSequenceNumber, SequenceNumber: aws.String(b.Start),
	})
	var trimmed *types.TrimmedDataAccessException
	var missing *types.ResourceNotFoundException
	if errors.As(err, &trimmed) || errors.As(err, &missing) {
		return nil, fmt.Errorf("%w: %s %s from %s: %w", ErrBatchGone, b.StreamArn, b.ShardID, b.Start, err)
	}
	if err != nil {
		return nil, fmt.Errorf("recount: read back %s from %s: %w", b.ShardID, b.Start, err)
	}
	var keys []totals.Key
	iter := it.ShardIterator
	for range maxBatchReads {
		if iter == nil {
			return keys, nil // the shard ended
		}
		out, err := api.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter})
		if errors.As(err, &trimmed) {
			return nil, fmt.Errorf("%w: %w", ErrBatchGone, err)
		}
		if err != nil {
			return nil, fmt.Errorf("recount: read back %s: %w", b.ShardID, err)
		}
		for _, r := range out.Records {
			seq := aws.ToString(r.Dynamodb.SequenceNumber)
			if after(seq, b.End) {
				return keys, nil
			}
			if k, ok := keyOfRecord(r); ok && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
			if seq == b.End {
				return keys, nil
			}
		}
		iter = out.NextShardIterator
	}
	return nil, fmt.Errorf("recount: %s did not reach %s in %d reads", b.ShardID, b.End, maxBatchReads)
}

// after reports whether sequence number a comes after b: both are decimal
// strings of up to 40 digits, so the longer is the larger.
func after(a, b string) bool {
	if len(a) != len(b) {
		return len(a) > len(b)
	}
	return a > b
}

// keyOfRecord is the key of the event an outbox stream record carries, if
// it carries one (an INSERT or a re-drive's MODIFY; not a removal or a
// relay's marker).
func keyOfRecord(r types.Record) (totals.Key, bool) {
	if r.Dynamodb == nil {
		return totals.Key{}, false
	}
	p, ok := r.Dynamodb.NewImage[outbox.AttrPayload].(*types.AttributeValueMemberS)
	if !ok {
		return totals.Key{}, false
	}
	e, err := event.Unmarshal([]byte(p.Value))
	if err != nil || e.OccurredAt.IsZero() {
		return totals.Key{}, false
	}
	k := keyOf(e)
	if _, err := totals.ParseKey(k.String()); err != nil {
		return totals.Key{}, false // the job could not read it either (TotalsUnreadable)
	}
	return k, true
}
