package idem_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncepay/oncepay/internal/idem"
)

// An MRSC table (docs/regions.md) refuses a claim that meets one in progress
// in another Region with ReplicatedWriteConflictException. DynamoDB Local
// has no MRSC, so the refusal comes from a server answering as DynamoDB
// does (awsJson1_0 error body); the SDK's own deserializer reads it. The
// claim is answered as a repeat in progress, with the claimant's own lease:
// never as "nothing holds the key" (which would run the payment) and never
// as the key store being down (which would run it on the durable guard
// alone while another Region runs it too).
func TestAReplicatedWriteConflictIsARepeatInProgress(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("X-Amz-Target") != "DynamoDB_20120810.PutItem" {
			t.Errorf("unexpected call %s", r.Header.Get("X-Amz-Target"))
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ReplicatedWriteConflictException","message":"Transaction is in conflict with another replicated write"}`))
	}))
	defer srv.Close()
	db := dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: aws.AnonymousCredentials{}, RetryMaxAttempts: 1,
	})
	c := claim("payments#u1#K1", "A1", t0)
	err := idem.NewStore(db, "claims").Claim(context.Background(), c)
	var ex *idem.ExistsError
	if !errors.As(err, &ex) {
		t.Fatalf("err = %v, want *ExistsError", err)
	}
	if errors.Is(err, idem.ErrUnavailable) {
		t.Error("a replicated write conflict was read as the store being down")
	}
	r := ex.Record
	if r.State != idem.InProgress || r.Fingerprint != c.Fingerprint || r.PaymentID != c.PaymentID || !r.InProgressUntil.Equal(c.InProgressUntil) {
		t.Errorf("record %+v, want IN_PROGRESS with the claimant's own lease", r)
	}
	if r.LeaseExpired(t0, 0) {
		t.Error("the conflict's lease has already passed: the api would take over")
	}
	if calls.Load() != 1 {
		t.Errorf("%d calls, want 1", calls.Load())
	}
}

// The same conflict on a takeover, a completion or a release is a lost
// race (ErrNotOwner: the caller reads the record), never the store being
// down.
func TestAReplicatedWriteConflictOnAnUpdateIsALostRace(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ReplicatedWriteConflictException","message":"conflict"}`))
	}))
	defer srv.Close()
	st := idem.NewStore(dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: aws.AnonymousCredentials{}, RetryMaxAttempts: 1,
	}), "claims")
	ctx := context.Background()
	for name, err := range map[string]error{
		"takeover": st.Takeover(ctx, "s", "A1", "A2", "H1", t0.Add(5*time.Second), t0.Add(time.Hour)),
		"complete": st.Complete(ctx, "s", "A1", nil, t0.Add(time.Hour)),
		"release":  st.Release(ctx, "s", "A1"),
	} {
		if !errors.Is(err, idem.ErrNotOwner) || errors.Is(err, idem.ErrUnavailable) {
			t.Errorf("%s: err = %v, want ErrNotOwner", name, err)
		}
	}
}

// A completion refused by a conflict is asked again: the conflicting write
// lands, and the owner's completion goes through.
func TestACompletionRefusedByAConflictIsAskedAgain(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ReplicatedWriteConflictException","message":"conflict"}`))
			return
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	st := idem.NewStore(dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: aws.AnonymousCredentials{}, RetryMaxAttempts: 1,
	}), "claims")
	if err := st.Complete(context.Background(), "s", "A1", nil, t0.Add(time.Hour)); err != nil {
		t.Errorf("err = %v, want the retried completion through", err)
	}
	if calls.Load() != 2 {
		t.Errorf("%d calls, want 2", calls.Load())
	}
}
