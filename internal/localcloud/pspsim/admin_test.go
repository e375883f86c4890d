package pspsim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/psp"
)

func adminDo(t *testing.T, method, u, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// The admin API over HTTP, as other tests and the demo use it.
func TestAdminHTTP(t *testing.T) {
	e := setup(t)
	base := e.url + "/_sim"

	// An empty list is a JSON array, not null.
	if status, _, body := adminDo(t, "GET", base+"/charges", ""); status != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("GET charges: %d %q, want 200 []", status, body)
	}

	// A fault added over HTTP fires.
	status, _, body := adminDo(t, "POST", base+"/faults", `{"match":{"idempotency_key":"pay_h:charge"},"kind":"error_5xx"}`)
	if status != http.StatusCreated || !strings.Contains(body, `"times":1`) {
		t.Fatalf("POST faults: %d %s", status, body)
	}
	if res := mustCharge(t, e, chargeReq("pay_h")); res.Outcome != psp.Unknown || res.HTTPStatus != 500 {
		t.Fatalf("charge under error_5xx: %+v", res)
	}

	// Typos are refused, as problem+json.
	for _, bad := range []string{`{"kind":"explode"}`, `{"kind":"slow","delay":5}`, `not json`, `{"kind":"slow","delay_ms":-1}`} {
		status, ctype, _ := adminDo(t, "POST", base+"/faults", bad)
		if status != http.StatusBadRequest || ctype != "application/problem+json" {
			t.Errorf("POST faults %s: %d %s, want 400 problem+json", bad, status, ctype)
		}
	}

	// DELETE clears the rules.
	adminDo(t, "POST", base+"/faults", `{"kind":"drop_before","times":3}`)
	if status, _, _ := adminDo(t, "DELETE", base+"/faults", ""); status != http.StatusNoContent {
		t.Errorf("DELETE faults: %d", status)
	}
	if _, _, body := adminDo(t, "GET", base+"/faults", ""); strings.TrimSpace(body) != "[]" {
		t.Errorf("faults after DELETE: %s", body)
	}

	// The charge list carries the documented fields.
	paid := mustCharge(t, e, chargeReq("pay_list"))
	_, _, body = adminDo(t, "GET", base+"/charges", "")
	var charges []map[string]any
	if err := json.Unmarshal([]byte(body), &charges); err != nil || len(charges) != 1 {
		t.Fatalf("GET charges: %s (%v)", body, err)
	}
	for _, field := range []string{"id", "payment_intent", "idempotency_key", "amount", "currency", "metadata", "created"} {
		if _, ok := charges[0][field]; !ok {
			t.Errorf("charge without %q: %s", field, body)
		}
	}
	if charges[0]["id"] != paid.ChargeID || charges[0]["idempotency_key"] != "pay_list:charge" {
		t.Errorf("charge: %v", charges[0])
	}
	if status, _, body := adminDo(t, "GET", base+"/refunds", ""); status != 200 || strings.TrimSpace(body) != "[]" {
		t.Errorf("GET refunds: %d %s", status, body)
	}

	// The clock moves forward over HTTP: past the window and its pruning
	// jitter (25 h), the key is new.
	if status, _, _ := adminDo(t, "POST", base+"/clock", `{"advance_ms":90000000}`); status != 200 {
		t.Errorf("POST clock: %d", status)
	}
	if status, _, _ := adminDo(t, "POST", base+"/clock", `{"advance_ms":-1}`); status != 400 {
		t.Errorf("POST clock backwards: %d, want 400", status)
	}
	if res := mustCharge(t, e, chargeReq("pay_list")); res.Replayed {
		t.Errorf("after advancing 25 h over HTTP the key was still kept: %+v", res)
	}

	// Flush over HTTP delivers the two pending events (the 500 made none).
	status, _, body = adminDo(t, "POST", base+"/webhooks/flush", "")
	if status != 200 || !strings.Contains(body, `"delivered":2`) || !strings.Contains(body, `"pending":0`) {
		t.Errorf("flush: %d %s", status, body)
	}

	// Reset forgets everything.
	if status, _, _ := adminDo(t, "POST", base+"/reset", ""); status != http.StatusNoContent {
		t.Errorf("reset: %d", status)
	}
	wantCharges(t, e, 0)
	if status, ctype, _ := adminDo(t, "GET", base+"/nope", ""); status != 404 || ctype != "application/problem+json" {
		t.Errorf("unknown admin path: %d %s", status, ctype)
	}
}
