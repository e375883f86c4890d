package api_test

import (
	"net/http"
	"strings"
	"testing"
)

// Issue 13, defect 3: a merchant id with a space would be the events
// queue's MessageGroupId, which SQS refuses; any caller could send one (a
// bogus payment method makes a FAILED event, which is published too) and
// stall the relay. The API now answers 400 naming merchant_id, and nothing
// runs: no claim, no ledger row, no charge, no outbox intent.
func TestAMerchantIDWithASpaceIs400AndChangesNothing(t *testing.T) {
	w := newWorld(t)
	for _, body := range []string{
		strings.Replace(body3000, `"m1"`, `"m 1"`, 1),
		strings.Replace(strings.Replace(body3000, `"m1"`, `"acme store"`, 1), "pm_card_visa", "pm_bogus", 1),
	} {
		r := w.pay("u1", "K1", body)
		a := expectStatus(t, r, http.StatusBadRequest)
		if r.Headers.Get("Content-Type") != "application/problem+json" || a.Field != "merchant_id" {
			t.Fatalf("%s: %d %s; want problem+json naming merchant_id", body, r.Status, r.Body)
		}
	}
	if _, found := w.record("u1", "K1"); found {
		t.Fatal("the refused request claimed the key")
	}
	if n := w.countRows(`SELECT count(*) FROM payments`) + w.countRows(`SELECT count(*) FROM outbox_intents`); n != 0 || len(w.charges()) != 0 {
		t.Fatalf("the refused request left %d rows and %d charges", n, len(w.charges()))
	}
	// The same key with a valid merchant id is a first request.
	if a := expectStatus(t, w.pay("u1", "K1", body3000), http.StatusCreated); a.State != "SUCCEEDED" {
		t.Fatalf("then a valid request: %+v", a)
	}
}
