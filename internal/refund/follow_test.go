package refund_test

import (
	"context"
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

func openRefund(t *testing.T, charge string) (*ledger.Store, *pgxpool.Pool, ledger.Refund) {
	t.Helper()
	pool, _ := testenv.Ledger(t)
	st := ledger.New(pool)
	ctx := context.Background()
	now := time.Now()
	if _, _, err := st.InsertPending(ctx, ledger.Payment{ID: "pay_7", CallerID: "u1", ClientKey: "K1", Fingerprint: "F", Amount: 3000,
		Currency: "USD", MerchantID: "m1", OrderID: "42", PaymentMethod: "pm_1", DeadlineAt: now.Add(5 * time.Second)}); err != nil {
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
