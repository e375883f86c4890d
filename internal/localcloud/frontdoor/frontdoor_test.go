package frontdoor

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncepay/oncepay/internal/clock"
)

var secret = []byte("test-secret")

func TestTokensNameTheirCallerAndNothingElseDoes(t *testing.T) {
	now := time.Now()
	tok, err := Mint(secret, "u1", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := Verify(secret, tok); err != nil || c != "u1" {
		t.Fatalf("Verify = %q, %v", c, err)
	}
	if _, err := Verify([]byte("other"), tok); err == nil {
		t.Fatal("a token signed with another key verified")
	}
	old, _ := Mint(secret, "u1", time.Minute, now.Add(-time.Hour))
	if _, err := Verify(secret, old); err == nil {
		t.Fatal("an expired token verified")
	}
	if _, err := Mint(secret, "", time.Hour, now); err == nil {
		t.Fatal("minted a token for nobody")
	}
}

func TestTheDoorStampsAuthenticatesAndBuildsTheGatewayEvent(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 20_000_000, time.UTC)
	var got events.APIGatewayV2HTTPRequest
	calls := 0
	s := &Server{Secret: secret, Clock: clock.NewFake(at), Invoke: func(_ context.Context, e events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		calls++
		got = e
		return events.APIGatewayV2HTTPResponse{StatusCode: 201, Headers: map[string]string{"Idempotent-Replayed": "true"}, Body: `{"ok":true}`}, nil
	}}
	tok, _ := Mint(secret, "u1", time.Hour, time.Now())
	req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"a":1}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Idempotency-Key", "K1")
	req.Header.Set("X-Caller", "u2") // a client naming itself another caller changes nothing
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != 201 || rec.Header().Get("Idempotent-Replayed") != "true" || rec.Body.String() != `{"ok":true}` {
		t.Fatalf("response %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	if got.RequestContext.Authorizer.JWT.Claims["sub"] != "u1" {
		t.Fatalf("caller = %q", got.RequestContext.Authorizer.JWT.Claims["sub"])
	}
	if got.RequestContext.TimeEpoch != at.UnixMilli() || got.RawPath != "/payments" || got.RequestContext.HTTP.Method != "POST" {
		t.Fatalf("event = %+v", got.RequestContext)
	}
	if got.Headers["idempotency-key"] != "K1" || got.Body != `{"a":1}` {
		t.Fatalf("headers %v body %q", got.Headers, got.Body)
	}
	if _, leaked := got.Headers["authorization"]; leaked {
		t.Fatal("the bearer token reached the handler")
	}

	for _, auth := range []string{"", "Bearer nonsense", "Basic dTE6eA=="} {
		req := httptest.NewRequest(http.MethodPost, "/payments", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != 401 || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("auth %q: %d", auth, rec.Code)
		}
	}
	if calls != 1 {
		t.Fatalf("the handler ran %d times; unauthenticated requests must not reach it", calls)
	}
}

// The door hands the handler the path as the HTTP API does: decoded once
// (a client's %7E is "~", its %2541 stays "%41"), cut at a decoded "?".
func TestTheDoorDecodesThePathOnceAsTheGatewayDoes(t *testing.T) {
	var got events.APIGatewayV2HTTPRequest
	s := &Server{Secret: secret, Invoke: func(_ context.Context, e events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		got = e
		return events.APIGatewayV2HTTPResponse{StatusCode: 200}, nil
	}}
	tok, _ := Mint(secret, "u1", time.Hour, time.Now())
	for sent, want := range map[string]string{
		"/payments/K~1/resolve":        "/payments/K~1/resolve",
		"/payments/K%7E1/resolve":      "/payments/K~1/resolve",
		"/payments/%4B%31/refund":      "/payments/K1/refund",
		"/payments/K%2541/resolve":     "/payments/K%41/resolve",
		"/payments/a%2Fb/resolve":      "/payments/a/b/resolve",
		"/payments/a%3Fb/resolve":      "/payments/a",
		"/payments/K1/resolve?x=%3F":   "/payments/K1/resolve",
		"/payments/K1/resolve%3Fx=%3F": "/payments/K1/resolve",
	} {
		req := httptest.NewRequest(http.MethodPost, sent, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		s.ServeHTTP(httptest.NewRecorder(), req)
		if got.RawPath != want || got.RequestContext.HTTP.Path != want {
			t.Errorf("%s: rawPath %q, http.path %q; want %q", sent, got.RawPath, got.RequestContext.HTTP.Path, want)
		}
	}
}
