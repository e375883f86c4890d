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
