package pspsim

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// params lists the form parameters an endpoint accepts: exact names and
// bracketed prefixes (metadata[...], expand[...]). Like Stripe, anything else
// is refused, so a client sending a parameter the simulator would silently
// ignore finds out in tests.
type params struct {
	names    []string
	prefixes []string
}

// check refuses the first unknown parameter in name order: the same request
// is always refused the same way (a map's order is random).
func (p params) check(form url.Values) (reply, bool) {
	for _, name := range slices.Sorted(maps.Keys(form)) {
		if slices.Contains(p.names, name) {
			continue
		}
		known := false
		for _, pre := range p.prefixes {
			if strings.HasPrefix(name, pre) && strings.HasSuffix(name, "]") {
				known = true
				break
			}
		}
		if !known {
			return invalid(name, "parameter_unknown", fmt.Sprintf("Received unknown parameter: %s", name)), true
		}
	}
	return reply{}, false
}

// positiveInt reads an integer parameter > 0.
func positiveInt(form url.Values, name string, required bool) (int64, reply, bool) {
	v := form.Get(name)
	if v == "" {
		if required {
			return 0, invalid(name, "parameter_missing", "Missing required param: "+name+"."), true
		}
		return 0, reply{}, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, invalid(name, "parameter_invalid_integer", "Invalid positive integer: "+name+"."), true
	}
	return n, reply{}, false
}

// boolean reads an optional boolean parameter ("true" or "false", as
// stripe-go sends it).
func boolean(form url.Values, name string) (bool, reply, bool) {
	switch v := form.Get(name); v {
	case "", "false":
		return false, reply{}, false
	case "true":
		return true, reply{}, false
	default:
		return false, invalid(name, "parameter_invalid_boolean", fmt.Sprintf("Invalid boolean: %s", v)), true
	}
}

func isCurrency(c string) bool {
	if len(c) != 3 {
		return false
	}
	for _, r := range c {
		if r < 'a' || r > 'z' {
			return false
		}
	}
	return true
}

// metadata reads metadata[key]=value pairs, with Stripe's limits: 50 keys,
// keys up to 40 characters, values up to 500. The first bad key in name
// order is the one refused.
func metadata(form url.Values) (map[string]string, reply, bool) {
	md := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(form)) {
		vs := form[name]
		k, ok := strings.CutPrefix(name, "metadata[")
		if !ok {
			continue
		}
		k = strings.TrimSuffix(k, "]")
		switch {
		case k == "" || len(k) > 40:
			return nil, invalid(name, "parameter_invalid_string", "Metadata keys must be 1 to 40 characters."), true
		case len(vs[0]) > 500:
			return nil, invalid(name, "parameter_invalid_string", "Metadata values can have up to 500 characters."), true
		case vs[0] != "": // an empty value unsets the key in Stripe
			md[k] = vs[0]
		}
	}
	if len(md) > 50 {
		return nil, invalid("metadata", "parameter_invalid_integer", "You can have at most 50 metadata keys."), true
	}
	return md, reply{}, false
}
