package globaltable

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// streamReader follows every shard of one table's stream from its trim
// horizon, a child shard only once its parent has ended (the order of one
// item's changes). Only its side's pump uses it.
type streamReader struct {
	api        *dynamodbstreams.Client
	arn        string
	open       map[string]*shard // shards being read
	ended      map[string]bool   // shards read to their end
	discovered time.Time
}

type shard struct {
	parent string
	last   string // the sequence number of the last record read
}

func newStreamReader(api *dynamodbstreams.Client, arn string) *streamReader {
	return &streamReader{api: api, arn: arn, open: map[string]*shard{}, ended: map[string]bool{}}
}

// rediscover is how often the shard list is read again (a shard that ends
// makes it read at once).
const rediscover = 2 * time.Second

func (sr *streamReader) discover(ctx context.Context) error {
	var start *string
	for {
		out, err := sr.api.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(sr.arn), ExclusiveStartShardId: start})
		if err != nil {
			return fmt.Errorf("globaltable: describe stream %s: %w", sr.arn, err)
		}
		for _, s := range out.StreamDescription.Shards {
			id := aws.ToString(s.ShardId)
			if sr.open[id] != nil || sr.ended[id] {
				continue
			}
			sr.open[id] = &shard{parent: aws.ToString(s.ParentShardId)}
		}
		start = out.StreamDescription.LastEvaluatedShardId
		if start == nil {
			break
		}
	}
	sr.discovered = time.Now()
	return nil
}

// read returns the records written since the last read, each shard's in
// its order. On an error it returns what it read before it.
func (sr *streamReader) read(ctx context.Context) ([]streamtypes.Record, error) {
	if time.Since(sr.discovered) > rediscover {
		if err := sr.discover(ctx); err != nil {
			return nil, err
		}
	}
	var recs []streamtypes.Record
	for id, sh := range sr.open {
		if p := sr.open[sh.parent]; p != nil {
			continue // the parent's records come first
		}
		// A fresh iterator at each read, after the last record read (or at
		// the trim horizon): DynamoDB Local refuses a NextShardIterator
		// kept from a read of an empty shard (TrimmedDataAccessException)
		// once records arrive.
		in := &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(sr.arn), ShardId: aws.String(id), ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon}
		if sh.last != "" {
			in.ShardIteratorType, in.SequenceNumber = streamtypes.ShardIteratorTypeAfterSequenceNumber, aws.String(sh.last)
		}
		it, err := sr.api.GetShardIterator(ctx, in)
		if err != nil {
			return recs, fmt.Errorf("globaltable: iterator of shard %s: %w", id, err)
		}
		iter := it.ShardIterator
		for iter != nil {
			out, err := sr.api.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter})
			if err != nil {
				return recs, fmt.Errorf("globaltable: records of shard %s: %w", id, err)
			}
			recs = append(recs, out.Records...)
			if n := len(out.Records); n > 0 {
				sh.last = aws.ToString(out.Records[n-1].Dynamodb.SequenceNumber)
			}
			iter = out.NextShardIterator
			if len(out.Records) == 0 {
				break
			}
		}
		if iter == nil {
			delete(sr.open, id)
			sr.ended[id] = true
			sr.discovered = time.Time{} // its children, if any
		}
	}
	return recs, nil
}
