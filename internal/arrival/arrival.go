// Package arrival reads the arrival stamp: when the front door received the
// request (docs/mechanism.md#seed-part-4). The server refuses to
// start a request whose stamp is older than its deadline, so the stamp must
// be taken where nothing queues before it, and must be one a client cannot
// write.
//
// Behind API Gateway (HTTP API, payload 2.0) the stamp is
// requestContext.timeEpoch, set by the gateway in milliseconds.
//
// Behind an Application Load Balancer it is the time inside the load
// balancer's own field of the X-Amzn-Trace-Id header. AWS documents the
// header ("Request tracing for your Application Load Balancer",
// https://docs.aws.amazon.com/elasticloadbalancing/latest/application/load-balancer-request-tracing.html)
// as ';'-separated Field=version-time-id fields, version 1, time the epoch
// seconds in 8 hex digits, id 24 hex digits, and says:
//
//   - no header on the request: the load balancer generates one with a Root
//     field;
//   - a header with a Root field: it keeps that Root and inserts a Self
//     field (its examples place Self first);
//   - a header with a Self field: it updates the value of that Self field;
//   - headers over 7 KB: it rewrites the header with a Root field.
//
// So the load balancer does not append a Self after the client's: it leaves
// exactly one Self, and that one is its own. The rule here follows the
// documentation, not field position:
//
//   - exactly one Self field: it is the load balancer's; use it;
//   - more than one Self field: undocumented, and we cannot tell which one
//     the load balancer wrote; refuse (an error), never guess;
//   - no Self field: the load balancer generated the header, so the single
//     Root field is its own; use it (more than one Root: refuse).
//
// Field names are matched case-insensitively and with surrounding spaces
// trimmed. That errs towards refusing: if a client's "self=" or " Self=" is
// the field the load balancer updated, we still read it; if not, we see two
// Self fields and refuse. Either way a client-written time is never used.
// Other fields (Parent, Sampled, Lineage, an application's own) are
// ignored; a field that is not Key=Value, or a Self/Root whose value is not
// 1-<8 hex>-<24 hex>, is an error.
//
// The stamp is whole seconds, truncated, so it can read up to 1 s earlier
// than the real arrival. That only makes the deadline stricter (a request
// is judged older than it is), never looser.
package arrival

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// TraceHeader is the header an Application Load Balancer stamps.
const TraceHeader = "X-Amzn-Trace-Id"

// ErrNoStamp is wrapped by every error of this package: the request carries
// no arrival stamp the server can trust, so it cannot check the deadline.
var ErrNoStamp = errors.New("arrival: no usable arrival stamp")

// maxEpochMillis is 9999-12-31T23:59:59.999Z: beyond it the value is not a
// clock reading, and RFC 3339 formatting of the time would fail.
const maxEpochMillis = 253402300799999

// FromAPIGatewayV2 converts API Gateway's requestContext.timeEpoch
// (milliseconds since the epoch) to a time. Zero means the field was absent
// (a test event, or not API Gateway): there is no stamp, so it is an error
// rather than 1970, which would reject every request as late.
func FromAPIGatewayV2(timeEpochMillis int64) (time.Time, error) {
	if timeEpochMillis <= 0 || timeEpochMillis > maxEpochMillis {
		return time.Time{}, fmt.Errorf("%w: requestContext.timeEpoch %d out of range", ErrNoStamp, timeEpochMillis)
	}
	return time.UnixMilli(timeEpochMillis).UTC(), nil
}

// FromALBTraceHeader returns the load balancer's arrival time from an
// X-Amzn-Trace-Id header value, by the rule in the package documentation.
// If the target sees the header more than once (multi-value headers), the
// caller must refuse rather than pick one.
func FromALBTraceHeader(header string) (time.Time, error) {
	var self, root []string
	for _, field := range strings.Split(header, ";") {
		field = strings.TrimSpace(field)
		if field == "" {
			continue // "Root=...;" : an empty field carries nothing
		}
		key, value, ok := strings.Cut(field, "=")
		if !ok {
			return time.Time{}, fmt.Errorf("%w: %s field without '='", ErrNoStamp, TraceHeader)
		}
		switch key = strings.TrimSpace(key); {
		case strings.EqualFold(key, "Self"):
			self = append(self, strings.TrimSpace(value))
		case strings.EqualFold(key, "Root"):
			root = append(root, strings.TrimSpace(value))
		}
	}
	switch {
	case len(self) == 1:
		return traceTime(self[0], "Self")
	case len(self) > 1:
		return time.Time{}, fmt.Errorf("%w: %s has %d Self fields; the load balancer keeps one", ErrNoStamp, TraceHeader, len(self))
	case len(root) == 1:
		return traceTime(root[0], "Root")
	case len(root) > 1:
		return time.Time{}, fmt.Errorf("%w: %s has %d Root fields and no Self", ErrNoStamp, TraceHeader, len(root))
	default:
		return time.Time{}, fmt.Errorf("%w: %s has neither Self nor Root", ErrNoStamp, TraceHeader)
	}
}

// traceTime parses "1-<8 hex epoch seconds>-<24 hex id>".
func traceTime(value, field string) (time.Time, error) {
	parts := strings.Split(value, "-")
	if len(parts) != 3 || parts[0] != "1" || len(parts[1]) != 8 || len(parts[2]) != 24 || !isHex(parts[1]) || !isHex(parts[2]) {
		return time.Time{}, fmt.Errorf("%w: %s field is not 1-<8 hex>-<24 hex>", ErrNoStamp, field)
	}
	secs, err := strconv.ParseUint(parts[1], 16, 32)
	if err != nil || secs == 0 {
		return time.Time{}, fmt.Errorf("%w: %s field has no time", ErrNoStamp, field)
	}
	return time.Unix(int64(secs), 0).UTC(), nil
}

// isHex reports whether s is all hex digits. strconv alone would also take
// a sign or "0x", which a trace ID never has.
func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
