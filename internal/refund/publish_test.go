package refund_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/psp"
	"github.com/oncepay/oncepay/internal/refund"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// refunder is a PSP that refunds every request.
type refunder struct{ keys []string }

func (r *refunder) Refund(_ context.Context, req psp.RefundRequest) (psp.Result, error) {
	r.keys = append(r.keys, req.IdempotencyKey)
	return psp.Result{Outcome: psp.Succeeded, RefundID: "re_1"}, nil
}

func (r *refunder) Lookup(context.Context, string) (psp.Result, error) {
	return psp.Result{Outcome: psp.Succeeded, PaymentIntentID: "pi_1"}, nil
}

func (r *refunder) RetrieveRefund(_ context.Context, id string) (psp.Result, error) {
	return psp.Result{Outcome: psp.Succeeded, RefundID: id}, nil
}

func (r *refunder) FindRefund(context.Context, string, string, string) (psp.Result, error) {
	return psp.Result{Outcome: psp.NotFound}, nil
}

// Defect 11: a refund that succeeds publishes its event the way a payment
// does: an outbox intent <payment_id>:REFUNDED in the settle's own
// transaction, then the outbox item put right after the commit, carrying the
// same event.
func TestASucceededRefundPutsItsEventOnTheOutboxPath(t *testing.T) {
	pool, _ := testenv.Ledger(t)
	db := testenv.DynamoDB(t)
	table, _ := testenv.NewOutboxTable(t, db)
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pub, err := outbox.NewPublisher(db, outbox.Config{Table: table, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	st := ledger.New(pool)
	now := time.Now()
	if _, _, err := st.InsertPending(ctx, ledger.Payment{ID: "pay_7", CallerID: "u1", ClientKey: "K1", Fingerprint: "F", Amount: 3000,
		Currency: "USD", MerchantID: "m1", OrderID: "42", PaymentMethod: "pm_1", DeadlineAt: now.Add(5 * time.Second)}, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, moved, err := st.Settle(ctx, "pay_7", ledger.Outcome{State: ledger.Succeeded, PSPCharge: "pi_1"}, now); err != nil || !moved {
		t.Fatalf("settle: %v %v", moved, err)
	}
	row, _, err := st.InsertRefund(ctx, ledger.Refund{PaymentID: "pay_7", CallerID: "u1", RefundKey: "RK1", Fingerprint: refund.Fingerprint("pay_7"),
		Amount: 3000, Currency: "USD", MerchantID: "m1", PSPCharge: "pi_1", DeadlineAt: now.Add(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	a := refund.Attempter{Ledger: st, PSP: &refunder{}, Publisher: pub, Log: quiet}
	row, err = a.Attempt(ctx, row, now)
	if err != nil || row.State != ledger.RefundSucceeded {
		t.Fatalf("attempt: %+v %v", row, err)
	}
	var payload string
	if err := pool.QueryRow(ctx, `SELECT payload::text FROM outbox_intents WHERE event_id = 'pay_7:REFUNDED' AND merchant_id = 'm1'`).Scan(&payload); err != nil {
		t.Fatalf("the refund's outbox intent: %v", err)
	}
	intent, err := event.Unmarshal([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	if intent.State != event.Refunded || intent.Amount != 3000 || intent.CallerID != "u1" || intent.PaymentID != "pay_7" {
		t.Fatalf("intent event = %+v", intent)
	}
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: map[string]types.AttributeValue{
		outbox.AttrEventID: &types.AttributeValueMemberS{Value: "pay_7:REFUNDED"}}})
	if err != nil || out.Item == nil {
		t.Fatalf("outbox item: %v, %v", out, err)
	}
	item, err := event.Unmarshal([]byte(out.Item[outbox.AttrPayload].(*types.AttributeValueMemberS).Value))
	if err != nil || item != intent {
		t.Fatalf("outbox item carries %+v (%v), want the intent's %+v", item, err, intent)
	}
}
