package refund_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/psp"
	"github.com/oncepay/oncepay/internal/refund"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

// refusals is the world's PSP client, keeping the errors its refund
// calls returned.
type refusals struct {
	*psp.Client
	mu   sync.Mutex
	errs []error
}

func (p *refusals) Refund(ctx context.Context, req psp.RefundRequest) (psp.Result, error) {
	res, err := p.Client.Refund(ctx, req)
	if err != nil {
		p.mu.Lock()
		p.errs = append(p.errs, err)
		p.mu.Unlock()
	}
	return res, err
}

// A refund whose reply was lost, and whose replays get no answer for a
// day: the PSP forgets the key, and the next replay is a new request,
// refused with charge_already_refunded by the very refund the first one
// made. That refusal used to leave the refund open for good (the buyer
// refunded, the API answering 202 forever, the merchant never debited, no
// REFUNDED notification). The refund is now looked up among the charge's
// refunds: SUCCEEDED with the PSP's refund id, one refund at the PSP, the
// journal's refund entries and the REFUNDED event once.
func TestARefusedRefundReplayIsLookedUpAndSettled(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	ctx := context.Background()
	pid := ids.PaymentID(ids.Scope("u1", "K1"))
	if r := w.Pay("u1", "K1", worldtest.Body3000); r.Status != http.StatusCreated {
		t.Fatalf("payment = %d %s", r.Status, r.Body)
	}
	// The API's attempt refunds, and its reply is lost.
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.RefundKey(pid)}, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
		t.Fatal(err)
	}
	if r := w.Refund("u1", "K1", "RK1"); r.Status != http.StatusAccepted {
		t.Fatalf("refund with its reply lost = %d %s, want 202", r.Status, r.Body)
	}

	p := &refusals{Client: w.PSP}
	a := refund.Attempter{Ledger: w.Ledger, PSP: p, Publisher: w.Outbox, Backoff: refund.DefaultBackoff(),
		CallTimeout: time.Second, Log: w.Log}
	attempt := func() ledger.Refund {
		t.Helper()
		rows, err := w.Ledger.ClaimRefunds(ctx, ledger.Claim{Now: w.Clock.Now(), Margin: w.Timing.Margin, Lease: time.Minute, Limit: 10})
		if err != nil || len(rows) != 1 {
			t.Fatalf("due refunds = %+v, %v; want this one", rows, err)
		}
		row, err := a.Attempt(ctx, rows[0], w.Clock.Now())
		if err != nil {
			t.Fatalf("attempt: %v", err)
		}
		return row
	}
	// A replay inside the window gets no answer either.
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.RefundKey(pid)}, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
		t.Fatal(err)
	}
	w.Clock.Advance(time.Minute)
	if row := attempt(); row.State != ledger.RefundUnknown {
		t.Fatalf("after an unanswered replay: %+v, want UNKNOWN", row)
	}

	// A day on (past the key's 24 h and the PSP's pruning jitter), the
	// replay is refused.
	w.Sim.Advance(25 * time.Hour)
	w.Clock.Advance(25 * time.Hour)
	row := attempt()
	var apiErr *psp.APIError
	if len(p.errs) != 1 || !errors.As(p.errs[0], &apiErr) || apiErr.Code != "charge_already_refunded" || apiErr.Type != "invalid_request_error" {
		t.Fatalf("refund calls refused with %v, want one charge_already_refunded", p.errs)
	}
	rf := w.Sim.Refunds()
	if len(rf) != 1 || rf[0].IdempotencyKey != ids.RefundKey(pid) || rf[0].Amount != 3000 {
		t.Fatalf("PSP refunds = %+v, want exactly one of 3000 under %s", rf, ids.RefundKey(pid))
	}
	if row.State != ledger.RefundSucceeded || row.PSPRefund != rf[0].ID {
		t.Fatalf("refund row = %s %q, want SUCCEEDED with %s", row.State, row.PSPRefund, rf[0].ID)
	}
	if n := w.Count(`SELECT count(*) FROM journal_entries WHERE payment_id = $1 AND posting = 'refund'`, pid); n != 2 {
		t.Fatalf("refund journal entries = %d, want the pair once", n)
	}
	if n := w.Count(`SELECT count(*) FROM outbox_intents WHERE payment_id = $1 AND event_id LIKE '%:REFUNDED'`, pid); n != 1 {
		t.Fatalf("REFUNDED outbox intents = %d, want 1", n)
	}
	out, err := w.Dynamo.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(w.OutboxTable), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{outbox.AttrEventID: &types.AttributeValueMemberS{Value: ids.EventID(pid, string(event.Refunded))}}})
	if err != nil || len(out.Item) == 0 {
		t.Fatalf("the REFUNDED event's outbox item: %v, %v", out, err)
	}
	// Settled: nothing is due any more.
	if rows, err := w.Ledger.ClaimRefunds(ctx, ledger.Claim{Now: w.Clock.Now().Add(time.Hour), Margin: w.Timing.Margin, Lease: time.Minute, Limit: 10}); err != nil || len(rows) != 0 {
		t.Fatalf("still due: %+v, %v", rows, err)
	}
}
