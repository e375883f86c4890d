// Package idem is the key record: the DynamoDB item that claims an
// idempotency key's scope for one request, answers its repeats for the key
// window, and then expires. It is an accelerator: correctness rests on the
// ledger's unique key (the durable guard), never on this table.
//
// A record is IN_PROGRESS (owned by one request until its lease ends),
// COMPLETED (holding the final answer, or a pointer to the payment whose
// state is still changing) or VOID (the client was told "never will be").
// "Expired" means expires_at < now, checked here in the read path and in
// every condition: DynamoDB's TTL deletes expired items only eventually.
package idem

import (
	"errors"
	"net/http"
	"time"
)

// State is the key record's state.
type State string

// The key record's states.
const (
	InProgress State = "IN_PROGRESS"
	Completed  State = "COMPLETED"
	Void       State = "VOID"
)

// Answer is a stored final answer, replayed byte for byte to repeats.
type Answer struct {
	Status  int         `json:"status"`
	Headers http.Header `json:"headers,omitempty"`
	Body    []byte      `json:"body"`
}

// Record is one key record.
type Record struct {
	Scope           string
	State           State
	Fingerprint     string // empty on a VOID record
	Owner           string // the request that holds (or held) the claim
	PaymentID       string
	InProgressUntil time.Time // the owner's lease: arrival stamp + deadline
	ExpiresAt       time.Time // the key window's end (also the TTL attribute)
	Answer          *Answer   // the final answer, when one is stored
	Pointer         bool      // COMPLETED with a pointer: render from the payment
}

// Expired reports whether the record is past its window and so counts as
// absent, whether or not TTL has deleted it yet.
func (r Record) Expired(now time.Time) bool { return r.ExpiresAt.Before(now) }

// LeaseExpired reports whether an IN_PROGRESS owner's lease plus the clock
// margin has passed, so that a repeat may take over.
func (r Record) LeaseExpired(now time.Time, margin time.Duration) bool {
	return now.After(r.InProgressUntil.Add(margin))
}

// Claim is a request's bid for a scope.
type Claim struct {
	Scope           string
	Fingerprint     string
	Owner           string
	PaymentID       string
	Now             time.Time
	InProgressUntil time.Time
	ExpiresAt       time.Time
}

// ErrNotOwner means a takeover, completion or release found another owner
// (or another state) than the caller expected: it lost, and must read the
// record and answer what it holds.
var ErrNotOwner = errors.New("idem: the record has another owner")

// ExistsError is returned by Claim when an unexpired record holds the scope.
// Record is the holder, read in the same call (ALL_OLD), so answering the
// repeat costs no further read.
type ExistsError struct{ Record Record }

func (e *ExistsError) Error() string {
	return "idem: scope already claimed (" + string(e.Record.State) + ")"
}

// ErrUnavailable wraps every failure to reach the key store: the caller
// carries on with the durable guard alone.
var ErrUnavailable = errors.New("idem: key store unavailable")
