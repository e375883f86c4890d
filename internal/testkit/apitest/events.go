package apitest

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/oncepay/oncepay/internal/testkit/albsign"
)

// ALBEvent is the event an Application Load Balancer sends a Lambda target
// for a request to rawPath, which it passes exactly as the client sent it
// (still percent-encoded). The headers are lower-cased as the load balancer
// sends them; X-Amzn-Trace-Id carries its Self= field stamped at at (whole
// seconds, as the load balancer's is) after a Root=; x-amzn-oidc-data is the
// caller's claims signed by the test kit's load balancer (albsign.Default,
// expiring an hour after at, so a fake clock moved on does not expire it), and x-amzn-oidc-identity the plain copy
// the api does not trust. headers may add others (an Idempotency-Key), or
// replace those.
func ALBEvent(method, rawPath, caller string, headers map[string]string, body string, at time.Time) events.ALBTargetGroupRequest {
	h := map[string]string{
		"x-amzn-trace-id":      fmt.Sprintf("Self=1-%08x-%024x;Root=1-%08x-%024x", at.Unix(), 1, at.Unix(), 2),
		"x-amzn-oidc-identity": caller,
		"x-amzn-oidc-data":     albsign.Default.Sign(caller, at.Add(time.Hour)),
		"content-type":         "application/json",
	}
	for k, v := range headers {
		h[strings.ToLower(k)] = v
	}
	return events.ALBTargetGroupRequest{
		HTTPMethod: method, Path: rawPath, Headers: h, Body: body,
		RequestContext: events.ALBTargetGroupRequestContext{ELB: events.ELBContext{TargetGroupArn: "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/oncepay/0"}},
	}
}

// HTTPAPIEvent is the payload-2.0 event an API Gateway HTTP API sends for a
// request to rawPath as the client sent it. The gateway decodes the path
// once before the function sees it (rawPath and requestContext.http.path
// alike) and cuts it at a decoded "?"; a malformed escape is refused by the
// gateway itself (the error). The caller is the JWT authorizer's sub and
// the arrival stamp its timeEpoch.
func HTTPAPIEvent(method, rawPath, caller string, headers map[string]string, body string, at time.Time) (events.APIGatewayV2HTTPRequest, error) {
	path, err := url.PathUnescape(rawPath)
	if err != nil {
		return events.APIGatewayV2HTTPRequest{}, fmt.Errorf("apitest: the gateway refuses %q: %w", rawPath, err)
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	h := map[string]string{"content-type": "application/json"}
	for k, v := range headers {
		h[strings.ToLower(k)] = v
	}
	return events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: method + " " + path, RawPath: path, Headers: h, Body: body,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			Stage: "$default", TimeEpoch: at.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": caller}},
			},
		},
	}, nil
}
