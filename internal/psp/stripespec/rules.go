// Package stripespec holds the limits Stripe documents for the requests
// oncepay sends that Stripe's OpenAPI spec does not carry: the spec types
// amount as a bare integer, currency as a string, metadata as a map and the
// search query as a string, so a validator built on the spec alone (as
// stripe-mock is) accepts amount 1, amount 10^12, currency "xyz", 51
// metadata keys and a malformed query, all of which Stripe refuses.
//
// Check applies them to one request as sent on the wire. The simulator
// (internal/pspsim) refuses what Check refuses, the way Stripe does (400
// invalid_request_error naming the parameter), and the contract test runs
// every request the PSP client sends through Check and through the OpenAPI
// spec (package oas), so local green means Stripe green for these rules.
//
// Sources (Stripe's documentation, read 2026-12): "Minimum and maximum charge
// amounts" and "Supported currencies" (docs.stripe.com/currencies),
// "Metadata" (docs.stripe.com/api/metadata), "Idempotent requests"
// (docs.stripe.com/api/idempotent_requests) and "Search query language"
// (docs.stripe.com/search#search-query-language).
package stripespec

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Violation is one refusal, shaped as Stripe's 400 invalid_request_error.
type Violation struct {
	Param   string // the parameter, as Stripe names it (amount, metadata[k], query)
	Code    string // Stripe's error code where it has one, else ""
	Message string
}

func (v *Violation) Error() string {
	if v.Param == "" {
		return v.Message
	}
	return v.Param + ": " + v.Message
}

// Documented limits.
const (
	// MaxAmount: "The amount value supports up to eight digits (e.g., a
	// value of 99999999 for a USD charge of $999,999.99)."
	MaxAmount = 99_999_999
	// Metadata: "up to 50 keys, with key names up to 40 characters long
	// and values up to 500 characters long"; keys cannot contain square
	// brackets.
	MaxMetadataKeys     = 50
	MaxMetadataKeyLen   = 40
	MaxMetadataValueLen = 500
	// MaxIdempotencyKeyLen: "Idempotency keys can be up to 255 characters
	// long."
	MaxIdempotencyKeyLen = 255
	// MaxSearchClauses: "You can combine up to 10 query clauses."
	MaxSearchClauses = 10
	// MaxSearchLimit: search's limit "can range between 1 and 100".
	MaxSearchLimit = 100
)

// minCharge is Stripe's minimum charge amount in the currency's smallest
// unit, for the currencies its table lists (the minimum is $0.50 US "or
// equivalent in charge currency"; elsewhere it depends on the day's rate
// and the settlement currency, so only "positive" is checked).
var minCharge = map[string]int64{
	"usd": 50, "aed": 200, "aud": 50, "bgn": 100, "brl": 50, "cad": 50, "chf": 50,
	"czk": 1500, "dkk": 250, "eur": 50, "gbp": 30, "hkd": 400, "huf": 17500,
	"inr": 50, "jpy": 50, "mxn": 1000, "myr": 200, "nok": 300, "nzd": 50,
	"pln": 200, "ron": 200, "sek": 300, "sgd": 50, "thb": 1000,
}

// currencies are Stripe's supported presentment currencies (lower case).
var currencies = strings.Fields(`
usd aed afn all amd ang aoa ars aud awg azn bam bbd bdt bgn bif bmd bnd bob
brl bsd bwp byn bzd cad cdf chf clp cny cop crc cve czk djf dkk dop dzd egp
etb eur fjd fkp gbp gel gip gmd gnf gtq gyd hkd hnl htg huf idr ils inr isk
jmd jpy kes kgs khr kmf krw kyd kzt lak lbp lkr lrd lsl mad mdl mga mkd mmk
mnt mop mur mvr mwk mxn myr mzn nad ngn nio nok npr nzd pab pen pgk php pkr
pln pyg qar ron rsd rub rwf sar sbd scr sek sgd shp sle sos srd std szl thb
tjs top try ttd twd tzs uah ugx uyu uzs vnd vuv wst xaf xcd xof xpf yer zar
zmw`)

// SupportedCurrency reports whether Stripe accepts c (any case) as a
// presentment currency.
func SupportedCurrency(c string) bool {
	_, found := slices.BinarySearch(sortedCurrencies, strings.ToLower(c))
	return found
}

var sortedCurrencies = func() []string {
	s := slices.Clone(currencies)
	slices.Sort(s)
	return s
}()

// MinChargeAmount is the smallest amount Stripe charges in currency, in
// its smallest unit, and whether Stripe's table lists the currency.
func MinChargeAmount(currency string) (int64, bool) {
	m, ok := minCharge[strings.ToLower(currency)]
	return m, ok
}

// CheckCharge checks a charge's amount and currency.
func CheckCharge(amount int64, currency string) *Violation {
	cur := strings.ToLower(currency)
	if !SupportedCurrency(cur) {
		return &Violation{Param: "currency", Code: "parameter_invalid_string",
			Message: fmt.Sprintf("Invalid currency: %s. Stripe currently supports these currencies: %s", cur, strings.Join(sortedCurrencies, ", "))}
	}
	if minimum, listed := minCharge[cur]; (listed && amount < minimum) || amount < 1 {
		if !listed {
			minimum = 1
		}
		return &Violation{Param: "amount", Code: "amount_too_small",
			Message: fmt.Sprintf("Amount must be at least %d %s (smallest unit)", minimum, cur)}
	}
	if amount > MaxAmount {
		return &Violation{Param: "amount", Code: "amount_too_large",
			Message: fmt.Sprintf("Amount must be no more than %d %s (smallest unit)", MaxAmount, cur)}
	}
	return nil
}

// CheckMetadata checks a metadata map against Stripe's limits.
func CheckMetadata(md map[string]string) *Violation {
	if len(md) > MaxMetadataKeys {
		return &Violation{Param: "metadata",
			Message: fmt.Sprintf("Invalid metadata: metadata can have up to %d keys (%d given)", MaxMetadataKeys, len(md))}
	}
	for _, k := range slices.Sorted(maps.Keys(md)) {
		v := md[k]
		switch {
		case k == "" || len(k) > MaxMetadataKeyLen:
			return &Violation{Param: "metadata[" + k + "]",
				Message: fmt.Sprintf("Invalid metadata: keys must be 1 to %d characters long", MaxMetadataKeyLen)}
		case strings.ContainsAny(k, "[]"):
			return &Violation{Param: "metadata[" + k + "]", Message: "Invalid metadata: keys cannot contain '[' or ']'"}
		case len(v) > MaxMetadataValueLen:
			return &Violation{Param: "metadata[" + k + "]",
				Message: fmt.Sprintf("Invalid metadata: values can be up to %d characters long", MaxMetadataValueLen)}
		}
	}
	return nil
}

// CheckIdempotencyKey checks an Idempotency-Key header value.
func CheckIdempotencyKey(key string) *Violation {
	if len(key) > MaxIdempotencyKeyLen {
		return &Violation{Message: fmt.Sprintf("Idempotency keys can be up to %d characters long (%d given).", MaxIdempotencyKeyLen, len(key))}
	}
	return nil
}

// Check applies the rules to one request to the endpoints oncepay uses:
// form is the POST body or the GET query, key the Idempotency-Key header.
// Other endpoints are checked for the key alone.
func Check(method, path string, form url.Values, key string) *Violation {
	if v := CheckIdempotencyKey(key); v != nil {
		return v
	}
	switch {
	case method == "POST" && path == "/v1/payment_intents":
		if v := checkAmountForm(form, true); v != nil {
			return v
		}
		if v := checkMetadataForm(form); v != nil {
			return v
		}
	case method == "POST" && path == "/v1/refunds":
		if form.Has("amount") {
			if n, err := strconv.ParseInt(form.Get("amount"), 10, 64); err == nil && n < 1 {
				return &Violation{Param: "amount", Code: "parameter_invalid_integer", Message: "Refund amount must be a positive integer."}
			}
		}
		return checkMetadataForm(form)
	case method == "GET" && path == "/v1/payment_intents/search":
		if form.Has("limit") {
			if n, err := strconv.Atoi(form.Get("limit")); err == nil && (n < 1 || n > MaxSearchLimit) {
				return &Violation{Param: "limit", Code: "parameter_invalid_integer",
					Message: fmt.Sprintf("This value must be between 1 and %d.", MaxSearchLimit)}
			}
		}
		if err := CheckSearchQuery(form.Get("query"), PaymentIntentSearchFields); err != nil {
			return &Violation{Param: "query", Message: "Invalid search query: " + err.Error() + "."}
		}
	}
	return nil
}

// checkAmountForm checks amount and currency as sent (a bad integer is the
// spec's business; this checks the values).
func checkAmountForm(form url.Values, charge bool) *Violation {
	amount, err := strconv.ParseInt(form.Get("amount"), 10, 64)
	if err != nil || !charge {
		return nil
	}
	return CheckCharge(amount, form.Get("currency"))
}

func checkMetadataForm(form url.Values) *Violation {
	md := map[string]string{}
	for name, vs := range form {
		if k, ok := strings.CutPrefix(name, "metadata["); ok && strings.HasSuffix(k, "]") && len(vs) > 0 && vs[0] != "" {
			md[strings.TrimSuffix(k, "]")] = vs[0]
		}
	}
	return CheckMetadata(md)
}
