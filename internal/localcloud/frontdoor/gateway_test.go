package frontdoor_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncepay/oncepay/internal/apispec"
	"github.com/oncepay/oncepay/internal/clock"
	"github.com/oncepay/oncepay/internal/localcloud/frontdoor"
	"github.com/oncepay/oncepay/internal/localcloud/invoke"
)

// The logical ids of the fixture's functions (testdata/httpapi.template.json
// is the HTTP API part of cdk.out/Oncepay.template.json).
const (
	apiFn     = "ApiFunction52E267E3"
	webhookFn = "WebhookFunction6FF7199F"
	fixture   = "testdata/httpapi.template.json"
)

var (
	secret = []byte("gateway-test-secret")
	quiet  = slog.New(slog.NewJSONHandler(io.Discard, nil))
)

// recorder is an invoke.Func handler that keeps the events it got and
// answers with reply.
type recorder struct {
	mu     sync.Mutex
	events []events.APIGatewayV2HTTPRequest
	reply  func(e events.APIGatewayV2HTTPRequest) ([]byte, error)
}

func (rc *recorder) handle(_ context.Context, payload []byte) ([]byte, error) {
	var e events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(payload, &e); err != nil {
		return nil, err
	}
	rc.mu.Lock()
	rc.events = append(rc.events, e)
	rc.mu.Unlock()
	if rc.reply != nil {
		return rc.reply(e)
	}
	return []byte(`{"statusCode":200,"headers":{"Content-Type":"application/json"},"body":"{\"ok\":true}"}`), nil
}

func (rc *recorder) calls() []events.APIGatewayV2HTTPRequest {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]events.APIGatewayV2HTTPRequest(nil), rc.events...)
}

// door serves the fixture's routes over real HTTP with api and webhook as
// the two functions.
func door(t *testing.T, api, webhook *recorder, opts ...frontdoor.Option) *httptest.Server {
	t.Helper()
	inv := invoke.Func{apiFn: api.handle, webhookFn: webhook.handle}
	g, err := frontdoor.FromTemplate(fixture, inv, secret, append([]frontdoor.Option{frontdoor.WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return srv
}

func token(t *testing.T, caller string) string {
	t.Helper()
	tok, err := frontdoor.Mint(secret, caller, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type answer struct {
	status int
	header http.Header
	body   string
}

func send(t *testing.T, srv *httptest.Server, method, path string, body []byte, hdr map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, string(b)}
}

func TestTheTemplatesRoutesAreLoadedWithTheirFunctionsAndAuthorizers(t *testing.T) {
	routes, err := frontdoor.LoadRoutes(fixture)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]frontdoor.Route{}
	for _, r := range routes {
		got[r.Key] = r
	}
	want := map[string]struct {
		fn  string
		jwt bool
	}{
		"POST /payments":               {apiFn, true},
		"POST /payments/{key}/resolve": {apiFn, true},
		"POST /payments/{key}/refund":  {apiFn, true},
		"POST /webhooks/psp":           {webhookFn, false},
		"PUT /devices/{device_id}":     {"DevicesFunction7CB93F7E", true},
		"DELETE /devices/{device_id}":  {"DevicesFunction7CB93F7E", true},
	}
	if len(got) != len(want) {
		t.Fatalf("routes %v, want %v", got, want)
	}
	for key, w := range want {
		r, ok := got[key]
		if !ok || r.Function != w.fn || r.JWT != w.jwt || r.Timeout != 30*time.Second {
			t.Errorf("%s: %+v, want function %s jwt %v timeout 30s", key, r, w.fn, w.jwt)
		}
		// The webhook route has its own settings (RouteSettings), below
		// the stage's default.
		rate, burst := 50.0, 100
		if !w.jwt {
			rate, burst = 10, 10
		}
		if r.ThrottleRate != rate || r.ThrottleBurst != burst {
			t.Errorf("%s: throttle %v/%d, want %v/%d", key, r.ThrottleRate, r.ThrottleBurst, rate, burst)
		}
	}
}

// Each route reaches its own function with the event API Gateway builds:
// the route key as the template spells it, the path decoded once, path
// and query parameters, headers lowercased with repeats comma-joined,
// cookies in their own field, the arrival stamp, the JWT's claims on JWT
// routes and no authorizer at all on the webhook's NONE route.
func TestEachRouteInvokesItsFunctionWithTheGatewaysEvent(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 345_000_000, time.UTC)
	api, webhook := &recorder{}, &recorder{}
	srv := door(t, api, webhook, frontdoor.WithClock(clock.NewFake(at)))
	tok := token(t, "u1")

	a := send(t, srv, "POST", "/payments/K%7E1/resolve?x=1&x=2&y=%20z", []byte(`{"a":1}`), map[string]string{
		"Authorization": "Bearer " + tok, "Content-Type": "application/json", "X-Caller": "u2",
		"Cookie": "c1=v1; c2=v2", "User-Agent": "gateway-test/1",
	})
	if a.status != 200 || a.body != `{"ok":true}` || a.header.Get("Content-Type") != "application/json" {
		t.Fatalf("answer %+v", a)
	}
	calls := api.calls()
	if len(calls) != 1 || len(webhook.calls()) != 0 {
		t.Fatalf("api ran %d times, webhook %d", len(calls), len(webhook.calls()))
	}
	e := calls[0]
	rc := e.RequestContext
	switch {
	case e.Version != "2.0", e.RouteKey != "POST /payments/{key}/resolve", rc.RouteKey != e.RouteKey:
		t.Errorf("version %q route key %q/%q", e.Version, e.RouteKey, rc.RouteKey)
	case e.RawPath != "/payments/K~1/resolve", rc.HTTP.Path != e.RawPath:
		t.Errorf("rawPath %q http.path %q", e.RawPath, rc.HTTP.Path)
	case e.PathParameters["key"] != "K~1":
		t.Errorf("pathParameters %v", e.PathParameters)
	case e.RawQueryString != "x=1&x=2&y=%20z", e.QueryStringParameters["x"] != "1,2", e.QueryStringParameters["y"] != " z":
		t.Errorf("query %q %v", e.RawQueryString, e.QueryStringParameters)
	case e.Body != `{"a":1}`, e.IsBase64Encoded:
		t.Errorf("body %q base64 %v", e.Body, e.IsBase64Encoded)
	case e.Headers["content-type"] != "application/json", e.Headers["x-caller"] != "u2", e.Headers["authorization"] != "Bearer "+tok:
		t.Errorf("headers %v", e.Headers)
	case e.Headers["cookie"] != "", strings.Join(e.Cookies, "|") != "c1=v1|c2=v2":
		t.Errorf("cookies %v, cookie header %q", e.Cookies, e.Headers["cookie"])
	case rc.TimeEpoch != at.UnixMilli(), rc.Time != "01/Dec/2026:12:00:00 +0000":
		t.Errorf("time %q epoch %d", rc.Time, rc.TimeEpoch)
	case rc.HTTP.Method != "POST", rc.HTTP.SourceIP != "127.0.0.1", rc.HTTP.UserAgent != "gateway-test/1", rc.HTTP.Protocol != "HTTP/1.1":
		t.Errorf("http %+v", rc.HTTP)
	case rc.Stage != "$default", rc.RequestID == "", rc.RequestID != a.header.Get("Apigw-Requestid"):
		t.Errorf("stage %q request id %q (header %q)", rc.Stage, rc.RequestID, a.header.Get("Apigw-Requestid"))
	case rc.Authorizer == nil || rc.Authorizer.JWT == nil || rc.Authorizer.JWT.Claims["sub"] != "u1" || rc.Authorizer.JWT.Claims["iss"] != frontdoor.Issuer:
		t.Errorf("authorizer %+v", rc.Authorizer)
	}

	// The webhook route takes no token and passes no authorizer context,
	// even when the sender presents a caller's token.
	for _, auth := range []string{"", "Bearer " + tok} {
		hdr := map[string]string{"Content-Type": "application/json; charset=utf-8", "Stripe-Signature": "t=1,v1=00"}
		if auth != "" {
			hdr["Authorization"] = auth
		}
		if a := send(t, srv, "POST", "/webhooks/psp", []byte(`{"id":"evt_1"}`), hdr); a.status != 200 {
			t.Fatalf("webhook (auth %q): %+v", auth, a)
		}
	}
	wh := webhook.calls()
	if len(wh) != 2 {
		t.Fatalf("webhook ran %d times", len(wh))
	}
	for _, e := range wh {
		if e.RouteKey != "POST /webhooks/psp" || e.RequestContext.Authorizer != nil || e.Body != `{"id":"evt_1"}` ||
			e.IsBase64Encoded || e.Headers["stripe-signature"] != "t=1,v1=00" {
			t.Errorf("webhook event %+v", e)
		}
	}
}

// HTTP API passes a body as text only for text/*, JSON, XML and
// JavaScript; everything else, a missing content type included, comes
// base64-encoded with isBase64Encoded.
func TestANonTextBodyReachesTheFunctionBase64Encoded(t *testing.T) {
	api := &recorder{}
	srv := door(t, api, &recorder{})
	raw, text := []byte{0x00, 0xff, 'k', 0x80}, []byte(`{"café":"ok"}`)
	for _, c := range []struct {
		contentType string
		text        bool
	}{
		{"application/json", true},
		{"application/json; charset=utf-8", true},
		{"text/plain", true},
		{"application/octet-stream", false},
		{"application/x-www-form-urlencoded", false},
		{"", false},
	} {
		hdr := map[string]string{"Authorization": "Bearer " + token(t, "u1")}
		if c.contentType != "" {
			hdr["Content-Type"] = c.contentType
		}
		body := raw
		if c.text {
			body = text
		}
		send(t, srv, "POST", "/payments", body, hdr)
		calls := api.calls()
		e := calls[len(calls)-1]
		if c.text {
			if e.IsBase64Encoded || e.Body != string(text) {
				t.Errorf("%q: base64 %v body %q, want the text", c.contentType, e.IsBase64Encoded, e.Body)
			}
			continue
		}
		if got, err := base64.StdEncoding.DecodeString(e.Body); !e.IsBase64Encoded || err != nil || !bytes.Equal(got, raw) {
			t.Errorf("%q: base64 %v body %q, want the bytes base64-encoded", c.contentType, e.IsBase64Encoded, e.Body)
		}
	}
	// No body: no body field, not base64.
	send(t, srv, "POST", "/payments", nil, map[string]string{"Authorization": "Bearer " + token(t, "u1")})
	calls := api.calls()
	if e := calls[len(calls)-1]; e.Body != "" || e.IsBase64Encoded {
		t.Errorf("empty body: %q base64 %v", e.Body, e.IsBase64Encoded)
	}
}

// What the gateway answers by itself, with the function never invoked:
// no route, no valid token on a JWT route, a body over 10 MB.
func TestTheGatewaysOwnAnswersNeverReachTheFunction(t *testing.T) {
	api, webhook := &recorder{}, &recorder{}
	srv := door(t, api, webhook)
	tok := token(t, "u1")
	expired, _ := frontdoor.Mint(secret, "u1", time.Minute, time.Now().Add(-time.Hour))
	foreign, _ := frontdoor.Mint([]byte("another key"), "u1", time.Hour, time.Now())
	bearer := map[string]string{"Authorization": "Bearer " + tok}
	for _, c := range []struct {
		name, method, path string
		hdr                map[string]string
		body               []byte
		status             int
		body0              string
	}{
		{"no such path", "POST", "/nope", bearer, nil, 404, `{"message":"Not Found"}`},
		{"another method", "GET", "/payments", bearer, nil, 404, `{"message":"Not Found"}`},
		{"a trailing slash", "POST", "/payments/", bearer, nil, 404, `{"message":"Not Found"}`},
		{"no key", "POST", "/payments//resolve", bearer, nil, 404, `{"message":"Not Found"}`},
		{"a %2F splits the key", "POST", "/payments/a%2Fb/resolve", bearer, nil, 404, `{"message":"Not Found"}`},
		{"a %3F ends the path", "POST", "/payments/a%3Fb/resolve", bearer, nil, 404, `{"message":"Not Found"}`},
		{"no token", "POST", "/payments", nil, nil, 401, `{"message":"Unauthorized"}`},
		{"not a bearer token", "POST", "/payments", map[string]string{"Authorization": "Basic dTE6eA=="}, nil, 401, `{"message":"Unauthorized"}`},
		{"expired token", "POST", "/payments", map[string]string{"Authorization": "Bearer " + expired}, nil, 401, `{"message":"Unauthorized"}`},
		{"token of another key", "POST", "/payments", map[string]string{"Authorization": "Bearer " + foreign}, nil, 401, `{"message":"Unauthorized"}`},
		{"a caller header is no token", "POST", "/payments", map[string]string{"X-Caller": "u1"}, nil, 401, `{"message":"Unauthorized"}`},
		{"body over 10 MB", "POST", "/webhooks/psp", nil, make([]byte, frontdoor.MaxGatewayBody+1), 413, `{"message":"Request Entity Too Large"}`},
	} {
		a := send(t, srv, c.method, c.path, c.body, c.hdr)
		if a.status != c.status || a.body != c.body0 || a.header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %q %q, want %d %q", c.name, a.status, a.header.Get("Content-Type"), a.body, c.status, c.body0)
		}
		if c.status == 401 && !strings.HasPrefix(a.header.Get("Www-Authenticate"), "Bearer") {
			t.Errorf("%s: WWW-Authenticate %q", c.name, a.header.Get("Www-Authenticate"))
		}
	}
	if n, m := len(api.calls()), len(webhook.calls()); n+m != 0 {
		t.Fatalf("the functions ran %d+%d times; none of these requests may reach them", n, m)
	}
	// Exactly 10 MB is within the limit.
	if a := send(t, srv, "POST", "/webhooks/psp", make([]byte, frontdoor.MaxGatewayBody), nil); a.status != 200 || len(webhook.calls()) != 1 {
		t.Fatalf("a 10 MB body: %d, webhook ran %d times", a.status, len(webhook.calls()))
	}
}

// The local front door serves the HTTP contract (internal/apispec) without
// a token; it reaches no function.
func TestTheFrontDoorServesTheOpenAPIDocument(t *testing.T) {
	api, webhook := &recorder{}, &recorder{}
	srv := door(t, api, webhook)
	a := send(t, srv, "GET", apispec.Path, nil, nil)
	if a.status != 200 || a.header.Get("Content-Type") != "application/yaml" || a.body != string(apispec.YAML) {
		t.Fatalf("GET %s: %d %q, %d bytes", apispec.Path, a.status, a.header.Get("Content-Type"), len(a.body))
	}
	if !strings.HasPrefix(a.body, "openapi: 3.1") {
		t.Fatalf("not an OpenAPI 3.1 document: %.40q", a.body)
	}
	if n, m := len(api.calls()), len(webhook.calls()); n+m != 0 {
		t.Fatalf("the functions ran %d+%d times", n, m)
	}
}

// A function that failed, a throttled invocation and an answer that is not
// a response object are all 500 {"message":"Internal Server Error"}, as
// HTTP API answers them; nothing of the function's error reaches the client.
func TestFunctionFailuresAreTheGatewaysInternalServerError(t *testing.T) {
	for _, c := range []struct {
		name  string
		reply func(events.APIGatewayV2HTTPRequest) ([]byte, error)
	}{
		{"the handler failed", func(events.APIGatewayV2HTTPRequest) ([]byte, error) {
			return nil, &invoke.FunctionError{Function: apiFn, Type: "Runtime.ExitError", Message: "secret detail"}
		}},
		{"throttled", func(events.APIGatewayV2HTTPRequest) ([]byte, error) { return nil, invoke.ErrThrottled }},
		{"the runner failed", func(events.APIGatewayV2HTTPRequest) ([]byte, error) { return nil, errors.New("secret detail") }},
		{"not JSON", func(events.APIGatewayV2HTTPRequest) ([]byte, error) { return []byte(`<html>`), nil }},
		{"statusCode 0", func(events.APIGatewayV2HTTPRequest) ([]byte, error) {
			return []byte(`{"statusCode":0,"body":"x"}`), nil
		}},
		{"statusCode 600", func(events.APIGatewayV2HTTPRequest) ([]byte, error) { return []byte(`{"statusCode":600}`), nil }},
		{"statusCode a string", func(events.APIGatewayV2HTTPRequest) ([]byte, error) { return []byte(`{"statusCode":"200"}`), nil }},
		{"body an object", func(events.APIGatewayV2HTTPRequest) ([]byte, error) {
			return []byte(`{"statusCode":200,"body":{"a":1}}`), nil
		}},
		{"base64 that is not", func(events.APIGatewayV2HTTPRequest) ([]byte, error) {
			return []byte(`{"statusCode":200,"body":"***","isBase64Encoded":true}`), nil
		}},
	} {
		api := &recorder{reply: c.reply}
		srv := door(t, api, &recorder{})
		a := send(t, srv, "POST", "/payments", []byte(`{}`), map[string]string{"Authorization": "Bearer " + token(t, "u1")})
		if a.status != 500 || a.body != `{"message":"Internal Server Error"}` || a.header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %q", c.name, a.status, a.body)
		}
		if strings.Contains(a.body, "secret") {
			t.Errorf("%s: the function's error reached the client", c.name)
		}
	}
}

// The function's response object is mapped back field by field; a payload
// that is not a response object becomes the body of a 200 application/json,
// as the 2.0 format infers it.
func TestTheFunctionsResponseIsMappedBackAsThe20FormatSays(t *testing.T) {
	for _, c := range []struct {
		name, payload string
		status        int
		header        http.Header
		cookies       []string
		body          string
	}{
		{"a response object", `{"statusCode":201,"headers":{"Idempotent-Replayed":"true","Content-Type":"application/json"},"body":"{\"id\":1}"}`,
			201, http.Header{"Idempotent-Replayed": {"true"}, "Content-Type": {"application/json"}}, nil, `{"id":1}`},
		{"multi-value headers and cookies", `{"statusCode":200,"headers":{"X-A":"1"},"multiValueHeaders":{"X-B":["2","3"]},"cookies":["a=1; Path=/","b=2"],"body":""}`,
			200, http.Header{"X-A": {"1"}, "X-B": {"2", "3"}}, []string{"a=1; Path=/", "b=2"}, ""},
		{"a base64 body", `{"statusCode":200,"headers":{"Content-Type":"application/octet-stream"},"body":"AP9r","isBase64Encoded":true}`,
			200, http.Header{"Content-Type": {"application/octet-stream"}}, nil, "\x00\xffk"},
		{"what aws-lambda-go marshals", `{"statusCode":409,"headers":{"Retry-After":"1"},"multiValueHeaders":null,"body":"busy","cookies":null}`,
			409, http.Header{"Retry-After": {"1"}}, nil, "busy"},
		{"a JSON string", `"Hello from Lambda!"`, 200, http.Header{"Content-Type": {"application/json"}}, nil, `"Hello from Lambda!"`},
		{"an object without statusCode", `{"message":"Hello"}`, 200, http.Header{"Content-Type": {"application/json"}}, nil, `{"message":"Hello"}`},
		{"null", `null`, 200, http.Header{"Content-Type": {"application/json"}}, nil, `null`},
	} {
		api := &recorder{reply: func(events.APIGatewayV2HTTPRequest) ([]byte, error) { return []byte(c.payload), nil }}
		srv := door(t, api, &recorder{})
		a := send(t, srv, "POST", "/payments", nil, map[string]string{"Authorization": "Bearer " + token(t, "u1")})
		if a.status != c.status || a.body != c.body {
			t.Errorf("%s: %d %q, want %d %q", c.name, a.status, a.body, c.status, c.body)
		}
		for k, vs := range c.header {
			if got := a.header.Values(k); strings.Join(got, "|") != strings.Join(vs, "|") {
				t.Errorf("%s: header %s = %v, want %v", c.name, k, got, vs)
			}
		}
		if got := a.header.Values("Set-Cookie"); strings.Join(got, "|") != strings.Join(c.cookies, "|") {
			t.Errorf("%s: Set-Cookie %v, want %v", c.name, got, c.cookies)
		}
		if c.header.Get("Content-Type") == "" && a.header.Get("Content-Type") != "" {
			t.Errorf("%s: Content-Type %q appeared; the function set none", c.name, a.header.Get("Content-Type"))
		}
	}
}

// API Gateway does not cancel an invocation when the client hangs up: a
// payment whose client gave up still runs to its end (and its answer is
// saved for the retry).
func TestAClientThatHangsUpDoesNotCancelTheFunction(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	ctxErr := make(chan error, 1)
	inv := invoke.Func{apiFn: func(ctx context.Context, _ []byte) ([]byte, error) {
		close(started)
		<-release
		ctxErr <- ctx.Err()
		return []byte(`{"statusCode":201,"body":""}`), nil
	}, webhookFn: (&recorder{}).handle}
	g, err := frontdoor.FromTemplate(fixture, inv, secret, frontdoor.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/payments", nil)
	req.Header.Set("Authorization", "Bearer "+token(t, "u1"))
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	cancel()
	time.Sleep(100 * time.Millisecond) // the server sees the connection close
	close(release)
	if err := <-ctxErr; err != nil {
		t.Fatalf("the function's context was cancelled when the client left: %v", err)
	}
}

// A function slower than the integration timeout (30 s at most) gets 503
// {"message":"Service Unavailable"}, as HTTP API answers it.
func TestAFunctionSlowerThanTheIntegrationTimeoutIs503(t *testing.T) {
	routes, err := frontdoor.LoadRoutes(fixture)
	if err != nil {
		t.Fatal(err)
	}
	for i := range routes {
		routes[i].Timeout = 50 * time.Millisecond
	}
	release := make(chan struct{})
	defer close(release)
	inv := invoke.Func{apiFn: func(context.Context, []byte) ([]byte, error) {
		<-release
		return []byte(`{"statusCode":201}`), nil
	}}
	g, err := frontdoor.NewGateway(routes, inv, secret, frontdoor.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	defer srv.Close()
	a := send(t, srv, "POST", "/payments", nil, map[string]string{"Authorization": "Bearer " + token(t, "u1")})
	if a.status != 503 || a.body != `{"message":"Service Unavailable"}` {
		t.Fatalf("%d %q", a.status, a.body)
	}
}

// Each route has the stage's token bucket: past its burst the gateway
// answers 429 {"message":"Too Many Requests"} and the function does not run.
func TestARoutePastItsThrottleIs429(t *testing.T) {
	routes, err := frontdoor.LoadRoutes(fixture)
	if err != nil {
		t.Fatal(err)
	}
	for i := range routes {
		routes[i].ThrottleRate, routes[i].ThrottleBurst = 0.001, 2
	}
	api, webhook := &recorder{}, &recorder{}
	mk := func(opts ...frontdoor.Option) *httptest.Server {
		g, err := frontdoor.NewGateway(routes, invoke.Func{apiFn: api.handle, webhookFn: webhook.handle}, secret,
			append([]frontdoor.Option{frontdoor.WithLogger(quiet)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(g)
		t.Cleanup(srv.Close)
		return srv
	}
	srv := mk()
	bearer := map[string]string{"Authorization": "Bearer " + token(t, "u1")}
	var statuses []int
	for range 3 {
		statuses = append(statuses, send(t, srv, "POST", "/payments", nil, bearer).status)
	}
	if a := send(t, srv, "POST", "/payments", nil, bearer); a.status != 429 || a.body != `{"message":"Too Many Requests"}` {
		t.Fatalf("past the burst: %d %q", a.status, a.body)
	}
	if statuses[0] != 200 || statuses[1] != 200 || statuses[2] != 429 || len(api.calls()) != 2 {
		t.Fatalf("statuses %v, api ran %d times", statuses, len(api.calls()))
	}
	// The webhook route has a bucket of its own.
	if a := send(t, srv, "POST", "/webhooks/psp", nil, nil); a.status != 200 {
		t.Fatalf("webhook after the api's bucket ran dry: %d", a.status)
	}
	free := mk(frontdoor.WithoutThrottling())
	for range 5 {
		if a := send(t, free, "POST", "/payments", nil, bearer); a.status != 200 {
			t.Fatalf("WithoutThrottling: %d", a.status)
		}
	}
}

// Among routes that all match, the most specific wins: literal segments
// over variables, variables over a greedy variable, a method over ANY, and
// $default only when nothing else matches.
func TestTheMostSpecificRouteIsSelected(t *testing.T) {
	tmpl := map[string]any{"Resources": map[string]any{
		"Fn":   map[string]any{"Type": "AWS::Lambda::Function"},
		"Api":  map[string]any{"Type": "AWS::ApiGatewayV2::Api"},
		"Intg": map[string]any{"Type": "AWS::ApiGatewayV2::Integration", "Properties": map[string]any{"ApiId": map[string]any{"Ref": "Api"}, "IntegrationType": "AWS_PROXY", "IntegrationUri": map[string]any{"Fn::GetAtt": []any{"Fn", "Arn"}}, "PayloadFormatVersion": "2.0"}},
	}}
	res := tmpl["Resources"].(map[string]any)
	for i, key := range []string{"GET /a/b", "GET /a/{x}", "ANY /a/{x}", "ANY /{proxy+}", "$default", "GET /a/{x}/c"} {
		res["R"+string(rune('0'+i))] = map[string]any{"Type": "AWS::ApiGatewayV2::Route", "Properties": map[string]any{
			"ApiId": map[string]any{"Ref": "Api"}, "RouteKey": key, "AuthorizationType": "NONE",
			"Target": map[string]any{"Fn::Join": []any{"", []any{"integrations/", map[string]any{"Ref": "Intg"}}}},
		}}
	}
	path := filepath.Join(t.TempDir(), "t.json")
	b, _ := json.Marshal(tmpl)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	rc := &recorder{}
	g, err := frontdoor.FromTemplate(path, invoke.Func{"Fn": rc.handle}, nil, frontdoor.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	defer srv.Close()
	for _, c := range []struct{ method, path, route, params string }{
		{"GET", "/a/b", "GET /a/b", ""},
		{"GET", "/a/z", "GET /a/{x}", "x=z"},
		{"POST", "/a/z", "ANY /a/{x}", "x=z"},
		{"GET", "/a/z/c", "GET /a/{x}/c", "x=z"},
		{"GET", "/a/z/d", "ANY /{proxy+}", "proxy=a/z/d"},
		{"DELETE", "/q", "ANY /{proxy+}", "proxy=q"},
		{"GET", "/", "$default", ""},
	} {
		send(t, srv, c.method, c.path, nil, nil)
		calls := rc.calls()
		e := calls[len(calls)-1]
		var params []string
		for k, v := range e.PathParameters {
			params = append(params, k+"="+v)
		}
		if e.RouteKey != c.route || strings.Join(params, ",") != c.params {
			t.Errorf("%s %s: route %q params %v, want %q %q", c.method, c.path, e.RouteKey, params, c.route, c.params)
		}
	}
}

// A template the front door cannot play as AWS would is refused when the
// door is built, not served differently.
func TestATemplateTheDoorCannotPlayIsRefused(t *testing.T) {
	base, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, from, to string }{
		{"payload format 1.0", `"PayloadFormatVersion": "2.0"`, `"PayloadFormatVersion": "1.0"`},
		{"an IAM-authorized route", `"AuthorizationType": "NONE"`, `"AuthorizationType": "AWS_IAM"`},
		{"a function not in the template", `"WebhookFunction6FF7199F",`, `"NoSuchFunction",`},
		{"a named stage", `"StageName": "$default"`, `"StageName": "prod"`},
	} {
		s := string(base)
		if !strings.Contains(s, c.from) {
			t.Fatalf("%s: fixture lacks %s", c.name, c.from)
		}
		path := filepath.Join(t.TempDir(), "t.json")
		if err := os.WriteFile(path, []byte(strings.Replace(s, c.from, c.to, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := frontdoor.FromTemplate(path, invoke.Func{}, secret); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}
