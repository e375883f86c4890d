package totals_test

import (
	"maps"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/totals"
)

func same(a, b totals.State) bool {
	return a.Checkpoint == b.Checkpoint && a.Floor.Equal(b.Floor) && a.Through == b.Through && maps.Equal(a.Totals, b.Totals) &&
		maps.EqualFunc(a.Seen, b.Seen, time.Time.Equal)
}

func TestAStateSurvivesItsEncoding(t *testing.T) {
	st := totals.State{
		Checkpoint: 42,
		Floor:      time.Date(2026, 12, 1, 12, 0, 0, 7e6, time.UTC),
		Totals:     map[totals.Key]int64{{Merchant: "m#1:<x>", Day: "2026-12-01", Currency: "EUR"}: -5, {Merchant: "m2", Day: "2026-11-30", Currency: "USD"}: 15000},
		Seen:       map[string]time.Time{"pay_7:SUCCEEDED": time.Date(2026, 12, 1, 10, 0, 0, 123e6, time.UTC)},
		Through:    "000000000000000000042",
	}
	got, ok, err := totals.Decode(st.Encode())
	if err != nil || !ok {
		t.Fatalf("Decode = %v, %v", ok, err)
	}
	if !same(got, st) {
		t.Errorf("round trip = %+v, want %+v", got, st)
	}
}

func TestAFreshStateIsNotAStateAndAForeignOneIsRefused(t *testing.T) {
	if _, ok, err := totals.Decode(nil); ok || err != nil {
		t.Errorf("Decode(nil) = %v, %v; want a fresh state", ok, err)
	}
	for name, m := range map[string]map[string]string{
		"no checkpoint":   {"t:2026-12-01#EUR#m1": "5"},
		"negative":        {"checkpoint": "-1"},
		"foreign entry":   {"checkpoint": "1", "count": "3"},
		"bad day":         {"checkpoint": "1", "t:2026-13-01#EUR#m1": "5"},
		"bad total":       {"checkpoint": "1", "t:2026-12-01#EUR#m1": "five"},
		"key without sep": {"checkpoint": "1", "t:2026-12-01EUR#m1": "5"},
		"no currency":     {"checkpoint": "1", "t:2026-12-01#m1": "5"},
		"lower currency":  {"checkpoint": "1", "t:2026-12-01#eur#m1": "5"},
		"no merchant":     {"checkpoint": "1", "t:2026-12-01#EUR#": "5"},
		"bad seen time":   {"checkpoint": "1", "s:pay_7:SUCCEEDED": "soon"},
		"bad floor":       {"checkpoint": "1", "floor": "x"},
		"bad through":     {"checkpoint": "1", "through": "4e2"},
		"empty through":   {"checkpoint": "1", "through": ""},
	} {
		if _, _, err := totals.Decode(m); err == nil {
			t.Errorf("%s: Decode(%v) accepted it", name, m)
		}
	}
}

// FuzzDecode: whatever Lambda hands back, Decode either refuses it or
// returns a state that encodes back to a map Decode reads the same.
func FuzzDecode(f *testing.F) {
	f.Add("checkpoint", "3", "t:2026-12-01#EUR#m1", "15000", "s:pay_7:SUCCEEDED", "1764583200000")
	f.Add("checkpoint", "0", "floor", "1764583200000", "t:2026-12-01#USD##", "-1")
	f.Add("checkpoint", "7", "through", "000000000000000000042", "s:x", "0")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		st, ok, err := totals.Decode(map[string]string{k1: v1, k2: v2, k3: v3})
		if err != nil || !ok {
			return
		}
		again, ok, err := totals.Decode(st.Encode())
		if err != nil || !ok {
			t.Fatalf("the encoding of %+v does not decode: %v", st, err)
		}
		if !same(again, st) {
			t.Fatalf("round trip changed %+v into %+v", st, again)
		}
	})
}
