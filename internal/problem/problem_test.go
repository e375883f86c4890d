package problem

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// decode reads marshalled JSON generically, as any client would.
func decode(t *testing.T, p Problem) map[string]any {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return m
}

func TestConstructors(t *testing.T) {
	cases := []struct {
		p      Problem
		typ    string
		status int
		ext    map[string]any // extensions expected at the top level
	}{
		{BadRequest("amount", "must be greater than zero"), TypeBadRequest, 400, map[string]any{"field": "amount"}},
		{Unauthorized(), TypeUnauthorized, 401, nil},
		{KeyReused(), TypeKeyReused, 422, nil},
		{InProgress(1500 * time.Millisecond), TypeInProgress, 409, map[string]any{"retry_after": 2.0}},
		{KeyVoided(), TypeKeyVoided, 409, nil},
		{DeadlineExceeded(), TypeDeadlineExceeded, 503, nil},
		{LedgerUnavailable(), TypeLedgerUnavailable, 503, nil},
		{LedgerUnconfirmed(1500 * time.Millisecond), TypeLedgerUnconfirmed, 503, map[string]any{"retry_after": 2.0}},
		{PSPRejected("parameter_invalid_integer"), TypePSPRejected, 502, nil},
		{TooLarge(16384), TypeTooLarge, 413, map[string]any{"limit_bytes": 16384.0}},
		{NotFound(), TypeNotFound, 404, nil},
		{MethodNotAllowed(), TypeMethodNotAllowed, 405, nil},
		{Internal(), TypeInternal, 500, nil},
	}
	types := map[string]bool{}
	for _, c := range cases {
		t.Run(c.typ, func(t *testing.T) {
			m := decode(t, c.p)
			if m["type"] != c.typ || !strings.HasPrefix(c.typ, TypeBase) {
				t.Errorf("type = %v, want %s", m["type"], c.typ)
			}
			if m["status"] != float64(c.status) {
				t.Errorf("status = %v, want %d", m["status"], c.status)
			}
			if title, _ := m["title"].(string); title == "" || len(title) > 60 {
				t.Errorf("title = %q, want short and present", m["title"])
			}
			for k, v := range c.ext {
				if m[k] != v {
					t.Errorf("%s = %v, want %v", k, m[k], v)
				}
			}
			// Only the standard members and the expected extensions.
			for k := range m {
				if !standard(k) && c.ext[k] == nil {
					t.Errorf("unexpected member %q", k)
				}
			}
		})
		if types[c.typ] {
			t.Errorf("type %s used twice", c.typ)
		}
		types[c.typ] = true
	}
	// The same constructor always gives the same title (RFC 9457 §3.1.3).
	if PSPRejected("a").Title != PSPRejected("b").Title || BadRequest("x", "a").Title != BadRequest("y", "b").Title {
		t.Error("title varies with the occurrence")
	}
	// Titles the API contract names.
	if KeyReused().Title != "Key reused with a different request" || KeyVoided().Title != "Key was voided" {
		t.Errorf("titles: %q, %q", KeyReused().Title, KeyVoided().Title)
	}
	if Internal().Detail != "" {
		t.Error("Internal leaks a detail")
	}
}

func TestMarshalShapeAndOrder(t *testing.T) {
	p := Problem{
		Type: TypeBadRequest, Title: "Invalid request", Status: 400,
		Detail: "amount: must be greater than zero", Instance: "/payments",
		Extensions: map[string]any{"zeta": 1, "field": "amount", "nested": map[string]any{"a": []int{1}}},
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"https://oncepay.dev/problems/bad-request","title":"Invalid request","status":400,` +
		`"detail":"amount: must be greater than zero","instance":"/payments",` +
		`"field":"amount","nested":{"a":[1]},"zeta":1}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
}

func TestMarshalDefaultsAndOmissions(t *testing.T) {
	b, err := json.Marshal(Problem{})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"type":"about:blank"}` {
		t.Fatalf("zero Problem = %s", b)
	}
	// A pointer marshals the same (value receiver).
	p := NotFound()
	b1, _ := json.Marshal(p)
	b2, _ := json.Marshal(&p)
	if string(b1) != string(b2) {
		t.Fatalf("%s != %s", b1, b2)
	}
}

func TestExtensionsCannotOverrideStandardMembers(t *testing.T) {
	p := BadRequest("amount", "real detail")
	p.Instance = "/payments"
	for _, k := range []string{"type", "title", "status", "detail", "instance", "Type", "STATUS", "Detail"} {
		p.Extensions[k] = "forged"
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "forged") {
		t.Fatalf("an extension overrode a standard member: %s", b)
	}
	m := decode(t, p)
	if m["type"] != TypeBadRequest || m["status"] != 400.0 || m["detail"] != "real detail" || m["instance"] != "/payments" || m["field"] != "amount" {
		t.Fatalf("got %v", m)
	}
	// Even when the standard member is empty, its name stays reserved.
	q := Problem{Type: TypeInternal, Extensions: map[string]any{"detail": "stack trace"}}
	if b, _ := json.Marshal(q); strings.Contains(string(b), "stack") {
		t.Fatalf("extension filled an empty standard member: %s", b)
	}
}

func TestMarshalReportsBadExtension(t *testing.T) {
	p := Problem{Type: TypeInternal, Extensions: map[string]any{"x": math.NaN()}}
	if _, err := json.Marshal(p); err == nil {
		t.Fatal("NaN extension marshalled")
	}
}

func TestUnmarshalRoundTrip(t *testing.T) {
	for _, p := range []Problem{
		BadRequest("Idempotency-Key", "required"),
		InProgress(3 * time.Second),
		TooLarge(16384),
		Internal(),
		{Type: TypeKeyReused, Title: "t", Status: 422, Detail: "d", Instance: "/i"},
	} {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var got Problem
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		again, _ := json.Marshal(got)
		if string(again) != string(b) {
			t.Errorf("round trip: %s -> %s", b, again)
		}
	}
	var p Problem
	for _, bad := range []string{`null`, `[]`, `"x"`, `{`} {
		if err := json.Unmarshal([]byte(bad), &p); err == nil {
			t.Errorf("Unmarshal(%s) succeeded", bad)
		}
	}
	// A consumer ignores a standard member of the wrong type (RFC 9457 §3.1).
	if err := json.Unmarshal([]byte(`{"type":7,"status":"500","title":"T","x":true}`), &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != "" || p.Status != 0 || p.Title != "T" || p.Extensions["x"] != true {
		t.Fatalf("got %+v", p)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int{
		-time.Second:            1,
		0:                       1,
		time.Millisecond:        1,
		time.Second:             1,
		time.Second + 1:         2,
		4500 * time.Millisecond: 5,
		5 * time.Second:         5,
	} {
		if got := RetryAfterSeconds(d); got != want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}

// TestLedgerUnavailableNeverSaysThePaymentDidNotRun: the 503 also answers a
// repeat whose ledger read failed (the key's first request may have paid),
// so its detail speaks of this request and tells the client to keep the key.
func TestLedgerUnavailableNeverSaysThePaymentDidNotRun(t *testing.T) {
	d := LedgerUnavailable().Detail
	for _, bad := range []string{"could not be recorded", "nothing was run"} {
		if strings.Contains(d, bad) {
			t.Errorf("detail %q says %q: false for a repeat of a payment that ran", d, bad)
		}
	}
	if !strings.Contains(d, "same Idempotency-Key") {
		t.Errorf("detail %q does not tell the client to keep its key", d)
	}
}
