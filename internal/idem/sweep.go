package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Sweeper deletes key records past their window from a claim table that has
// no TTL: a multi-Region strongly consistent (MRSC) global table, which
// supports none (docs/regions.md). Nothing reads an expired record as
// present (every condition and read checks expires_at < now), so the sweep
// only reclaims space, and it may lag as far as it likes.
type Sweeper struct {
	db    *dynamodb.Client
	table string

	mu   sync.Mutex
	next map[string]types.AttributeValue // where the last Sweep stopped (nil: the start)
}

// NewSweeper returns a Sweeper over table.
func NewSweeper(db *dynamodb.Client, table string) *Sweeper {
	return &Sweeper{db: db, table: table}
}

// sweepPage is how many items one page of the sweep's scan reads.
const sweepPage = 100

// SweepReport is what one Sweep did.
type SweepReport struct {
	Scanned int // items the scan read
	Deleted int // expired records deleted
	Kept    int // expired when scanned, claimed again before the delete
	// More is true when the sweep stopped at its page budget with the
	// table not yet read to its end; the next Sweep starts over.
	More bool
}

// Sweep scans up to pages pages of the table, from where the last Sweep of
// this Sweeper stopped (a warm Lambda's next run goes on; a cold one starts
// over), and deletes every record expired at now, each with a condition
// that it is still expired: a record claimed again between the scan and the
// delete (a new window) stays.
func (sw *Sweeper) Sweep(ctx context.Context, now time.Time, pages int) (rep SweepReport, err error) {
	nowAttr := n(now.Unix())
	sw.mu.Lock()
	start := sw.next
	sw.mu.Unlock()
	defer func() {
		sw.mu.Lock()
		sw.next = start // on an error too: that page is read again
		sw.mu.Unlock()
	}()
	for page := 0; page < pages; page++ {
		out, err := sw.db.Scan(ctx, &dynamodb.ScanInput{
			TableName:                 &sw.table,
			ExclusiveStartKey:         start,
			Limit:                     aws.Int32(sweepPage),
			ProjectionExpression:      aws.String("#pk"),
			FilterExpression:          aws.String("#exp < :now"),
			ExpressionAttributeNames:  map[string]string{"#pk": attrPK, "#exp": attrExpires},
			ExpressionAttributeValues: map[string]types.AttributeValue{":now": nowAttr},
		})
		if err != nil {
			return rep, fmt.Errorf("idem: sweep scan: %w", err)
		}
		rep.Scanned += int(out.ScannedCount)
		for _, item := range out.Items {
			_, err := sw.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
				TableName:                 &sw.table,
				Key:                       map[string]types.AttributeValue{attrPK: item[attrPK]},
				ConditionExpression:       aws.String("#exp < :now"),
				ExpressionAttributeNames:  map[string]string{"#exp": attrExpires},
				ExpressionAttributeValues: map[string]types.AttributeValue{":now": nowAttr},
			})
			var ccf *types.ConditionalCheckFailedException
			var rwc *types.ReplicatedWriteConflictException
			switch {
			case err == nil:
				rep.Deleted++
			case errors.As(err, &ccf), errors.As(err, &rwc):
				// Claimed again, or being written in another Region right
				// now: not this sweep's to delete.
				rep.Kept++
			default:
				return rep, fmt.Errorf("idem: sweep delete: %w", err)
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			start = nil // the table is read to its end: the next Sweep starts over
			return rep, nil
		}
		start = out.LastEvaluatedKey
	}
	rep.More = true
	return rep, nil
}
