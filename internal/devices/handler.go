package devices

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncepay/oncepay/internal/httpevent"
	"github.com/oncepay/oncepay/internal/problem"
)

// Store is what the handler asks of the devices (Registry).
type Store interface {
	Put(ctx context.Context, caller string, reg Registration) (Outcome, error)
	Remove(ctx context.Context, caller, deviceID string, counter int64) (Outcome, error)
}

// Handler serves PUT and DELETE /devices/{device_id} for the authenticated
// caller: a caller only ever reaches its own devices.
type Handler struct {
	Store Store
	Log   *slog.Logger
}

// Request is one request as the front door delivered it.
type Request struct {
	Method  string
	Path    string // decoded once
	Headers http.Header
	Body    []byte
	Caller  string // the JWT's sub; "" when nobody was authenticated
}

// Response is the answer.
type Response struct {
	Status  int
	Headers http.Header
	Body    []byte
}

// Answer is the body of a 200 or 201: what the row holds, and whether this
// request moved it.
type Answer struct {
	Record
	Applied bool `json:"applied"`
}

// Serve answers one request. Bad input is a 400 problem and changes
// nothing; a ledger or SNS that cannot be reached is a 503 and the app
// sends the same counter again (a request that did apply answers 200 with
// applied false the second time: the row holds its counter).
func (h Handler) Serve(ctx context.Context, r Request) Response {
	log := h.Log
	if log == nil {
		log = slog.Default()
	}
	if r.Caller == "" {
		return problemOf(problem.Unauthorized())
	}
	rawID, err := DeviceIDOfPath(r.Path)
	if err != nil {
		return problemOf(problem.NotFound())
	}
	var out Outcome
	switch r.Method {
	case http.MethodPut:
		reg, err := ParseRegistration(rawID, r.Headers, r.Body)
		if err != nil {
			return badInput(err)
		}
		out, err = h.Store.Put(ctx, r.Caller, reg)
		if err != nil {
			return h.failed(ctx, log, r.Caller, reg.DeviceID, err)
		}
	case http.MethodDelete:
		id, err := ParseDeviceID(rawID)
		if err != nil {
			return badInput(err)
		}
		n, err := ParseCounter(r.Headers)
		if err != nil {
			return badInput(err)
		}
		if out, err = h.Store.Remove(ctx, r.Caller, id, n); err != nil {
			return h.failed(ctx, log, r.Caller, id, err)
		}
	default:
		r := problemOf(problem.MethodNotAllowed())
		r.Headers.Set("Allow", "PUT, DELETE")
		return r
	}
	// The caller's id is opaque and the device id the app's own: neither
	// is personal data, and the token is never logged.
	log.LogAttrs(ctx, slog.LevelInfo, "device", slog.String("scope", "devices"), slog.String("caller_id", r.Caller),
		slog.String("device_id", out.Record.DeviceID), slog.String("method", r.Method), slog.Int64("counter", out.Record.Counter),
		slog.String("state", out.Record.State), slog.Bool("applied", out.Applied))
	status := http.StatusOK
	if out.Created && r.Method == http.MethodPut {
		status = http.StatusCreated
	}
	b, err := json.Marshal(Answer{Record: out.Record, Applied: out.Applied})
	if err != nil {
		return problemOf(problem.Internal())
	}
	return Response{Status: status, Headers: http.Header{"Content-Type": {"application/json"}}, Body: b}
}

// TypePlatformNotConfigured, TypeTokenRefused and TypeTokenInUse are this
// route's own problem types.
const (
	TypePlatformNotConfigured = problem.TypeBase + "platform-not-configured"
	TypeTokenRefused          = problem.TypeBase + "token-refused"
	TypeTokenInUse            = problem.TypeBase + "token-in-use"
)

func (h Handler) failed(ctx context.Context, log *slog.Logger, caller, deviceID string, err error) Response {
	switch {
	case errors.Is(err, ErrNoPlatform):
		return problemOf(problem.Problem{Type: TypePlatformNotConfigured, Title: "Platform not configured", Status: http.StatusUnprocessableEntity,
			Detail: "this deployment has no push platform application for that platform", Extensions: map[string]any{"field": "platform"}})
	case errors.Is(err, ErrTokenRefused):
		return problemOf(problem.Problem{Type: TypeTokenRefused, Title: "Push token refused", Status: http.StatusUnprocessableEntity,
			Detail: "the push platform refused the token", Extensions: map[string]any{"field": "token"}})
	case errors.Is(err, ErrTokenInUse):
		// The token is never logged: it addresses someone's phone.
		log.LogAttrs(ctx, slog.LevelWarn, "device registration refused: the push token is live on another caller's device",
			slog.String("scope", "devices"), slog.String("caller_id", caller), slog.String("device_id", deviceID))
		return problemOf(problem.Problem{Type: TypeTokenInUse, Title: "Push token in use", Status: http.StatusConflict,
			Detail:     "the push token is registered to a device of another account; that device must be removed first",
			Extensions: map[string]any{"field": "token"}})
	}
	log.LogAttrs(ctx, slog.LevelError, "device write failed: unknown whether it applied; the app sends the same counter again",
		slog.String("scope", "devices"), slog.String("err", err.Error()))
	return problemOf(problem.Problem{Type: problem.TypeLedgerUnavailable, Title: "Service unavailable", Status: http.StatusServiceUnavailable,
		Detail: "the device was not confirmed; send the same request again"})
}

func badInput(err error) Response {
	var in *InputError
	if errors.As(err, &in) {
		return problemOf(problem.BadRequest(in.Field, in.Reason))
	}
	return problemOf(problem.BadRequest("", "invalid request"))
}

func problemOf(p problem.Problem) Response {
	b, err := json.Marshal(p)
	if err != nil {
		b = []byte(`{"type":"about:blank"}`)
	}
	return Response{Status: p.Status, Headers: http.Header{"Content-Type": {problem.ContentType}}, Body: b}
}

// HandleAPIGatewayV2 serves an HTTP API (payload format 2.0) event: the
// caller is the JWT authorizer's verified sub, and the path is the
// gateway's rawPath, already decoded once.
func (h Handler) HandleAPIGatewayV2(ctx context.Context, e events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	body := []byte(e.Body)
	if e.IsBase64Encoded {
		var err error
		if body, err = base64.StdEncoding.DecodeString(e.Body); err != nil {
			r := badInput(bad("body", "invalid base64 body"))
			return httpevent.HTTPAPIResponse(r.Status, r.Headers, r.Body), nil
		}
	}
	var caller string
	if a := e.RequestContext.Authorizer; a != nil && a.JWT != nil {
		caller = a.JWT.Claims["sub"]
	}
	hdr := http.Header{}
	for k, v := range e.Headers {
		hdr.Set(k, v)
	}
	r := h.Serve(ctx, Request{Method: e.RequestContext.HTTP.Method, Path: e.RawPath, Headers: hdr, Body: body, Caller: caller})
	return httpevent.HTTPAPIResponse(r.Status, r.Headers, r.Body), nil
}
