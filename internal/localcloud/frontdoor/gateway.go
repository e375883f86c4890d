package frontdoor

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"golang.org/x/time/rate"

	"github.com/oncepay/oncepay/internal/apispec"
	"github.com/oncepay/oncepay/internal/clock"
	"github.com/oncepay/oncepay/internal/localcloud/invoke"
	"github.com/oncepay/oncepay/internal/localcloud/provision"
)

// MaxGatewayBody is HTTP API's request payload limit (10 MB): a larger body
// is answered 413 before any function runs.
const MaxGatewayBody = 10 << 20

// The gateway's own answers, byte for byte as HTTP API sends them.
const (
	bodyNotFound      = `{"message":"Not Found"}`
	bodyUnauthorized  = `{"message":"Unauthorized"}`
	bodyInternalError = `{"message":"Internal Server Error"}`
	bodyUnavailable   = `{"message":"Service Unavailable"}`
	bodyTooMany       = `{"message":"Too Many Requests"}`
	bodyTooLarge      = `{"message":"Request Entity Too Large"}`
)

// Gateway plays the template's HTTP API: every AWS::ApiGatewayV2::Route,
// each invoking its integration's function through an invoke.Invoker with
// the payload-2.0 event API Gateway builds, and the function's answer
// mapped back as API Gateway maps it. It is safe for concurrent use.
type Gateway struct {
	routes   []Route
	limiters []*rate.Limiter // per route; nil: not throttled
	inv      invoke.Invoker
	secret   []byte
	clock    clock.Clock
	log      *slog.Logger
	account  string
	apiID    string
}

// Option configures a Gateway.
type Option func(*Gateway)

// WithClock sets the clock that stamps arrivals (default the system clock).
func WithClock(c clock.Clock) Option { return func(g *Gateway) { g.clock = c } }

// WithLogger sets the logger of the gateway's access lines (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(g *Gateway) { g.log = l } }

// WithoutThrottling turns the stage's route throttling off (by default each
// route gets the template's ThrottlingRateLimit/ThrottlingBurstLimit token
// bucket and answers 429 past it, as API Gateway does).
func WithoutThrottling() Option { return func(g *Gateway) { g.limiters = nil } }

// WithAccountID sets requestContext.accountId (default provision.AccountID,
// the account moto reports).
func WithAccountID(id string) Option { return func(g *Gateway) { g.account = id } }

// FromTemplate builds the front door for the synthesized template at
// templatePath: the routes it declares, invoked through inv, JWT routes
// authenticated with local tokens signed by secret (Mint). A template the
// front door cannot play as AWS would (see LoadRoutes) is an error.
func FromTemplate(templatePath string, inv invoke.Invoker, secret []byte, opts ...Option) (*Gateway, error) {
	routes, err := LoadRoutes(templatePath)
	if err != nil {
		return nil, err
	}
	return NewGateway(routes, inv, secret, opts...)
}

// NewGateway builds the front door for routes (LoadRoutes).
func NewGateway(routes []Route, inv invoke.Invoker, secret []byte, opts ...Option) (*Gateway, error) {
	if inv == nil {
		return nil, errors.New("frontdoor: nil invoker")
	}
	for _, r := range routes {
		if r.JWT && len(secret) == 0 {
			return nil, fmt.Errorf("frontdoor: route %s needs a JWT and there is no token key", r.Key)
		}
	}
	g := &Gateway{routes: routes, inv: inv, secret: secret, clock: clock.System{}, log: slog.Default(), account: provision.AccountID}
	g.limiters = make([]*rate.Limiter, len(routes))
	for i, r := range routes {
		if r.ThrottleRate > 0 || r.ThrottleBurst > 0 {
			g.limiters[i] = rate.NewLimiter(rate.Limit(r.ThrottleRate), r.ThrottleBurst)
		}
	}
	sum := sha256.Sum256([]byte(strings.Join(routeKeys(routes), "\n")))
	g.apiID = strings.ToLower(base32hex(sum[:])[:10])
	for _, o := range opts {
		o(g)
	}
	g.log = g.log.With("scope", "frontdoor")
	return g, nil
}

// Routes returns the routes served.
func (g *Gateway) Routes() []Route { return append([]Route(nil), g.routes...) }

func routeKeys(rs []Route) []string {
	keys := make([]string, len(rs))
	for i, r := range rs {
		keys[i] = r.Key
	}
	sort.Strings(keys)
	return keys
}

// ServeHTTP stamps the arrival, selects the route, authenticates JWT
// routes, invokes the route's function and maps its answer back.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := g.clock.Now() // first, as the gateway's own stamp is
	reqID := requestID()
	w.Header().Set("Apigw-Requestid", reqID)
	log := g.log.With("request_id", reqID, "method", r.Method)

	path := gatewayPath(r)
	if r.Method == http.MethodGet && path == apispec.Path {
		// The HTTP contract, for a client generator or a reader: local only
		// (the deployed HTTP API routes nothing but the payment routes).
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(apispec.YAML)
		return
	}
	i, params := g.selectRoute(r.Method, path)
	if i < 0 {
		log.Info("no route", "path", path)
		gatewayAnswer(w, http.StatusNotFound, bodyNotFound)
		return
	}
	route := &g.routes[i]
	log = log.With("route_key", route.Key, "function_id", route.Function)
	if l := g.limiters; l != nil && l[i] != nil && !l[i].Allow() {
		log.Warn("throttled by the route's rate limit", "rate", route.ThrottleRate, "burst", route.ThrottleBurst)
		gatewayAnswer(w, http.StatusTooManyRequests, bodyTooMany)
		return
	}
	if r.ContentLength > MaxGatewayBody {
		gatewayAnswer(w, http.StatusRequestEntityTooLarge, bodyTooLarge)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxGatewayBody+1))
	if err != nil {
		log.Warn("read body", "err", err)
		gatewayAnswer(w, http.StatusBadRequest, `{"message":"Bad Request"}`)
		return
	}
	if len(body) > MaxGatewayBody {
		gatewayAnswer(w, http.StatusRequestEntityTooLarge, bodyTooLarge)
		return
	}
	var claims map[string]string
	if route.JWT {
		if claims, err = g.authorize(r); err != nil {
			log.Info("unauthorized", "err", err)
			w.Header().Set("Www-Authenticate", challenge(r))
			gatewayAnswer(w, http.StatusUnauthorized, bodyUnauthorized)
			return
		}
	}
	e := g.event(r, body, route, path, params, claims, arrived, reqID)
	payload, err := json.Marshal(e)
	if err != nil {
		log.Error("marshal event", "err", err)
		gatewayAnswer(w, http.StatusInternalServerError, bodyInternalError)
		return
	}
	out, err := g.invoke(r.Context(), route, payload)
	switch {
	case errors.Is(err, errIntegrationTimeout):
		log.Error("integration timed out", "timeout", route.Timeout)
		gatewayAnswer(w, http.StatusServiceUnavailable, bodyUnavailable)
		return
	case errors.Is(err, invoke.ErrThrottled):
		// Lambda refused the invocation (429): API Gateway answers every
		// invocation error 500 with its generic body, throttling included.
		log.Warn("function throttled", "err", err)
		gatewayAnswer(w, http.StatusInternalServerError, bodyInternalError)
		return
	case err != nil:
		var fe *invoke.FunctionError
		if errors.As(err, &fe) {
			log.Error("function error", "error_type", fe.Type, "err", fe.Message)
		} else {
			log.Error("invocation failed", "err", err)
		}
		gatewayAnswer(w, http.StatusInternalServerError, bodyInternalError)
		return
	}
	resp, err := ParseResponse(out)
	if err != nil {
		log.Error("malformed function response", "err", err)
		gatewayAnswer(w, http.StatusInternalServerError, bodyInternalError)
		return
	}
	resp.write(w)
	log.Info("answered", "status", resp.Status, "latency_ms", g.clock.Now().Sub(arrived).Milliseconds())
}

var errIntegrationTimeout = errors.New("frontdoor: integration timeout")

// invoke runs the function. The gateway does not cancel an invocation when
// the client goes away (nor when it stops waiting at the integration
// timeout): the function runs to its end, as on AWS.
func (g *Gateway) invoke(ctx context.Context, route *Route, payload []byte) ([]byte, error) {
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := g.inv.Invoke(context.WithoutCancel(ctx), route.Function, payload)
		done <- result{out, err}
	}()
	t := time.NewTimer(route.Timeout)
	defer t.Stop()
	select {
	case res := <-done:
		return res.out, res.err
	case <-t.C:
		return nil, errIntegrationTimeout
	}
}

// selectRoute returns the index of the most specific route serving method
// and path, and its path parameters; -1 when none does.
func (g *Gateway) selectRoute(method, path string) (int, map[string]string) {
	best := -1
	var bestParams map[string]string
	for i := range g.routes {
		params, ok := g.routes[i].match(method, path)
		if !ok {
			continue
		}
		if best < 0 || moreSpecific(&g.routes[i], &g.routes[best]) {
			best, bestParams = i, params
		}
	}
	return best, bestParams
}

// gatewayPath is the path as the HTTP API matches routes and sends it as
// rawPath: percent-decoded once (r.URL.Path) and cut at a decoded "?", so
// a %2F splits a segment and %3F ends the path (seen on AWS; see the
// package documentation).
func gatewayPath(r *http.Request) string {
	path := r.URL.Path
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	if path == "" {
		path = "/"
	}
	return path
}

// authorize plays the JWT authorizer with local tokens: the identity
// source is the Authorization header, "Bearer <token>".
func (g *Gateway) authorize(r *http.Request) (map[string]string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return nil, errors.New("no Authorization header")
	}
	token, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		return nil, errors.New("the Authorization header is not a bearer token")
	}
	c, err := verifyClaims(g.secret, strings.TrimSpace(token))
	if err != nil {
		return nil, err
	}
	claims := map[string]string{"sub": c.Subject, "iss": c.Issuer}
	if c.IssuedAt != nil {
		claims["iat"] = strconv.FormatInt(c.IssuedAt.Unix(), 10)
	}
	if c.ExpiresAt != nil {
		claims["exp"] = strconv.FormatInt(c.ExpiresAt.Unix(), 10)
	}
	return claims, nil
}

// challenge is the WWW-Authenticate of a refused request: the bare scheme
// when no token came, invalid_token when one did.
func challenge(r *http.Request) string {
	if r.Header.Get("Authorization") == "" {
		return "Bearer"
	}
	return `Bearer error="invalid_token"`
}

// event builds the payload-2.0 event of r as HTTP API builds it.
func (g *Gateway) event(r *http.Request, body []byte, route *Route, path string, params, claims map[string]string,
	arrived time.Time, reqID string) events.APIGatewayV2HTTPRequest {
	srcIP := r.RemoteAddr
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		srcIP = h
	}
	headers := map[string]string{}
	var cookies []string
	for k, vs := range r.Header {
		lk := strings.ToLower(k)
		if lk == "cookie" { // moved to the cookies field
			for _, v := range vs {
				for c := range strings.SplitSeq(v, ";") {
					if c = strings.TrimSpace(c); c != "" {
						cookies = append(cookies, c)
					}
				}
			}
			continue
		}
		headers[lk] = strings.Join(vs, ",")
	}
	host := r.Host
	headers["host"] = host
	if xff := headers["x-forwarded-for"]; xff != "" {
		headers["x-forwarded-for"] = xff + ", " + srcIP
	} else {
		headers["x-forwarded-for"] = srcIP
	}
	headers["x-forwarded-proto"] = "http"
	if _, port, err := net.SplitHostPort(host); err == nil {
		headers["x-forwarded-port"] = port
	}
	if headers["x-amzn-trace-id"] == "" {
		headers["x-amzn-trace-id"] = traceID(arrived)
	}
	hostname := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		hostname = h
	}
	prefix, _, _ := strings.Cut(hostname, ".")
	e := events.APIGatewayV2HTTPRequest{
		Version:               "2.0",
		RouteKey:              route.Key,
		RawPath:               path,
		RawQueryString:        r.URL.RawQuery,
		Cookies:               cookies,
		Headers:               headers,
		QueryStringParameters: queryParams(r.URL.RawQuery),
		PathParameters:        params,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:     route.Key,
			AccountID:    g.account,
			Stage:        "$default",
			RequestID:    reqID,
			APIID:        g.apiID,
			DomainName:   hostname,
			DomainPrefix: prefix,
			Time:         arrived.UTC().Format("02/Jan/2006:15:04:05 -0700"),
			TimeEpoch:    arrived.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method: r.Method, Path: path, Protocol: r.Proto, SourceIP: srcIP, UserAgent: r.UserAgent(),
			},
		},
	}
	if claims != nil {
		e.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: claims},
		}
	}
	if len(body) > 0 {
		if isTextBody(headers["content-type"]) {
			e.Body = string(body)
		} else {
			e.Body, e.IsBase64Encoded = base64.StdEncoding.EncodeToString(body), true
		}
	}
	return e
}

// isTextBody reports whether HTTP API passes a body of this content type as
// text: text/* and application/json, xml and javascript. Anything else,
// a missing content type and form posts included, arrives base64-encoded
// with isBase64Encoded (measured on AWS; AWS documents only "if the
// content type is binary").
func isTextBody(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"),
		mt == "application/json", mt == "application/xml", mt == "application/javascript":
		return true
	}
	return false
}

// queryParams decodes a query string, duplicates comma-joined as payload
// 2.0 carries them.
func queryParams(raw string) map[string]string {
	if raw == "" {
		return nil
	}
	vals, _ := url.ParseQuery(raw) // what parses is kept, as the gateway does not refuse
	if len(vals) == 0 {
		return nil
	}
	out := make(map[string]string, len(vals))
	for k, vs := range vals {
		out[k] = strings.Join(vs, ",")
	}
	return out
}

// Response is a function's answer as the gateway sends it.
type Response struct {
	Status  int
	Header  http.Header
	Body    []byte
	Cookies []string
}

// ParseResponse reads a function's payload by the 2.0 format's rules: a
// JSON object with a statusCode is a response (statusCode, headers,
// multiValueHeaders, cookies, body, isBase64Encoded); any other valid JSON
// is the body of a 200 application/json answer, as API Gateway infers it.
// Anything else (not JSON, a statusCode out of range, a field of the wrong
// type, a body that is not base64 when it says it is) is an error: the
// gateway answers 500.
func ParseResponse(payload []byte) (Response, error) {
	if !json.Valid(payload) {
		return Response{}, errors.New("frontdoor: the function's payload is not JSON")
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(payload, &probe); err != nil || probe == nil || probe["statusCode"] == nil {
		h := http.Header{}
		h.Set("Content-Type", "application/json")
		return Response{Status: http.StatusOK, Header: h, Body: payload}, nil
	}
	var v struct {
		StatusCode        json.RawMessage     `json:"statusCode"`
		Headers           map[string]string   `json:"headers"`
		MultiValueHeaders map[string][]string `json:"multiValueHeaders"`
		Cookies           []string            `json:"cookies"`
		Body              *string             `json:"body"`
		IsBase64Encoded   bool                `json:"isBase64Encoded"`
	}
	if err := json.Unmarshal(payload, &v); err != nil {
		return Response{}, fmt.Errorf("frontdoor: malformed response object: %w", err)
	}
	status, err := strconv.Atoi(string(v.StatusCode)) // a JSON integer; "200" or 200.0 is not one
	if err != nil || status < 100 || status > 599 {
		return Response{}, fmt.Errorf("frontdoor: statusCode %s is not an HTTP status", v.StatusCode)
	}
	resp := Response{Status: status, Header: http.Header{}, Cookies: v.Cookies}
	for k, val := range v.Headers {
		resp.Header.Set(k, val)
	}
	for k, vals := range v.MultiValueHeaders {
		for _, val := range vals {
			resp.Header.Add(k, val)
		}
	}
	if v.Body != nil {
		resp.Body = []byte(*v.Body)
		if v.IsBase64Encoded {
			if resp.Body, err = base64.StdEncoding.DecodeString(*v.Body); err != nil {
				return Response{}, fmt.Errorf("frontdoor: isBase64Encoded body is not base64: %w", err)
			}
		}
	}
	return resp, nil
}

func (resp Response) write(w http.ResponseWriter) {
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = append(h[k], vs...)
	}
	for _, c := range resp.Cookies {
		h.Add("Set-Cookie", c)
	}
	if h.Get("Content-Type") == "" {
		h["Content-Type"] = nil // the function set none: send none (net/http would sniff one)
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// gatewayAnswer writes one of the gateway's own answers.
func gatewayAnswer(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// requestID is an id in the shape of HTTP API's (16 base64 characters).
func requestID() string {
	b := make([]byte, 11)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// traceID is an X-Amzn-Trace-Id Root for a request that came without one.
func traceID(at time.Time) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return fmt.Sprintf("Root=1-%08x-%s", at.Unix(), hex.EncodeToString(b))
}

func base32hex(b []byte) string {
	const alphabet = "0123456789abcdefghijklmnopqrstuv"
	var sb strings.Builder
	for _, c := range b {
		sb.WriteByte(alphabet[c%32])
	}
	return sb.String()
}
