package idem_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

func newStore(t *testing.T) (*idem.Store, *dynamodb.Client, string) {
	db := testenv.DynamoDB(t)
	table := testenv.NewTable(t, db, "pk")
	return idem.NewStore(db, table), db, table
}

var t0 = time.Unix(1_800_000_000, 0)

func claim(scope, owner string, now time.Time) idem.Claim {
	return idem.Claim{Scope: scope, Fingerprint: "H1", Owner: owner, PaymentID: "pay_7",
		Now: now, InProgressUntil: now.Add(5 * time.Second), ExpiresAt: now.Add(time.Hour)}
}

func TestClaimThenRepeatGetsTheHolderInOneCall(t *testing.T) {
	st, _, _ := newStore(t)
	ctx := context.Background()
	if err := st.Claim(ctx, claim("payments#u1#K1", "A1", t0)); err != nil {
		t.Fatal(err)
	}
	err := st.Claim(ctx, claim("payments#u1#K1", "A2", t0.Add(time.Second)))
	var ex *idem.ExistsError
	if !errors.As(err, &ex) {
		t.Fatalf("second claim: err = %v, want *ExistsError", err)
	}
	r := ex.Record
	if r.Owner != "A1" || r.State != idem.InProgress || r.Fingerprint != "H1" || r.PaymentID != "pay_7" || !r.InProgressUntil.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("ALL_OLD record = %+v", r)
	}
}

func TestAnExpiredRecordStillPresentCountsAsAbsent(t *testing.T) {
	st, db, table := newStore(t)
	ctx := context.Background()
	// An expired record that TTL has not deleted (this table has no TTL at all).
	_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: map[string]types.AttributeValue{
		"pk":         &types.AttributeValueMemberS{Value: "payments#u1#K1"},
		"state":      &types.AttributeValueMemberS{Value: "COMPLETED"},
		"fp":         &types.AttributeValueMemberS{Value: "H1"},
		"owner":      &types.AttributeValueMemberS{Value: "A1"},
		"expires_at": &types.AttributeValueMemberN{Value: strconv.FormatInt(t0.Add(-time.Second).Unix(), 10)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, found, err := st.Get(ctx, "payments#u1#K1", t0); err != nil || found {
		t.Fatalf("Get of an expired record: found=%v err=%v, want absent", found, err)
	}
	if err := st.Claim(ctx, claim("payments#u1#K1", "A3", t0)); err != nil {
		t.Fatalf("claim over an expired record: %v", err)
	}
	rec, found, err := st.Get(ctx, "payments#u1#K1", t0)
	if err != nil || !found || rec.Owner != "A3" {
		t.Fatalf("after claim: %+v found=%v err=%v", rec, found, err)
	}
}

func TestOnlyTheOwnerCompletesAndTakeoverIsConditionalOnTheOwnerRead(t *testing.T) {
	st, _, _ := newStore(t)
	ctx := context.Background()
	scope := "payments#u1#K2"
	if err := st.Claim(ctx, claim(scope, "A1", t0)); err != nil {
		t.Fatal(err)
	}
	// A takeover that read a stale owner loses.
	if err := st.Takeover(ctx, scope, "someone-else", "A2", "H1", t0.Add(12*time.Second), t0.Add(time.Hour)); !errors.Is(err, idem.ErrNotOwner) {
		t.Fatalf("takeover with a stale owner: %v", err)
	}
	// The taker's fingerprint replaces the dead owner's, which no ledger
	// check ever confirmed.
	if err := st.Takeover(ctx, scope, "A1", "A2", "H2", t0.Add(12*time.Second), t0.Add(time.Hour)); err != nil {
		t.Fatalf("takeover: %v", err)
	}
	if rec, _, err := st.Get(ctx, scope, t0); err != nil || rec.Fingerprint != "H2" || rec.Owner != "A2" {
		t.Fatalf("record after the takeover = %+v, %v; want owner A2 with fingerprint H2", rec, err)
	}
	// The paused owner wakes up: its completion fails.
	if err := st.Complete(ctx, scope, "A1", &idem.Answer{Status: 201, Body: []byte(`{}`)}, t0.Add(time.Hour)); !errors.Is(err, idem.ErrNotOwner) {
		t.Fatalf("zombie completion: %v", err)
	}
	if err := st.Complete(ctx, scope, "A2", &idem.Answer{Status: 201, Body: []byte(`{"state":"SUCCEEDED"}`)}, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	rec, _, err := st.Get(ctx, scope, t0)
	if err != nil || rec.State != idem.Completed || rec.Answer == nil || string(rec.Answer.Body) != `{"state":"SUCCEEDED"}` || rec.Pointer {
		t.Fatalf("record = %+v err=%v", rec, err)
	}
	// Completed records cannot be taken over.
	if err := st.Takeover(ctx, scope, "A2", "A3", "H2", t0, t0.Add(time.Hour)); !errors.Is(err, idem.ErrNotOwner) {
		t.Fatalf("takeover of a completed record: %v", err)
	}
}

func TestPointerCompletionAndRelease(t *testing.T) {
	st, _, _ := newStore(t)
	ctx := context.Background()
	if err := st.Claim(ctx, claim("payments#u1#K3", "A1", t0)); err != nil {
		t.Fatal(err)
	}
	if err := st.Complete(ctx, "payments#u1#K3", "A1", nil, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	rec, _, _ := st.Get(ctx, "payments#u1#K3", t0)
	if !rec.Pointer || rec.Answer != nil || rec.PaymentID != "pay_7" {
		t.Fatalf("pointer record = %+v", rec)
	}
	// Release only deletes an owner's IN_PROGRESS claim.
	if err := st.Release(ctx, "payments#u1#K3", "A1"); !errors.Is(err, idem.ErrNotOwner) {
		t.Fatalf("release of a completed record: %v", err)
	}
	if err := st.Claim(ctx, claim("payments#u1#K4", "B1", t0)); err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, "payments#u1#K4", "B1"); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := st.Get(ctx, "payments#u1#K4", t0); found {
		t.Fatal("released claim still there")
	}
}

func TestVoidIsInsertIfAbsent(t *testing.T) {
	st, _, _ := newStore(t)
	ctx := context.Background()
	if err := st.Void(ctx, "payments#u1#K5", "pay_5", t0, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var ex *idem.ExistsError
	if err := st.Claim(ctx, claim("payments#u1#K5", "A1", t0)); !errors.As(err, &ex) || ex.Record.State != idem.Void {
		t.Fatalf("claim of a voided key: %v", err)
	}
	if err := st.Claim(ctx, claim("payments#u1#K6", "A1", t0)); err != nil {
		t.Fatal(err)
	}
	if err := st.Void(ctx, "payments#u1#K6", "pay_6", t0, t0.Add(time.Hour)); !errors.As(err, &ex) || ex.Record.Owner != "A1" {
		t.Fatalf("void of a claimed key: %v", err)
	}
}

func TestUnreachableKeyStoreIsUnavailable(t *testing.T) {
	testenv.AWS(t)
	db := dynamodb.New(dynamodb.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String("http://127.0.0.1:1"),
		Credentials:      aws.AnonymousCredentials{},
		RetryMaxAttempts: 1,
	})
	st := idem.NewStore(db, "idem")
	err := st.Claim(context.Background(), claim("payments#u1#K1", "A1", t0))
	if !errors.Is(err, idem.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}
