package resolver_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

func bodyWith(pm string) string {
	return strings.Replace(worldtest.Body3000, "pm_card_visa", pm, 1)
}

// Issue 13, defect 10: a card that needs 3-D Secure used to be parked by
// the PSP in requires_action, which nobody in a server-side flow ever
// completes, so the payment stayed UNKNOWN for good. The charge is now
// confirmed with error_on_requires_action, and the PSP declines such a
// card at once (authentication_required): FAILED, 402, nothing charged,
// nothing left for the resolver. When that 402's reply is lost, the
// resolver's replay gets the saved decline back and settles it the same.
func TestAThreeDSecureCardEndsFailedAuthenticationRequiredNotUnknownForever(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	r := w.Pay("u1", "K3DS", bodyWith("pm_card_threeDSecure2Required"))
	if r.Status != http.StatusPaymentRequired {
		t.Fatalf("3-D Secure card = %d %s, want 402", r.Status, r.Body)
	}
	if p := w.Row("u1", "K3DS"); p.State != ledger.Failed || p.DeclineCode != "authentication_required" {
		t.Fatalf("row = %s %q, want FAILED authentication_required", p.State, p.DeclineCode)
	}

	// The same decline, its reply lost: UNKNOWN until the resolver replays.
	lost := ids.PaymentID(ids.Scope("u1", "K3DS-lost"))
	loseReply(t, w, lost)
	if r := w.Pay("u1", "K3DS-lost", bodyWith("pm_card_authenticationRequired")); r.Status != http.StatusAccepted {
		t.Fatalf("lost reply = %d %s, want 202", r.Status, r.Body)
	}
	w.Clock.Advance(time.Second)
	rep := run(t, w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{}))
	if rep.Claimed != 1 || rep.Failed != 1 || rep.Open != 0 {
		t.Fatalf("report = %+v, want the lost decline settled FAILED", rep)
	}
	if p := w.Row("u1", "K3DS-lost"); p.State != ledger.Failed || p.DeclineCode != "authentication_required" {
		t.Fatalf("row = %s %q, want FAILED authentication_required", p.State, p.DeclineCode)
	}
	if n := len(w.Sim.Charges()); n != 0 {
		t.Fatalf("charges = %d, want none", n)
	}
	if !outboxItem(t, w, ids.EventID(lost, "FAILED")) {
		t.Fatal("the FAILED event was not put into the outbox")
	}
	if rep := run(t, w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{})); rep.Claimed != 0 {
		t.Fatalf("a later run still found work: %+v", rep)
	}
}

// A bank debit the PSP holds in processing is neither paid nor failed: the
// resolver reads it (replay, then Retrieve), leaves it open and charges
// nothing; past the horizon it is counted as money in doubt. When the PSP
// has finished it, days later and past the key window, the resolver's
// lookup finds it succeeded and settles it with that charge.
func TestAProcessingPaymentIsLeftOpenNeverGuessed(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	if r := w.Pay("u1", "KACH", bodyWith("pm_usBankAccount_success")); r.Status != http.StatusAccepted {
		t.Fatalf("processing = %d %s, want 202", r.Status, r.Body)
	}
	if p := w.Row("u1", "KACH"); p.State != ledger.Unknown {
		t.Fatalf("row = %s, want UNKNOWN", p.State)
	}
	res := w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{})
	w.Clock.Advance(time.Second)
	if rep := run(t, res); rep.Claimed != 1 || rep.Open != 1 || rep.PSPCalls != 2 {
		t.Fatalf("report = %+v, want a replay and a Retrieve, left open", rep)
	}
	w.Clock.Advance(16 * time.Minute)
	if rep := run(t, res); rep.Open != 1 || rep.OpenOverHorizon != 1 {
		t.Fatalf("past the horizon = %+v, want it open and counted", rep)
	}
	if p := w.Row("u1", "KACH"); p.State != ledger.Unknown || len(w.Sim.Charges()) != 0 {
		t.Fatalf("row %s, charges %d", p.State, len(w.Sim.Charges()))
	}

	// Four days on, the debit has settled at the PSP.
	if _, err := w.Pool.Exec(ctx, `UPDATE payments SET created_at = created_at - interval '4 days' WHERE client_key = 'KACH'`); err != nil {
		t.Fatal(err)
	}
	w.Sim.Advance(4 * 24 * time.Hour)
	if rep := run(t, res); rep.Succeeded != 1 || rep.Open != 0 {
		t.Fatalf("after settlement = %+v, want it settled by lookup", rep)
	}
	ch := w.Sim.Charges()
	if p := w.Row("u1", "KACH"); len(ch) != 1 || p.State != ledger.Succeeded || p.PSPCharge != ch[0].ID {
		t.Fatalf("row %s %q, charges %+v; want SUCCEEDED with the one charge", p.State, p.PSPCharge, ch)
	}
}

// A payment whose charge was sent by a client that did not yet send
// error_on_requires_action: the replay carries other parameters, and the
// PSP refuses it as key reuse (400 idempotency_error, nothing run). The
// resolver then looks the payment up by our reference: a charge it made is
// settled SUCCEEDED with that charge (no second one); one parked in
// requires_action stays open, never guessed.
func TestAChargeSentWithoutErrorOnRequiresActionIsSettledByLookupNotLeftOpen(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	charged := insertOpen(t, w, "u1", "K-before", "UNKNOWN", time.Minute)
	parked := insertOpen(t, w, "u1", "K-parked", "UNKNOWN", time.Minute)
	if _, err := w.Pool.Exec(ctx, `UPDATE payments SET payment_method = 'pm_card_threeDSecure2Required' WHERE payment_id = $1`, parked); err != nil {
		t.Fatal(err)
	}
	for pid, pm := range map[string]string{charged: "pm_card_visa", parked: "pm_card_threeDSecure2Required"} {
		// The request the older client sent, field for field, but the flag.
		form := url.Values{
			"amount": {"3000"}, "currency": {"usd"}, "confirm": {"true"}, "payment_method": {pm},
			"automatic_payment_methods[enabled]": {"true"}, "automatic_payment_methods[allow_redirects]": {"never"},
			"metadata[payment_id]": {pid}, "metadata[merchant_id]": {"m1"},
		}
		req, _ := http.NewRequest(http.MethodPost, w.SimURL+"/v1/payment_intents", strings.NewReader(form.Encode()))
		req.Header.Set("Authorization", "Bearer sk_test_x")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Idempotency-Key", ids.ChargeKey(pid))
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("older client's charge of %s: %v %v", pm, resp, err)
		}
		resp.Body.Close()
	}
	ch := w.Sim.Charges()
	if len(ch) != 1 {
		t.Fatalf("charges = %+v", ch)
	}

	rep := run(t, w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{}))
	if rep.Claimed != 2 || rep.Succeeded != 1 || rep.Open != 1 {
		t.Fatalf("report = %+v, want one settled by lookup and one left open", rep)
	}
	if p := w.Row("u1", "K-before"); p.State != ledger.Succeeded || p.PSPCharge != ch[0].ID {
		t.Fatalf("charged row = %s %q, want SUCCEEDED with %s", p.State, p.PSPCharge, ch[0].ID)
	}
	if p := w.Row("u1", "K-parked"); p.State != ledger.Unknown {
		t.Fatalf("parked row = %s, want UNKNOWN", p.State)
	}
	if n := len(w.Sim.Charges()); n != 1 {
		t.Fatalf("charges = %d: the lookup charged anew", n)
	}
}
