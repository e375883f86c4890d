package resolver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/psp"
)

// The decision table: only a definite answer settles; everything that
// leaves the charge's fate open leaves the row open. Never a guess.
func TestDecideSettlesOnlyOnADefiniteAnswer(t *testing.T) {
	invalid := func(status int, typ string) error {
		return fmt.Errorf("charge: %w", fmt.Errorf("%w: %w", psp.ErrInvalidRequest, &psp.APIError{HTTPStatus: status, Type: typ}))
	}
	for _, tc := range []struct {
		name  string
		res   psp.Result
		how   string
		err   error
		final bool
		want  ledger.Outcome
	}{
		{"replay succeeded", psp.Result{Outcome: psp.Succeeded, PaymentIntentID: "pi_1", ChargeID: "ch_1"}, howReplay, nil, true,
			ledger.Outcome{State: ledger.Succeeded, PSPCharge: "ch_1"}},
		{"succeeded without a charge id", psp.Result{Outcome: psp.Succeeded, PaymentIntentID: "pi_1"}, howLookup, nil, true,
			ledger.Outcome{State: ledger.Succeeded, PSPCharge: "pi_1"}},
		{"declined", psp.Result{Outcome: psp.Declined, PaymentIntentID: "pi_1", DeclineCode: "insufficient_funds"}, howReplay, nil, true,
			ledger.Outcome{State: ledger.Failed, PSPCharge: "pi_1", DeclineCode: "insufficient_funds"}},
		{"not found after the window", psp.Result{Outcome: psp.NotFound}, howLookup, nil, true,
			ledger.Outcome{State: ledger.Failed, DeclineCode: "psp_no_charge"}},
		{"400 invalid request on the replay", psp.Result{}, howReplay, invalid(400, "invalid_request_error"), true,
			ledger.Outcome{State: ledger.Failed, DeclineCode: "psp_invalid_request"}},
		{"refused by the client's own checks", psp.Result{}, howReplay, fmt.Errorf("%w: empty payment method", psp.ErrInvalidRequest), true,
			ledger.Outcome{State: ledger.Failed, DeclineCode: "psp_invalid_request"}},

		{"unknown", psp.Result{Outcome: psp.Unknown}, howReplay, nil, false, ledger.Outcome{}},
		{"pending", psp.Result{Outcome: psp.Pending}, howRetrieve, nil, false, ledger.Outcome{}},
		{"not found from a replay's look-up is mapped open by ask", psp.Result{Outcome: psp.NotFound}, howReplay, nil, false, ledger.Outcome{}},
		{"401: our key is wrong, says nothing about the charge", psp.Result{}, howReplay, invalid(401, "invalid_request_error"), false, ledger.Outcome{}},
		{"404", psp.Result{}, howReplay, invalid(404, "invalid_request_error"), false, ledger.Outcome{}},
		{"400 on a look-up", psp.Result{}, howLookup, invalid(400, "invalid_request_error"), false, ledger.Outcome{}},
		{"key reuse", psp.Result{}, howReplay, fmt.Errorf("%w: %w", psp.ErrKeyReuse, psp.ErrInvalidRequest), false, ledger.Outcome{}},
		{"context ended", psp.Result{}, howReplay, context.DeadlineExceeded, false, ledger.Outcome{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, final := decide(tc.res, tc.how, tc.err)
			if final != tc.final || got != tc.want {
				t.Fatalf("decide = %+v final=%v, want %+v final=%v", got, final, tc.want, tc.final)
			}
		})
	}
}

func TestConfigDefaultsValidateAndALeaseMustOutlastARun(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	c.Lease = 10 * time.Second // 300 rows at 10/s need far longer
	if err := c.Validate(); err == nil {
		t.Fatal("a lease shorter than a run's work validated")
	}
	var zero Config
	zero.fill()
	if zero != DefaultConfig() {
		t.Fatalf("fill() = %+v, want the defaults", zero)
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Setenv("ONCEPAY_RESOLVER_PSP_RATE", "25.5")
	t.Setenv("ONCEPAY_RESOLVER_LIMIT", "120")
	t.Setenv("ONCEPAY_PSP_KEY_WINDOW", "12h")
	t.Setenv("ONCEPAY_REFUND_RETRY_BUDGET", "3")
	c, err := ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if c.PSPRate != 25.5 || c.Limit != 120 || c.KeyWindow != 12*time.Hour || c.Refund.Budget != 3 {
		t.Fatalf("config = %+v", c)
	}
	t.Setenv("ONCEPAY_RESOLVER_PSP_RATE", "fast")
	if _, err := ConfigFromEnv(); err == nil {
		t.Fatal("a bad rate was accepted")
	}
}
