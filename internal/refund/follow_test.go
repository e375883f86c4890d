package refund_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/psp"
	"github.com/oncepay/oncepay/internal/refund"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// stripeLike answers a refund the way Stripe can: the create answers
// pending (and, replayed under its key, keeps answering the saved pending);
// only GET /v1/refunds/{id} tells the refund's status now.
type stripeLike struct {
	creates, retrieves, lookups int
	reqs                        []psp.RefundRequest
	status                      psp.Outcome // what a GET answers
}

func (s *stripeLike) Refund(_ context.Context, req psp.RefundRequest) (psp.Result, error) {
	s.creates++
	s.reqs = append(s.reqs, req)
	return psp.Result{Outcome: psp.Pending, RefundID: "re_1", Replayed: s.creates > 1}, nil
}

func (s *stripeLike) Lookup(context.Context, string) (psp.Result, error) {
	s.lookups++
	return psp.Result{Outcome: psp.NotFound}, nil // the search index lags
}

func (s *stripeLike) RetrieveRefund(_ context.Context, id string) (psp.Result, error) {
	s.retrieves++
	r := psp.Result{Outcome: s.status, RefundID: id}
	if s.status == psp.Declined {
		r.DeclineCode = "lost_or_stolen_card"
	}
	return r, nil
}

func (s *stripeLike) FindRefund(context.Context, string, string, string) (psp.Result, error) {
	return psp.Result{Outcome: psp.NotFound}, nil
}

func openRefund(t *testing.T, charge string) (*ledger.Store, *pgxpool.Pool, ledger.Refund) {
	t.Helper()
	pool, _ := testenv.Ledger(t)
	st := ledger.New(pool)
	ctx := context.Background()
	now := time.Now()
	if _, _, err := st.InsertPending(ctx, ledger.Payment{ID: "pay_7", CallerID: "u1", ClientKey: "K1", Fingerprint: "F", Amount: 3000,
		Currency: "USD", MerchantID: "m1", OrderID: "42", PaymentMethod: "pm_1", DeadlineAt: now.Add(5 * time.Second)}, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, moved, err := st.Settle(ctx, "pay_7", ledger.Outcome{State: ledger.Succeeded, PSPCharge: charge}, now); err != nil || !moved {
		t.Fatalf("settle: %v %v", moved, err)
	}
	row, _, err := st.InsertRefund(ctx, ledger.Refund{PaymentID: "pay_7", CallerID: "u1", RefundKey: "RK1", Fingerprint: refund.Fingerprint("pay_7"),
		Amount: 3000, Currency: "USD", MerchantID: "m1", PSPCharge: charge, DeadlineAt: now.Add(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	return st, pool, row
}

// A refund the PSP answers pending is recorded "at the PSP, pending" (its
// refund id on the row) and the next attempts follow it by id, never by
// replaying the key, whose saved answer stays "pending" whatever happened
// since: it reaches SUCCEEDED, or FAILED with no money moved.
func TestAPendingRefundIsFollowedByItsIDNotByReplayingTheKey(t *testing.T) {
	for _, tc := range []struct {
		name    string
		final   psp.Outcome
		want    ledger.RefundState
		intents int
	}{
		{"succeeds", psp.Succeeded, ledger.RefundSucceeded, 2},
		{"fails", psp.Declined, ledger.RefundFailed, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, pool, row := openRefund(t, "ch_1")
			ctx := context.Background()
			p := &stripeLike{status: psp.Pending}
			a := refund.Attempter{Ledger: st, PSP: p, Backoff: refund.Backoff{Base: time.Minute}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			now := time.Now()
			row, err := a.Attempt(ctx, row, now)
			if err != nil || row.State != ledger.RefundUnknown || row.PSPRefund != "re_1" {
				t.Fatalf("after the pending answer: %+v %v; want UNKNOWN at the PSP as re_1", row, err)
			}
			if row, err = a.Attempt(ctx, row, now.Add(time.Minute)); err != nil || row.State != ledger.RefundUnknown {
				t.Fatalf("still pending: %+v %v", row, err)
			}
			p.status = tc.final
			if row, err = a.Attempt(ctx, row, now.Add(3*time.Minute)); err != nil || row.State != tc.want || row.PSPRefund != "re_1" {
				t.Fatalf("after settling: %+v %v; want %s with re_1", row, err, tc.want)
			}
			if p.creates != 1 || p.retrieves != 2 {
				t.Fatalf("%d creates, %d retrieves: want one create, then GETs by id", p.creates, p.retrieves)
			}
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_intents WHERE payment_id = 'pay_7'`).Scan(&n); err != nil || n != tc.intents {
				t.Fatalf("%d outbox intents (%v), want %d", n, err, tc.intents)
			}
		})
	}
}

// The ledger holds the charge (ch_…): the refund is sent by charge= at
// once. Finding the PaymentIntent by search first would wait on Stripe's
// search index, which lags behind writes.
func TestARefundOfAKnownChargeIsSentByChargeWithoutASearch(t *testing.T) {
	st, _, row := openRefund(t, "ch_1")
	p := &stripeLike{status: psp.Succeeded}
	a := refund.Attempter{Ledger: st, PSP: p, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if _, err := a.Attempt(context.Background(), row, time.Now()); err != nil {
		t.Fatal(err)
	}
	if p.lookups != 0 || len(p.reqs) != 1 || p.reqs[0].ChargeID != "ch_1" || p.reqs[0].PaymentIntentID != "" || p.reqs[0].Amount != 3000 {
		t.Fatalf("%d look-ups, requests %+v: want one refund of ch_1 for 3000 and no search", p.lookups, p.reqs)
	}
}

// saved500 answers every refund create with the 500 saved under its key
// (Stripe's saved result once execution began); the list of the charge's
// refunds is what tells.
type saved500 struct {
	creates, finds int
	found          psp.Result
	findBy         [3]string
	findErrs       int // look-ups that fail before the list answers
}

func (s *saved500) Refund(context.Context, psp.RefundRequest) (psp.Result, error) {
	s.creates++
	return psp.Result{Outcome: psp.Unknown, HTTPStatus: 500, Replayed: s.creates > 1}, nil
}

func (s *saved500) Lookup(context.Context, string) (psp.Result, error) {
	return psp.Result{Outcome: psp.NotFound}, nil
}

func (s *saved500) RetrieveRefund(_ context.Context, id string) (psp.Result, error) {
	return psp.Result{Outcome: psp.Succeeded, RefundID: id}, nil
}

func (s *saved500) FindRefund(_ context.Context, pi, charge, paymentID string) (psp.Result, error) {
	s.finds++
	s.findBy = [3]string{pi, charge, paymentID}
	if s.findErrs > 0 {
		s.findErrs--
		return psp.Result{}, errors.New("psp: list refunds: connection reset")
	}
	return s.found, nil
}

// A look-up that fails says nothing either: the refund stays open with no
// PSP id, and the next attempt replays the same key (the saved 500) and
// looks again, settling from the list: never a second refund, never a
// guess.
func TestARefundWhoseLookUpFailsStaysOpenAndTheNextAttemptLooksAgain(t *testing.T) {
	st, _, row := openRefund(t, "ch_1")
	p := &saved500{found: psp.Result{Outcome: psp.Succeeded, RefundID: "re_9"}, findErrs: 1}
	a := refund.Attempter{Ledger: st, PSP: p, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	got, err := a.Attempt(context.Background(), row, time.Now())
	if err != nil || got.State != ledger.RefundUnknown || got.PSPRefund != "" || p.creates != 1 || p.finds != 1 {
		t.Fatalf("after the failed look-up: %+v %v (%d creates, %d finds); want open, no PSP id", got, err, p.creates, p.finds)
	}
	got, err = a.Attempt(context.Background(), got, time.Now())
	if err != nil || got.State != ledger.RefundSucceeded || got.PSPRefund != "re_9" || p.creates != 2 || p.finds != 2 {
		t.Fatalf("the next attempt: %+v %v (%d creates, %d finds); want settled from the list after one replay", got, err, p.creates, p.finds)
	}
}

// A 5xx under the refund key says nothing about whether the refund ran: the
// refund is settled from the PSP's list of the charge's refunds — succeeded
// or failed as found there, pending recorded by id to be followed, and
// only when none is found is the refund left open for the key's retry.
func TestARefundBehindA5xxIsSettledFromThePSPsListOfTheChargesRefunds(t *testing.T) {
	for _, tc := range []struct {
		name      string
		found     psp.Result
		want      ledger.RefundState
		pspRefund string
	}{
		{"found succeeded", psp.Result{Outcome: psp.Succeeded, RefundID: "re_9"}, ledger.RefundSucceeded, "re_9"},
		{"found failed", psp.Result{Outcome: psp.Declined, RefundID: "re_9", DeclineCode: "lost_or_stolen_card"}, ledger.RefundFailed, "re_9"},
		{"found pending", psp.Result{Outcome: psp.Pending, RefundID: "re_9"}, ledger.RefundUnknown, "re_9"},
		{"none found", psp.Result{Outcome: psp.NotFound}, ledger.RefundUnknown, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _, row := openRefund(t, "ch_1")
			p := &saved500{found: tc.found}
			a := refund.Attempter{Ledger: st, PSP: p, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			got, err := a.Attempt(context.Background(), row, time.Now())
			if err != nil || got.State != tc.want || got.PSPRefund != tc.pspRefund {
				t.Fatalf("after the 500: %+v %v; want %s with %q", got, err, tc.want, tc.pspRefund)
			}
			if p.creates != 1 || p.finds != 1 || p.findBy != [3]string{"", "ch_1", "pay_7"} {
				t.Fatalf("%d creates, %d finds by %v: want one of each, by the charge the refund was sent against", p.creates, p.finds, p.findBy)
			}
			if tc.want == ledger.RefundUnknown && tc.pspRefund == "re_9" {
				// Pending: the next attempt follows it by id, not by the key.
				if got, err = a.Attempt(context.Background(), got, time.Now()); err != nil || got.State != ledger.RefundSucceeded || p.creates != 1 {
					t.Fatalf("following the found pending refund: %+v %v, %d creates", got, err, p.creates)
				}
			}
		})
	}
}
