package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/internal/client"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
)

// slow holds every request for d before it reaches the front door, so taps
// made at once are all still in flight together.
func slow(d time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			time.Sleep(d)
			next.ServeHTTP(rw, r)
		})
	}
}

// Two taps at once (a double tap, or the app's retry racing the buyer's):
// the order's look-up and the new key's insert are one journal transaction,
// so exactly one key is made and one charge taken; every tap hears the
// same payment.
func TestTwoTapsAtOnceMakeOneKeyAndOneCharge(t *testing.T) {
	w := apitest.New(t, config.Timing{})
	door := w.Door(t, slow(20*time.Millisecond))
	tok := w.Token(t, "u1")
	j := openJournal(t)
	const taps = 8
	results := make([]client.Result, taps)
	errs := make([]error, taps)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range taps {
		wg.Go(func() {
			<-start
			results[i], errs[i] = fastClient(door.URL, tok, j).Pay(context.Background(), order42)
		})
	}
	close(start)
	wg.Wait()
	keys := map[string]bool{}
	for i := range taps {
		if errs[i] != nil {
			t.Fatalf("tap %d: %v", i, errs[i])
		}
		if results[i].State != client.Succeeded {
			t.Errorf("tap %d: %+v, want SUCCEEDED", i, results[i])
		}
		keys[results[i].Key] = true
	}
	if len(keys) != 1 {
		t.Errorf("%d keys for one order: %v", len(keys), keys)
	}
	if got := len(w.Charges()); got != 1 {
		t.Fatalf("charges = %d for one order, want 1", got)
	}
	if n := w.Scalar(t, `SELECT count(*) FROM payments`); n != 1 {
		t.Fatalf("payments = %d, want 1", n)
	}
}

// callerDoor is the front door with every reply lost for the tokens in
// lose: the server acts, that caller hears nothing.
func callerDoor(t *testing.T, w *apitest.World, lose *sync.Map) *httptest.Server {
	drop := dropper("/", 1<<30)
	return w.Door(t, func(next http.Handler) http.Handler {
		lost := drop(next)
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if _, ok := lose.Load(r.Header.Get("Authorization")); ok {
				lost.ServeHTTP(rw, r)
				return
			}
			next.ServeHTTP(rw, r)
		})
	})
}

// Two callers on one journal (two accounts in one app): intents are scoped
// by caller, so the second caller's tap for the same order id is its own
// purchase. Served the first caller's SUCCEEDED from the journal, it would
// believe it had paid and never pay.
func TestASecondCallerOnTheJournalIsNotServedTheFirstCallersPayment(t *testing.T) {
	w := apitest.New(t, config.Timing{})
	door := w.Door(t, nil)
	j := openJournal(t)
	ctx := context.Background()
	r1, err := fastClient(door.URL, w.Token(t, "u1"), j).Pay(ctx, order42)
	if err != nil || r1.State != client.Succeeded {
		t.Fatalf("u1: %+v %v", r1, err)
	}
	r2, err := fastClient(door.URL, w.Token(t, "u2"), j).Pay(ctx, order42)
	if err != nil || r2.State != client.Succeeded || r2.FromJournal || r2.Key == r1.Key {
		t.Fatalf("u2 was answered %+v (%v): want its own payment under its own key", r2, err)
	}
	if chargesFor(w, "u1", r1.Key) != 1 || chargesFor(w, "u2", r2.Key) != 1 || len(w.Charges()) != 2 {
		t.Fatalf("charges: u1 %d, u2 %d, all %d; want 1, 1, 2", chargesFor(w, "u1", r1.Key), chargesFor(w, "u2", r2.Key), len(w.Charges()))
	}
}

// A token swapped while an intent is open: resuming under the second
// caller's token must leave the first caller's intent alone. Sent under
// another caller its key names a new payment at the server (the scope is
// the caller's): the order would be charged a second time. The first
// caller, signed in again, resumes it with its key: one charge.
func TestResumingUnderAnotherTokenLeavesTheFirstCallersOpenIntentAlone(t *testing.T) {
	w := apitest.New(t, config.Timing{})
	var lose sync.Map
	door := callerDoor(t, w, &lose)
	u1, u2 := w.Token(t, "u1"), w.Token(t, "u2")
	j := openJournal(t)
	ctx := context.Background()

	lose.Store("Bearer "+u1, true) // u1 pays; every reply is lost; the intent stays open
	open, err := fastClient(door.URL, u1, j).Pay(ctx, order42)
	if err != nil || open.State != client.Unknown {
		t.Fatalf("u1's tap: %+v %v, want UNKNOWN", open, err)
	}
	lose.Delete("Bearer " + u1)

	// The app restarts signed in as u2 and resumes what the journal holds.
	if _, err := fastClient(door.URL, u2, j).Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if n := w.Scalar(t, `SELECT count(*) FROM payments WHERE caller_id = 'u2'`); n != 0 || len(w.Charges()) != 1 {
		t.Fatalf("after u2's resume: %d payments of u2's, %d charges; want 0 and 1 (u1's lost reply)", n, len(w.Charges()))
	}
	rs, err := fastClient(door.URL, u1, j).Resume(ctx)
	if err != nil || len(rs) != 1 || rs[0].Key != open.Key || rs[0].State != client.Succeeded {
		t.Fatalf("u1's resume: %+v %v, want its intent SUCCEEDED with its key", rs, err)
	}
	if got := len(w.Charges()); got != 1 {
		t.Fatalf("charges = %d, want 1", got)
	}
}

// Another API (a staging URL beside production) is another scope too: the
// order's intent at one is not answered, nor resumed, at the other.
func TestAnotherAPIIsAnotherScope(t *testing.T) {
	w := apitest.New(t, config.Timing{})
	a, b := w.Door(t, nil), w.Door(t, nil)
	tok := w.Token(t, "u1")
	j := openJournal(t)
	ra, err := fastClient(a.URL, tok, j).Pay(context.Background(), order42)
	if err != nil || ra.State != client.Succeeded {
		t.Fatalf("at a: %+v %v", ra, err)
	}
	rb, err := fastClient(b.URL+"/", tok, j).Pay(context.Background(), order42)
	if err != nil || rb.FromJournal || rb.Key == ra.Key {
		t.Fatalf("at b: %+v %v: want a tap of its own", rb, err)
	}
	again, err := fastClient(strings.ToUpper(a.URL[:4])+a.URL[4:]+"/", tok, j).Pay(context.Background(), order42)
	if err != nil || !again.FromJournal || again.Key != ra.Key {
		t.Fatalf("a's URL written differently: %+v %v: want a's intent from the journal", again, err)
	}
}

// A definite decline is final for its key, but not for the order: the
// buyer may pay with another card, which is a new payment with a new key
// (the rule: a new key only after a voided, refused or declined intent).
// Tapping again with the declined card is answered from the journal, unless
// the buyer explicitly pays again (PayAgain). A paid order never pays twice.
func TestADeclinedOrderCanBePaidWithANewCardUnderANewKey(t *testing.T) {
	w := apitest.New(t, config.Timing{})
	door := w.Door(t, nil)
	tok := w.Token(t, "u1")
	j := openJournal(t)
	c := fastClient(door.URL, tok, j)
	ctx := context.Background()
	declined := order42
	declined.PaymentMethod = "pm_card_chargeDeclined"

	first, err := c.Pay(ctx, declined)
	if err != nil || first.State != client.FailedPay {
		t.Fatalf("the declined card: %+v %v", first, err)
	}
	same, err := c.Pay(ctx, declined)
	if err != nil || !same.FromJournal || same.Key != first.Key || same.State != client.FailedPay {
		t.Fatalf("the same tap again: %+v %v, want the decline from the journal", same, err)
	}
	paid, err := c.Pay(ctx, order42) // another card
	if err != nil || paid.State != client.Succeeded || paid.Key == first.Key || paid.Replaces != first.Key {
		t.Fatalf("the new card: %+v %v, want SUCCEEDED under a new key", paid, err)
	}
	for _, p := range []func(context.Context, client.Payment) (client.Result, error){c.Pay, c.PayAgain} {
		r, err := p(ctx, order42)
		if err != nil || !r.FromJournal || r.Key != paid.Key {
			t.Fatalf("a tap after the order was paid: %+v %v, want the payment from the journal", r, err)
		}
	}
	// "Try again" with the same card, on another order: a new key.
	d43 := declined
	d43.OrderID = "43"
	d1, err := c.Pay(ctx, d43)
	if err != nil || d1.State != client.FailedPay {
		t.Fatalf("order 43: %+v %v", d1, err)
	}
	d2, err := c.PayAgain(ctx, d43)
	if err != nil || d2.Key == d1.Key || d2.FromJournal || d2.State != client.FailedPay || d2.Replaces != d1.Key {
		t.Fatalf("pay again with the declined card: %+v %v, want a new key, declined again", d2, err)
	}
	if got := len(w.Charges()); got != 1 {
		t.Fatalf("charges = %d, want 1", got)
	}
	if n := w.Scalar(t, `SELECT count(*) FROM payments WHERE state = 'FAILED'`); n != 3 {
		t.Fatalf("declined payments = %d, want 3", n)
	}
}

// The receipt address is part of the payment, as at the server: a tap with
// another address while the first is open is another payment, refused
// (ErrChanged) until the first is resolved; the first's resume sends the
// journaled address, and one charge is taken.
func TestAnotherReceiptAddressIsAnotherPayment(t *testing.T) {
	w := apitest.New(t, config.Timing{})
	tok := w.Token(t, "u1")
	j := openJournal(t)
	first := order42
	first.ReceiptEmail = "first@example.com"
	var losing atomic.Bool
	losing.Store(true)
	drop := dropper("/", 1<<30)
	door := w.Door(t, func(next http.Handler) http.Handler {
		lost := drop(next)
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if losing.Load() {
				lost.ServeHTTP(rw, r)
				return
			}
			next.ServeHTTP(rw, r)
		})
	})
	r1, err := fastClient(door.URL, tok, j).Pay(context.Background(), first)
	if r1.State != client.Unknown {
		t.Fatalf("every reply lost: %+v %v, want UNKNOWN", r1, err)
	}
	losing.Store(false)
	second := order42
	second.ReceiptEmail = "second@example.com"
	if r2, err := fastClient(door.URL, tok, j).Pay(context.Background(), second); !errors.Is(err, client.ErrChanged) || r2.Key != r1.Key {
		t.Fatalf("another address while open: %+v %v, want ErrChanged on the first key", r2, err)
	}
	r3, err := fastClient(door.URL, tok, j).Pay(context.Background(), first)
	if err != nil || r3.Key != r1.Key || r3.State != client.Succeeded {
		t.Fatalf("the first resumed: %+v %v", r3, err)
	}
	if got := len(w.Charges()); got != 1 {
		t.Fatalf("charges = %d, want 1", got)
	}
	var to string
	if err := w.Pool.QueryRow(context.Background(), `SELECT receipt_email FROM payments`).Scan(&to); err != nil || to != first.ReceiptEmail {
		t.Fatalf("receipt_email %q %v, want the first request's", to, err)
	}
}
