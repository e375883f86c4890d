package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/frontdoor"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

// reply is a front door's answer as the client sees it.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r reply) answer(t *testing.T) resolveAnswer {
	t.Helper()
	var a resolveAnswer
	if err := json.Unmarshal(r.Body, &a); err != nil {
		t.Fatalf("answer %d %q: %v", r.Status, r.Body, err)
	}
	return a
}

// problemField is the "field" of a problem+json answer.
func (r reply) problemField(t *testing.T) string {
	t.Helper()
	var p struct {
		Field string `json:"field"`
	}
	if err := json.Unmarshal(r.Body, &p); err != nil || r.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("answer %d %q is not problem+json: %v", r.Status, r.Body, err)
	}
	return p.Field
}

// frontDoor sends one request the way a client would through one of the
// api's front doors: rawPath is the path as the client spells it on the
// wire, key the Idempotency-Key header ("" for none).
type frontDoor struct {
	name string
	send func(t *testing.T, method, rawPath, caller, key, body string) reply
}

func keyHeader(key string) map[string]string {
	if key == "" {
		return nil
	}
	return map[string]string{"Idempotency-Key": key}
}

func fromMap(m map[string]string) http.Header {
	h := http.Header{}
	for k, v := range m {
		h.Set(k, v)
	}
	return h
}

// albDoor is the load balancer: the path reaches HandleALB still encoded.
func albDoor(w *worldtest.World) frontDoor {
	return frontDoor{name: "ALB", send: func(t *testing.T, method, rawPath, caller, key, body string) reply {
		t.Helper()
		e := apitest.ALBEvent(method, rawPath, caller, keyHeader(key), body, w.Clock.Now())
		r, err := w.API.HandleALB(context.Background(), e)
		if err != nil {
			t.Fatalf("ALB %s %s: %v", method, rawPath, err)
		}
		if want := fmt.Sprintf("%d %s", r.StatusCode, http.StatusText(r.StatusCode)); r.StatusDescription != want {
			t.Fatalf("ALB status line %q, want %q", r.StatusDescription, want)
		}
		return reply{Status: r.StatusCode, Header: fromMap(r.Headers), Body: []byte(r.Body)}
	}}
}

// httpAPIDoor is API Gateway's HTTP API: the gateway decodes the path before
// HandleAPIGatewayV2 sees it (and refuses a malformed escape itself).
func httpAPIDoor(w *worldtest.World) frontDoor {
	return frontDoor{name: "HTTP API", send: func(t *testing.T, method, rawPath, caller, key, body string) reply {
		t.Helper()
		e, err := apitest.HTTPAPIEvent(method, rawPath, caller, keyHeader(key), body, w.Clock.Now())
		if err != nil {
			return reply{Status: http.StatusBadRequest, Header: http.Header{}, Body: []byte(`{"message":"Bad Request"}`)}
		}
		r, err := w.API.HandleAPIGatewayV2(context.Background(), e)
		if err != nil {
			t.Fatalf("HTTP API %s %s: %v", method, rawPath, err)
		}
		return reply{Status: r.StatusCode, Header: fromMap(r.Headers), Body: []byte(r.Body)}
	}}
}

// localDoor is internal/frontdoor over real HTTP, on the world's clock.
func localDoor(t *testing.T, w *worldtest.World) frontDoor {
	secret := []byte("frontdoors-test")
	srv := httptest.NewServer(&frontdoor.Server{Invoke: w.API.HandleAPIGatewayV2, Secret: secret, Clock: w.Clock})
	t.Cleanup(srv.Close)
	return frontDoor{name: "local front door", send: func(t *testing.T, method, rawPath, caller, key, body string) reply {
		t.Helper()
		tok, err := frontdoor.Mint(secret, caller, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest(method, srv.URL+rawPath, strings.NewReader(body))
		if err != nil {
			t.Fatalf("request %s: %v", rawPath, err)
		}
		if req.URL.EscapedPath() != rawPath {
			t.Fatalf("the client would send %q, not %q", req.URL.EscapedPath(), rawPath)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, rawPath, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return reply{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}}
}

func allDoors(t *testing.T, w *worldtest.World) []frontDoor {
	return []frontDoor{httpAPIDoor(w), albDoor(w), localDoor(t, w)}
}

// percentEncoded spells every byte of s as %XX: a client's encoder may
// escape characters RFC 3986 says it need not, and it is still the same
// path segment.
func percentEncoded(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

// claimItems counts the key records in the world's claim table.
func claimItems(t *testing.T, w *worldtest.World) int32 {
	t.Helper()
	out, err := w.Dynamo.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(w.ClaimsTable), Select: types.SelectCount, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Count
}

// Issue 13, defect 1. The PSP charged but its reply was lost: the api
// answers 202 with Location /payments/{key}/resolve, and the app follows it
// through the load balancer — as the header names the key, or with some
// characters percent-encoded, as many encoders do (Java's URLEncoder writes
// "~" as %7E). The ALB passes the path still encoded; read as it came, the
// key was "K%7E1…", an empty scope, which resolve VOIDed and answered "not
// found, and it never will be" — and the app made a new key and paid again.
// Now every spelling reports the payment, and nothing is voided.
func TestALBLocationResolvesTheSamePayment(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	alb := albDoor(w)
	const key = "K~1.01ARZ3NDEKTSV4RRFFQ69G5FAV_x-y"
	pid := ids.PaymentID(ids.Scope("u1", key))
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.ChargeKey(pid)}, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
		t.Fatal(err)
	}
	paid := alb.send(t, http.MethodPost, "/payments", "u1", key, worldtest.Body3000)
	if paid.Status != http.StatusAccepted || paid.answer(t).PaymentID != pid {
		t.Fatalf("pay through the ALB = %d %s, want 202 for %s", paid.Status, paid.Body, pid)
	}
	loc := paid.Header.Get("Location")
	if loc != "/payments/"+key+"/resolve" {
		t.Fatalf("Location %q: the path form is not the key verbatim", loc)
	}
	spellings := []string{
		loc,
		strings.ReplaceAll(loc, "~", "%7E"),
		strings.ReplaceAll(loc, "~", "%7e"),
		"/payments/" + percentEncoded(key) + "/resolve",
	}
	for _, path := range spellings {
		r := alb.send(t, http.MethodPost, path, "u1", "", "")
		if a := r.answer(t); r.Status != http.StatusAccepted || a.State != "PROCESSING" || a.PaymentID != pid {
			t.Fatalf("resolve %s through the ALB = %d %s, want 202 PROCESSING of %s", path, r.Status, r.Body, pid)
		}
	}
	// The money: one charge, one row (UNKNOWN, never VOID), no other scope.
	if n := w.Charges(ids.ChargeKey(pid)); n != 1 || len(w.Sim.Charges()) != 1 {
		t.Fatalf("charges under %s = %d (all: %d), want 1", ids.ChargeKey(pid), n, len(w.Sim.Charges()))
	}
	if p := w.Row("u1", key); p.State != ledger.Unknown {
		t.Fatalf("payments row = %s, want UNKNOWN", p.State)
	}
	if n := w.Count(`SELECT count(*) FROM payments`); n != 1 {
		t.Fatalf("%d payments rows, want 1: a resolve through the ALB wrote another scope", n)
	}
	if rec, _ := w.Record("u1", key); rec.State == idem.Void {
		t.Fatal("the key record was voided")
	}
	if n := claimItems(t, w); n != 1 {
		t.Fatalf("%d key records, want 1", n)
	}

	// The resolver settles it; the same Location then reports the charge.
	w.Clock.Advance(10 * time.Second)
	if _, err := w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, path := range spellings {
		r := alb.send(t, http.MethodPost, path, "u1", "", "")
		if a := r.answer(t); r.Status != http.StatusCreated || a.State != "SUCCEEDED" || a.PSPCharge != w.Sim.Charges()[0].ID {
			t.Fatalf("resolve %s after the resolver = %d %s", path, r.Status, r.Body)
		}
	}
	if n := len(w.Sim.Charges()); n != 1 {
		t.Fatalf("charges = %d, want 1", n)
	}
}

// Issue 13, defect 1, the key from the report: "a b" was accepted, and its
// Location (/payments/a%20b/resolve) reached the handler as "a%20b" through
// the ALB — another scope, voided — or, for a key holding "/" or "?", could
// never match a route behind the HTTP API. Such a key is now refused at
// the door before anything is claimed or charged, so no Location is ever
// handed out that a front door cannot carry back.
func TestAKeyNoPathCanCarryIsRefusedBeforeTheCharge(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	for _, d := range allDoors(t, w) {
		for _, key := range []string{"a b", "a/b", "a?b", "a%20b"} {
			r := d.send(t, http.MethodPost, "/payments", "u1", key, worldtest.Body3000)
			if r.Status != http.StatusBadRequest || r.problemField(t) != payment.FieldKey {
				t.Fatalf("%s: pay under %q = %d %s, want 400 naming %s", d.name, key, r.Status, r.Body, payment.FieldKey)
			}
		}
	}
	if n := len(w.Sim.Charges()); n != 0 {
		t.Fatalf("the PSP charged %d times", n)
	}
	if n := w.Count(`SELECT count(*) FROM payments`); n != 0 {
		t.Fatalf("%d payments rows", n)
	}
	if n := claimItems(t, w); n != 0 {
		t.Fatalf("%d key records", n)
	}
}

// validKeys spans the whole alphabet: every byte of payment.KeyAlphabet,
// each punctuation mark alone and at either end, the longest key, case
// (K1 and k1 are two keys), and the usual key formats.
func validKeys() []string {
	long := strings.Repeat(payment.KeyAlphabet, 4)[:payment.MaxKeyLen]
	return []string{
		payment.KeyAlphabet, long,
		"-", "_", "~", "...", ".K", "K.", "~K~", "-_-",
		"K1", "k1",
		"0192f0c4-5b7e-7c1a-9d3e-2f4b8a6c1e07", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "q5kX-_w9Zg", "idem_1Nv0FGQ9RKHgCVdK",
	}
}

// Issue 13, defect 1: for every accepted key, the header form and the path
// form name one scope through every front door — the HTTP API (path
// decoded by the gateway), the ALB (path still encoded), and the local
// front door over HTTP — as the client spells the path, key verbatim or
// every byte percent-encoded: one payment, paid through one door, resolved
// through all three, refunded through another, the refund's repeat through
// the third; one charge and one refund per key, nothing voided.
func TestEveryAcceptedKeyNamesOneScopeThroughEveryFrontDoor(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	doors := allDoors(t, w)
	keys := validKeys()
	for i, key := range keys {
		pid := ids.PaymentID(ids.Scope("u1", key))
		paid := doors[i%3].send(t, http.MethodPost, "/payments", "u1", key, worldtest.Body3000)
		pa := paid.answer(t)
		if paid.Status != http.StatusCreated || pa.PaymentID != pid || pa.State != "SUCCEEDED" {
			t.Fatalf("%s: pay under %q = %d %s, want 201 for %s", doors[i%3].name, key, paid.Status, paid.Body, pid)
		}
		for _, d := range doors {
			for _, seg := range []string{key, percentEncoded(key)} {
				r := d.send(t, http.MethodPost, "/payments/"+seg+"/resolve", "u1", "", "")
				if r.Status != http.StatusCreated || string(r.Body) != string(paid.Body) {
					t.Fatalf("%s: resolve /payments/%s/resolve = %d %s, want the payment %s", d.name, seg, r.Status, r.Body, paid.Body)
				}
			}
		}
		refundKey := fmt.Sprintf("RK-%d", i)
		rf := doors[(i+1)%3].send(t, http.MethodPost, "/payments/"+key+"/refund", "u1", refundKey, "")
		ra := rf.answer(t)
		if rf.Status != http.StatusCreated || ra.PaymentID != pid || ra.State != "SUCCEEDED" {
			t.Fatalf("%s: refund of %q = %d %s", doors[(i+1)%3].name, key, rf.Status, rf.Body)
		}
		again := doors[(i+2)%3].send(t, http.MethodPost, "/payments/"+percentEncoded(key)+"/refund", "u1", refundKey, "")
		if again.Status != http.StatusCreated || string(again.Body) != string(rf.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("%s: refund repeat of %q = %d %s, want the replay of %s", doors[(i+2)%3].name, key, again.Status, again.Body, rf.Body)
		}
		if n := w.Charges(ids.ChargeKey(pid)); n != 1 {
			t.Fatalf("key %q: %d charges under %s", key, n, ids.ChargeKey(pid))
		}
	}
	if n := len(w.Sim.Charges()); n != len(keys) {
		t.Fatalf("charges = %d, want one per key (%d)", n, len(keys))
	}
	if n := len(w.Sim.Refunds()); n != len(keys) {
		t.Fatalf("refunds = %d, want one per key (%d)", n, len(keys))
	}
	if n := w.Count(`SELECT count(*) FROM payments WHERE state = 'SUCCEEDED'`); n != len(keys) {
		t.Fatalf("%d SUCCEEDED rows, want %d", n, len(keys))
	}
	if n := w.Count(`SELECT count(*) FROM payments`); n != len(keys) {
		t.Fatalf("%d payments rows, want %d: some path named another scope", n, len(keys))
	}
}

// A 202's Location, followed through each door, names the same payment.
func TestEveryDoorFollowsTheLocationOfA202(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	for i, d := range allDoors(t, w) {
		key := payment.KeyAlphabet[i:] // a different key per door, all of the alphabet's kinds
		pid := ids.PaymentID(ids.Scope("u1", key))
		if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.ChargeKey(pid)}, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
			t.Fatal(err)
		}
		paid := d.send(t, http.MethodPost, "/payments", "u1", key, worldtest.Body3000)
		if paid.Status != http.StatusAccepted || paid.Header.Get("Location") != "/payments/"+key+"/resolve" {
			t.Fatalf("%s: pay = %d Location %q", d.name, paid.Status, paid.Header.Get("Location"))
		}
		for _, e := range allDoors(t, w) {
			r := e.send(t, http.MethodPost, paid.Header.Get("Location"), "u1", "", "")
			if a := r.answer(t); r.Status != http.StatusAccepted || a.PaymentID != pid || a.State != "PROCESSING" {
				t.Fatalf("paid through %s, resolved through %s: %d %s", d.name, e.name, r.Status, r.Body)
			}
		}
	}
	if n := w.Count(`SELECT count(*) FROM payments WHERE state = 'VOID'`); n != 0 {
		t.Fatalf("%d VOID rows", n)
	}
	if n := len(w.Sim.Charges()); n != 3 {
		t.Fatalf("charges = %d, want 3", n)
	}
}

// Keys outside the alphabet get 400 on POST /payments (naming the header)
// and on the path (naming the key), through every door, and change
// nothing: no key record, no ledger row, no PSP call. A path with no key
// (/payments//resolve), or one the HTTP API cuts at a decoded "?", matches
// no route at all (404). A double-encoded
// spelling is decoded once, like every path, and so is not a valid key.
func TestKeysOutsideTheAlphabetAre400AndChangeNothing(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	keys := []string{
		"", " ", " K1", "K1 ", "a b", "a/b", "/", "a?b", "?", "a#b", "a%41", "a%b", "%", `"K1`, `"K1";a=1`, ` "K1"`, `K"1`,
		".", "..", "a+b", "K:1", "K@1", "K;1", "K=1", "K,1", "K!1", "K*1", "K'1", "K(1)", "K$1", "K&1",
		"é", "K\x7f1", strings.Repeat("k", payment.MaxKeyLen+1),
	}
	for _, d := range allDoors(t, w) {
		for _, key := range keys {
			// HTTP strips whitespace around a field value (every door does), so
			// " K1" in a header is the key K1; and net/http refuses to send DEL.
			if key != "" && strings.TrimSpace(key) == key && !strings.Contains(key, "\x7f") {
				r := d.send(t, http.MethodPost, "/payments", "u1", key, worldtest.Body3000)
				if r.Status != http.StatusBadRequest || r.problemField(t) != payment.FieldKey {
					t.Fatalf("%s: pay under %q = %d %s, want 400 naming %s", d.name, key, r.Status, r.Body, payment.FieldKey)
				}
			}
			for _, action := range []string{"resolve", "refund"} {
				paths := []string{"/payments/" + url.PathEscape(key) + "/" + action}
				if key != "" {
					paths = append(paths, "/payments/"+percentEncoded(key)+"/"+action)
				}
				for _, path := range paths {
					r := d.send(t, http.MethodPost, path, "u1", "RK1", "")
					want := http.StatusBadRequest
					switch {
					case key == "":
						want = http.StatusNotFound // /payments//resolve names no key: no route
					case d.name != "ALB" && strings.Contains(key, "?"):
						want = http.StatusNotFound // the gateway cut the path at the "?"
					}
					if r.Status != want {
						t.Fatalf("%s: %s = %d %s, want %d", d.name, path, r.Status, r.Body, want)
					}
					if want == http.StatusBadRequest && r.problemField(t) != "key" {
						t.Fatalf("%s: %s: 400 names %q, want the key", d.name, path, r.problemField(t))
					}
				}
			}
		}
		for _, path := range []string{"/payments/K%25311/resolve", "/payments/K1%252F/resolve"} {
			if r := d.send(t, http.MethodPost, path, "u1", "", ""); r.Status != http.StatusBadRequest {
				t.Fatalf("%s: %s (double-encoded) = %d %s, want 400", d.name, path, r.Status, r.Body)
			}
		}
	}
	if r := albDoor(w).send(t, http.MethodPost, "/payments/K%zz1/resolve", "u1", "", ""); r.Status != http.StatusBadRequest || r.problemField(t) != "path" {
		t.Fatalf("ALB: a malformed escape = %d %s, want 400 naming the path", r.Status, r.Body)
	}
	if n := len(w.Sim.Charges()); n != 0 {
		t.Fatalf("the PSP charged %d times", n)
	}
	if n := w.Count(`SELECT count(*) FROM payments`); n != 0 {
		t.Fatalf("%d payments rows", n)
	}
	if n := w.Count(`SELECT count(*) FROM refunds`); n != 0 {
		t.Fatalf("%d refund rows", n)
	}
	if n := claimItems(t, w); n != 0 {
		t.Fatalf("%d key records", n)
	}
}
