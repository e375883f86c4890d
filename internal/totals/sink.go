package totals

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncepay/oncepay/cdk/oncepay/totalstable"
)

// Sink is where the job's output goes. Every write is absolute (SET total),
// so writing a total twice is harmless; each carries the tag of the
// checkpoint the writing run was handed.
type Sink interface {
	// Newest is the newest mark MarkNewest recorded for the shard (read
	// strongly consistent); written is false if there is none.
	Newest(ctx context.Context, shard string) (m Mark, written bool, err error)
	// MarkNewest records that a run is about to write.
	MarkNewest(ctx context.Context, shard string, m Mark) error
	// Put sets each key's total, tagged.
	Put(ctx context.Context, shard string, tag int64, totals map[Key]int64) error
	// Read returns the shard's totals of keys (read strongly consistent);
	// a key with no total is left out.
	Read(ctx context.Context, shard string, keys []Key) (map[Key]int64, error)
	// TaggedSince lists the shard's keys whose tag is tag or later (the
	// sparse index, read strongly consistent).
	TaggedSince(ctx context.Context, shard string, tag int64) ([]Key, error)
	// Delete removes the shard's totals of keys.
	Delete(ctx context.Context, shard string, keys []Key) error
	// LoadCarry and SaveCarry hand the state from one window to the next.
	LoadCarry(ctx context.Context, shard string) (State, bool, error)
	SaveCarry(ctx context.Context, shard string, st State) error
}

// Mark is what a run records before it writes: the checkpoint it was
// handed (the tag of its writes) and the start of the window its batch
// belongs to. A retry is always in its lost run's window, so a mark of
// another window was not left by a lost run of this batch.
type Mark struct {
	Tag    int64
	Window time.Time // zero: not known (a mark written before windows were)
	// Through is the last stream sequence number of the marking run's
	// batch: a state rebuilt from the sink has counted what came up to it.
	Through string
}

// TableAPI is the DynamoDB calls a Table makes.
type TableAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// The sink table's shape (the stack's TotalsTable, and the tests' own);
// the names the construct makes the table with are totalstable's.
const (
	AttrShard    = totalstable.AttrShard   // partition key: a stream shard's partial totals
	AttrSortKey  = totalstable.AttrSortKey // sort key: Key.String(), or a "~" item of the shard's
	AttrKey      = totalstable.AttrKey     // Key.String() on total rows only: the ByKey index's partition key
	AttrMerchant = "merchant_id"           //
	AttrDay      = "day"                   //
	AttrCurrency = "currency"              //
	AttrTotal    = totalstable.AttrTotal   //
	AttrTag      = totalstable.AttrTag     // the ByTag index's sort key: only on total rows (sparse)
	AttrNewest   = "newest_tag"            // on the shard's meta item
	AttrWindow   = "newest_window"         // on the shard's meta item: the marking run's window start, Unix ms
	AttrThrough  = "newest_through"        // on the shard's meta item: the marking run's last sequence number
	AttrData     = "data"                  // a carry chunk
	AttrCarry    = "carry_checkpoint"
	AttrChunks   = "chunks"
	AttrNonce    = "carry_nonce"

	// IndexByTag is a local secondary index (shard, tag): LSIs, unlike
	// GSIs, read strongly consistent, and the flush must see every key its
	// lost run wrote.
	IndexByTag = totalstable.IndexByTag
	// IndexByKey is a global secondary index (total_key, shard): a
	// merchant's day summed across shards.
	IndexByKey = totalstable.IndexByKey

	skMeta  = "~meta"
	skCarry = "~carry"

	// RecountShard is the partition of the recount's totals (package
	// recount): one row per key, the day's total read from the ledger
	// after the day was over. It supersedes the shards' partials, which
	// the stream may still change (a lagging shard, a copy sent to the
	// recount); no stream shard is named so, and it carries no tag, so no
	// flush reads or deletes it.
	RecountShard = "~recount"
	// AttrRecountedAt is when the recount wrote its row (RFC 3339).
	AttrRecountedAt = "recounted_at"
	// PendingShard holds a row per key whose recount waits for its day to
	// close (AttrPendingUntil): until then the partials may be short (a
	// discarded batch's writes were taken back) and a reader must say so.
	// The rows carry no total_key, so the day index never lists them.
	PendingShard     = "~pending"
	AttrPendingUntil = "pending_until"
)

// maxChunk keeps each carry chunk well under DynamoDB's 400 KB item limit.
const maxChunk = 300 << 10

// Table is a Sink on a DynamoDB table.
type Table struct {
	api  TableAPI
	name string
}

// NewTable returns the sink on the named table.
func NewTable(api TableAPI, name string) (*Table, error) {
	if api == nil || name == "" {
		return nil, errors.New("totals: NewTable needs a client and a table name")
	}
	return &Table{api: api, name: name}, nil
}

func (t *Table) item(shard, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		AttrShard:   &types.AttributeValueMemberS{Value: shard},
		AttrSortKey: &types.AttributeValueMemberS{Value: sk},
	}
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func readNum(av types.AttributeValue) (int64, error) {
	n, ok := av.(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("totals: attribute is %T, not a number", av)
	}
	return strconv.ParseInt(n.Value, 10, 64)
}

// Newest implements Sink.
func (t *Table) Newest(ctx context.Context, shard string) (Mark, bool, error) {
	out, err := t.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: &t.name, Key: t.item(shard, skMeta), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return Mark{}, false, fmt.Errorf("totals: read %s's newest tag: %w", shard, err)
	}
	av, ok := out.Item[AttrNewest]
	if !ok {
		return Mark{}, false, nil
	}
	var m Mark
	if m.Tag, err = readNum(av); err != nil {
		return Mark{}, false, fmt.Errorf("totals: %s's newest tag: %w", shard, err)
	}
	if av, ok := out.Item[AttrWindow]; ok {
		ms, err := readNum(av)
		if err != nil {
			return Mark{}, false, fmt.Errorf("totals: %s's newest window: %w", shard, err)
		}
		m.Window = time.UnixMilli(ms).UTC()
	}
	if av, ok := out.Item[AttrThrough].(*types.AttributeValueMemberS); ok {
		m.Through = av.Value
	}
	return m, true, nil
}

// MarkNewest implements Sink.
func (t *Table) MarkNewest(ctx context.Context, shard string, m Mark) error {
	it := t.item(shard, skMeta)
	it[AttrNewest] = num(m.Tag)
	if !m.Window.IsZero() {
		it[AttrWindow] = num(m.Window.UnixMilli())
	}
	if m.Through != "" {
		it[AttrThrough] = &types.AttributeValueMemberS{Value: m.Through}
	}
	if _, err := t.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: &t.name, Item: it}); err != nil {
		return fmt.Errorf("totals: mark %s's newest tag %d: %w", shard, m.Tag, err)
	}
	return nil
}

// Put implements Sink.
func (t *Table) Put(ctx context.Context, shard string, tag int64, totals map[Key]int64) error {
	reqs := make([]types.WriteRequest, 0, len(totals))
	for k, v := range totals {
		it := t.item(shard, k.String())
		it[AttrKey] = &types.AttributeValueMemberS{Value: k.String()}
		it[AttrMerchant] = &types.AttributeValueMemberS{Value: k.Merchant}
		it[AttrDay] = &types.AttributeValueMemberS{Value: k.Day}
		it[AttrCurrency] = &types.AttributeValueMemberS{Value: k.Currency}
		it[AttrTotal] = num(v)
		it[AttrTag] = num(tag)
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: it}})
	}
	return t.batch(ctx, reqs)
}

// Read implements Sink: one consistent GetItem a key (the keys of one
// lost window, and GetItem is what the job's role already holds).
func (t *Table) Read(ctx context.Context, shard string, keys []Key) (map[Key]int64, error) {
	out := make(map[Key]int64, len(keys))
	for _, k := range keys {
		got, err := t.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: &t.name, Key: t.item(shard, k.String()), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, fmt.Errorf("totals: read %s's total of %s: %w", shard, k, err)
		}
		av, ok := got.Item[AttrTotal]
		if !ok {
			continue
		}
		n, err := readNum(av)
		if err != nil {
			return nil, fmt.Errorf("totals: %s's total of %s: %w", shard, k, err)
		}
		out[k] = n
	}
	return out, nil
}

// Delete implements Sink.
func (t *Table) Delete(ctx context.Context, shard string, keys []Key) error {
	reqs := make([]types.WriteRequest, 0, len(keys))
	for _, k := range keys {
		reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: t.item(shard, k.String())}})
	}
	return t.batch(ctx, reqs)
}

// batch writes reqs 25 at a time, retrying what DynamoDB leaves unprocessed.
func (t *Table) batch(ctx context.Context, reqs []types.WriteRequest) error {
	for len(reqs) > 0 {
		n := min(len(reqs), 25)
		pending := reqs[:n]
		reqs = reqs[n:]
		for attempt := 0; len(pending) > 0; attempt++ {
			if attempt > 0 {
				if attempt > 8 {
					return fmt.Errorf("totals: %d writes to %s still unprocessed after %d tries", len(pending), t.name, attempt)
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Duration(25<<attempt) * time.Millisecond):
				}
			}
			out, err := t.api.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{t.name: pending}})
			if err != nil {
				return fmt.Errorf("totals: write %s: %w", t.name, err)
			}
			pending = out.UnprocessedItems[t.name]
		}
	}
	return nil
}

// TaggedSince implements Sink.
func (t *Table) TaggedSince(ctx context.Context, shard string, tag int64) ([]Key, error) {
	var keys []Key
	var start map[string]types.AttributeValue
	for {
		out, err := t.api.Query(ctx, &dynamodb.QueryInput{
			TableName: &t.name, IndexName: aws.String(IndexByTag), ConsistentRead: aws.Bool(true),
			KeyConditionExpression:    aws.String("#s = :s AND #t >= :t"),
			ExpressionAttributeNames:  map[string]string{"#s": AttrShard, "#t": AttrTag},
			ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberS{Value: shard}, ":t": num(tag)},
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, fmt.Errorf("totals: keys of %s tagged %d or later: %w", shard, tag, err)
		}
		for _, it := range out.Items {
			sk, _ := it[AttrSortKey].(*types.AttributeValueMemberS)
			if sk == nil {
				continue
			}
			k, err := ParseKey(sk.Value)
			if err != nil {
				return nil, err
			}
			keys = append(keys, k)
		}
		if start = out.LastEvaluatedKey; len(start) == 0 {
			return keys, nil
		}
	}
}

// LoadCarry implements Sink: the header names the checkpoint whose chunks
// are whole (SaveCarry writes it last).
func (t *Table) LoadCarry(ctx context.Context, shard string) (State, bool, error) {
	out, err := t.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: &t.name, Key: t.item(shard, skCarry), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return State{}, false, fmt.Errorf("totals: read %s's carry: %w", shard, err)
	}
	if out.Item == nil {
		return State{}, false, nil
	}
	cp, err1 := readNum(out.Item[AttrCarry])
	chunks, err2 := readNum(out.Item[AttrChunks])
	nonce, _ := out.Item[AttrNonce].(*types.AttributeValueMemberS)
	if err := errors.Join(err1, err2); err != nil || nonce == nil {
		return State{}, false, fmt.Errorf("totals: %s's carry header: %w", shard, errors.Join(err, errors.New("no nonce")))
	}
	m := map[string]string{}
	for i := range chunks {
		out, err := t.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: &t.name, Key: t.item(shard, chunkKey(cp, nonce.Value, i)), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return State{}, false, fmt.Errorf("totals: read %s's carry chunk %d: %w", shard, i, err)
		}
		d, ok := out.Item[AttrData].(*types.AttributeValueMemberS)
		if !ok {
			return State{}, false, fmt.Errorf("totals: %s's carry chunk %d of checkpoint %d is missing", shard, i, cp)
		}
		var part map[string]string
		if err := json.Unmarshal([]byte(d.Value), &part); err != nil {
			return State{}, false, fmt.Errorf("totals: %s's carry chunk %d: %w", shard, i, err)
		}
		for k, v := range part {
			m[k] = v
		}
	}
	st, ok, err := Decode(m)
	if err != nil || !ok {
		return State{}, false, fmt.Errorf("totals: %s's carry of checkpoint %d: %w", shard, cp, errors.Join(err, errors.New("empty")))
	}
	return st, true, nil
}

// chunkKey names a carry chunk by checkpoint and by the write's own nonce:
// a retried final invoke saves the same checkpoint again, and must not
// overwrite chunks the header still points at.
func chunkKey(checkpoint int64, nonce string, i int64) string {
	return fmt.Sprintf("%s#%d#%s#%d", skCarry, checkpoint, nonce, i)
}

// SaveCarry implements Sink. Chunks first, keyed by checkpoint and a nonce
// of this write's own, then the header that points at them: a run that dies
// in between leaves the header on a whole carry. Superseded chunks are left
// to the table's TTL (the stack enables it on expires_at).
func (t *Table) SaveCarry(ctx context.Context, shard string, st State) error {
	// Chunks are sized by their JSON as written (no HTML escaping, so a
	// merchant id's '<' stays one byte), well under the 400 KB item limit.
	var chunks [][]byte
	cur := []byte{'{'}
	for k, v := range st.Encode() {
		kb, err1 := marshalRaw(k)
		vb, err2 := marshalRaw(v)
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("totals: encode %s's carry: %w", shard, err)
		}
		if len(cur)+len(kb)+len(vb)+3 > maxChunk && len(cur) > 1 {
			chunks = append(chunks, append(cur, '}'))
			cur = []byte{'{'}
		}
		if len(cur) > 1 {
			cur = append(cur, ',')
		}
		cur = append(append(append(cur, kb...), ':'), vb...)
	}
	chunks = append(chunks, append(cur, '}'))
	nonce := strconv.FormatInt(time.Now().UnixNano(), 36)
	expires := num(time.Now().Add(14 * 24 * time.Hour).Unix())
	for i, b := range chunks {
		it := t.item(shard, chunkKey(st.Checkpoint, nonce, int64(i)))
		it[AttrData] = &types.AttributeValueMemberS{Value: string(b)}
		it[AttrExpiresAt] = expires
		if _, err := t.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: &t.name, Item: it}); err != nil {
			return fmt.Errorf("totals: write %s's carry chunk %d: %w", shard, i, err)
		}
	}
	h := t.item(shard, skCarry)
	h[AttrCarry] = num(st.Checkpoint)
	h[AttrChunks] = num(int64(len(chunks)))
	h[AttrNonce] = &types.AttributeValueMemberS{Value: nonce}
	if _, err := t.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: &t.name, Item: h}); err != nil {
		return fmt.Errorf("totals: write %s's carry header: %w", shard, err)
	}
	return nil
}

// AttrExpiresAt is the sink table's TTL attribute (superseded carry chunks).
const AttrExpiresAt = "expires_at"

// DayTotal reads a merchant's total for a day: the recount's, once the day
// has been recounted, else the sum of every shard's partial total (the
// ByKey index; eventually consistent, as any read of a GSI).
func (t *Table) DayTotal(ctx context.Context, k Key) (total int64, found bool, err error) {
	partials, err := t.Partials(ctx, k)
	total, _ = Total(partials)
	return total, len(partials) > 0, err
}

// Total is a day's total from its partials (Partials): the recount's when
// it has one, else the sum of the shards'.
func Total(partials map[string]int64) (total int64, recounted bool) {
	if n, ok := partials[RecountShard]; ok {
		return n, true
	}
	for _, n := range partials {
		total += n
	}
	return total, false
}

// PutRecount sets the recount's total of k (RecountShard): absolute, so a
// recount repeated writes the same row.
func (t *Table) PutRecount(ctx context.Context, k Key, total int64, at time.Time) error {
	it := t.item(RecountShard, k.String())
	it[AttrKey] = &types.AttributeValueMemberS{Value: k.String()}
	it[AttrMerchant] = &types.AttributeValueMemberS{Value: k.Merchant}
	it[AttrDay] = &types.AttributeValueMemberS{Value: k.Day}
	it[AttrCurrency] = &types.AttributeValueMemberS{Value: k.Currency}
	it[AttrTotal] = num(total)
	it[AttrRecountedAt] = &types.AttributeValueMemberS{Value: at.UTC().Format(time.RFC3339)}
	if _, err := t.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: &t.name, Item: it}); err != nil {
		return fmt.Errorf("totals: write the recount of %s: %w", k, err)
	}
	return nil
}

// PutPending marks k as waiting for its recount until the given time.
// The mark expires with the table's TTL two weeks after.
func (t *Table) PutPending(ctx context.Context, k Key, until time.Time) error {
	it := t.item(PendingShard, k.String())
	it[AttrPendingUntil] = &types.AttributeValueMemberS{Value: until.UTC().Format(time.RFC3339)}
	it[AttrExpiresAt] = num(until.Add(14 * 24 * time.Hour).Unix())
	if _, err := t.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: &t.name, Item: it}); err != nil {
		return fmt.Errorf("totals: mark %s pending: %w", k, err)
	}
	return nil
}

// Pending reads when k's awaited recount is due; ok is false when none
// was ever awaited.
func (t *Table) Pending(ctx context.Context, k Key) (until time.Time, ok bool, err error) {
	out, err := t.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: &t.name, Key: t.item(PendingShard, k.String())})
	if err != nil {
		return time.Time{}, false, fmt.Errorf("totals: read %s's pending recount: %w", k, err)
	}
	v, found := out.Item[AttrPendingUntil].(*types.AttributeValueMemberS)
	if !found {
		return time.Time{}, false, nil
	}
	until, err = time.Parse(time.RFC3339, v.Value)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("totals: %s's pending recount: %w", k, err)
	}
	return until, true, nil
}

// Partials reads each shard's partial total of a merchant's day, by shard
// (RecountShard's too, once recounted).
func (t *Table) Partials(ctx context.Context, k Key) (map[string]int64, error) {
	out := map[string]int64{}
	var start map[string]types.AttributeValue
	for {
		page, err := t.api.Query(ctx, &dynamodb.QueryInput{
			TableName: &t.name, IndexName: aws.String(IndexByKey),
			KeyConditionExpression:    aws.String("#k = :k"),
			ExpressionAttributeNames:  map[string]string{"#k": AttrKey},
			ExpressionAttributeValues: map[string]types.AttributeValue{":k": &types.AttributeValueMemberS{Value: k.String()}},
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, fmt.Errorf("totals: read %s: %w", k, err)
		}
		for _, it := range page.Items {
			n, err := readNum(it[AttrTotal])
			if err != nil {
				return nil, fmt.Errorf("totals: %s's total: %w", k, err)
			}
			shard, _ := it[AttrShard].(*types.AttributeValueMemberS)
			if shard == nil {
				return nil, fmt.Errorf("totals: a partial of %s has no shard", k)
			}
			out[shard.Value] = n
		}
		if start = page.LastEvaluatedKey; len(start) == 0 {
			return out, nil
		}
	}
}

// marshalRaw encodes a string as JSON without HTML escaping.
func marshalRaw(s string) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
