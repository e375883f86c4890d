package globaltable

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

const (
	r1 = "us-east-1"
	r2 = "us-west-2"
)

// replicated is a table in each Region's DynamoDB Local (partition key pk)
// and a running replicator between them; all removed when the test ends.
type replicated struct {
	r    *Replicator
	a, b Side
}

func newReplicated(t *testing.T, lag time.Duration) replicated {
	t.Helper()
	a := Side{Name: r1, DB: testenv.DynamoDB(t), Streams: testenv.DynamoDBStreams(t)}
	b := Side{Name: r2, DB: testenv.R2DynamoDB(t), Streams: testenv.R2DynamoDBStreams(t)}
	a.Table, b.Table = newTable(t, a.DB), newTable(t, b.DB)
	r, err := New(Config{A: a, B: b, Lag: lag, ProbeKey: func(id string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "#probe#" + id}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop) // before the tables' deletion (cleanups run last first)
	return replicated{r: r, a: a, b: b}
}

func newTable(t *testing.T, db *dynamodb.Client) string {
	t.Helper()
	return testenv.NewStreamTable(t, db, "pk", types.StreamViewTypeNewAndOldImages)
}

func key(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}}
}

// claim is the claim table's conditional put: it succeeds only where the
// key is absent in this Region's replica.
func claim(t *testing.T, s Side, pk, owner string) {
	t.Helper()
	_, err := s.DB.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName: aws.String(s.Table),
		Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: pk}, "owner": &types.AttributeValueMemberS{Value: owner},
		},
		ConditionExpression: aws.String("attribute_not_exists(pk)"),
	})
	if err != nil {
		t.Fatalf("claim %s as %s in %s: %v", pk, owner, s.Name, err)
	}
}

// owner reads the item's owner in s ("" when absent).
func owner(t *testing.T, s Side, pk string) string {
	t.Helper()
	out, err := s.DB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(s.Table), Key: key(pk), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if out.Item == nil {
		return ""
	}
	if o, ok := out.Item["owner"].(*types.AttributeValueMemberS); ok {
		return o.Value
	}
	return "?"
}

func caughtUp(t *testing.T, r *Replicator) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.CaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
}

// A put in one Region appears in the other no sooner than the lag, in both
// directions.
func TestAPutArrivesNoSoonerThanTheLag(t *testing.T) {
	t.Parallel()
	const lag = 500 * time.Millisecond
	x := newReplicated(t, lag)
	for _, dir := range []struct{ from, to Side }{{x.a, x.b}, {x.b, x.a}} {
		pk := "item-from-" + dir.from.Name
		began := time.Now()
		claim(t, dir.from, pk, dir.from.Name)
		for owner(t, dir.to, pk) == "" {
			if time.Since(began) > lag+10*time.Second {
				t.Fatalf("%s's put never reached %s", dir.from.Name, dir.to.Name)
			}
			time.Sleep(5 * time.Millisecond)
		}
		took := time.Since(began)
		t.Logf("%s -> %s: %v (lag %v)", dir.from.Name, dir.to.Name, took.Round(time.Millisecond), lag)
		if took < lag {
			t.Errorf("%s's put reached %s after %v, sooner than the lag %v", dir.from.Name, dir.to.Name, took, lag)
		}
	}
}

// Measure reports at least the configured lag.
func TestMeasure(t *testing.T) {
	t.Parallel()
	for _, lag := range []time.Duration{0, 300 * time.Millisecond, time.Second} {
		t.Run(lag.String(), func(t *testing.T) {
			x := newReplicated(t, lag)
			var best, worst time.Duration
			for i := range 3 {
				d, err := x.r.Measure(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 || d < best {
					best = d
				}
				if i == 0 || d > worst {
					worst = d
				}
			}
			t.Logf("lag %v: measured %v to %v over 3 probes", lag, best.Round(time.Millisecond), worst.Round(time.Millisecond))
			if best < lag {
				t.Errorf("measured %v with a lag of %v", best, lag)
			}
			if best > lag+2*time.Second {
				t.Errorf("measured %v with a lag of %v", best, lag)
			}
		})
	}
}

// Seed Part 9: during the lag both Regions claim the same key and both
// conditional puts succeed, each checked against its own replica. Once
// replicated, last writer wins: both replicas hold the later claim, and
// the earlier one is gone without a trace.
func TestBothRegionsClaimDuringTheLagAndTheLaterWriterWins(t *testing.T) {
	t.Parallel()
	const lag = time.Second
	x := newReplicated(t, lag)
	claim(t, x.a, "payments#u1#K1", "api-1")
	time.Sleep(200 * time.Millisecond) // the seed's 0.02 s and 0.45 s, roughly
	claim(t, x.b, "payments#u1#K1", "api-2")
	caughtUp(t, x.r)
	for _, s := range []Side{x.a, x.b} {
		if o := owner(t, s, "payments#u1#K1"); o != "api-2" {
			t.Errorf("%s holds the claim of %q after replication, want the later writer's api-2", s.Name, o)
		}
	}
	st := x.r.Stats()
	if st.DroppedByLWW != 1 || st.Applied != 1 {
		t.Errorf("stats %+v; want 1 applied (api-2's into %s) and 1 dropped (api-1's, older than %s's)", st, r1, r2)
	}
}

// A removal replicates.
func TestARemoveReplicates(t *testing.T) {
	t.Parallel()
	x := newReplicated(t, 100*time.Millisecond)
	claim(t, x.a, "k", "api-1")
	caughtUp(t, x.r)
	if owner(t, x.b, "k") != "api-1" {
		t.Fatal("the put did not replicate")
	}
	if _, err := x.a.DB.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(x.a.Table), Key: key("k")}); err != nil {
		t.Fatal(err)
	}
	caughtUp(t, x.r)
	if o := owner(t, x.b, "k"); o != "" {
		t.Errorf("%s still holds the item (%q) after its removal in %s replicated", r2, o, r1)
	}
}

// The replicator's own writes are not copied back: once everything is
// applied, each applied write has been read back once as an echo, and the
// counts stay put.
func TestNoEchoLoop(t *testing.T) {
	t.Parallel()
	x := newReplicated(t, 50*time.Millisecond)
	ctx := context.Background()
	claim(t, x.a, "k1", "api-1")
	claim(t, x.b, "k2", "api-2")
	caughtUp(t, x.r)
	_, err := x.b.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(x.b.Table), Key: key("k1"),
		UpdateExpression:          aws.String("SET #s = :s"),
		ExpressionAttributeNames:  map[string]string{"#s": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberS{Value: "done"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	caughtUp(t, x.r)
	time.Sleep(500 * time.Millisecond) // ten polls: an echo loop would be copying by now
	before := x.r.Stats()
	time.Sleep(500 * time.Millisecond)
	after := x.r.Stats()
	if before != after {
		t.Errorf("the counts moved with nothing written: %+v, then %+v", before, after)
	}
	if after.Applied != 3 || after.EchoSkipped != 3 {
		t.Errorf("stats %+v; want 3 applied (k1 and k2 across, k1's update back) and each read back once as an echo", after)
	}
	out, err := x.a.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(x.a.Table), Key: key("k1"), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := out.Item["state"].(*types.AttributeValueMemberS); s == nil || s.Value != "done" {
		t.Errorf("%s's update of k1 did not reach %s: %v", r2, r1, out.Item)
	}
}

// A Region cut off loses the change it had not replicated yet; a write in
// the surviving Region is not copied to it either.
func TestCutLosesTheChangeInFlight(t *testing.T) {
	t.Parallel()
	const lag = time.Second
	x := newReplicated(t, lag)
	claim(t, x.a, "settled", "api-1")
	caughtUp(t, x.r)
	claim(t, x.a, "in-flight", "api-1")
	time.Sleep(200 * time.Millisecond) // read from the stream, held by the lag
	x.r.Cut(r1)
	claim(t, x.b, "after-cut", "api-2")
	caughtUp(t, x.r) // the surviving Region alone
	time.Sleep(lag + 500*time.Millisecond)
	if owner(t, x.b, "settled") != "api-1" {
		t.Error("the change replicated before the cut is gone")
	}
	if o := owner(t, x.b, "in-flight"); o != "" {
		t.Errorf("the change in flight at the cut reached %s (%q)", r2, o)
	}
	if o := owner(t, x.a, "after-cut"); o != "" {
		t.Errorf("a write in %s after the cut reached the cut-off %s (%q)", r2, r1, o)
	}
	if st := x.r.Stats(); st.LostAtCut != 1 {
		t.Errorf("stats %+v; want 1 change lost at the cut", st)
	}
	if _, err := x.r.Measure(context.Background()); !errors.Is(err, ErrCut) {
		t.Errorf("Measure after the cut: %v, want ErrCut", err)
	}
}

// The unit of the last-writer-wins bookkeeping (no services): a record of
// an own write that arrives while one of the replicator's writes of the
// item is still pending was overwritten unseen, and is written again;
// the echo that follows is skipped.
func TestAnOwnWriteOverwrittenUnseenIsRestored(t *testing.T) {
	r, err := New(Config{
		A: Side{Name: r1, DB: &dynamodb.Client{}, Streams: &dynamodbstreams.Client{}, Table: "a"},
		B: Side{Name: r2, DB: &dynamodb.Client{}, Streams: &dynamodbstreams.Client{}, Table: "b"},
	})
	if err != nil {
		t.Fatal(err)
	}
	b := r.sides[1]
	record := func(owner string) streamtypes.Record {
		return streamtypes.Record{EventName: streamtypes.OperationTypeModify, Dynamodb: &streamtypes.StreamRecord{
			Keys: map[string]streamtypes.AttributeValue{"pk": &streamtypes.AttributeValueMemberS{Value: "k"}},
			NewImage: map[string]streamtypes.AttributeValue{
				"pk": &streamtypes.AttributeValueMemberS{Value: "k"}, "owner": &streamtypes.AttributeValueMemberS{Value: owner},
			},
		}}
	}
	applied := fromStream(record("api-1").Dynamodb.NewImage)
	k := canonical(key("k"))
	b.pending[k] = []string{digest(applied)} // the replicator put api-1's claim into B
	now := time.Now()
	if _, restore := r.observe(b, record("api-2"), now); !restore {
		t.Error("B's own write, read while the replicated put is pending, was not marked for restoring")
	}
	if len(r.sides[0].inbox) != 1 || b.newest[k].at != now {
		t.Errorf("B's own write is not B's newest version on its way to A: inbox %d, newest %v", len(r.sides[0].inbox), b.newest[k])
	}
	if _, restore := r.observe(b, record("api-1"), now.Add(time.Millisecond)); restore {
		t.Error("the echo of the replicated put was taken for an own write")
	}
	if st := r.Stats(); st.Restored != 1 || st.EchoSkipped != 1 || len(r.sides[0].inbox) != 1 {
		t.Errorf("stats %+v, A's inbox %d; want 1 restored, 1 echo skipped, 1 change for A", st, len(r.sides[0].inbox))
	}
}

// One image, whatever the order of its sets, has one digest.
func TestDigestIgnoresSetOrder(t *testing.T) {
	x := map[string]types.AttributeValue{"s": &types.AttributeValueMemberSS{Value: []string{"a", "b"}}, "n": &types.AttributeValueMemberN{Value: "1"}}
	y := map[string]types.AttributeValue{"n": &types.AttributeValueMemberN{Value: "1"}, "s": &types.AttributeValueMemberSS{Value: []string{"b", "a"}}}
	z := map[string]types.AttributeValue{"n": &types.AttributeValueMemberN{Value: "2"}, "s": &types.AttributeValueMemberSS{Value: []string{"b", "a"}}}
	if digest(x) != digest(y) {
		t.Error("the same image in another order has another digest")
	}
	if digest(x) == digest(z) || digest(nil) == digest(x) {
		t.Error("different images share a digest")
	}
}

// With FromNow, an item written before Start stays where it was and one
// written after it is copied.
func TestFromNowCopiesOnlyWhatComesAfterStart(t *testing.T) {
	t.Parallel()
	const lag = 100 * time.Millisecond
	a := Side{Name: r1, DB: testenv.DynamoDB(t), Streams: testenv.DynamoDBStreams(t)}
	b := Side{Name: r2, DB: testenv.R2DynamoDB(t), Streams: testenv.R2DynamoDBStreams(t)}
	a.Table, b.Table = newTable(t, a.DB), newTable(t, b.DB)
	claim(t, a, "before", r1)
	r, err := New(Config{A: a, B: b, Lag: lag, FromNow: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	claim(t, a, "after", r1)
	caughtUp(t, r)
	if got := owner(t, b, "after"); got != r1 {
		t.Errorf("the item written after Start: %q in %s, want %q", got, r2, r1)
	}
	if got := owner(t, b, "before"); got != "" {
		t.Errorf("the item written before Start reached %s (owner %q): FromNow copied the stream's history", r2, got)
	}
}
