// Package specwire checks a request and the answer a handler gave it
// against the published HTTP contract (internal/apispec), as a client on
// the wire would see them. Tests only: it links the OpenAPI validator.
package specwire

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/oncepay/oncepay/internal/apispec"
)

// Validator is the OpenAPI document, built once: building it costs more
// than validating a request.
var Validator = sync.OnceValues(func() (validator.Validator, error) {
	doc, err := libopenapi.NewDocument(apispec.YAML)
	if err != nil {
		return nil, fmt.Errorf("parse the spec: %w", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return nil, fmt.Errorf("build the validator: %v", errs)
	}
	return v, nil
})

// Exchange is one request and its answer.
type Exchange struct {
	Method, Path string
	// ReqHeaders are the request's; Bearer adds the token the gateway
	// verified before the handler ran (the webhook route has none).
	ReqHeaders http.Header
	ReqBody    []byte
	Bearer     bool

	Status      int
	RespHeaders http.Header
	RespBody    []byte
}

// Errors is what the validator finds wrong with the exchange: the answer,
// and the request too when withRequest (a request refused on purpose, a
// 400's or a 413's, breaks the spec by design).
func Errors(x Exchange, withRequest bool) ([]string, error) {
	v, err := Validator()
	if err != nil {
		return nil, err
	}
	u := &url.URL{Scheme: "http", Host: "127.0.0.1:8080", Path: x.Path}
	hr, err := http.NewRequest(x.Method, u.String(), bytes.NewReader(x.ReqBody))
	if err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	hr.Header = x.ReqHeaders.Clone()
	if hr.Header == nil {
		hr.Header = http.Header{}
	}
	if x.Bearer {
		hr.Header.Set("Authorization", "Bearer a-token-the-gateway-verified")
	}
	hres := &http.Response{
		StatusCode: x.Status, Header: x.RespHeaders.Clone(), Request: hr,
		Body: io.NopCloser(bytes.NewReader(x.RespBody)), ContentLength: int64(len(x.RespBody)),
	}
	if hres.Header == nil {
		hres.Header = http.Header{}
	}
	validate := v.ValidateHttpResponse
	if withRequest {
		validate = v.ValidateHttpRequestResponse
	}
	var out []string
	if ok, errs := validate(hr, hres); !ok {
		for _, e := range errs {
			out = append(out, fmt.Sprintf("%s (%s)", e.Message, e.Reason))
			for _, se := range e.SchemaValidationErrors {
				out = append(out, fmt.Sprintf("  %s: %s", se.FieldPath, se.Reason))
			}
		}
	}
	return out, nil
}
