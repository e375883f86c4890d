// Package totalstable names the stream job's sink table: its keys, its two
// indexes, and the job's counting versions. The StreamTotals construct makes
// the table with these names and the job (internal/totals) reads and writes
// it with them; the names live here, in the constructs' module, so that the
// constructs depend on nothing of the handlers'.
package totalstable

// The sink table's keys and indexes.
const (
	AttrShard   = "shard"     // partition key: a stream shard's partial totals
	AttrSortKey = "sk"        // sort key: a total's key, or a "~" item of the shard's
	AttrKey     = "total_key" // a total's key on total rows only: the ByKey index's partition key
	AttrTotal   = "total"     // the amount, projected into ByKey
	AttrTag     = "tag"       // the ByTag index's sort key: only on total rows (sparse)

	// IndexByTag is a local secondary index (shard, tag): LSIs, unlike
	// GSIs, read strongly consistent, and the flush must see every key its
	// lost run wrote.
	IndexByTag = "by_tag"
	// IndexByKey is a global secondary index (total_key, shard): a
	// merchant's day summed across shards.
	IndexByKey = "by_key"
)

// Version says what the job counts: the story's v1 counts declined payments
// (its bug), v2 skips them.
type Version int

// The versions.
const (
	V1 Version = 1
	V2 Version = 2
)
