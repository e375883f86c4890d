package chaos

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncepay/oncepay/internal/api"
	pmt "github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/testkit/albsign"
)

// keyAlphabet is every byte an Idempotency-Key may hold: the keys of a
// schedule are drawn from all of it.
const keyAlphabet = pmt.KeyAlphabet

// newKey draws a key of 1..24 bytes from keyAlphabet that is not a dot
// segment ("." and ".." cannot travel in a path).
func newKey(rng *rand.Rand) string {
	for {
		b := make([]byte, 1+rng.IntN(24))
		for i := range b {
			b[i] = keyAlphabet[rng.IntN(len(keyAlphabet))]
		}
		if k := string(b); k != "." && k != ".." {
			return k
		}
	}
}

// frontDoor is what a schedule's requests come through, as the deployed
// stack delivers them to the api function: an HTTP API (payload 2.0) event
// or an ALB target group event, handed to the handler's entry point for its
// shape or to Invoke as raw JSON (Lambda's way).
type frontDoor struct {
	alb        bool // ALB, else HTTP API
	multiValue bool // ALB with multi-value headers on
}

func (d frontDoor) String() string {
	switch {
	case d.alb && d.multiValue:
		return "ALB (multi-value headers)"
	case d.alb:
		return "ALB"
	}
	return "HTTP API"
}

// hreq is one request: path is what the client means (decoded).
type hreq struct {
	path, caller, key, body string
	arrival                 time.Time
}

// send delivers r through the door and returns the answer and how it went
// (for the trace). Every random choice is drawn from rng, in a fixed order.
func (d frontDoor) send(ctx context.Context, h *api.Handler, rng *rand.Rand, r hreq) (api.Response, string, error) {
	invoke := rng.IntN(2) == 0
	b64 := rng.IntN(4) == 0
	body := r.body
	if b64 {
		body = base64.StdEncoding.EncodeToString([]byte(r.body))
	}
	var how []string
	if invoke {
		how = append(how, "invoke")
	}
	if b64 {
		how = append(how, "base64")
	}
	var resp api.Response
	if d.alb {
		path := percentEncodeSome(rng, r.path)
		if path != r.path {
			how = append(how, "path "+path)
		}
		e := d.albEvent(rng, r, path, body, b64)
		if invoke {
			out, err := invokeRaw(ctx, h, e)
			if err != nil {
				return api.Response{}, "", err
			}
			ar, ok := out.(events.ALBTargetGroupResponse)
			if !ok {
				return api.Response{}, "", fmt.Errorf("chaos: Invoke answered an ALB event with %T", out)
			}
			resp, err = fromALB(ar)
			if err != nil {
				return api.Response{}, "", err
			}
		} else {
			ar, err := h.HandleALB(ctx, e)
			if err != nil {
				return api.Response{}, "", fmt.Errorf("chaos: HandleALB: %w", err)
			}
			if resp, err = fromALB(ar); err != nil {
				return api.Response{}, "", err
			}
		}
	} else {
		e := d.httpAPIEvent(r, body, b64)
		var vr events.APIGatewayV2HTTPResponse
		if invoke {
			out, err := invokeRaw(ctx, h, e)
			if err != nil {
				return api.Response{}, "", err
			}
			var ok bool
			if vr, ok = out.(events.APIGatewayV2HTTPResponse); !ok {
				return api.Response{}, "", fmt.Errorf("chaos: Invoke answered an HTTP API event with %T", out)
			}
		} else {
			var err error
			if vr, err = h.HandleAPIGatewayV2(ctx, e); err != nil {
				return api.Response{}, "", fmt.Errorf("chaos: HandleAPIGatewayV2: %w", err)
			}
		}
		var err error
		if resp, err = fromHTTPAPI(vr); err != nil {
			return api.Response{}, "", err
		}
	}
	return resp, strings.Join(how, ","), nil
}

func invokeRaw(ctx context.Context, h *api.Handler, e any) (any, error) {
	raw, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("chaos: encode event: %w", err)
	}
	out, err := h.Invoke(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("chaos: Invoke: %w", err)
	}
	return out, nil
}

// routeKey is the HTTP API route a path matches.
func routeKey(path string) (string, map[string]string) {
	if rest, ok := strings.CutPrefix(path, "/payments/"); ok {
		if i := strings.LastIndexByte(rest, '/'); i > 0 {
			return "POST /payments/{key}/" + rest[i+1:], map[string]string{"key": rest[:i]}
		}
	}
	return "POST " + path, nil
}

// httpAPIEvent is what API Gateway sends: rawPath decoded, the JWT
// authorizer's claims (sub = the caller), timeEpoch = the arrival in ms.
func (d frontDoor) httpAPIEvent(r hreq, body string, b64 bool) events.APIGatewayV2HTTPRequest {
	rk, params := routeKey(r.path)
	hdr := map[string]string{"content-type": "application/json", "user-agent": "oncepay-chaos", "x-forwarded-proto": "https"}
	if r.key != "" {
		hdr["idempotency-key"] = r.key
	}
	return events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: rk, RawPath: r.path, Headers: hdr, PathParameters: params,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey: rk, AccountID: "123456789012", Stage: "$default", DomainName: "chaos.execute-api.local",
			RequestID: fmt.Sprintf("req-%d", r.arrival.UnixNano()), Time: r.arrival.Format("02/Jan/2006:15:04:05 -0700"),
			TimeEpoch: r.arrival.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method: http.MethodPost, Path: r.path, Protocol: "HTTP/1.1", SourceIP: "198.51.100.7", UserAgent: "oncepay-chaos",
			},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": r.caller}},
			},
		},
		Body: body, IsBase64Encoded: b64,
	}
}

// albEvent is what the load balancer sends: the path as the client sent it,
// X-Amzn-Trace-Id with the balancer's Self field carrying the arrival (after
// the client's own Root), and the authenticate action's signed claims of
// the caller (x-amzn-oidc-data, the test kit's load balancer) with their
// plain copy x-amzn-oidc-identity.
func (d frontDoor) albEvent(rng *rand.Rand, r hreq, path, body string, b64 bool) events.ALBTargetGroupRequest {
	trace := fmt.Sprintf("Self=1-%08x-%s;Root=1-%08x-%s", r.arrival.Unix(), hex24(rng), r.arrival.Unix()-int64(rng.IntN(3)), hex24(rng))
	hdr := map[string]string{
		"content-type": "application/json", "host": "chaos.elb.local", "user-agent": "oncepay-chaos",
		"x-amzn-trace-id": trace, "x-amzn-oidc-identity": r.caller, "x-forwarded-for": "198.51.100.7",
		"x-amzn-oidc-data": albsign.Default.Sign(r.caller, r.arrival.Add(time.Hour)),
		"x-forwarded-port": "443", "x-forwarded-proto": "https",
	}
	if r.key != "" {
		hdr["idempotency-key"] = r.key
	}
	e := events.ALBTargetGroupRequest{
		HTTPMethod: http.MethodPost, Path: path, Body: body, IsBase64Encoded: b64,
		RequestContext: events.ALBTargetGroupRequestContext{ELB: events.ELBContext{
			TargetGroupArn: "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/chaos/0123456789abcdef",
		}},
	}
	if d.multiValue {
		e.MultiValueHeaders = map[string][]string{}
		for k, v := range hdr {
			e.MultiValueHeaders[k] = []string{v}
		}
		e.MultiValueQueryStringParameters = map[string][]string{}
	} else {
		e.Headers = hdr
		e.QueryStringParameters = map[string]string{}
	}
	return e
}

func hex24(rng *rand.Rand) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 24)
	for i := range b {
		b[i] = digits[rng.IntN(16)]
	}
	return string(b)
}

// percentEncodeSome percent-encodes some bytes of the key segment of a
// /payments/{key}/... path, as a client may (RFC 3986 §2.3: an encoded
// unreserved byte is the same character); the ALB passes the path as sent.
func percentEncodeSome(rng *rand.Rand, path string) string {
	rest, ok := strings.CutPrefix(path, "/payments/")
	i := strings.LastIndexByte(rest, '/')
	if !ok || i <= 0 || rng.IntN(2) == 0 {
		return path
	}
	key := rest[:i]
	var b strings.Builder
	for j := 0; j < len(key); j++ {
		switch rng.IntN(4) {
		case 0:
			fmt.Fprintf(&b, "%%%02X", key[j])
		case 1:
			fmt.Fprintf(&b, "%%%02x", key[j])
		default:
			b.WriteByte(key[j])
		}
	}
	return "/payments/" + b.String() + rest[i:]
}

func fromHTTPAPI(r events.APIGatewayV2HTTPResponse) (api.Response, error) {
	return response(r.StatusCode, r.Headers, r.MultiValueHeaders, r.Body, r.IsBase64Encoded)
}

func fromALB(r events.ALBTargetGroupResponse) (api.Response, error) {
	return response(r.StatusCode, r.Headers, r.MultiValueHeaders, r.Body, r.IsBase64Encoded)
}

func response(status int, single map[string]string, multi map[string][]string, body string, b64 bool) (api.Response, error) {
	h := http.Header{}
	for k, v := range single {
		h.Set(k, v)
	}
	for k, vs := range multi {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	b := []byte(body)
	if b64 {
		var err error
		if b, err = base64.StdEncoding.DecodeString(body); err != nil {
			return api.Response{}, fmt.Errorf("chaos: base64 response body: %w", err)
		}
	}
	return api.Response{Status: status, Headers: h, Body: b}, nil
}

// locationPath is the decoded path of a Location header ("" when absent or
// not a path).
func locationPath(h http.Header) string {
	loc := h.Get("Location")
	if loc == "" {
		return ""
	}
	u, err := url.Parse(loc)
	if err != nil || u.Path == "" {
		return ""
	}
	return u.Path
}
