package frontdoor

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/provision"
)

// Route is one AWS::ApiGatewayV2::Route of the template, resolved to the
// Lambda function its integration invokes.
type Route struct {
	// Key is the route key as the template spells it: "POST /payments",
	// "POST /payments/{key}/resolve", "ANY /{proxy+}" or "$default".
	Key string `json:"route_key"`
	// Function is the logical id of the integration's Lambda function (its
	// IntegrationUri is {"Fn::GetAtt": [Function, "Arn"]}).
	Function string `json:"function"`
	// JWT is true for AuthorizationType JWT: the caller must present a valid
	// bearer token. False is AuthorizationType NONE (the PSP's webhook,
	// whose signature is its guard).
	JWT bool `json:"jwt"`
	// Timeout is the integration's TimeoutInMillis (default and maximum
	// 30 s): the gateway answers 503 when the function takes longer.
	Timeout time.Duration `json:"timeout"`
	// ThrottleRate and ThrottleBurst are the stage's route throttling
	// (DefaultRouteSettings, or this route's RouteSettings); zero means none.
	ThrottleRate  float64 `json:"throttle_rate"`
	ThrottleBurst int     `json:"throttle_burst"`

	method   string   // "POST", "ANY"; "" for $default
	segments []string // "payments", "{key}", "resolve"
}

// maxIntegrationTimeout is HTTP API's integration timeout, its default and
// its upper bound.
const maxIntegrationTimeout = 30 * time.Second

// LoadRoutes reads the HTTP API's routes from the synthesized template at
// path. Every route must target an AWS_PROXY integration of a Lambda
// function in the same template with payload format 2.0, and be authorized
// by JWT or NONE: anything else is an error here, never a route served
// differently from AWS.
func LoadRoutes(path string) ([]Route, error) {
	t, err := provision.ReadTemplate(path)
	if err != nil {
		return nil, fmt.Errorf("frontdoor: %w", err)
	}
	return routesOf(t)
}

func routesOf(t *provision.Template) ([]Route, error) {
	ids := t.OfType("AWS::ApiGatewayV2::Route")
	if len(ids) == 0 {
		return nil, errors.New("frontdoor: the template declares no AWS::ApiGatewayV2::Route")
	}
	rate, burst, perRoute, err := stageThrottling(t)
	if err != nil {
		return nil, err
	}
	var routes []Route
	api := ""
	for _, id := range ids {
		p := t.Resources[id].Properties
		r, apiID, err := routeOf(t, id, p)
		if err != nil {
			return nil, err
		}
		if api != "" && apiID != api {
			return nil, fmt.Errorf("frontdoor: routes of two HTTP APIs (%s, %s): the front door plays one", api, apiID)
		}
		api = apiID
		r.ThrottleRate, r.ThrottleBurst = rate, burst
		if s, ok := perRoute[r.Key]; ok {
			r.ThrottleRate, r.ThrottleBurst = s.rate, s.burst
		}
		routes = append(routes, r)
	}
	return routes, nil
}

func routeOf(t *provision.Template, id string, p map[string]any) (Route, string, error) {
	key, _ := p["RouteKey"].(string)
	r := Route{Key: key}
	if err := r.parseKey(); err != nil {
		return r, "", fmt.Errorf("frontdoor: route %s: %w", id, err)
	}
	apiID, _, _ := provision.Ref(p["ApiId"])
	switch auth, _ := p["AuthorizationType"].(string); auth {
	case "JWT":
		authz, _, _ := provision.Ref(p["AuthorizerId"])
		if a, ok := t.Resources[authz]; !ok || a.Type != "AWS::ApiGatewayV2::Authorizer" || a.Properties["AuthorizerType"] != "JWT" {
			return r, "", fmt.Errorf("frontdoor: route %s (%s): AuthorizerId does not name a JWT authorizer of the template", id, key)
		}
		r.JWT = true
	case "", "NONE":
	default:
		return r, "", fmt.Errorf("frontdoor: route %s (%s): AuthorizationType %s is not played locally", id, key, auth)
	}
	integ, err := targetIntegration(p["Target"])
	if err != nil {
		return r, "", fmt.Errorf("frontdoor: route %s (%s): %w", id, key, err)
	}
	in, ok := t.Resources[integ]
	if !ok || in.Type != "AWS::ApiGatewayV2::Integration" {
		return r, "", fmt.Errorf("frontdoor: route %s (%s): target %s is not an integration of the template", id, key, integ)
	}
	ip := in.Properties
	if ip["IntegrationType"] != "AWS_PROXY" {
		return r, "", fmt.Errorf("frontdoor: integration %s: IntegrationType %v is not played locally (AWS_PROXY only)", integ, ip["IntegrationType"])
	}
	if ip["PayloadFormatVersion"] != "2.0" {
		return r, "", fmt.Errorf("frontdoor: integration %s: PayloadFormatVersion %v is not played locally (2.0 only)", integ, ip["PayloadFormatVersion"])
	}
	fn, attr, ok := provision.Ref(ip["IntegrationUri"])
	if !ok || attr != "Arn" {
		return r, "", fmt.Errorf("frontdoor: integration %s: IntegrationUri is not {Fn::GetAtt: [<function>, Arn]}", integ)
	}
	if f, ok := t.Resources[fn]; !ok || f.Type != "AWS::Lambda::Function" {
		return r, "", fmt.Errorf("frontdoor: integration %s: %s is not a Lambda function of the template", integ, fn)
	}
	r.Function = fn
	r.Timeout = maxIntegrationTimeout
	if ms, ok := ip["TimeoutInMillis"].(float64); ok && ms > 0 {
		r.Timeout = min(time.Duration(ms)*time.Millisecond, maxIntegrationTimeout)
	}
	return r, apiID, nil
}

// parseKey splits "METHOD /a/{b}/c" (or "$default") into its method and
// path segments.
func (r *Route) parseKey() error {
	if r.Key == "$default" {
		return nil
	}
	method, path, ok := strings.Cut(r.Key, " ")
	if !ok || method == "" || !strings.HasPrefix(path, "/") {
		return fmt.Errorf("route key %q is not METHOD /path or $default", r.Key)
	}
	r.method = method
	if path == "/" {
		return nil
	}
	r.segments = strings.Split(path[1:], "/")
	for i, s := range r.segments {
		if strings.HasSuffix(s, "+}") && i != len(r.segments)-1 {
			return fmt.Errorf("route key %q: a greedy variable must be the last segment", r.Key)
		}
	}
	return nil
}

// targetIntegration reads "integrations/<id>" out of a route's Target, as
// CDK writes it: {"Fn::Join": ["", ["integrations/", {"Ref": id}]]}.
func targetIntegration(v any) (string, error) {
	m, _ := v.(map[string]any)
	join, _ := m["Fn::Join"].([]any)
	if len(join) == 2 {
		if parts, _ := join[1].([]any); len(parts) == 2 && parts[0] == "integrations/" {
			if id, attr, ok := provision.Ref(parts[1]); ok && attr == "" {
				return id, nil
			}
		}
	}
	return "", errors.New(`the Target is not {"Fn::Join": ["", ["integrations/", {"Ref": <integration>}]]}`)
}

type throttle struct {
	rate  float64
	burst int
}

// stageThrottling reads the $default stage's route throttling. Any other
// stage would put its name in front of every path, which the front door
// does not play.
func stageThrottling(t *provision.Template) (float64, int, map[string]throttle, error) {
	var rate float64
	var burst int
	per := map[string]throttle{}
	for id, r := range t.Resources {
		if r.Type != "AWS::ApiGatewayV2::Stage" {
			continue
		}
		if name, _ := r.Properties["StageName"].(string); name != "$default" {
			return 0, 0, nil, fmt.Errorf("frontdoor: stage %s is named %q: only the $default stage is played locally", id, name)
		}
		rate, burst = throttleOf(r.Properties["DefaultRouteSettings"])
		if rs, ok := r.Properties["RouteSettings"].(map[string]any); ok {
			for key, s := range rs {
				rt, b := throttleOf(s)
				per[key] = throttle{rt, b}
			}
		}
	}
	return rate, burst, per, nil
}

func throttleOf(v any) (float64, int) {
	m, _ := v.(map[string]any)
	rate, _ := m["ThrottlingRateLimit"].(float64)
	burst, _ := m["ThrottlingBurstLimit"].(float64)
	return rate, int(burst)
}

// match reports whether the route serves method and the (decoded) path,
// and the path parameters it binds.
func (r *Route) match(method, path string) (map[string]string, bool) {
	if r.Key == "$default" {
		return nil, true
	}
	if r.method != "ANY" && r.method != method {
		return nil, false
	}
	var segs []string
	if path != "/" {
		segs = strings.Split(strings.TrimPrefix(path, "/"), "/")
	}
	params := map[string]string{}
	for i, s := range r.segments {
		if name, greedy := strings.CutSuffix(strings.TrimPrefix(s, "{"), "+}"); greedy && strings.HasPrefix(s, "{") {
			rest := strings.Join(segs[min(i, len(segs)):], "/")
			if rest == "" {
				return nil, false
			}
			params[name] = rest
			return params, true
		}
		if i >= len(segs) {
			return nil, false
		}
		if name, isVar := strings.CutPrefix(s, "{"); isVar && strings.HasSuffix(name, "}") {
			if segs[i] == "" { // a variable binds a non-empty segment
				return nil, false
			}
			params[strings.TrimSuffix(name, "}")] = segs[i]
			continue
		}
		if s != segs[i] {
			return nil, false
		}
	}
	if len(segs) != len(r.segments) {
		return nil, false
	}
	if len(params) == 0 {
		params = nil
	}
	return params, true
}

// moreSpecific orders routes as API Gateway selects among matches: a
// literal segment over a variable at the first place they differ, a
// variable over a greedy {proxy+}, a named method over ANY, $default last.
func moreSpecific(a, b *Route) bool {
	if (a.Key == "$default") != (b.Key == "$default") {
		return b.Key == "$default"
	}
	for i := range min(len(a.segments), len(b.segments)) {
		ka, kb := segKind(a.segments[i]), segKind(b.segments[i])
		if ka != kb {
			return ka < kb
		}
	}
	if len(a.segments) != len(b.segments) {
		return len(a.segments) > len(b.segments)
	}
	return a.method != "ANY" && b.method == "ANY"
}

// segKind ranks a route segment: 0 literal, 1 {var}, 2 {greedy+}.
func segKind(s string) int {
	switch {
	case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "+}"):
		return 2
	case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}"):
		return 1
	}
	return 0
}
