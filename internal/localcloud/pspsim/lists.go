package pspsim

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// listLimit reads a list's limit: 1 to 100, 10 when absent, as on every
// Stripe list endpoint.
func listLimit(form url.Values) (int64, reply, bool) {
	if !form.Has("limit") {
		return 10, reply{}, false
	}
	l, rep, bad := positiveInt(form, "limit", false)
	if bad || l > 100 {
		if !bad {
			rep = invalid("limit", "parameter_invalid_integer", "limit must be between 1 and 100.")
		}
		return 0, rep, true
	}
	return l, reply{}, false
}

// createdRange is a list's created filter, in Unix seconds, as Stripe takes
// it in form encoding: created=N (equal) or any of created[gt], [gte], [lt]
// and [lte]. A nil bound is absent.
type createdRange struct {
	eq, gt, gte, lt, lte *int64
}

func (r createdRange) holds(c int64) bool {
	return (r.eq == nil || c == *r.eq) &&
		(r.gt == nil || c > *r.gt) && (r.gte == nil || c >= *r.gte) &&
		(r.lt == nil || c < *r.lt) && (r.lte == nil || c <= *r.lte)
}

// created reads the created filter. Like Stripe it refuses a bound that is
// not an integer (parameter_invalid_integer, naming it) and a created[...]
// key other than the four (parameter_unknown); the first bad one in name
// order is the one refused, so a request is always refused the same way.
func created(form url.Values) (createdRange, reply, bool) {
	var r createdRange
	bounds := map[string]**int64{
		"created": &r.eq, "created[gt]": &r.gt, "created[gte]": &r.gte, "created[lt]": &r.lt, "created[lte]": &r.lte,
	}
	hash := false
	for _, name := range slices.Sorted(maps.Keys(form)) {
		dst, ok := bounds[name]
		if !ok {
			if strings.HasPrefix(name, "created[") {
				return r, invalid(name, "parameter_unknown", "Received unknown parameter: "+name), true
			}
			continue
		}
		v := form.Get(name)
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return r, invalid(name, "parameter_invalid_integer", fmt.Sprintf("Invalid integer: %s", v)), true
		}
		*dst = &n
		hash = hash || name != "created"
	}
	if r.eq != nil && hash {
		// Stripe decodes created as an integer or as a hash, never both.
		return r, invalid("created", "", "created takes an integer or a hash of gt, gte, lt and lte, not both."), true
	}
	return r, reply{}, false
}

var listIntentParams = params{
	names:    []string{"limit", "starting_after", "ending_before", "created"},
	prefixes: []string{"created[", "expand["},
}

// listPaymentIntents is GET /v1/payment_intents: the PaymentIntents as
// they stand now (each settled first, as a retrieve would), newest first,
// in Stripe's list shape, limit 1-100 (default 10), starting_after paging
// and the created filter. Unlike search it has no lag: a PaymentIntent is
// listed as soon as it is made.
func (s *Sim) listPaymentIntents(form url.Values, _ string) (reply, bool) {
	if rep, bad := listIntentParams.check(form); bad {
		return rep, false
	}
	if form.Get("ending_before") != "" {
		return invalid("ending_before", "", "pspsim pages PaymentIntent lists forward only (starting_after)."), false
	}
	limit, rep, bad := listLimit(form)
	if bad {
		return rep, false
	}
	span, rep, bad := created(form)
	if bad {
		return rep, false
	}
	after := form.Get("starting_after")
	if after != "" {
		if _, ok := s.intents[after]; !ok {
			return invalid("starting_after", "resource_missing", fmt.Sprintf("No such payment_intent: '%s'", after)), false
		}
	}
	data := []*paymentIntent{}
	hasMore, skipping := false, after != ""
	for _, pi := range slices.Backward(s.order) {
		if skipping {
			skipping = pi.ID != after
			continue
		}
		if !span.holds(pi.Created) {
			continue
		}
		if int64(len(data)) == limit {
			hasMore = true
			break
		}
		s.settleLocked(pi)
		data = append(data, pi)
	}
	return jsonReply(http.StatusOK, map[string]any{
		"object":   "list",
		"data":     data,
		"has_more": hasMore,
		"url":      "/v1/payment_intents",
	}), true
}
