package stripespec_test

import (
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/psp/stripespec"
)

const charge = "amount=3000&currency=usd&confirm=true&payment_method=pm_card_visa&metadata[payment_id]=pay_1"

func form(s string) url.Values {
	v, err := url.ParseQuery(s)
	if err != nil {
		panic(err)
	}
	return v
}

// What stripe-mock accepted and Stripe refuses (issue 22 item 11): each is
// refused here, naming the parameter Stripe names.
func TestWhatStripeMockAcceptedAndStripeRefuses(t *testing.T) {
	manyKeys := charge
	for i := range 50 {
		manyKeys += "&metadata[k" + strconv.Itoa(i) + "]=v"
	}
	for _, tc := range []struct {
		name, method, path, form, key, param string
	}{
		{"amount 1", "POST", "/v1/payment_intents", strings.Replace(charge, "3000", "1", 1), "k", "amount"},
		{"amount 49 usd", "POST", "/v1/payment_intents", strings.Replace(charge, "3000", "49", 1), "k", "amount"},
		{"amount 10^12", "POST", "/v1/payment_intents", strings.Replace(charge, "3000", "1000000000000", 1), "k", "amount"},
		{"amount 29 gbp", "POST", "/v1/payment_intents", strings.NewReplacer("3000", "29", "usd", "gbp").Replace(charge), "k", "amount"},
		{"currency xyz", "POST", "/v1/payment_intents", strings.Replace(charge, "usd", "xyz", 1), "k", "currency"},
		{"51 metadata keys", "POST", "/v1/payment_intents", manyKeys, "k", "metadata"},
		{"41-character key", "POST", "/v1/payment_intents", charge + "&metadata[" + strings.Repeat("k", 41) + "]=v", "k", "metadata[" + strings.Repeat("k", 41) + "]"},
		{"501-character value", "POST", "/v1/payment_intents", charge + "&metadata[note]=" + strings.Repeat("v", 501), "k", "metadata[note]"},
		{"300-character key", "POST", "/v1/payment_intents", charge, strings.Repeat("k", 300), ""},
		{"refund amount 0", "POST", "/v1/refunds", "payment_intent=pi_1&amount=0", "k", "amount"},
		{"refund metadata value 501", "POST", "/v1/refunds", "payment_intent=pi_1&metadata[payment_id]=" + strings.Repeat("v", 501), "k", "metadata[payment_id]"},
		{"malformed query", "GET", "/v1/payment_intents/search", "query=metadata['payment_id']:pay_1", "", "query"},
		{"unknown field", "GET", "/v1/payment_intents/search", "query=colour:'red'", "", "query"},
		{"AND with OR", "GET", "/v1/payment_intents/search", "query=status:'succeeded' AND amount>100 OR currency:'usd'", "", "query"},
		{"limit 101", "GET", "/v1/payment_intents/search", "query=status:'succeeded'&limit=101", "", "limit"},
	} {
		v := stripespec.Check(tc.method, tc.path, form(tc.form), tc.key)
		if v == nil || v.Param != tc.param {
			t.Errorf("%s: %v, want a refusal of %q", tc.name, v, tc.param)
		}
	}
}

func TestWhatStripeAccepts(t *testing.T) {
	full := charge
	for i := range 49 {
		full += "&metadata[k" + strconv.Itoa(i) + "]=" + strings.Repeat("v", 500)
	}
	for _, tc := range []struct{ name, method, path, form, key string }{
		{"the client's charge", "POST", "/v1/payment_intents", charge, "pay_1:charge"},
		{"50 cents", "POST", "/v1/payment_intents", strings.Replace(charge, "3000", "50", 1), "k"},
		{"the most", "POST", "/v1/payment_intents", strings.Replace(charge, "3000", "99999999", 1), "k"},
		{"upper-case currency", "POST", "/v1/payment_intents", strings.Replace(charge, "usd", "USD", 1), "k"},
		{"50 keys at the limits", "POST", "/v1/payment_intents", full, strings.Repeat("k", 255)},
		{"the client's search", "GET", "/v1/payment_intents/search", "query=metadata['payment_id']:'pay_1'&limit=10", ""},
		{"second page", "GET", "/v1/payment_intents/search", "query=metadata['payment_id']:'pay_1'&limit=10&page=page_10", ""},
		{"double quotes, AND, negation, numbers", "GET", "/v1/payment_intents/search",
			`query=metadata["order"]:"6735" AND -status:"canceled" AND amount>=100 AND created<1700000000`, ""},
		{"null", "GET", "/v1/payment_intents/search", "query=customer:null", ""},
		{"a refund of what is left", "POST", "/v1/refunds", "payment_intent=pi_1&metadata[payment_id]=pay_1", "pay_1:cancel:refund"},
	} {
		if v := stripespec.Check(tc.method, tc.path, form(tc.form), tc.key); v != nil {
			t.Errorf("%s: refused: %v", tc.name, v)
		}
	}
}

func TestSearchQueryGrammar(t *testing.T) {
	f := stripespec.PaymentIntentSearchFields
	for q, ok := range map[string]bool{
		"metadata['a']:'b'":                       true,
		"metadata['a']:'b' AND metadata['c']:'d'": true,
		"status:'succeeded' OR status:'canceled'": true,
		`metadata['a']:'it\'s'`:                   true,
		"status~'suc'":                            true,
		"status~'su'":                             false,
		"metadata:'b'":                            false,
		"metadata['a']:'b' and status:'x'":        false,
		"metadata['a']:'b'AND status:'x'":         false,
		"status>'a'":                              false,
		"amount>abc":                              false,
		"metadata['a':'b'":                        false,
		"metadata['a']:'b":                        false,
		"(status:'a')":                            false,
		"":                                        false,
		strings.Repeat("status:'a' AND ", 10) + "status:'a'": false,
	} {
		if err := stripespec.CheckSearchQuery(q, f); (err == nil) != ok {
			t.Errorf("%q: %v, want ok=%v", q, err, ok)
		}
	}
}
