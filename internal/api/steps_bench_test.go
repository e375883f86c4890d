package api_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/psp"
)

// BenchmarkSteps times each durable step of the happy path bare, one after
// another: it shows where a first call's time goes.
func BenchmarkSteps(b *testing.B) {
	w := newWorld(b)
	ctx := context.Background()
	var claim, ins, pspc, settle, comp, pub samples
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("bd-%d-%d", time.Now().UnixNano(), i)
		now := time.Now()
		t := time.Now()
		if err := w.claims.Claim(ctx, idem.Claim{Scope: id, Fingerprint: "f", Owner: "o", PaymentID: id, Now: now, InProgressUntil: now.Add(5 * time.Second), ExpiresAt: now.Add(time.Hour)}); err != nil {
			b.Fatal(err)
		}
		claim = append(claim, time.Since(t))
		t = time.Now()
		if _, _, err := w.ledger.InsertPending(ctx, ledger.Payment{ID: id, CallerID: "c", ClientKey: id, Fingerprint: "f", Amount: 3000, Currency: "USD", MerchantID: "m1", OrderID: "1", PaymentMethod: "pm_card_visa", DeadlineAt: now}, ""); err != nil {
			b.Fatal(err)
		}
		ins = append(ins, time.Since(t))
		t = time.Now()
		res, err := w.psp.Charge(ctx, psp.ChargeRequest{IdempotencyKey: id + ":charge", PaymentID: id, MerchantID: "m1", Amount: 3000, Currency: "USD", PaymentMethod: "pm_card_visa"})
		if err != nil {
			b.Fatal(err)
		}
		pspc = append(pspc, time.Since(t))
		t = time.Now()
		_, ev, _, err := w.ledger.Settle(ctx, id, ledger.Outcome{State: ledger.Succeeded, PSPCharge: res.ChargeID}, now)
		if err != nil {
			b.Fatal(err)
		}
		settle = append(settle, time.Since(t))
		t = time.Now()
		if err := w.claims.Complete(ctx, id, "o", &idem.Answer{Status: 201, Body: []byte(`{"payment_id":"x","state":"SUCCEEDED","amount":3000}`)}, now.Add(time.Hour)); err != nil {
			b.Fatal(err)
		}
		comp = append(comp, time.Since(t))
		t = time.Now()
		if err := w.outbox.Publish(ctx, *ev); err != nil {
			b.Fatal(err)
		}
		pub = append(pub, time.Since(t))
	}
	for _, x := range []struct {
		n string
		s samples
	}{{"claim", claim}, {"insert", ins}, {"psp", pspc}, {"settle", settle}, {"complete", comp}, {"publish", pub}} {
		b.ReportMetric(ms(x.s.pct(0.5)), x.n+"-p50-ms")
	}
}
