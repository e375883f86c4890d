package httpevent

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

func TestDispatchTellsTheShapesApart(t *testing.T) {
	var got string
	h := Handlers{
		HTTPAPI: func(_ context.Context, e events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			got = "httpapi " + e.RawPath
			return HTTPAPIResponse(201, nil, nil), nil
		},
		ALB: func(_ context.Context, e events.ALBTargetGroupRequest) (events.ALBTargetGroupResponse, error) {
			got = "alb " + e.Path
			return ALBResponse(201, nil, nil), nil
		},
	}
	for raw, want := range map[string]string{
		`{"rawPath":"/payments","requestContext":{"timeEpoch":1}}`:                 "httpapi /payments",
		`{"path":"/payments","requestContext":{"elb":{"targetGroupArn":"arn:x"}}}`: "alb /payments",
	} {
		if _, err := h.Dispatch(context.Background(), json.RawMessage(raw)); err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", raw, got, err, want)
		}
	}
	if _, err := h.Dispatch(context.Background(), json.RawMessage(`not json`)); err == nil {
		t.Error("garbage dispatched")
	}
	r := ALBResponse(402, http.Header{"A": {"1", "2"}}, []byte("x"))
	if r.StatusDescription != "402 Payment Required" || r.Headers["A"] != "1, 2" || r.Body != "x" {
		t.Errorf("ALB response = %+v", r)
	}
}

// The ALB's still-encoded path is decoded exactly once: a client's
// %-spelling of a character is that character, a %25 stays a literal "%"
// (never decoded twice), and a malformed escape is refused.
func TestALBPathDecodesExactlyOnce(t *testing.T) {
	for raw, want := range map[string]string{
		"/payments/K1/resolve":       "/payments/K1/resolve",
		"/payments/K%7E1/resolve":    "/payments/K~1/resolve",
		"/payments/%4B%31/refund":    "/payments/K1/refund",
		"/payments/a%20b/resolve":    "/payments/a b/resolve",
		"/payments/a%2Fb/resolve":    "/payments/a/b/resolve",
		"/payments/K%2541/resolve":   "/payments/K%41/resolve",
		"/payments/a+b/resolve":      "/payments/a+b/resolve", // "+" is a space only in a query
		"/payments%2FK1%2Fresolve":   "/payments/K1/resolve",  // as the HTTP API decodes it
		"/payments/K1/resolve%3Fx=1": "/payments/K1/resolve?x=1",
	} {
		if got, err := ALBPath(raw); err != nil || got != want {
			t.Errorf("ALBPath(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for _, raw := range []string{"/payments/K%1/resolve", "/payments/K%zz/resolve", "/payments/K1%"} {
		if got, err := ALBPath(raw); err == nil {
			t.Errorf("ALBPath(%q) = %q, want an error", raw, got)
		}
	}
}
