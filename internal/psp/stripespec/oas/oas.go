// Package oas checks Stripe API traffic against Stripe's published OpenAPI
// spec (the spec3.json stripe-mock embeds), with kin-openapi's schema
// validator: a request's form-encoded body or query against its
// operation's parameters, a response body against the operation's response
// schema (error bodies included), and a webhook event against the event
// schema and its data.object against the object's own.
//
// It is for tests (the spec is 8 MB and read from the Go module cache);
// nothing that deploys imports it. The value limits the spec does not carry
// are package stripespec's.
package oas

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// StripeMockVersion is the stripe-mock release whose embedded spec is
// used: the one the contract test runs (docs/mechanism.md#design-6).
const StripeMockVersion = "v0.203.0"

// SpecPath finds stripe-mock's spec3.json in the Go module cache. It is
// there after `go install github.com/stripe/stripe-mock@v0.203.0` or
// `go mod download github.com/stripe/stripe-mock@v0.203.0`.
func SpecPath() (string, error) {
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		out, err := exec.Command("go", "env", "GOMODCACHE").Output()
		if err != nil {
			return "", fmt.Errorf("oas: go env GOMODCACHE: %w", err)
		}
		cache = strings.TrimSpace(string(out))
	}
	p := filepath.Join(cache, "github.com", "stripe", "stripe-mock@"+StripeMockVersion, "embedded", "openapi", "spec3.json")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("oas: Stripe's spec not found (go mod download github.com/stripe/stripe-mock@%s): %w", StripeMockVersion, err)
	}
	return p, nil
}

// Spec is Stripe's OpenAPI spec, reduced to the operations asked for.
type Spec struct {
	doc *openapi3.T
}

// Load reads the spec at path and keeps the given paths (e.g.
// "/v1/payment_intents") and the schemas they and the named components
// (e.g. "event", "charge") reach; trimming first makes loading take a
// fraction of the 5 s the whole spec takes.
func Load(path string, paths, components []string) (*Spec, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("oas: read spec: %w", err)
	}
	trimmed, err := trim(raw, paths, components)
	if err != nil {
		return nil, err
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(trimmed)
	if err != nil {
		return nil, fmt.Errorf("oas: load spec: %w", err)
	}
	return &Spec{doc: doc}, nil
}

// Version is the spec's info.version: the Stripe API version it describes.
func (s *Spec) Version() string { return s.doc.Info.Version }

// trim keeps the wanted paths and every component schema reachable from
// them or from the wanted components.
func trim(raw []byte, paths, components []string) ([]byte, error) {
	var spec map[string]any
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("oas: parse spec: %w", err)
	}
	allPaths, _ := spec["paths"].(map[string]any)
	comps, _ := spec["components"].(map[string]any)
	schemas, _ := comps["schemas"].(map[string]any)
	keptPaths := map[string]any{}
	var queue []any
	for _, p := range paths {
		item, ok := allPaths[p]
		if !ok {
			return nil, fmt.Errorf("oas: the spec has no path %s", p)
		}
		keptPaths[p] = item
		queue = append(queue, item)
	}
	keptSchemas := map[string]any{}
	for _, c := range components {
		if _, ok := schemas[c]; !ok {
			return nil, fmt.Errorf("oas: the spec has no schema %s", c)
		}
		queue = append(queue, map[string]any{"$ref": "#/components/schemas/" + c})
	}
	for len(queue) > 0 {
		n := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		switch v := n.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				name := strings.TrimPrefix(ref, "#/components/schemas/")
				if _, seen := keptSchemas[name]; !seen {
					if sch, ok := schemas[name]; ok {
						keptSchemas[name] = sch
						queue = append(queue, sch)
					}
				}
			}
			for _, c := range v {
				queue = append(queue, c)
			}
		case []any:
			queue = append(queue, v...)
		}
	}
	spec["paths"] = keptPaths
	spec["components"] = map[string]any{"schemas": keptSchemas, "securitySchemes": comps["securitySchemes"]}
	delete(spec, "webhooks")
	return json.Marshal(spec)
}

// operation finds the operation for method and a concrete path
// (/v1/payment_intents/pi_123 matches /v1/payment_intents/{intent}); a
// literal path wins over a template.
func (s *Spec) operation(method, path string) (*openapi3.Operation, error) {
	if item := s.doc.Paths.Value(path); item != nil {
		if op := item.GetOperation(strings.ToUpper(method)); op != nil {
			return op, nil
		}
	}
	for tmpl, item := range s.doc.Paths.Map() {
		if !strings.Contains(tmpl, "{") || !templateRe(tmpl).MatchString(path) {
			continue
		}
		if op := item.GetOperation(strings.ToUpper(method)); op != nil {
			return op, nil
		}
	}
	return nil, fmt.Errorf("oas: Stripe has no operation %s %s (or it was not loaded)", method, path)
}

func templateRe(tmpl string) *regexp.Regexp {
	parts := strings.Split(tmpl, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, "{") {
			parts[i] = `[^/]+`
		} else {
			parts[i] = regexp.QuoteMeta(p)
		}
	}
	return regexp.MustCompile("^" + strings.Join(parts, "/") + "$")
}

// ValidateRequest checks a request's parameters: the form-encoded body of
// a POST (form) and the query string (query), decoded the way Stripe
// decodes them (a[b]=c is an object, a[0]=c an array), against the
// operation's request body schema and query parameters. Unknown
// parameters are errors, as Stripe refuses them.
func (s *Spec) ValidateRequest(method, path string, query, form url.Values) error {
	op, err := s.operation(method, path)
	if err != nil {
		return err
	}
	var errs []error
	// Query parameters.
	qtree := decodeForm(query)
	known := map[string]bool{}
	for _, pr := range op.Parameters {
		p := pr.Value
		if p.In != openapi3.ParameterInQuery {
			continue
		}
		known[p.Name] = true
		v, present := qtree[p.Name]
		if !present {
			if p.Required {
				errs = append(errs, fmt.Errorf("query parameter %s is required", p.Name))
			}
			continue
		}
		if err := validate(p.Schema.Value, v, openapi3.VisitAsRequest()); err != nil {
			errs = append(errs, fmt.Errorf("query parameter %s: %w", p.Name, err))
		}
	}
	for name := range qtree {
		if !known[name] {
			errs = append(errs, fmt.Errorf("unknown query parameter %s", name))
		}
	}
	// The body.
	if len(form) > 0 || strings.EqualFold(method, "POST") {
		var schema *openapi3.Schema
		if rb := op.RequestBody; rb != nil && rb.Value != nil {
			if mt := rb.Value.Content.Get("application/x-www-form-urlencoded"); mt != nil && mt.Schema != nil {
				schema = mt.Schema.Value
			}
		}
		switch {
		case schema == nil && len(form) > 0:
			errs = append(errs, errors.New("the operation takes no form body"))
		case schema != nil:
			body := map[string]any{}
			for k, v := range decodeForm(form) {
				body[k] = v
			}
			if err := validate(schema, body, openapi3.VisitAsRequest()); err != nil {
				errs = append(errs, fmt.Errorf("body: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// ValidateResponse checks a JSON response body against the operation's
// schema for status (the default response, Stripe's error object, for
// any status without its own).
func (s *Spec) ValidateResponse(method, path string, status int, body []byte) error {
	op, err := s.operation(method, path)
	if err != nil {
		return err
	}
	resp := op.Responses.Status(status)
	if resp == nil {
		resp = op.Responses.Default()
	}
	if resp == nil || resp.Value == nil {
		return fmt.Errorf("oas: %s %s has no response %d", method, path, status)
	}
	mt := resp.Value.Content.Get("application/json")
	if mt == nil || mt.Schema == nil {
		return fmt.Errorf("oas: %s %s response %d has no JSON schema", method, path, status)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("response %d is not JSON: %w", status, err)
	}
	if err := validate(mt.Schema.Value, v, openapi3.VisitAsResponse()); err != nil {
		return fmt.Errorf("response %d: %w", status, err)
	}
	return nil
}

// ValidateObject checks a JSON object against the named component schema
// (e.g. "payment_intent", "refund", "event").
func (s *Spec) ValidateObject(component string, body []byte) error {
	ref, ok := s.doc.Components.Schemas[component]
	if !ok || ref.Value == nil {
		return fmt.Errorf("oas: no schema %s loaded", component)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("%s is not JSON: %w", component, err)
	}
	return validate(ref.Value, v, openapi3.VisitAsResponse())
}

// ValidateEvent checks a webhook payload: the event envelope, and its
// data.object against the schema its "object" field names.
func (s *Spec) ValidateEvent(payload []byte) error {
	if err := s.ValidateObject("event", payload); err != nil {
		return fmt.Errorf("event: %w", err)
	}
	var ev struct {
		Type string `json:"type"`
		Data struct {
			Object json.RawMessage `json:"object"`
		} `json:"data"`
	}
	if err := json.Unmarshal(payload, &ev); err != nil {
		return err
	}
	var obj struct {
		Object string `json:"object"`
	}
	if err := json.Unmarshal(ev.Data.Object, &obj); err != nil || obj.Object == "" {
		return fmt.Errorf("event %s: data.object has no object type", ev.Type)
	}
	if err := s.ValidateObject(obj.Object, ev.Data.Object); err != nil {
		return fmt.Errorf("event %s: data.object: %w", ev.Type, err)
	}
	return nil
}

func validate(schema *openapi3.Schema, v any, opts ...openapi3.SchemaValidationOption) error {
	v = coerce(schema, v)
	return schema.VisitJSON(v, append(opts, openapi3.MultiErrors())...)
}

// decodeForm turns Stripe's bracketed form keys into a tree of maps whose
// leaves are strings (coerce types them by the schema); a key sent twice
// keeps its first value.
func decodeForm(form url.Values) map[string]any {
	root := map[string]any{}
	keys := make([]string, 0, len(form))
	for k := range form {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		segs := splitKey(k)
		node := root
		for i, seg := range segs {
			if i == len(segs)-1 {
				if _, exists := node[seg]; !exists {
					node[seg] = form[k][0]
				}
				break
			}
			next, ok := node[seg].(map[string]any)
			if !ok {
				next = map[string]any{}
				node[seg] = next
			}
			node = next
		}
	}
	return root
}

// splitKey splits a[b][c] into a, b, c.
func splitKey(k string) []string {
	head, rest, found := strings.Cut(k, "[")
	if !found {
		return []string{k}
	}
	return append([]string{head}, strings.Split(strings.TrimSuffix(rest, "]"), "][")...)
}

// coerce types the strings of a decoded form by the schema: integers,
// numbers and booleans parsed, objects with 0..n keys under an array schema
// turned into arrays; under anyOf/oneOf the first alternative the value
// then validates against wins. Anything it cannot type is left as it is,
// for the validator to refuse.
func coerce(schema *openapi3.Schema, v any) any {
	if schema == nil {
		return v
	}
	if alts := append(slices.Clone(schema.AnyOf), schema.OneOf...); len(alts) > 0 {
		for _, alt := range alts {
			if alt.Value == nil {
				continue
			}
			c := coerce(alt.Value, v)
			if alt.Value.VisitJSON(c) == nil {
				return c
			}
		}
		return v
	}
	t := schema.Type
	switch val := v.(type) {
	case string:
		switch {
		case t.Is("integer"):
			if n, err := strconv.ParseInt(val, 10, 64); err == nil {
				return float64(n)
			}
		case t.Is("number"):
			if f, err := strconv.ParseFloat(val, 64); err == nil {
				return f
			}
		case t.Is("boolean"):
			if b, err := strconv.ParseBool(val); err == nil && (val == "true" || val == "false") {
				return b
			}
		}
		return val
	case map[string]any:
		if t.Is("array") {
			arr := make([]any, len(val))
			for k, item := range val {
				i, err := strconv.Atoi(k)
				if err != nil || i < 0 || i >= len(val) {
					return v // not an array encoding: let the validator say so
				}
				var items *openapi3.Schema
				if schema.Items != nil {
					items = schema.Items.Value
				}
				arr[i] = coerce(items, item)
			}
			return arr
		}
		out := make(map[string]any, len(val))
		for k, item := range val {
			var sub *openapi3.Schema
			if p, ok := schema.Properties[k]; ok && p.Value != nil {
				sub = p.Value
			} else if ap := schema.AdditionalProperties.Schema; ap != nil {
				sub = ap.Value
			}
			out[k] = coerce(sub, item)
		}
		return out
	case []any:
		if schema.Items == nil {
			return v
		}
		out := make([]any, len(val))
		for i, item := range val {
			out[i] = coerce(schema.Items.Value, item)
		}
		return out
	}
	return v
}
