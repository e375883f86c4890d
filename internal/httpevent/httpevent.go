// Package httpevent is what the HTTP-facing functions share about Lambda's
// two front-door event shapes (API Gateway HTTP API payload 2.0 and ALB
// target group): telling them apart and building their responses.
package httpevent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// Handlers are a function's handlers for the two shapes.
type Handlers struct {
	HTTPAPI func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)
	ALB     func(context.Context, events.ALBTargetGroupRequest) (events.ALBTargetGroupResponse, error)
}

// Dispatch decodes raw as an ALB event when it carries requestContext.elb,
// else as an HTTP API event, and calls the matching handler.
func (h Handlers) Dispatch(ctx context.Context, raw json.RawMessage) (any, error) {
	var probe struct {
		RequestContext struct {
			ELB *json.RawMessage `json:"elb"`
		} `json:"requestContext"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("httpevent: decode event: %w", err)
	}
	if probe.RequestContext.ELB != nil {
		var e events.ALBTargetGroupRequest
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, fmt.Errorf("httpevent: decode ALB event: %w", err)
		}
		return h.ALB(ctx, e)
	}
	var e events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(raw, &e); err != nil {
		return nil, fmt.Errorf("httpevent: decode HTTP API event: %w", err)
	}
	return h.HTTPAPI(ctx, e)
}

// ALBPath is the path of an ALB event as the HTTP API would deliver it. The
// load balancer passes the path exactly as the client sent it, still
// percent-encoded, while the HTTP API (and the local front door) decode it
// once before the function sees it; decoding it here, exactly once, makes
// /payments/K%7E1/resolve and /payments/K~1/resolve one path behind either
// door (RFC 3986 §6.2.2.2: they are the same URI). A malformed escape is an
// error, which the caller answers with 400.
func ALBPath(raw string) (string, error) {
	p, err := url.PathUnescape(raw)
	if err != nil {
		return "", fmt.Errorf("httpevent: ALB path: %w", err)
	}
	return p, nil
}

// Flat joins multi-valued headers the way both shapes carry them.
func Flat(h http.Header) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[k] = strings.Join(v, ", ")
	}
	return out
}

// HTTPAPIResponse builds an HTTP API response.
func HTTPAPIResponse(status int, h http.Header, body []byte) events.APIGatewayV2HTTPResponse {
	return events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: Flat(h), Body: string(body)}
}

// ALBResponse builds an ALB response (the ALB needs the status line).
func ALBResponse(status int, h http.Header, body []byte) events.ALBTargetGroupResponse {
	return events.ALBTargetGroupResponse{
		StatusCode: status, StatusDescription: fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Headers: Flat(h), Body: string(body),
	}
}
