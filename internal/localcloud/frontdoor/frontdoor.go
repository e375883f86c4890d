// Package frontdoor plays API Gateway's HTTP API locally: it authenticates
// the caller from a bearer token (the JWT authorizer's job), stamps the
// arrival time (requestContext.timeEpoch), builds the same payload-2.0 event
// API Gateway sends, and hands it to the function. No header lets a client
// name its caller: the caller is the verified token's subject.
//
// Two modes:
//
//   - Gateway (FromTemplate) serves every AWS::ApiGatewayV2::Route of the
//     synthesized template and invokes each route's integration through an
//     invoke.Invoker, by the function's logical id: the live stack's front
//     door. It answers what the gateway itself answers as HTTP API does (404
//     {"message":"Not Found"} for no route, 401 on a JWT route without a
//     valid token, 413 over 10 MB, 429 past the stage's route throttling, 500
//     {"message":"Internal Server Error"} for a failed, throttled or
//     malformed invocation, 503 past the integration timeout).
//   - Server hands every request to one in-process handler (the api's),
//     for the tests that drive the handler through a door.
//
// The path is the gateway's: HTTP API decodes the request path once before
// it matches routes and sends rawPath decoded (a %2F becomes a "/" that no
// {key} route matches; a decoded "?" ends the path). AWS does not document
// it; it is what deployed HTTP APIs are seen to send (captured events in,
// for example, fastify/aws-lambda-fastify#169).
package frontdoor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/golang-jwt/jwt/v5"

	"github.com/oncepay/oncepay/internal/clock"
)

// Issuer is the iss of local tokens.
const Issuer = "oncepay-local"

// MaxBody bounds what the front door reads; the handler enforces its own,
// smaller limit with a problem+json answer.
const MaxBody = 1 << 20

// Invoker is the function behind the door: the api Lambda's handler.
type Invoker func(ctx context.Context, e events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// Server is the local front door.
type Server struct {
	Invoke Invoker
	Secret []byte      // HMAC key of local tokens
	Clock  clock.Clock // nil: the system clock
}

// Mint returns a bearer token for caller, valid for ttl.
func Mint(secret []byte, caller string, ttl time.Duration, now time.Time) (string, error) {
	if caller == "" {
		return "", errors.New("frontdoor: empty caller")
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject: caller, Issuer: Issuer, IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	})
	s, err := tok.SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("frontdoor: sign: %w", err)
	}
	return s, nil
}

// Verify returns the caller a bearer token names, if its signature, issuer
// and expiry check out.
func Verify(secret []byte, token string) (string, error) {
	claims, err := verifyClaims(secret, token)
	if err != nil {
		return "", err
	}
	return claims.Subject, nil
}

// verifyClaims checks a token as Verify does and returns its claims.
func verifyClaims(secret []byte, token string) (jwt.RegisteredClaims, error) {
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer(Issuer), jwt.WithExpirationRequired())
	if err != nil {
		return claims, fmt.Errorf("frontdoor: token: %w", err)
	}
	if claims.Subject == "" {
		return claims, errors.New("frontdoor: token has no subject")
	}
	return claims, nil
}

// LoadOrCreateSecret reads the HMAC key at path, creating it if absent.
func LoadOrCreateSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return []byte(strings.TrimSpace(string(b))), nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("frontdoor: read key: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	key := hex.EncodeToString(raw)
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("frontdoor: write key: %w", err)
	}
	return []byte(key), nil
}

func (s *Server) now() time.Time {
	if s.Clock == nil {
		return time.Now()
	}
	return s.Clock.Now()
}

const unauthorized = `{"type":"https://oncepay.dev/problems/unauthorized","title":"Unauthorized","status":401,"detail":"A valid bearer token is required."}`

// ServeHTTP stamps, authenticates, builds the event and invokes the handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := s.now() // the stamp is taken first, as a load balancer's is
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	caller, err := Verify(s.Secret, strings.TrimSpace(token))
	if !ok || err != nil {
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("WWW-Authenticate", `Bearer realm="oncepay"`)
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, unauthorized)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	resp, err := s.Invoke(r.Context(), Event(r, body, caller, arrived))
	if err != nil {
		// API Gateway answers a failed invocation with 500 and this body.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"message":"Internal Server Error"}`)
		return
	}
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.WriteString(w, resp.Body)
}

// Event builds the payload-2.0 event API Gateway would send for r. Its
// path is the gateway's: decoded once (r.URL.Path) and cut at a decoded
// "?", as the HTTP API does, so a key's path form reads here exactly as it
// reads behind the deployed gateway.
func Event(r *http.Request, body []byte, caller string, arrived time.Time) events.APIGatewayV2HTTPRequest {
	path := r.URL.Path
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	headers := map[string]string{}
	for k, vs := range r.Header {
		if strings.EqualFold(k, "Authorization") {
			continue
		}
		headers[strings.ToLower(k)] = strings.Join(vs, ",")
	}
	reqID := make([]byte, 8)
	_, _ = rand.Read(reqID)
	return events.APIGatewayV2HTTPRequest{
		Version:        "2.0",
		RouteKey:       r.Method + " " + path,
		RawPath:        path,
		RawQueryString: r.URL.RawQuery,
		Headers:        headers,
		Body:           string(body),
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RequestID: hex.EncodeToString(reqID),
			Stage:     "$default",
			TimeEpoch: arrived.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method: r.Method, Path: path, Protocol: r.Proto, SourceIP: r.RemoteAddr, UserAgent: r.UserAgent(),
			},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{
					Claims: map[string]string{"sub": caller, "iss": Issuer},
				},
			},
		},
	}
}
