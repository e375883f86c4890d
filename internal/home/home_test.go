package home_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncepay/oncepay/internal/home"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

var urls = map[string]string{"us-east-1": "https://r1.example.test", "us-west-2": "https://r2.example.test"}

func newStore(t *testing.T) (*home.Mover, *dynamodb.Client, string) {
	t.Helper()
	db := testenv.DynamoDB(t)
	table := testenv.NewTable(t, db, "caller")
	return home.NewMover(db, table), db, table
}

func router(t *testing.T, s *home.Mover, region string) *home.Router {
	t.Helper()
	r, err := home.NewRouter(s.Store(), region, "us-east-1", urls)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// put writes a record as it is, with no condition: what a replica that has
// not caught up shows.
func put(t *testing.T, db *dynamodb.Client, table, caller, region string, version int64) {
	t.Helper()
	_, err := db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &table, Item: map[string]types.AttributeValue{
		"caller":  &types.AttributeValueMemberS{Value: caller},
		"region":  &types.AttributeValueMemberS{Value: region},
		"version": &types.AttributeValueMemberN{Value: strconv.FormatInt(version, 10)},
	}})
	if err != nil {
		t.Fatal(err)
	}
}

func decide(t *testing.T, r *home.Router, caller string) home.Decision {
	t.Helper()
	d, err := r.Decide(context.Background(), caller)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestACallerWithoutARecordIsHomedInTheFallback(t *testing.T) {
	s, _, _ := newStore(t)
	r1, r2 := router(t, s, "us-east-1"), router(t, s, "us-west-2")
	if d := decide(t, r1, "u1"); !d.Here || d.Home.Region != "us-east-1" || d.Home.Version != 0 || d.URL != "" {
		t.Errorf("R1 = %+v, want served here at version 0", d)
	}
	if d := decide(t, r2, "u1"); d.Here || d.Home.Region != "us-east-1" || d.URL != urls["us-east-1"] {
		t.Errorf("R2 = %+v, want sent to R1's URL", d)
	}
}

func TestACallersOwnRecordOverridesTheDefault(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	if _, err := s.Move(ctx, "u2", "us-west-2", 0); err != nil {
		t.Fatal(err)
	}
	r2 := router(t, s, "us-west-2")
	if d := decide(t, r2, "u2"); !d.Here || d.Home.Version != 1 {
		t.Errorf("u2 in R2 = %+v, want served at version 1", d)
	}
	if d := decide(t, r2, "u1"); d.Here {
		t.Errorf("u1 (no record) in R2 = %+v, want the fallback R1", d)
	}
}

func TestAMoveLosesToAnotherMove(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	if _, err := s.Move(ctx, "u1", "us-west-2", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Move(ctx, "u1", "us-east-1", 0); !errors.Is(err, home.ErrMoved) {
		t.Errorf("second first-move: err = %v, want ErrMoved", err)
	}
	if _, err := s.Move(ctx, "u1", "us-east-1", 7); !errors.Is(err, home.ErrMoved) {
		t.Errorf("move from a version never written: err = %v, want ErrMoved", err)
	}
	r, err := s.Move(ctx, "u1", "us-east-1", 1)
	if err != nil || r.Version != 2 {
		t.Errorf("move from the version read = %+v, %v; want version 2", r, err)
	}
}

// The seed's failover: every caller homed in R1, the default among them,
// moves to R2 with version + 1; a caller homed elsewhere stays.
func TestFailoverMovesEveryCallerOfTheFailedRegion(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	for caller, region := range map[string]string{"u1": "us-east-1", "u3": "us-east-1", "u4": "us-west-2"} {
		if _, err := s.Move(ctx, caller, region, 0); err != nil {
			t.Fatal(err)
		}
	}
	moved, err := s.Failover(ctx, "us-east-1", "us-west-2", "us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, m := range moved {
		if m.Region != "us-west-2" {
			t.Errorf("moved %+v to the wrong Region", m)
		}
		got[m.Caller] = m.Version
	}
	want := map[string]int64{"u1": 2, "u3": 2, home.Everyone: 1}
	if len(got) != len(want) {
		t.Errorf("moved %v, want %v", got, want)
	}
	for c, v := range want {
		if got[c] != v {
			t.Errorf("moved %s to version %d, want %d", c, got[c], v)
		}
	}
	r1, r2 := router(t, s, "us-east-1"), router(t, s, "us-west-2")
	for _, c := range []string{"u1", "u3", "nobody-placed"} {
		if d := decide(t, r2, c); !d.Here {
			t.Errorf("after failover R2 does not serve %s: %+v", c, d)
		}
		if d := decide(t, r1, c); d.Here || d.URL != urls["us-west-2"] {
			t.Errorf("after failover R1 still serves %s: %+v", c, d)
		}
	}
	// A second failover finds nothing left in R1.
	if again, err := s.Failover(ctx, "us-east-1", "us-west-2", "us-east-1"); err != nil || len(again) != 0 {
		t.Errorf("second failover moved %v, %v; want nothing", again, err)
	}
}

// A replica behind shows an older version after the router saw a newer one:
// the router keeps the newer (it may only be stricter), for the caller's own
// record and for the default one, and "not found" after a find too.
func TestARouterNeverGoesBackToAnOlderVersion(t *testing.T) {
	s, db, table := newStore(t)
	r1 := router(t, s, "us-east-1")
	put(t, db, table, "u1", "us-west-2", 2)
	put(t, db, table, home.Everyone, "us-west-2", 2)
	if d := decide(t, r1, "u1"); d.Here {
		t.Fatalf("u1 at version 2 in R2: R1 serves it: %+v", d)
	}
	put(t, db, table, "u1", "us-east-1", 1) // the stale replica's view
	if d := decide(t, r1, "u1"); d.Here || d.Home.Version != 2 {
		t.Errorf("a stale version 1 moved u1 back: %+v", d)
	}
	_, err := db.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: &table,
		Key: map[string]types.AttributeValue{"caller": &types.AttributeValueMemberS{Value: "u1"}}})
	if err != nil {
		t.Fatal(err)
	}
	put(t, db, table, home.Everyone, "us-east-1", 1)
	if d := decide(t, r1, "u1"); d.Here {
		t.Errorf("a replica without u1's record and with an older default moved u1 back: %+v", d)
	}
	// A newer version is taken at once.
	put(t, db, table, "u1", "us-east-1", 3)
	if d := decide(t, r1, "u1"); !d.Here || d.Home.Version != 3 {
		t.Errorf("version 3 in R1 not taken: %+v", d)
	}
}

func TestAnUnreadableRecordIsAnError(t *testing.T) {
	db := testenv.DynamoDB(t)
	r := router(t, home.NewMover(db, "no-such-table-"+testenv.RandomID(4)), "us-east-1")
	if _, err := r.Decide(context.Background(), "u1"); !errors.Is(err, home.ErrUnavailable) {
		t.Errorf("err = %v, want ErrUnavailable", err)
	}
}

func TestAMalformedRecordIsAnError(t *testing.T) {
	s, db, table := newStore(t)
	_, err := db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &table, Item: map[string]types.AttributeValue{
		"caller": &types.AttributeValueMemberS{Value: "u1"}, "region": &types.AttributeValueMemberS{Value: "us-east-1"},
		"version": &types.AttributeValueMemberN{Value: "0"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := router(t, s, "us-east-1").Decide(context.Background(), "u1"); err == nil {
		t.Error("a record at version 0 was accepted")
	}
}

func TestParseURLs(t *testing.T) {
	if m, err := home.ParseURLs(`{"us-east-1":"https://a.example","us-west-2":"http://127.0.0.1:8081"}`); err != nil || len(m) != 2 {
		t.Errorf("ParseURLs = %v, %v", m, err)
	}
	for _, bad := range []string{``, `[]`, `{"us-east-1":"a.example"}`, `{"us-east-1":"ftp://a"}`, `{"":"https://a"}`} {
		if _, err := home.ParseURLs(bad); err == nil {
			t.Errorf("ParseURLs(%q) accepted", bad)
		}
	}
	if _, err := home.NewRouter(home.NewStore(nil, "t"), "us-east-1", "eu-west-1", urls); err == nil {
		t.Error("a fallback without a URL was accepted")
	}
}

// A caller homed in a Region the router has no URL for is refused (the
// api's 503), never answered 421 with an empty URL it cannot follow.
func TestAHomeWithoutAURLIsAnError(t *testing.T) {
	s, db, table := newStore(t)
	put(t, db, table, "u1", "eu-west-1", 1)
	if _, err := router(t, s, "us-east-1").Decide(context.Background(), "u1"); !errors.Is(err, home.ErrNoURL) {
		t.Errorf("err = %v, want ErrNoURL", err)
	}
}

// When the version cache starts over, it keeps the default record: a
// replica behind must not move every caller without a record back.
func TestTheCacheKeepsTheDefaultWhenItStartsOver(t *testing.T) {
	defer home.SetMaxSeen(2)()
	s, db, table := newStore(t)
	r1 := router(t, s, "us-east-1")
	put(t, db, table, home.Everyone, "us-west-2", 2)
	put(t, db, table, "a", "us-west-2", 1)
	put(t, db, table, "b", "us-west-2", 1)
	decide(t, r1, "a")                               // the cache: *, a (full)
	put(t, db, table, home.Everyone, "us-east-1", 1) // from now on, the stale replica's view
	decide(t, r1, "b")                               // b's record starts the cache over
	if d := decide(t, r1, "nobody-placed"); d.Here {
		t.Errorf("after the cache started over, a stale default moved callers back: %+v", d)
	}
}

// The default home is the "*" record's Region, or the fallback while there
// is none; a move of "*" changes the answer in both Regions.
func TestTheDefaultHomeFollowsTheEveryoneRecord(t *testing.T) {
	s, _, _ := newStore(t)
	ctx := context.Background()
	is := func(region string) bool {
		t.Helper()
		ok, err := s.Store().IsDefaultHome(ctx, region, "us-east-1")
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !is("us-east-1") || is("us-west-2") {
		t.Errorf("no record: R1 %v, R2 %v; want the fallback R1 alone", is("us-east-1"), is("us-west-2"))
	}
	if _, err := s.Move(ctx, home.Everyone, "us-west-2", 0); err != nil {
		t.Fatal(err)
	}
	if is("us-east-1") || !is("us-west-2") {
		t.Errorf("after the move: R1 %v, R2 %v; want R2 alone", is("us-east-1"), is("us-west-2"))
	}
}
