package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/testkit/specwire"
)

// The document itself is valid OpenAPI 3.1.
func TestTheSpecIsAValidOpenAPIDocument(t *testing.T) {
	v, err := specwire.Validator()
	if err != nil {
		t.Fatal(err)
	}
	if ok, errs := v.ValidateDocument(); !ok {
		for _, e := range errs {
			t.Error(e.Error())
		}
	}
}

// checkAgainstSpec validates a request the handler served and its answer
// against the spec, as a client on the wire would see them. A request the
// spec refuses on purpose (a 400's, a 413's) has only its answer checked.
func checkAgainstSpec(t *testing.T, row string, req api.Request, resp api.Response) {
	t.Helper()
	for _, e := range specErrors(t, req, resp, !refusesInput(resp.Status)) {
		t.Errorf("%s: %d %s: %s", row, resp.Status, resp.Body, e)
	}
}

func refusesInput(status int) bool {
	return status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge
}

// specErrors is what the validator finds wrong with the pair (the request
// too when withRequest).
func specErrors(t *testing.T, req api.Request, resp api.Response, withRequest bool) []string {
	t.Helper()
	errs, err := specwire.Errors(specwire.Exchange{
		Method: req.Method, Path: req.Path, ReqHeaders: req.Headers, ReqBody: req.Body, Bearer: true,
		Status: resp.Status, RespHeaders: resp.Headers, RespBody: resp.Body,
	}, withRequest)
	if err != nil {
		t.Fatal(err)
	}
	return errs
}

// The check can fail: answers the spec does not describe are caught.
func TestTheSpecCheckCatchesAnswersItDoesNotDescribe(t *testing.T) {
	req := api.Request{Method: http.MethodPost, Path: "/payments", Headers: http.Header{"Idempotency-Key": {"K1"}, "Content-Type": {"application/json"}}, Body: []byte(body3000)}
	js := http.Header{"Content-Type": {"application/json"}}
	for name, resp := range map[string]api.Response{
		"an undeclared status":         {Status: http.StatusTeapot, Headers: js, Body: []byte(`{}`)},
		"a payment without its id":     {Status: http.StatusCreated, Headers: js, Body: []byte(`{"state":"SUCCEEDED"}`)},
		"a state the route never says": {Status: http.StatusCreated, Headers: js, Body: []byte(`{"payment_id":"pay_1","state":"MAYBE"}`)},
		"a problem of an unknown type": {Status: http.StatusConflict, Headers: http.Header{"Content-Type": {"application/problem+json"}}, Body: []byte(`{"type":"about:blank","title":"x","status":409}`)},
		"a 202 whose Location is elsewhere": {Status: http.StatusAccepted, Headers: http.Header{"Content-Type": {"application/json"}, "Location": {"https://evil.example/x"}},
			Body: []byte(`{"payment_id":"pay_1","state":"PROCESSING"}`)},
		"a 202 without its Location": {Status: http.StatusAccepted, Headers: http.Header{"Content-Type": {"application/json"}, "Retry-After": {"1"}}, Body: []byte(`{"payment_id":"pay_1","state":"PROCESSING"}`)},
		"a 201 that says FAILED":     {Status: http.StatusCreated, Headers: js, Body: []byte(`{"payment_id":"pay_1","state":"FAILED","decline_code":"card_declined"}`)},
		"a 402 that says SUCCEEDED":  {Status: http.StatusPaymentRequired, Headers: js, Body: []byte(`{"payment_id":"pay_1","state":"SUCCEEDED"}`)},
		// A problem type belongs to its status, and a problem's status is the answer's.
		"a 409 of the 422's type":            {Status: http.StatusConflict, Headers: http.Header{"Content-Type": {"application/problem+json"}}, Body: []byte(`{"type":"https://oncepay.dev/problems/key-reused","title":"x","status":409}`)},
		"a 503 of the 409's type":            {Status: http.StatusServiceUnavailable, Headers: http.Header{"Content-Type": {"application/problem+json"}}, Body: []byte(`{"type":"https://oncepay.dev/problems/in-progress","title":"x","status":503}`)},
		"a 502 of the refund's type on /pay": {Status: http.StatusBadGateway, Headers: http.Header{"Content-Type": {"application/problem+json"}}, Body: []byte(`{"type":"https://oncepay.dev/problems/refund-failed","title":"x","status":502}`)},
		"a 409 whose body says 503":          {Status: http.StatusConflict, Headers: http.Header{"Content-Type": {"application/problem+json"}}, Body: []byte(`{"type":"https://oncepay.dev/problems/in-progress","title":"x","status":503}`)},
	} {
		if errs := specErrors(t, req, resp, true); len(errs) == 0 {
			t.Errorf("%s passed the spec check", name)
		}
	}
	// A key outside the alphabet is outside the spec too.
	for _, key := range []string{"K 1", "a/b", `"K1`, `"K1";a=1`, `".."`, "..", strings.Repeat("k", 256), `"` + strings.Repeat("k", 256) + `"`} {
		bad := req
		bad.Headers = req.Headers.Clone()
		bad.Headers.Set("Idempotency-Key", key)
		ok := api.Response{Status: http.StatusCreated, Headers: js, Body: []byte(`{"payment_id":"pay_1","state":"SUCCEEDED"}`)}
		if errs := specErrors(t, bad, ok, true); len(errs) == 0 {
			t.Errorf("key %.20q passed the spec check", key)
		}
	}
}

// contractWorld sends requests through the handler and keeps each one's
// row of the answer table, for the spec check.
type contractWorld struct {
	*world
	t *testing.T
}

func (c contractWorld) send(row, path, key, body string, arrival time.Time) api.Response {
	h := http.Header{}
	if key != "" {
		h.Set("Idempotency-Key", key)
	}
	if body != "" {
		h.Set("Content-Type", "application/json")
	}
	req := api.Request{Method: http.MethodPost, Path: path, Headers: h, Body: []byte(body), Caller: "u1", Arrival: arrival}
	resp := c.h.Serve(context.Background(), req)
	checkAgainstSpec(c.t, row, req, resp)
	return resp
}

func (c contractWorld) pay(row, key, body string) api.Response {
	return c.send(row, "/payments", key, body, c.clock.Now())
}

// Every row of the answer table (README "The HTTP contract"), produced by
// the real handler over real parts and validated against the OpenAPI
// document: status, content type, body schema and headers. A row whose
// status the spec does not declare, or whose body or headers it does not
// describe, fails here.
func TestTheAnswerTableMatchesTheSpec(t *testing.T) {
	// The problem type each problem row must carry: the spec lets a status
	// carry several (a 409 is in-progress or key-voided), so the status alone
	// would not tell a voided key from a running one.
	problemOf := map[string]string{
		"same key, different fingerprint": "key-reused",
		"missing key":                     "bad-request",
		"invalid body":                    "bad-request",
		"body too large":                  "too-large",
		"request older than the deadline": "deadline-exceeded",
		"no caller":                       "unauthorized",
		"repeat while the original runs":  "in-progress",
		"a different request inside a live claimant's lease": "in-progress",
		"key voided by a resolve call":                       "key-voided",
		"resolve of a key outside the alphabet":              "bad-request",
		"key store down: a duplicate meets the PENDING row":  "in-progress",
		"ledger outcome unknown":                             "ledger-unconfirmed",
		"ledger unavailable":                                 "ledger-unavailable",
		"PSP invalid request":                                "psp-rejected",
		"PSP invalid request, replayed":                      "psp-rejected",
		"resolve of a payment the PSP refused":               "psp-rejected",
		"refund of an unknown payment":                       "not-found",
		"refund of a declined payment":                       "not-refundable",
		"refund without a key":                               "bad-request",
		"refund key reused for another payment":              "key-reused",
		"another refund key for a payment with a refund":     "refund-exists",
		"refund the PSP failed":                              "refund-failed",
		"refund with the ledger down":                        "ledger-unavailable",
		"resolve with the ledger down":                       "ledger-unavailable",
	}
	seen := map[string]int{}
	expect := func(t *testing.T, row string, r api.Response, status int, header string) {
		t.Helper()
		seen[row] = r.Status
		if r.Status != status {
			t.Errorf("%s: %d %s, want %d", row, r.Status, r.Body, status)
		}
		if header != "" && r.Headers.Get(header) == "" {
			t.Errorf("%s: no %s header: %v", row, header, r.Headers)
		}
		want, isProblem := problemOf[row]
		if got := r.Headers.Get("Content-Type"); (got == problem.ContentType) != isProblem {
			t.Errorf("%s: content type %q; a problem row is exactly one listed with its type", row, got)
		}
		if isProblem {
			var p struct {
				Type   string `json:"type"`
				Status int    `json:"status"`
			}
			if err := json.Unmarshal(r.Body, &p); err != nil || p.Type != problem.TypeBase+want || p.Status != r.Status {
				t.Errorf("%s: problem %s, want type %s%s and status %d (%v)", row, r.Body, problem.TypeBase, want, r.Status, err)
			}
		}
	}
	declined := strings.Replace(body3000, "pm_card_visa", "pm_card_chargeDeclined", 1)

	t.Run("pay", func(t *testing.T) {
		c := contractWorld{newWorld(t), t}
		expect(t, "first request, PSP charged in time", c.pay("201", "K1", body3000), http.StatusCreated, "")
		expect(t, "repeat, final answer stored", c.pay("201 replay", "K1", body3000), http.StatusCreated, "Idempotent-Replayed")
		expect(t, "first request, definite decline", c.pay("402", "K2", declined), http.StatusPaymentRequired, "")
		expect(t, "same key, different fingerprint", c.pay("422", "K1", strings.Replace(body3000, "3000", "3001", 1)), http.StatusUnprocessableEntity, "")
		expect(t, "missing key", c.pay("400", "", body3000), http.StatusBadRequest, "")
		expect(t, "invalid body", c.pay("400", "K3", `{"amount":-1}`), http.StatusBadRequest, "")
		expect(t, "body too large", c.pay("413", "K4", `{"pad":"`+strings.Repeat("x", 20000)+`"}`), http.StatusRequestEntityTooLarge, "")
		expect(t, "request older than the deadline", c.send("503", "/payments", "K5", body3000, c.clock.Now().Add(-c.timing.Deadline-time.Millisecond)), http.StatusServiceUnavailable, "")
		noCaller := api.Request{Method: http.MethodPost, Path: "/payments", Headers: http.Header{"Idempotency-Key": {"K6"}, "Content-Type": {"application/json"}}, Body: []byte(body3000), Arrival: c.clock.Now()}
		r := c.h.Serve(context.Background(), noCaller)
		checkAgainstSpec(t, "401", noCaller, r)
		expect(t, "no caller", r, http.StatusUnauthorized, "")
		c.clock.Advance(2 * time.Hour)
		if _, found := c.record("u1", "K1"); found {
			t.Fatal("the key record should read as expired")
		}
		expect(t, "key record expired, ledger row exists", c.pay("201 from the ledger", "K1", body3000), http.StatusCreated, "Idempotent-Replayed")
	})

	t.Run("lost reply", func(t *testing.T) {
		c := contractWorld{newWorld(t), t}
		pid := ids.PaymentID(ids.Scope("u1", "K1"))
		if err := c.sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.ChargeKey(pid)}, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
			t.Fatal(err)
		}
		expect(t, "PSP reply not in time", c.pay("202", "K1", body3000), http.StatusAccepted, "Location")
		c.clock.Advance(10 * time.Second)
		expect(t, "repeat, pointer stored", c.pay("202 replay", "K1", body3000), http.StatusAccepted, "Idempotent-Replayed")
		expect(t, "resolve of an open payment", c.send("resolve 202", "/payments/K1/resolve", "", "", c.clock.Now()), http.StatusAccepted, "Location")
	})

	t.Run("in flight and takeover", func(t *testing.T) {
		c := contractWorld{newWorld(t), t}
		c.hooks.AfterPendingInsert = crashOnce()
		c.rebuild()
		c.h.Serve(context.Background(), api.Request{Method: http.MethodPost, Path: "/payments", Headers: http.Header{"Idempotency-Key": {"K1"}, "Content-Type": {"application/json"}}, Body: []byte(body3000), Caller: "u1", Arrival: c.clock.Now()})
		expect(t, "repeat while the original runs", c.pay("409", "K1", body3000), http.StatusConflict, "Retry-After")
		c.clock.Advance(c.timing.Deadline + 2*c.timing.Margin + time.Second)
		expect(t, "repeat after the owner's lease + margin", c.pay("201 takeover", "K1", body3000), http.StatusCreated, "")
	})

	t.Run("takeover whose PSP reply is lost", func(t *testing.T) {
		c := contractWorld{newWorld(t), t}
		c.hooks.AfterPendingInsert = crashOnce()
		c.rebuild()
		c.h.Serve(context.Background(), api.Request{Method: http.MethodPost, Path: "/payments", Headers: http.Header{"Idempotency-Key": {"K1"}, "Content-Type": {"application/json"}}, Body: []byte(body3000), Caller: "u1", Arrival: c.clock.Now()})
		pid := ids.PaymentID(ids.Scope("u1", "K1"))
		if err := c.sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.ChargeKey(pid)}, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
			t.Fatal(err)
		}
		c.clock.Advance(c.timing.Deadline + 2*c.timing.Margin + time.Second)
		expect(t, "takeover, the replay's reply not in time", c.pay("202 takeover", "K1", body3000), http.StatusAccepted, "Location")
	})

	t.Run("voided key", func(t *testing.T) {
		c := contractWorld{newWorld(t), t}
		expect(t, "resolve of an absent key", c.send("resolve 200 VOID", "/payments/K1/resolve", "", "", c.clock.Now()), http.StatusOK, "")
		expect(t, "key voided by a resolve call", c.pay("409 voided", "K1", body3000), http.StatusConflict, "")
		c.pay("201", "K2", body3000)
		expect(t, "resolve of a known payment", c.send("resolve 201", "/payments/K2/resolve", "", "", c.clock.Now()), http.StatusCreated, "")
		expect(t, "resolve of a key outside the alphabet", c.send("resolve 400", "/payments/K%20/resolve", "", "", c.clock.Now()), http.StatusBadRequest, "")
	})

	t.Run("key store down", func(t *testing.T) {
		c := contractWorld{newWorld(t), t}
		c.claims = idem.NewStore(unreachableDynamo(), "idem")
		c.rebuild()
		expect(t, "key store unavailable", c.pay("201 degraded", "K1", body3000), http.StatusCreated, "")
	})

	t.Run("a different request inside a live claimant's lease", func(t *testing.T) {
		c := contractWorld{newWorld(t), t}
		c.hooks.AfterClaim = crashOnce() // the claimant dies before its row
		c.rebuild()
		c.h.Serve(context.Background(), api.Request{Method: http.MethodPost, Path: "/payments", Headers: http.Header{"Idempotency-Key": {"K1"}, "Content-Type": {"application/json"}}, Body: []byte(body3000), Caller: "u1", Arrival: c.clock.Now()})
		// Not 422 yet: without a row the claimant may never become the payment.
		expect(t, "a different request inside a live claimant's lease", c.pay("409 other request", "K1", strings.Replace(body3000, "3000", "3001", 1)), http.StatusConflict, "Retry-After")
	})

	t.Run("key store down, the original in flight", func(t *testing.T) {
		c := contractWorld{newWorld(t), t}
		c.claims = idem.NewStore(unreachableDynamo(), "idem")
		c.hooks.AfterPendingInsert = crashOnce()
		c.rebuild()
		c.h.Serve(context.Background(), api.Request{Method: http.MethodPost, Path: "/payments", Headers: http.Header{"Idempotency-Key": {"K1"}, "Content-Type": {"application/json"}}, Body: []byte(body3000), Caller: "u1", Arrival: c.clock.Now()})
		expect(t, "key store down: a duplicate meets the PENDING row", c.pay("409 degraded", "K1", body3000), http.StatusConflict, "Retry-After")
	})

	t.Run("the PENDING insert's reply lost, the ledger silent", func(t *testing.T) {
		c := contractWorld{newWorld(t), t}
		proxy := ledgerThroughLostCommit(t, c.world, ids.PaymentID(ids.Scope("u1", "K1")))
		proxy.refuse.Store(true)
		expect(t, "ledger outcome unknown", c.pay("503 unconfirmed", "K1", body3000), http.StatusServiceUnavailable, "Retry-After")
	})

	t.Run("ledger down", func(t *testing.T) {
		c := contractWorld{newWorld(t), t}
		c.ledger = unreachableLedger(t)
		c.rebuild()
		expect(t, "ledger unavailable", c.pay("503 ledger", "K1", body3000), http.StatusServiceUnavailable, "")
	})

	t.Run("PSP refuses the request", func(t *testing.T) {
		c := contractWorld{newWorld(t), t}
		c.refuseCharges(401)
		expect(t, "PSP invalid request", c.pay("502", "K1", body3000), http.StatusBadGateway, "")
		expect(t, "PSP invalid request, replayed", c.pay("502 replay", "K1", body3000), http.StatusBadGateway, "Idempotent-Replayed")
		expect(t, "resolve of a payment the PSP refused", c.send("resolve 502", "/payments/K1/resolve", "", "", c.clock.Now()), http.StatusBadGateway, "")
	})

	t.Run("refund", func(t *testing.T) {
		c := contractWorld{newWorld(t), t}
		c.pay("201", "K1", body3000)
		c.pay("402", "K2", declined)
		expect(t, "refund of a succeeded payment", c.send("refund 201", "/payments/K1/refund", "R1", "", c.clock.Now()), http.StatusCreated, "")
		expect(t, "refund repeat", c.send("refund 201 replay", "/payments/K1/refund", "R1", "", c.clock.Now()), http.StatusCreated, "Idempotent-Replayed")
		expect(t, "refund of an unknown payment", c.send("refund 404", "/payments/K9/refund", "R2", "", c.clock.Now()), http.StatusNotFound, "")
		expect(t, "refund of a declined payment", c.send("refund 409", "/payments/K2/refund", "R3", "", c.clock.Now()), http.StatusConflict, "")
		expect(t, "refund without a key", c.send("refund 400", "/payments/K1/refund", "", "", c.clock.Now()), http.StatusBadRequest, "")
		c.pay("201", "K3", body3000)
		expect(t, "refund key reused for another payment", c.send("refund 422", "/payments/K3/refund", "R1", "", c.clock.Now()), http.StatusUnprocessableEntity, "")
	})

	t.Run("refund open, resolve declined, ledger down", func(t *testing.T) {
		c := contractWorld{newWorld(t), t}
		c.pay("201", "K1", body3000)
		c.pay("402", "K2", declined)
		now := c.clock.Now()
		expect(t, "resolve of a declined payment", c.send("resolve 402", "/payments/K2/resolve", "", "", now), http.StatusPaymentRequired, "")
		pid := ids.PaymentID(ids.Scope("u1", "K1"))
		if err := c.sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.RefundKey(pid)}, Kind: pspsim.FaultRefundPending, DelayMS: 600000}); err != nil {
			t.Fatal(err)
		}
		expect(t, "refund pending at the PSP", c.send("refund 202", "/payments/K1/refund", "R1", "", now), http.StatusAccepted, "Location")
		expect(t, "another refund key for a payment with a refund", c.send("refund 409 exists", "/payments/K1/refund", "R2", "", now), http.StatusConflict, "")
		// The PSP fails the open refund later (refund.failed, or the
		// resolver's look-up): the repeat answers the stored failure.
		if _, moved, err := c.ledger.SettleRefund(context.Background(), pid, ledger.RefundOutcome{State: ledger.RefundFailed, PSPRefund: "re_contract", FailureReason: "lost_or_stolen_card"}); err != nil || !moved {
			t.Fatalf("settle the refund failed: moved %v, %v", moved, err)
		}
		expect(t, "refund the PSP failed", c.send("refund 502", "/payments/K1/refund", "R1", "", now), http.StatusBadGateway, "")
		c.ledger = unreachableLedger(t)
		c.rebuild()
		expect(t, "refund with the ledger down", c.send("refund 503", "/payments/K1/refund", "R1", "", now), http.StatusServiceUnavailable, "")
		expect(t, "resolve with the ledger down", c.send("resolve 503", "/payments/K1/resolve", "", "", now), http.StatusServiceUnavailable, "")
	})

	var rows []string
	for r, s := range seen {
		rows = append(rows, fmt.Sprintf("%d %s", s, r))
	}
	sort.Strings(rows)
	t.Logf("%d rows checked against the spec:\n%s", len(rows), strings.Join(rows, "\n"))
}
