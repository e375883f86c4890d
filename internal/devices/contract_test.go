package devices_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/oncepay/oncepay/internal/devices"
	"github.com/oncepay/oncepay/internal/testkit/specwire"
)

// Every answer of the devices route, produced by the real handler over a
// real ledger and SNS, is one the published contract describes
// (internal/apispec): 201, 200 applied and not, the tombstone's 200, 400,
// 401, 409, 422 and 503 (the gateway routes no other method to the function).
func TestTheDeviceAnswersMatchTheSpec(t *testing.T) {
	w := newWorld(t)
	type call struct {
		name, caller, method, path string
		counter                    string
		body                       string
		status                     int
		badRequest                 bool // a request refused on purpose breaks the spec by design
	}
	calls := []call{
		{"created", "u1", http.MethodPut, "/devices/D1", "41", register("tok-A"), http.StatusCreated, false},
		{"updated", "u1", http.MethodPut, "/devices/D1", "42", register("tok-B"), http.StatusOK, false},
		{"stale", "u1", http.MethodPut, "/devices/D1", "41", register("tok-A"), http.StatusOK, false},
		{"removed", "u1", http.MethodDelete, "/devices/D1", "43", "", http.StatusOK, false},
		{"tombstone", "u1", http.MethodPut, "/devices/D1", "42", register("tok-B"), http.StatusOK, false},
		{"bad token", "u1", http.MethodPut, "/devices/D1", "44", `{"platform":"GCM","token":""}`, http.StatusBadRequest, true},
		{"no counter", "u1", http.MethodDelete, "/devices/D1", "", "", http.StatusBadRequest, true},
		{"no caller", "", http.MethodPut, "/devices/D1", "44", register("tok-C"), http.StatusUnauthorized, false},
		{"no platform application", "u1", http.MethodPut, "/devices/D2", "1", `{"platform":"APNS","token":"abc"}`, http.StatusUnprocessableEntity, false},
		{"live token of another caller", "u1", http.MethodPut, "/devices/D4", "1", register("tok-U2"), http.StatusCreated, false},
		{"token in use", "u2", http.MethodPut, "/devices/D5", "1", register("tok-U2"), http.StatusConflict, false},
	}
	run := func(c call) {
		t.Helper()
		h := http.Header{}
		if c.counter != "" {
			h.Set(devices.CounterHeader, c.counter)
		}
		if c.body != "" {
			h.Set("Content-Type", "application/json")
		}
		r := w.h.Serve(context.Background(), devices.Request{Method: c.method, Path: c.path, Headers: h, Body: []byte(c.body), Caller: c.caller})
		if r.Status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, r.Status, r.Body, c.status)
			return
		}
		errs, err := specwire.Errors(specwire.Exchange{Method: c.method, Path: c.path, ReqHeaders: h, ReqBody: []byte(c.body), Bearer: c.caller != "",
			Status: r.Status, RespHeaders: r.Headers, RespBody: r.Body}, !c.badRequest && c.caller != "")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range errs {
			t.Errorf("%s (%d %s): %s", c.name, r.Status, r.Body, e)
		}
	}
	for _, c := range calls {
		run(c)
	}
	w.pool.Close() // the ledger gone: 503
	run(call{"ledger down", "u1", http.MethodPut, "/devices/D3", strconv.Itoa(1), register("tok-D"), http.StatusServiceUnavailable, false})
}
