package chaos_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/testkit/chaos"
	"github.com/oncepay/oncepay/internal/testkit/story"
)

// committedButNothingRan is a ledger whose PENDING insert commits and then
// reports a plain failure, so the API answers "nothing was run" for a
// payment the ledger holds: the lie a client re-keys and pays twice on.
type committedButNothingRan struct{ api.Ledger }

func (l committedButNothingRan) InsertPending(ctx context.Context, p ledger.Payment, receiptEmail string) (ledger.Payment, bool, error) {
	if _, _, err := l.Ledger.InsertPending(ctx, p, receiptEmail); err != nil {
		return ledger.Payment{}, false, err
	}
	return ledger.Payment{}, false, errors.New("injected: committed, reported as not written")
}

// The checker holds a "nothing was run" answer against the ledger: told to
// a request whose insert committed, it is a violation.
func TestTheCheckerCatchesNothingRanForACommittedInsert(t *testing.T) {
	sum := runMany(t, chaos.Config{First: 1, Runs: 3, World: story.Options{WrapLedger: func(l api.Ledger) api.Ledger { return committedButNothingRan{l} }}})
	var all []string
	for _, f := range sum.Failed {
		all = append(all, f.Violations...)
	}
	if !slices.ContainsFunc(all, func(v string) bool { return strings.Contains(v, "nothing was run") }) {
		t.Fatalf("three schedules told \"nothing was run\" for committed inserts; violations %v name none", all)
	}
}

// refundCommittedButNothingRan is a ledger whose refund intent's insert
// commits and then reports a plain failure, so the API answers "nothing
// was run" for a refund the resolver then makes: the lie the review found
// in the refund path, which the checker did not look at.
type refundCommittedButNothingRan struct{ refundLedger }

type refundLedger interface {
	api.Ledger
	api.RefundLedger
	api.Resolver
}

func (l refundCommittedButNothingRan) InsertRefund(ctx context.Context, r ledger.Refund) (ledger.Refund, bool, error) {
	if _, _, err := l.refundLedger.InsertRefund(ctx, r); err != nil {
		return ledger.Refund{}, false, err
	}
	return ledger.Refund{}, false, errors.New("injected: committed, reported as not written")
}

// The checker holds a refund's "nothing was run" answer against the
// refund rows: told to a refund request whose intent committed, it is a
// violation.
func TestTheCheckerCatchesNothingRanForACommittedRefundIntent(t *testing.T) {
	sum := runMany(t, chaos.Config{First: 6, Runs: 3, Workers: 2, World: story.Options{WrapLedger: func(l api.Ledger) api.Ledger {
		return refundCommittedButNothingRan{l.(refundLedger)}
	}}})
	var all []string
	for _, f := range sum.Failed {
		all = append(all, f.Violations...)
	}
	if !slices.ContainsFunc(all, func(v string) bool { return strings.Contains(v, "its refund row was written") }) {
		t.Fatalf("three schedules (seeds 6 and 8 refund a payment that succeeded) told \"nothing was run\" for committed refund intents; violations %v name none", all)
	}
}
