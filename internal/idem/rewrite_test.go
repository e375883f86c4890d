package idem_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncepay/oncepay/internal/idem"
)

// Finalize rewrites only a COMPLETED pointer to the named payment, keeps
// its window and owner, and leaves every other record — IN_PROGRESS, a
// final answer, VOID, another payment's pointer, none at all — untouched.
func TestFinalizeRewritesOnlyAPointerToThePayment(t *testing.T) {
	st, db, table := newStore(t)
	ctx := context.Background()
	final := &idem.Answer{Status: http.StatusCreated, Headers: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"state":"SUCCEEDED"}`)}

	// A pointer.
	if err := st.Claim(ctx, claim("payments#u1#P", "A1", t0)); err != nil {
		t.Fatal(err)
	}
	if err := st.Complete(ctx, "payments#u1#P", "A1", nil, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := st.Finalize(ctx, "payments#u1#P", "pay_other", final); !errors.Is(err, idem.ErrNotPointer) {
		t.Fatalf("another payment's pointer: %v", err)
	}
	if err := st.Finalize(ctx, "payments#u1#P", "pay_7", final); err != nil {
		t.Fatalf("finalize: %v", err)
	}
	rec, found, err := st.Get(ctx, "payments#u1#P", t0)
	if err != nil || !found || rec.Pointer || rec.Answer == nil || string(rec.Answer.Body) != string(final.Body) ||
		rec.Owner != "A1" || !rec.ExpiresAt.Equal(t0.Add(time.Hour)) || rec.State != idem.Completed {
		t.Fatalf("after finalize: %+v %v %v", rec, found, err)
	}
	// Now a final answer: a second finalize changes nothing.
	if err := st.Finalize(ctx, "payments#u1#P", "pay_7", &idem.Answer{Status: 402}); !errors.Is(err, idem.ErrNotPointer) {
		t.Fatalf("finalize of a final answer: %v", err)
	}

	// IN_PROGRESS (a takeover may be running).
	if err := st.Claim(ctx, claim("payments#u1#I", "A1", t0)); err != nil {
		t.Fatal(err)
	}
	if err := st.Finalize(ctx, "payments#u1#I", "pay_7", final); !errors.Is(err, idem.ErrNotPointer) {
		t.Fatalf("IN_PROGRESS: %v", err)
	}
	if rec, _, _ := st.Get(ctx, "payments#u1#I", t0); rec.State != idem.InProgress || rec.Answer != nil {
		t.Fatalf("IN_PROGRESS record changed: %+v", rec)
	}

	// VOID.
	if err := st.Void(ctx, "payments#u1#V", "pay_7", t0, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := st.Finalize(ctx, "payments#u1#V", "pay_7", final); !errors.Is(err, idem.ErrNotPointer) {
		t.Fatalf("VOID: %v", err)
	}

	// Absent: nothing is created.
	if err := st.Finalize(ctx, "payments#u1#none", "pay_7", final); !errors.Is(err, idem.ErrNotPointer) {
		t.Fatalf("absent: %v", err)
	}
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table,
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "payments#u1#none"}}})
	if err != nil || len(out.Item) != 0 {
		t.Fatalf("finalize created an item: %v %v", out.Item, err)
	}
}
