package ids

import (
	"strings"
	"testing"
)

func TestScopesOfDifferentCallersAndKeysNeverCollide(t *testing.T) {
	pairs := [][2]string{{"a#b", "c"}, {"a", "b#c"}, {"a%23b", "c"}, {"u1", "K1"}, {"u2", "K1"}, {"u1", "K2"}}
	seen := map[string][2]string{}
	for _, p := range pairs {
		s := Scope(p[0], p[1])
		if prev, dup := seen[s]; dup {
			t.Fatalf("Scope(%q,%q) == Scope(%q,%q) == %q", p[0], p[1], prev[0], prev[1], s)
		}
		seen[s] = p
	}
}

func TestPaymentIDIsDerivedAndOpaque(t *testing.T) {
	a := PaymentID(Scope("u1", "K1"))
	if a != PaymentID(Scope("u1", "K1")) {
		t.Fatal("PaymentID is not stable")
	}
	if a == PaymentID(Scope("u2", "K1")) {
		t.Fatal("two callers' keys named the same payment")
	}
	if !strings.HasPrefix(a, "pay_") || len(a) != 30 || strings.Contains(a, "u1") {
		t.Fatalf("PaymentID = %q", a)
	}
}

func TestTheChainOfIDs(t *testing.T) {
	pid := "pay_7"
	for got, want := range map[string]string{
		ChargeKey(pid):                    "pay_7:charge",
		RefundKey(pid):                    "pay_7:cancel:refund",
		EventID(pid, "SUCCEEDED"):         "pay_7:SUCCEEDED",
		PaymentOfEvent("pay_7:SUCCEEDED"): "pay_7",
		ReplaceID(pid):                    "pay_7",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}
