package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncepay/oncepay/internal/albauth"
	"github.com/oncepay/oncepay/internal/arrival"
	"github.com/oncepay/oncepay/internal/home"
	"github.com/oncepay/oncepay/internal/httpevent"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/problem"
)

// Serve routes one request.
func (h *Handler) Serve(ctx context.Context, r Request) Response {
	if r.Caller == "" {
		return problemResponse(problem.Unauthorized())
	}
	var stop bool
	var resp Response
	if r.home, resp, stop = h.routeHome(ctx, r.Caller); stop {
		return resp
	}
	switch {
	case r.Path == "/payments":
		if r.Method != http.MethodPost {
			return problemResponse(problem.MethodNotAllowed())
		}
		return h.pay(ctx, r)
	case strings.HasPrefix(r.Path, "/payments/"):
		return h.subresource(ctx, r) // /payments/{key}/resolve, /payments/{key}/refund
	}
	return problemResponse(problem.NotFound())
}

// routeHome answers a request that is not this Region's to serve, before
// anything is read or written: 421 with the home's URL, or 503 when the
// caller's home cannot be read (fail closed: serving a caller this Region
// cannot place could serve it in two Regions at once).
func (h *Handler) routeHome(ctx context.Context, caller string) (home.Decision, Response, bool) {
	if h.d.Homes == nil {
		return home.Decision{}, Response{}, false
	}
	d, err := h.d.Homes.Decide(ctx, caller)
	if err != nil {
		h.d.Log.ErrorContext(ctx, "home record unreadable; refusing", "err", err)
		h.d.Metrics.Count("HomeUnavailable", 1)
		return d, problemResponse(problem.HomeUnavailable()), true
	}
	if d.Here {
		return d, Response{}, false
	}
	h.d.Log.InfoContext(ctx, "misdirected: the caller's home is another Region", "home_region", d.Home.Region, "home_version", d.Home.Version)
	h.d.Metrics.Count("Misdirected", 1)
	return d, problemResponse(problem.Misdirected(d.Home.Region, d.URL, d.Home.Version)), true
}

// callerOfClaims reads the JWT subject the gateway's authorizer verified.
func callerOfClaims(claims map[string]string) string { return claims["sub"] }

// HandleAPIGatewayV2 serves an HTTP API (payload format 2.0) event. The
// caller is the JWT authorizer's verified sub; the arrival stamp is the
// gateway's requestContext.timeEpoch. The gateway has already decoded
// rawPath once (and matched the route on the decoded path), so it is used
// as it comes: decoding it again would read a client's %2541 as "A".
func (h *Handler) HandleAPIGatewayV2(ctx context.Context, e events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	body, err := eventBody(e.Body, e.IsBase64Encoded)
	if err != nil {
		return toV2(problemResponse(problem.BadRequest("body", "invalid base64 body"))), nil
	}
	at, err := arrival.FromAPIGatewayV2(e.RequestContext.TimeEpoch)
	if err != nil {
		return toV2(problemResponse(problem.BadRequest("", "missing arrival stamp"))), nil
	}
	var caller string
	if a := e.RequestContext.Authorizer; a != nil && a.JWT != nil {
		caller = callerOfClaims(a.JWT.Claims)
	}
	hdr := http.Header{}
	for k, v := range e.Headers {
		hdr.Set(k, v)
	}
	resp := h.Serve(ctx, Request{
		Method: e.RequestContext.HTTP.Method, Path: e.RawPath, Headers: hdr, Body: body, Caller: caller, Arrival: at,
	})
	return toV2(resp), nil
}

// HandleALB serves an Application Load Balancer event. The arrival stamp is
// the load balancer's own field of X-Amzn-Trace-Id; the caller is the sub
// of the claims the load balancer's authenticate action signed
// (x-amzn-oidc-data), verified against this stack's load balancer (Deps.ALB):
// x-amzn-oidc-identity is not read, since any other load balancer, or
// anyone allowed to invoke the function, can set it. A token that does not
// verify is 401 and runs nothing; a key endpoint that cannot be reached is
// 500 (retry the same key). The load
// balancer passes the path still percent-encoded; it is decoded once here
// (httpevent.ALBPath), so the Location of a 202 names the same key behind
// this door as behind the HTTP API, however the client spells it. Every
// route here changes state and the caller rides on a cookie, so a request
// not declared JSON is refused first (requireJSON).
func (h *Handler) HandleALB(ctx context.Context, e events.ALBTargetGroupRequest) (events.ALBTargetGroupResponse, error) {
	body, err := eventBody(e.Body, e.IsBase64Encoded)
	if err != nil {
		return toALB(problemResponse(problem.BadRequest("body", "invalid base64 body"))), nil
	}
	hdr := http.Header{}
	for k, v := range e.Headers {
		hdr.Set(k, v)
	}
	for k, vs := range e.MultiValueHeaders {
		for _, v := range vs {
			hdr.Add(k, v)
		}
	}
	at, err := arrival.FromALBTraceHeader(strings.Join(hdr.Values("X-Amzn-Trace-Id"), ";"))
	if err != nil {
		return toALB(problemResponse(problem.BadRequest("X-Amzn-Trace-Id", "missing or malformed arrival stamp"))), nil
	}
	path, err := httpevent.ALBPath(e.Path)
	if err != nil {
		return toALB(problemResponse(problem.BadRequest("path", "malformed percent-encoding in the path"))), nil
	}
	if refused := h.requireJSON(ctx, e.HTTPMethod, hdr); refused != nil {
		return toALB(*refused), nil
	}
	caller, refused := h.albCaller(ctx, hdr.Get("X-Amzn-Oidc-Data"))
	if refused != nil {
		return toALB(*refused), nil
	}
	resp := h.Serve(ctx, Request{
		Method: e.HTTPMethod, Path: path, Headers: hdr, Body: body, Caller: caller, Arrival: at,
	})
	return toALB(resp), nil
}

// requireJSON refuses a state-changing ALB request that is not declared
// application/json. Behind the ALB the caller is the load balancer's
// session cookie, which a browser sends with a cross-site form post too: a
// page could then void a victim's unsent key (resolve takes no header). A
// page can post only form, multipart or text/plain bodies without a CORS
// preflight, which neither the ALB nor the api answers; JSON it cannot. The
// HTTP API needs no such check: its bearer token is never sent by a browser
// on its own.
func (h *Handler) requireJSON(ctx context.Context, method string, hdr http.Header) *Response {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil // change nothing; the routes answer them 405
	}
	if mt, _, err := mime.ParseMediaType(hdr.Get("Content-Type")); err == nil && mt == "application/json" {
		return nil
	}
	// Neither the path (a key) nor the type is logged: both are the sender's text.
	h.d.Log.WarnContext(ctx, "refused an ALB request not declared JSON: a cross-site form could send it with the session cookie",
		"method", method)
	h.d.Metrics.Count("ALBNotJSON", 1)
	r := problemResponse(problem.BadRequest("Content-Type",
		"a request through the load balancer must be sent with Content-Type: application/json; nothing was run"))
	return &r
}

// albCaller is the verified caller of an ALB event, or the answer refusing
// it.
func (h *Handler) albCaller(ctx context.Context, token string) (string, *Response) {
	if h.d.ALB == nil {
		h.d.Log.Error("refused an ALB event: this function has no load balancer to verify it against (ONCEPAY_ALB_ARN unset)")
		r := problemResponse(problem.Unauthorized())
		return "", &r
	}
	caller, err := h.d.ALB.Verify(ctx, token)
	switch {
	case errors.Is(err, albauth.ErrKeyUnavailable):
		h.d.Log.Error("the load balancer's public key could not be read; nothing ran", "err", err)
		r := problemResponse(problem.Internal())
		return "", &r
	case err != nil:
		h.d.Log.Warn("refused an ALB event whose signed claims do not verify", "err", err)
		h.d.Metrics.Count("ALBUnauthenticated", 1)
		r := problemResponse(problem.Unauthorized())
		return "", &r
	}
	return caller, nil
}

// Invoke is the Lambda entry point: it accepts either event shape.
func (h *Handler) Invoke(ctx context.Context, raw json.RawMessage) (any, error) {
	return httpevent.Handlers{HTTPAPI: h.HandleAPIGatewayV2, ALB: h.HandleALB}.Dispatch(ctx, raw)
}

func eventBody(body string, b64 bool) ([]byte, error) {
	if len(body) > 2*payment.MaxBodyBytes {
		// Parse enforces the exact limit; this only bounds the decoding work.
		body = body[:2*payment.MaxBodyBytes]
	}
	if !b64 {
		return []byte(body), nil
	}
	return base64.StdEncoding.DecodeString(body)
}

func toV2(r Response) events.APIGatewayV2HTTPResponse {
	return httpevent.HTTPAPIResponse(r.Status, r.Headers, r.Body)
}

func toALB(r Response) events.ALBTargetGroupResponse {
	return httpevent.ALBResponse(r.Status, r.Headers, r.Body)
}
