package pspsim_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/psp"
)

// The simulator counts its Stripe behaviours when they act, not when they
// are set up: a lag that hides nothing, or a 3-D Secure card nobody
// confirmed, counts nothing. A chaos runner reports coverage from these.
func TestStatsCountTheBehavioursThatActed(t *testing.T) {
	e := setup(t, func(c *pspsim.Config) { c.SearchLag = time.Minute })
	ctx := context.Background()
	if got := e.sim.Stats(); got != (pspsim.Stats{}) {
		t.Fatalf("a new simulator counts %+v", got)
	}

	mustCharge(t, e, chargeReq("pay_lag")) // a charge, then a search the lag blinds
	if res, err := e.psp.Lookup(ctx, "pay_lag"); err != nil || res.Outcome != psp.NotFound {
		t.Fatalf("lookup inside the lag = %+v, %v; want NotFound", res, err)
	}
	if res, err := e.psp.Lookup(ctx, "pay_nobody"); err != nil || res.Outcome != psp.NotFound {
		t.Fatalf("lookup of nothing = %+v, %v", res, err)
	}

	tds := chargeReq("pay_3ds")
	tds.PaymentMethod = "pm_card_threeDSecure2Required"
	if res := mustCharge(t, e, tds); res.Outcome != psp.Declined || res.DeclineCode != "authentication_required" {
		t.Fatalf("3-D Secure card = %+v, want declined authentication_required", res)
	}

	unknown := chargeReq("pay_unknown")
	unknown.PaymentMethod = "pm_1NoSuchMethod"
	if _, err := e.psp.Charge(ctx, unknown); !errors.Is(err, psp.ErrInvalidRequest) {
		t.Fatalf("unknown payment method: err %v, want ErrInvalidRequest", err)
	}

	if err := e.sim.AddPaymentMethod("pm_1Once"); err != nil {
		t.Fatal(err)
	}
	first, second := chargeReq("pay_once_a"), chargeReq("pay_once_b")
	first.PaymentMethod, second.PaymentMethod = "pm_1Once", "pm_1Once"
	mustCharge(t, e, first)
	if _, err := e.psp.Charge(ctx, second); !errors.Is(err, psp.ErrInvalidRequest) {
		t.Fatalf("a single-use payment method used twice: err %v, want ErrInvalidRequest", err)
	}

	want := pspsim.Stats{SearchHidden: 1, RequiresAction: 1, UnknownPaymentMethod: 1, PaymentMethodReused: 1}
	if got := e.sim.Stats(); got != want {
		t.Fatalf("stats = %+v, want %+v", got, want)
	}
	resp, err := http.Get(e.url + "/_sim/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var over pspsim.Stats
	if err := json.NewDecoder(resp.Body).Decode(&over); err != nil || over != want {
		t.Fatalf("GET /_sim/stats = %+v (%v), want %+v", over, err, want)
	}
}
