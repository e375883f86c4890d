package provision

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
)

// ErrUnresolvable is what an intrinsic, a pseudo parameter, a resource
// attribute or a dynamic reference the local cloud cannot evaluate wraps: a
// value CloudFormation would fill in is never left as an empty string.
var ErrUnresolvable = errors.New("localcloud: cannot resolve")

// SecretGetter is the part of the Secrets Manager client dynamic references
// need (moto's, locally).
type SecretGetter interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// Evaluator evaluates a template's intrinsic functions (Ref, Fn::GetAtt,
// Fn::Join, Fn::Sub, Fn::Select, Fn::Split) and pseudo parameters over the
// local cloud's physical resources, and the dynamic references
// {{resolve:secretsmanager:...}} over its Secrets Manager, the way
// CloudFormation evaluates them at deploy time.
type Evaluator struct {
	Template  *Template
	Physical  map[string]Physical
	Region    string
	AccountID string
	StackName string
	Secrets   SecretGetter // nil: every dynamic reference is an error
}

// StackID is the local stack's id, stable for a stack name (CloudFormation
// gives a stack one id for its life).
func (e *Evaluator) StackID() string {
	sum := sha256.Sum256([]byte(e.StackName))
	h := fmt.Sprintf("%x", sum[:16])
	return fmt.Sprintf("arn:aws:cloudformation:%s:%s:stack/%s/%s-%s-%s-%s-%s",
		e.Region, e.AccountID, e.StackName, h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])
}

// String evaluates v to the string CloudFormation would pass (numbers and
// booleans as their text), dynamic references resolved.
func (e *Evaluator) String(ctx context.Context, v any) (string, error) {
	r, err := e.Eval(v)
	if err != nil {
		return "", err
	}
	s, err := scalar(r)
	if err != nil {
		return "", err
	}
	return e.resolveDynamic(ctx, s)
}

// Properties evaluates a resource's properties to what a custom resource
// receives: every scalar as a string (CloudFormation's conversion), dynamic
// references resolved.
func (e *Evaluator) Properties(ctx context.Context, props map[string]any) (map[string]any, error) {
	out := map[string]any{}
	for k, v := range props {
		r, err := e.Eval(v)
		if err != nil {
			return nil, fmt.Errorf("property %s: %w", k, err)
		}
		s, err := e.stringify(ctx, r)
		if err != nil {
			return nil, fmt.Errorf("property %s: %w", k, err)
		}
		out[k] = s
	}
	return out, nil
}

func (e *Evaluator) stringify(ctx context.Context, v any) (any, error) {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, el := range x {
			s, err := e.stringify(ctx, el)
			if err != nil {
				return nil, err
			}
			out[i] = s
		}
		return out, nil
	case map[string]any:
		out := map[string]any{}
		for k, el := range x {
			s, err := e.stringify(ctx, el)
			if err != nil {
				return nil, err
			}
			out[k] = s
		}
		return out, nil
	}
	s, err := scalar(v)
	if err != nil {
		return nil, err
	}
	return e.resolveDynamic(ctx, s)
}

// Eval evaluates the intrinsic functions in v; dynamic references are left
// in place (CloudFormation resolves them in the final value).
func (e *Evaluator) Eval(v any) (any, error) {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, el := range x {
			r, err := e.Eval(el)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	case map[string]any:
		if len(x) == 1 {
			for k, arg := range x {
				if k == "Ref" || strings.HasPrefix(k, "Fn::") || k == "Condition" {
					return e.intrinsic(k, arg)
				}
			}
		}
		out := map[string]any{}
		for k, el := range x {
			r, err := e.Eval(el)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	}
	return v, nil
}

func (e *Evaluator) intrinsic(fn string, arg any) (any, error) {
	switch fn {
	case "Ref":
		name, ok := arg.(string)
		if !ok {
			return nil, fmt.Errorf("%w: Ref of %v", ErrUnresolvable, arg)
		}
		return e.Ref(name)
	case "Fn::GetAtt":
		id, attr, ok := Ref(map[string]any{fn: arg})
		if !ok {
			return nil, fmt.Errorf("%w: Fn::GetAtt %v", ErrUnresolvable, arg)
		}
		return e.getAtt(id, attr)
	case "Fn::Join":
		a, ok := arg.([]any)
		if !ok || len(a) != 2 {
			return nil, fmt.Errorf("%w: Fn::Join wants [delimiter, list], got %v", ErrUnresolvable, arg)
		}
		delim, ok := a[0].(string)
		if !ok {
			return nil, fmt.Errorf("%w: Fn::Join delimiter %v", ErrUnresolvable, a[0])
		}
		list, err := e.list(a[1], "Fn::Join")
		if err != nil {
			return nil, err
		}
		parts := make([]string, len(list))
		for i, el := range list {
			if parts[i], err = scalar(el); err != nil {
				return nil, fmt.Errorf("Fn::Join: %w", err)
			}
		}
		return strings.Join(parts, delim), nil
	case "Fn::Select":
		a, ok := arg.([]any)
		if !ok || len(a) != 2 {
			return nil, fmt.Errorf("%w: Fn::Select wants [index, list], got %v", ErrUnresolvable, arg)
		}
		ir, err := e.Eval(a[0])
		if err != nil {
			return nil, err
		}
		is, err := scalar(ir)
		if err != nil {
			return nil, err
		}
		i, err := strconv.Atoi(is)
		if err != nil {
			return nil, fmt.Errorf("%w: Fn::Select index %q", ErrUnresolvable, is)
		}
		list, err := e.list(a[1], "Fn::Select")
		if err != nil {
			return nil, err
		}
		if i < 0 || i >= len(list) {
			return nil, fmt.Errorf("%w: Fn::Select index %d out of a list of %d", ErrUnresolvable, i, len(list))
		}
		return list[i], nil
	case "Fn::Split":
		a, ok := arg.([]any)
		if !ok || len(a) != 2 {
			return nil, fmt.Errorf("%w: Fn::Split wants [delimiter, string], got %v", ErrUnresolvable, arg)
		}
		delim, _ := a[0].(string)
		sr, err := e.Eval(a[1])
		if err != nil {
			return nil, err
		}
		s, err := scalar(sr)
		if err != nil || delim == "" {
			return nil, fmt.Errorf("%w: Fn::Split of %v", ErrUnresolvable, a[1])
		}
		var out []any
		for _, p := range strings.Split(s, delim) {
			out = append(out, p)
		}
		return out, nil
	case "Fn::Sub":
		return e.sub(arg)
	}
	return nil, fmt.Errorf("%w: intrinsic %s is not supported by the local cloud", ErrUnresolvable, fn)
}

func (e *Evaluator) list(v any, fn string) ([]any, error) {
	r, err := e.Eval(v)
	if err != nil {
		return nil, err
	}
	list, ok := r.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: %s wants a list, got %v", ErrUnresolvable, fn, r)
	}
	return list, nil
}

var subVar = regexp.MustCompile(`\$\{([^}]*)\}`)

func (e *Evaluator) sub(arg any) (any, error) {
	var tmpl string
	vars := map[string]any{}
	switch a := arg.(type) {
	case string:
		tmpl = a
	case []any:
		if len(a) != 2 {
			return nil, fmt.Errorf("%w: Fn::Sub wants a string or [string, map], got %v", ErrUnresolvable, arg)
		}
		tmpl, _ = a[0].(string)
		m, ok := a[1].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%w: Fn::Sub variables %v", ErrUnresolvable, a[1])
		}
		vars = m
	default:
		return nil, fmt.Errorf("%w: Fn::Sub of %v", ErrUnresolvable, arg)
	}
	var firstErr error
	out := subVar.ReplaceAllStringFunc(tmpl, func(m string) string {
		name := m[2 : len(m)-1]
		if strings.HasPrefix(name, "!") { // ${!Literal} is the text ${Literal}
			return "${" + name[1:] + "}"
		}
		var r any
		var err error
		if v, ok := vars[name]; ok {
			r, err = e.Eval(v)
		} else if id, attr, dotted := strings.Cut(name, "."); dotted && !strings.HasPrefix(name, "AWS::") {
			r, err = e.getAtt(id, attr)
		} else {
			r, err = e.Ref(name)
		}
		var s string
		if err == nil {
			s, err = scalar(r)
		}
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("Fn::Sub ${%s}: %w", name, err)
		}
		return s
	})
	if firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

func (e *Evaluator) Ref(name string) (any, error) {
	switch name {
	case "AWS::Region":
		return e.Region, nil
	case "AWS::AccountId":
		return e.AccountID, nil
	case "AWS::StackName":
		return e.StackName, nil
	case "AWS::StackId":
		return e.StackID(), nil
	case "AWS::Partition":
		return "aws", nil
	case "AWS::URLSuffix":
		return "amazonaws.com", nil
	}
	if strings.HasPrefix(name, "AWS::") {
		return nil, fmt.Errorf("%w: pseudo parameter %s", ErrUnresolvable, name)
	}
	if p, ok := e.Template.Parameters[name]; ok {
		// Only a plain parameter's default is known here; an SSM-typed one
		// would need a parameter store the local cloud does not run.
		if p.Default == nil || strings.HasPrefix(p.Type, "AWS::") {
			return nil, fmt.Errorf("%w: parameter %s (%s)", ErrUnresolvable, name, p.Type)
		}
		return p.Default, nil
	}
	return e.getAtt(name, "")
}

func (e *Evaluator) getAtt(id, attr string) (any, error) {
	what := "Ref " + id
	if attr != "" {
		what = "Fn::GetAtt " + id + "." + attr
	}
	r, ok := e.Template.Resources[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s: no such resource in the template", ErrUnresolvable, what)
	}
	ph, ok := e.Physical[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s: the local cloud does not run %s resources", ErrUnresolvable, what, r.Type)
	}
	v := attribute(ph, attr)
	if v == "" {
		return nil, fmt.Errorf("%w: %s: %s has no such attribute locally", ErrUnresolvable, what, r.Type)
	}
	return v, nil
}

func scalar(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case bool:
		return strconv.FormatBool(x), nil
	case json.Number:
		return x.String(), nil
	}
	return "", fmt.Errorf("%w: %v is not a string", ErrUnresolvable, v)
}

var dynamicRef = regexp.MustCompile(`\{\{resolve:([^:}]+):([^}]*)\}\}`)

// resolveDynamic replaces each {{resolve:secretsmanager:id:SecretString:key:stage:version}}
// in s with the secret's value (or its JSON key's).
func (e *Evaluator) resolveDynamic(ctx context.Context, s string) (string, error) {
	var firstErr error
	out := dynamicRef.ReplaceAllStringFunc(s, func(m string) string {
		sub := dynamicRef.FindStringSubmatch(m)
		v, err := e.secretRef(ctx, sub[1], sub[2])
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("dynamic reference %s: %w", m, err)
		}
		return v
	})
	if firstErr != nil {
		return "", firstErr
	}
	return out, nil
}

func (e *Evaluator) secretRef(ctx context.Context, service, ref string) (string, error) {
	if service != "secretsmanager" {
		return "", fmt.Errorf("%w: dynamic references to %s", ErrUnresolvable, service)
	}
	if e.Secrets == nil {
		return "", fmt.Errorf("%w: no Secrets Manager to read", ErrUnresolvable)
	}
	parts := strings.Split(ref, ":")
	// The secret id is a name or a full ARN, whose own colons split it
	// into its 7 fields (arn:aws:secretsmanager:region:account:secret:name).
	n := 1
	if parts[0] == "arn" {
		n = 7
	}
	if len(parts) < n {
		return "", fmt.Errorf("%w: secret id %q", ErrUnresolvable, ref)
	}
	id, rest := strings.Join(parts[:n], ":"), parts[n:]
	field := func(i int) string {
		if i < len(rest) {
			return rest[i]
		}
		return ""
	}
	if f := field(0); f != "" && f != "SecretString" {
		return "", fmt.Errorf("%w: secret field %q (only SecretString)", ErrUnresolvable, f)
	}
	in := &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)}
	if st := field(2); st != "" {
		in.VersionStage = aws.String(st)
	}
	if vid := field(3); vid != "" {
		in.VersionId = aws.String(vid)
	}
	out, err := e.Secrets.GetSecretValue(ctx, in)
	if err != nil {
		return "", fmt.Errorf("localcloud: read secret %s: %w", id, err)
	}
	val := aws.ToString(out.SecretString)
	key := field(1)
	if key == "" {
		return val, nil
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(val), &obj); err != nil {
		return "", fmt.Errorf("%w: secret %s is not JSON, so it has no key %q", ErrUnresolvable, id, key)
	}
	kv, ok := obj[key]
	if !ok {
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return "", fmt.Errorf("%w: secret %s has no key %q (it has %v)", ErrUnresolvable, id, key, keys)
	}
	return scalar(kv)
}
