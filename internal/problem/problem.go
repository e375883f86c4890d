// Package problem renders the API's errors as RFC 9457 problem details
// (application/problem+json), one constructor per answer in the table of
// docs/mechanism.md#design-2, each with a stable type URI a client can switch on.
//
// Titles are fixed per type (RFC 9457 §3.1.3: the title should not change
// from occurrence to occurrence), and nothing here carries personal data:
// details are fixed texts or the caller's own field-level reasons, which
// never echo input values.
package problem

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// ContentType is the media type of a problem details body (RFC 9457 §3).
const ContentType = "application/problem+json"

// TypeBase prefixes every problem type URI of the API.
const TypeBase = "https://oncepay.dev/problems/"

// The problem types. They are part of the API's contract: clients switch on
// them, so they never change once published.
const (
	TypeBadRequest        = TypeBase + "bad-request"
	TypeUnauthorized      = TypeBase + "unauthorized"
	TypeKeyReused         = TypeBase + "key-reused"
	TypeInProgress        = TypeBase + "in-progress"
	TypeKeyVoided         = TypeBase + "key-voided"
	TypeDeadlineExceeded  = TypeBase + "deadline-exceeded"
	TypeLedgerUnavailable = TypeBase + "ledger-unavailable"
	TypeLedgerUnconfirmed = TypeBase + "ledger-unconfirmed"
	TypePSPRejected       = TypeBase + "psp-rejected"
	TypeTooLarge          = TypeBase + "too-large"
	TypeNotFound          = TypeBase + "not-found"
	TypeMethodNotAllowed  = TypeBase + "method-not-allowed"
	TypeInternal          = TypeBase + "internal"
	TypeMisdirected       = TypeBase + "misdirected"
	TypeHomeUnavailable   = TypeBase + "home-unavailable"
)

// Problem is an RFC 9457 problem details object. Extensions are extra
// members, written at the top level beside the standard ones.
type Problem struct {
	Type     string // URI; "" is written as "about:blank" (RFC 9457 §4.2.1)
	Title    string
	Status   int
	Detail   string
	Instance string
	// Extensions never override a standard member: a name equal to one
	// (in any letter case) is dropped when marshalling.
	Extensions map[string]any
}

// standard reports whether name is, in any letter case, a standard member.
// Case-folded too because a case-insensitive reader (Go's json.Unmarshal
// into a struct is one) would let "Status" override "status".
func standard(name string) bool {
	for _, s := range [...]string{"type", "title", "status", "detail", "instance"} {
		if strings.EqualFold(name, s) {
			return true
		}
	}
	return false
}

// MarshalJSON writes the standard members first, in RFC order, then the
// extensions sorted by name, so the same problem is always the same bytes.
// Empty title, detail and instance and a zero status are omitted.
func (p Problem) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	member := func(name string, v any) error {
		val, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("problem: member %q: %w", name, err)
		}
		key, _ := json.Marshal(name) // a string always marshals
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.Write(key)
		b.WriteByte(':')
		b.Write(val)
		return nil
	}
	typ := p.Type
	if typ == "" {
		typ = "about:blank"
	}
	_ = member("type", typ)
	if p.Title != "" {
		_ = member("title", p.Title)
	}
	if p.Status != 0 {
		_ = member("status", p.Status)
	}
	if p.Detail != "" {
		_ = member("detail", p.Detail)
	}
	if p.Instance != "" {
		_ = member("instance", p.Instance)
	}
	names := make([]string, 0, len(p.Extensions))
	for name := range p.Extensions {
		if !standard(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if err := member(name, p.Extensions[name]); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads a problem: the standard members into their fields,
// every other member into Extensions. Clients and tests use it; a standard
// member of the wrong type is ignored, as RFC 9457 §3.1 asks of consumers.
func (p *Problem) UnmarshalJSON(data []byte) error {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return fmt.Errorf("problem: %w", err)
	}
	if members == nil {
		return fmt.Errorf("problem: not a JSON object")
	}
	*p = Problem{}
	str := func(name string, dst *string) {
		if raw, ok := members[name]; ok {
			_ = json.Unmarshal(raw, dst)
			delete(members, name)
		}
	}
	str("type", &p.Type)
	str("title", &p.Title)
	str("detail", &p.Detail)
	str("instance", &p.Instance)
	if raw, ok := members["status"]; ok {
		_ = json.Unmarshal(raw, &p.Status)
		delete(members, "status")
	}
	if len(members) > 0 {
		p.Extensions = make(map[string]any, len(members))
		for name, raw := range members {
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				return fmt.Errorf("problem: member %q: %w", name, err)
			}
			p.Extensions[name] = v
		}
	}
	return nil
}

// RetryAfterSeconds is the Retry-After delay-seconds for d (RFC 9110
// §10.2.3): rounded up to whole seconds, and at least 1, because 0 would
// invite a client to retry in a tight loop. The API uses it for both the
// header and the body so the two agree.
func RetryAfterSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	if s < 1 {
		return 1
	}
	return s
}

// BadRequest is a 400 for an invalid body or header; field names the input
// ("body", "amount", "Idempotency-Key", ...) in the "field" extension.
// Nothing was stored, so the client may fix the request and reuse the key.
func BadRequest(field, detail string) Problem {
	return Problem{
		Type:       TypeBadRequest,
		Title:      "Invalid request",
		Status:     http.StatusBadRequest,
		Detail:     detail,
		Extensions: map[string]any{"field": field},
	}
}

// Unauthorized is a 401: no authenticated caller, so there is no scope to
// look a key up in. It says nothing about why, to give a prober nothing.
func Unauthorized() Problem {
	return Problem{
		Type:   TypeUnauthorized,
		Title:  "Unauthorized",
		Status: http.StatusUnauthorized,
	}
}

// KeyReused is the 422 for a key already bound to a request with a different
// fingerprint (docs/mechanism.md#seed-part-2): replaying the first answer and
// running the second request would both be wrong, so nothing runs.
func KeyReused() Problem {
	return Problem{
		Type:   TypeKeyReused,
		Title:  "Key reused with a different request",
		Status: http.StatusUnprocessableEntity,
		Detail: "This Idempotency-Key was first used with a request of different content. Nothing was run. Use a new key for a new request.",
	}
}

// InProgress is the 409 for a repeat that arrives while the original still
// holds its lease. The "retry_after" extension carries the same delay in
// seconds as the Retry-After header the API sets.
func InProgress(retryAfter time.Duration) Problem {
	return Problem{
		Type:       TypeInProgress,
		Title:      "Request in progress",
		Status:     http.StatusConflict,
		Detail:     "A request with this Idempotency-Key is still being processed. Retry with the same key after the delay.",
		Extensions: map[string]any{"retry_after": RetryAfterSeconds(retryAfter)},
	}
}

// KeyVoided is the 409 for a key a resolve call declared never-to-run
// (docs/mechanism.md#seed-part-4): the client has been told it may make a new
// key, so the late original must not run.
func KeyVoided() Problem {
	return Problem{
		Type:   TypeKeyVoided,
		Title:  "Key was voided",
		Status: http.StatusConflict,
		Detail: "A status check declared this Idempotency-Key never to run. Nothing was run.",
	}
}

// DeadlineExceeded is the 503 for a request whose arrival stamp is already
// older than the server's deadline (docs/mechanism.md#seed-part-4): its
// client may have given up and tapped again with a new key, so it must not
// start. Nothing was claimed, so a retry with the same key is safe.
func DeadlineExceeded() Problem {
	return Problem{
		Type:   TypeDeadlineExceeded,
		Title:  "Request arrived too late",
		Status: http.StatusServiceUnavailable,
		Detail: "The request waited longer than the server's deadline before it could start. Nothing was run; it is safe to retry with the same Idempotency-Key.",
	}
}

// LedgerUnavailable is the 503 when the durable guard cannot be reached:
// no PSP call without a durable intent, so nothing runs.
func LedgerUnavailable() Problem {
	return Problem{
		Type:   TypeLedgerUnavailable,
		Title:  "Service temporarily unavailable",
		Status: http.StatusServiceUnavailable,
		// Said of this request only: the same 503 answers a repeat whose
		// ledger read failed, and the key's first request may have paid.
		Detail: "The ledger is unavailable, so this request ran nothing. Retry with the same Idempotency-Key: an earlier request with it may already have run, and a new key could pay twice.",
	}
}

// LedgerUnconfirmed is the 503 when the ledger may have recorded the
// payment but could not confirm it (the write's reply was lost, and so was
// the read that followed): unlike LedgerUnavailable it does NOT say that
// nothing ran. The request keeps its claim, so a retry with the same key
// after retryAfter (the claim's lease) finds out and finishes the payment;
// a new key could pay twice. "retry_after" carries the delay in seconds.
func LedgerUnconfirmed(retryAfter time.Duration) Problem {
	return Problem{
		Type:       TypeLedgerUnconfirmed,
		Title:      "Payment not confirmed yet",
		Status:     http.StatusServiceUnavailable,
		Detail:     "The payment may have been recorded, but the service could not confirm it. Retry with the same Idempotency-Key after the delay to learn its outcome; do not use a new key.",
		Extensions: map[string]any{"retry_after": RetryAfterSeconds(retryAfter)},
	}
}

// PSPRejected is the 502 for a request the payment provider refused as
// invalid (not a card decline, which is a 402 payment answer). detail must
// be the provider's code or message with no personal data in it.
func PSPRejected(detail string) Problem {
	return Problem{
		Type:   TypePSPRejected,
		Title:  "Payment provider rejected the request",
		Status: http.StatusBadGateway,
		Detail: detail,
	}
}

// TooLarge is the 413 for a body over limit bytes, given in "limit_bytes".
func TooLarge(limit int) Problem {
	return Problem{
		Type:       TypeTooLarge,
		Title:      "Request body too large",
		Status:     http.StatusRequestEntityTooLarge,
		Detail:     fmt.Sprintf("The body must be at most %d bytes.", limit),
		Extensions: map[string]any{"limit_bytes": limit},
	}
}

// NotFound is a 404 for an unknown route, or a key the caller does not own:
// the two read the same, so keys can't be probed (docs/mechanism.md#seed-part-2).
func NotFound() Problem {
	return Problem{
		Type:   TypeNotFound,
		Title:  "Not found",
		Status: http.StatusNotFound,
	}
}

// MethodNotAllowed is a 405; the API also sets the Allow header.
func MethodNotAllowed() Problem {
	return Problem{
		Type:   TypeMethodNotAllowed,
		Title:  "Method not allowed",
		Status: http.StatusMethodNotAllowed,
	}
}

// Misdirected is the 421 for a request that reached a Region which is not
// the caller's home (docs/regions.md): nothing was read or written here. The
// client sends the same request, with the same Idempotency-Key, to
// home_url (the home's API base URL) plus the same path; home_version is
// the home record's version, which only grows.
func Misdirected(region, homeURL string, version int64) Problem {
	return Problem{
		Type:   TypeMisdirected,
		Title:  "Misdirected Request",
		Status: http.StatusMisdirectedRequest,
		Detail: "This caller is served in another Region. Nothing was run here. Send the same request, with the same Idempotency-Key, to home_url.",
		Extensions: map[string]any{
			"home_region": region, "home_url": homeURL, "home_version": version,
		},
	}
}

// HomeUnavailable is the 503 when the caller's home record cannot be read:
// nothing was run, and a retry with the same key is safe.
func HomeUnavailable() Problem {
	return Problem{
		Type:       TypeHomeUnavailable,
		Title:      "Service temporarily unavailable",
		Status:     http.StatusServiceUnavailable,
		Detail:     "The service could not tell which Region serves this caller, so it ran nothing. Retry with the same Idempotency-Key.",
		Extensions: map[string]any{"retry_after": 1},
	}
}

// Internal is a 500. It has no detail: the cause goes to the log, tagged
// with the request's IDs, never to the client.
func Internal() Problem {
	return Problem{
		Type:   TypeInternal,
		Title:  "Internal error",
		Status: http.StatusInternalServerError,
	}
}
