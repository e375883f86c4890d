package pspsim_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/psp"
)

// The API key stops working for a while (401, then 403): every call in that
// while is refused before the idempotency layer, charging nothing and saving
// nothing under the key, so the first call after it runs as a new request
// and charges once.
func TestAnAPIKeyRefusedForAWhileSavesNothingAndThenCharges(t *testing.T) {
	e := setup(t)
	req := chargeReq("pay_k")
	mustAddFault(t, e, pspsim.Fault{Kind: pspsim.FaultUnauthorized, Times: 2})
	mustAddFault(t, e, pspsim.Fault{Match: pspsim.Match{IdempotencyKey: req.IdempotencyKey}, Kind: pspsim.FaultForbidden})
	for i, want := range []int{http.StatusUnauthorized, http.StatusUnauthorized, http.StatusForbidden} {
		res, err := e.psp.Charge(context.Background(), req)
		var apiErr *psp.APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatus != want || res.Outcome == psp.Succeeded {
			t.Fatalf("call %d: %+v, %v; want a %d refusal", i, res, err, want)
		}
		wantCharges(t, e, 0)
	}
	if f := e.sim.Faults(); len(f) != 0 {
		t.Fatalf("faults left armed: %+v", f)
	}
	res := mustCharge(t, e, req)
	if res.Outcome != psp.Succeeded || res.Replayed {
		t.Fatalf("after the key works again: %+v; want a fresh success", res)
	}
	wantCharges(t, e, 1)
}
