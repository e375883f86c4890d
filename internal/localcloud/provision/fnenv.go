package provision

import (
	"context"
	"fmt"
	"sort"
	"strconv"
)

// LocalSessionToken is the session token of the local cloud's static test
// credentials in RuntimeEnv. The Lambda runtime hands each function its
// role's credentials in AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
// AWS_SESSION_TOKEN; Envs replaces this one with a random token per
// function, so the Secrets Manager gate (localcloud/secretsgate) knows
// which function calls and serves it only what its role may read
// (SecretCallers).
const LocalSessionToken = "oncepay-local-session-token"

// EnvConfig is what Envs needs besides the template and its resources.
type EnvConfig struct {
	Region    string
	AccountID string
	StackName string
	Secrets   SecretGetter // dynamic references
	// Runtime is what the Lambda runtime sets in every function's
	// environment: region, credentials, and locally the SDK's endpoint
	// variables. It wins over the template, as Lambda's reserved variables do.
	Runtime map[string]string
	// Defaults fill only what the template leaves unset: the PSP
	// simulator's URL (a deployed function talks to Stripe's own endpoint).
	Defaults map[string]string
	// SessionTokens are the functions' AWS_SESSION_TOKENs by logical id
	// from an earlier provisioning, kept; a function without one gets a
	// new random token.
	SessionTokens map[string]string
}

// RuntimeEnv is the environment the local Lambda runtime gives every
// function: the region, the static test credentials, and the SDK's
// endpoint variables pointing at moto and DynamoDB Local.
func (c Config) RuntimeEnv() map[string]string {
	return map[string]string{
		"AWS_REGION":                        c.Region,
		"AWS_DEFAULT_REGION":                c.Region,
		"AWS_ACCESS_KEY_ID":                 "test",
		"AWS_SECRET_ACCESS_KEY":             "test",
		"AWS_SESSION_TOKEN":                 LocalSessionToken,
		"AWS_ENDPOINT_URL":                  c.AWSURL,
		"AWS_ENDPOINT_URL_DYNAMODB":         c.DynamoURL,
		"AWS_ENDPOINT_URL_DYNAMODB_STREAMS": c.DynamoURL,
	}
}

// Envs resolves every AWS::Lambda::Function's Environment.Variables to the
// local cloud's values (Evaluator: intrinsics over phys, dynamic references
// over Secrets Manager), adds the runtime's variables and Lambda's own
// (AWS_LAMBDA_FUNCTION_NAME, _MEMORY_SIZE, _TIMEOUT, _VERSION), and returns
// them by the function's logical id. A value it cannot resolve is an error
// naming the function, the variable and what failed.
func Envs(ctx context.Context, t *Template, phys map[string]Physical, c EnvConfig) (map[string]map[string]string, error) {
	ev := &Evaluator{Template: t, Physical: phys, Region: c.Region, AccountID: c.AccountID, StackName: c.StackName, Secrets: c.Secrets}
	out := map[string]map[string]string{}
	for _, id := range t.OfType("AWS::Lambda::Function") {
		props := t.Resources[id].Properties
		env := map[string]string{}
		vars, err := variables(props)
		if err != nil {
			return nil, fmt.Errorf("localcloud: function %s: %w", id, err)
		}
		names := make([]string, 0, len(vars))
		for k := range vars {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			v, err := ev.String(ctx, vars[k])
			if err != nil {
				return nil, fmt.Errorf("localcloud: function %s: variable %s: %w", id, k, err)
			}
			env[k] = v
		}
		for k, v := range c.Defaults {
			if _, set := env[k]; !set {
				env[k] = v
			}
		}
		for k, v := range c.Runtime {
			env[k] = v
		}
		// One token per function and provisioning (written to the 0600
		// functions.json): it names the function to the Secrets Manager gate.
		if _, ok := env["AWS_SESSION_TOKEN"]; ok {
			tok := c.SessionTokens[id]
			if tok == "" || tok == LocalSessionToken {
				tok = newSessionToken()
			}
			env["AWS_SESSION_TOKEN"] = tok
		}
		name := id
		if ph, ok := phys[id]; ok && ph.Name != "" {
			name = ph.Name
		}
		env["AWS_LAMBDA_FUNCTION_NAME"] = name
		env["AWS_LAMBDA_FUNCTION_VERSION"] = "$LATEST"
		env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] = numberProp(props, "MemorySize", 128)
		env["AWS_LAMBDA_FUNCTION_TIMEOUT"] = numberProp(props, "Timeout", 3)
		out[id] = env
	}
	return out, nil
}

func variables(props map[string]any) (map[string]any, error) {
	e, ok := props["Environment"]
	if !ok {
		return nil, nil
	}
	em, ok := e.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: Environment %v", ErrUnresolvable, e)
	}
	v, ok := em["Variables"]
	if !ok {
		return nil, nil
	}
	vm, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: Environment.Variables %v", ErrUnresolvable, v)
	}
	return vm, nil
}

func numberProp(props map[string]any, key string, def int) string {
	switch v := props[key].(type) {
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case string:
		return v
	}
	return strconv.Itoa(def)
}
