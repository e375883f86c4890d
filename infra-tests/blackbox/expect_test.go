package blackbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// actors are a case's own caller and merchant: no other case or run pays
// with them or to them, so every count below is this case's alone.
type actors struct {
	caller, merchant string
}

func newActors(name string) actors {
	r := testenv.RandomID(4)
	return actors{caller: "bb-" + name + "-" + r, merchant: "mbb-" + name + "-" + r}
}

// paymentID is the payment a key names for the caller: derived, as every id
// of the chain is (docs/mechanism.md#design-1), so a case can arm a PSP fault
// on the charge key before it pays.
func (a actors) paymentID(key string) string { return ids.PaymentID(ids.Scope(a.caller, key)) }

func (a actors) body(order string, amount int64, method string) payBody {
	return payBody{MerchantID: a.merchant, OrderID: order, Amount: amount, Currency: "USD", PaymentMethod: method}
}

// final reports whether a payment state is one the ledger never leaves.
func final(state string) bool { return state == "SUCCEEDED" || state == "FAILED" }

// awaitSettled waits until the payment is final, every event it raised was
// taken by the worker's inbox and every notification intent has left
// PENDING; it returns the report and how long that took.
func (s *surface) awaitSettled(ctx context.Context, pid string, within time.Duration) (report, time.Duration, error) {
	var r report
	took, err := eventually(ctx, within, 250*time.Millisecond, func(ctx context.Context) error {
		var err error
		if r, err = s.inspect.read(ctx, pid); err != nil {
			return err
		}
		switch {
		case !final(r.Payment.State):
			return fmt.Errorf("%w: %s is %s", errNotYet, pid, r.Payment.State)
		case len(r.pushIntents()) == 0:
			return fmt.Errorf("%w: %s is %s with no push intent", errNotYet, pid, r.Payment.State)
		case len(r.open()) > 0:
			return fmt.Errorf("%w: %s is %s: %s", errNotYet, pid, r.Payment.State, strings.Join(r.open(), ", "))
		}
		return nil
	})
	return r, took, err
}

// want is a payment's expected end: its state and amount.
type want struct {
	state  string // SUCCEEDED or FAILED
	amount int64
}

// count is what the stack holds for one payment, read only through its
// surface: the PSP's charges, the ledger's credits (what the merchant's
// balance moved by) and the pushes the suite's own queue received.
type count struct {
	Charges      int
	Credits      int
	BalanceDelta int64
	Shown        int // notifications a phone shows (one per replace id)
	Alerts       int // pushes that arrived
}

// expectOnce checks the money and the notifications of a settled payment:
// a SUCCEEDED one charged once at the PSP (the charge the ledger names),
// credited once with its amount, its push intent SENT and its push received
// under the payment's id; a FAILED one never charged, never credited, and
// its "failed" push received. It returns the count.
func (s *surface) expectOnce(ctx context.Context, t *testing.T, a actors, pid string, r report, w want) count {
	t.Helper()
	var c count
	if r.Payment.State != w.state {
		t.Errorf("%s is %s, want %s", pid, r.Payment.State, w.state)
	}
	if r.Payment.MerchantID == nil || *r.Payment.MerchantID != a.merchant {
		t.Errorf("%s belongs to merchant %v, want %s", pid, r.Payment.MerchantID, a.merchant)
	}
	charges, err := s.awaitCharges(ctx, pid, w.state == "SUCCEEDED")
	if err != nil {
		t.Errorf("charges of %s: %v", pid, err)
	}
	c.Charges = len(charges)
	c.Credits = len(r.Credits)
	c.BalanceDelta = r.credited()
	switch w.state {
	case "SUCCEEDED":
		if len(charges) != 1 {
			t.Errorf("%s: the PSP holds %d charges, want 1: %+v", pid, len(charges), charges)
		} else if r.Payment.PSPCharge == nil || *r.Payment.PSPCharge != charges[0].ID || charges[0].Amount != w.amount {
			t.Errorf("%s: the ledger names charge %v, the PSP made %+v (want amount %d)", pid, r.Payment.PSPCharge, charges[0], w.amount)
		}
		if len(r.Credits) != 1 || r.Credits[0].Amount != w.amount || r.Credits[0].MerchantID != a.merchant {
			t.Errorf("%s: credits %+v, want one of %d to %s", pid, r.Credits, w.amount, a.merchant)
		}
		if r.credited() != w.amount {
			t.Errorf("%s moved %s's balance by %d, want %d", pid, a.merchant, r.credited(), w.amount)
		}
	case "FAILED":
		if len(charges) != 0 {
			t.Errorf("%s FAILED but the PSP holds %d charges: %+v", pid, len(charges), charges)
		}
		if len(r.Credits) != 0 || r.credited() != 0 {
			t.Errorf("%s FAILED but credited %+v", pid, r.Credits)
		}
	}
	if got := r.pushIntents(); !slices.Equal(got, []string{"SENT"}) {
		t.Errorf("%s: push intents %v, want one SENT", pid, got)
	}
	for _, n := range r.Notifications {
		if n.ReplaceID != pid {
			t.Errorf("%s: notification %s/%s has replace id %s, want the payment id", pid, n.EventID, n.Channel, n.ReplaceID)
		}
	}
	if _, err := s.pushes.await(ctx, pid, 1, 30*time.Second); err != nil {
		t.Errorf("%s: no push reached the suite's queue: %v", pid, err)
	}
	// A second copy from a second send comes moments later; one from the
	// sweep or a redelivery (after the queue's 180 s visibility timeout)
	// much later: TestMain looks again at the end, and says how long each
	// payment was watched.
	time.Sleep(2 * time.Second)
	pushes := s.pushes.of(pid)
	for _, p := range pushes {
		if p.ReplaceID != pid || p.State != w.state || p.MerchantID != a.merchant || p.Amount != w.amount {
			t.Errorf("%s: push %+v, want replace id %s, state %s, %d to %s", pid, p.Data, pid, w.state, w.amount, a.merchant)
		}
	}
	c.Shown, c.Alerts = shown(pushes), len(pushes)
	s.pushes.settled(pid, len(pushes))
	return c
}

// stripeSearchLag bounds how long Stripe's search takes to show a charge
// (documented as under a minute in normal operation).
const stripeSearchLag = 70 * time.Second

// awaitCharges reads the payment's charges. Stripe's search lags its
// writes, so on a deployed stack a count is only trusted once the lag has
// passed: a charge expected waits up to the lag to show, and the count
// (one, or none) is read again after it, so a second charge, or the one
// a FAILED payment must not have, is not missed for being recent. The
// simulator is read once.
func (s *surface) awaitCharges(ctx context.Context, pid string, expectOne bool) ([]charge, error) {
	if s.deployed {
		start := time.Now()
		got, err := s.readCharges(ctx, pid, expectOne, stripeSearchLag)
		if err != nil {
			return got, err
		}
		select {
		case <-ctx.Done():
			return got, ctx.Err()
		case <-time.After(time.Until(start.Add(stripeSearchLag))):
		}
		return s.readCharges(ctx, pid, false, 0)
	}
	return s.readCharges(ctx, pid, expectOne, 0)
}

// readCharges reads the payment's charges, waiting up to within for one
// when expectOne.
func (s *surface) readCharges(ctx context.Context, pid string, expectOne bool, within time.Duration) ([]charge, error) {
	if !expectOne {
		within = 0
	}
	var got []charge
	_, err := eventually(ctx, within, 2*time.Second, func(ctx context.Context) error {
		m, err := s.psp.charges(ctx, pid)
		if err != nil {
			return err
		}
		if got = m[pid]; expectOne && len(got) == 0 {
			return fmt.Errorf("%w: no charge yet", errNotYet)
		}
		return nil
	})
	if errors.Is(err, errNotYet) {
		err = nil // zero charges is an answer the caller checks
	}
	return got, err
}
