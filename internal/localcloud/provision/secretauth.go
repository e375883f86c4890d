package provision

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path"
	"strings"

	"github.com/oncepay/oncepay/internal/localcloud/secretsgate"
)

// newSessionToken is one function's AWS_SESSION_TOKEN: random, so the
// Secrets Manager gate can tell the functions apart by it.
func newSessionToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail (Go 1.24+)
	return "oncepay-local-" + hex.EncodeToString(b)
}

// SecretCallers is the Secrets Manager gate's authorization table
// (localcloud/secretsgate), from the template and the functions' resolved
// environments (envs, by logical id, as Envs returns them): each function's
// session token names it, with what its role lets it read.
// The role's policies are the AWS::IAM::Policy resources whose Roles hold
// it and the role's inline Policies; managed policies (ManagedPolicyArns)
// are not known locally and grant nothing here, so a function relying on
// one is refused locally rather than passed. A statement about
// GetSecretValue whose Resource cannot be resolved is an error.
func SecretCallers(t *Template, ev *Evaluator, envs map[string]map[string]string) (map[string]secretsgate.Caller, error) {
	keys, err := secretKeys(t, ev)
	if err != nil {
		return nil, err
	}
	out := map[string]secretsgate.Caller{}
	for _, id := range t.OfType("AWS::Lambda::Function") {
		props := t.Resources[id].Properties
		token := envs[id]["AWS_SESSION_TOKEN"]
		if token == "" {
			continue // no token, no caller: the gate refuses it
		}
		// A shared token (functions.json from before per-function tokens)
		// could not name the caller: provision again.
		if other, dup := out[token]; dup {
			return nil, fmt.Errorf("localcloud: functions %s and %s share a session token: run `make up` again", other.Function, id)
		}
		stmts, err := roleStatements(t, ev, props["Role"])
		if err != nil {
			return nil, fmt.Errorf("localcloud: function %s: %w", id, err)
		}
		out[token] = secretsgate.Caller{
			Function: id,
			MayRead: func(arn string) bool {
				if !allowed(stmts, "secretsmanager:GetSecretValue", arn) {
					return false
				}
				key, ok := keys[arn]
				return !ok || allowed(stmts, "kms:Decrypt", key)
			},
		}
	}
	return out, nil
}

// secretKeys maps each secret's ARN to its KmsKeyId's ARN, where both
// resolve (a secret without one uses the AWS-managed key, which any role
// in the account may use through Secrets Manager).
func secretKeys(t *Template, ev *Evaluator) (map[string]string, error) {
	out := map[string]string{}
	for _, id := range t.OfType("AWS::SecretsManager::Secret") {
		kid, ok := t.Resources[id].Properties["KmsKeyId"]
		if !ok {
			continue
		}
		arn, err := ev.Eval(map[string]any{"Ref": id})
		if err != nil {
			continue // not provisioned locally: nothing can read it anyway
		}
		key, err := resolveResources(t, ev, kid)
		if err != nil {
			return nil, fmt.Errorf("localcloud: secret %s: KmsKeyId %v: %w", id, kid, err)
		}
		if len(key) != 1 {
			return nil, fmt.Errorf("localcloud: secret %s: KmsKeyId %v names %d keys, not one", id, kid, len(key))
		}
		a, _ := arn.(string)
		out[a] = key[0]
	}
	return out, nil
}

// statement is one IAM statement, resolved: what the gate evaluates.
type statement struct {
	deny      bool
	actions   []string
	resources []string
}

// roleStatements resolves the statements of the policies attached to the
// role role (a function's Role: Fn::GetAtt [R, Arn]) that bear on reading
// a secret. A role the template does not define grants nothing.
func roleStatements(t *Template, ev *Evaluator, role any) ([]statement, error) {
	roleID, _, ok := Ref(role)
	if !ok {
		return nil, nil
	}
	r, ok := t.Resources[roleID]
	if !ok || r.Type != "AWS::IAM::Role" {
		return nil, nil
	}
	var docs []any
	if ps, ok := r.Properties["Policies"].([]any); ok {
		for _, p := range ps {
			if pm, ok := p.(map[string]any); ok {
				docs = append(docs, pm["PolicyDocument"])
			}
		}
	}
	for _, pid := range t.OfType("AWS::IAM::Policy") {
		props := t.Resources[pid].Properties
		roles, _ := props["Roles"].([]any)
		for _, rr := range roles {
			if id, _, ok := Ref(rr); ok && id == roleID {
				docs = append(docs, props["PolicyDocument"])
				break
			}
		}
	}
	var out []statement
	for _, d := range docs {
		dm, _ := d.(map[string]any)
		sts, ok := dm["Statement"].([]any)
		if !ok {
			sts = []any{dm["Statement"]}
		}
		for _, s := range sts {
			sm, ok := s.(map[string]any)
			if !ok {
				continue
			}
			// NotAction, NotResource and Condition are not evaluated: such an
			// Allow grants nothing here, and such a Deny denies everything it
			// could cover (every action and resource), so the gate errs
			// towards refusing either way.
			_, notA := sm["NotAction"]
			_, notR := sm["NotResource"]
			cond, hasCond := sm["Condition"]
			deny := sm["Effect"] == "Deny"
			if hasCond && !deny {
				// The one condition this gate knows: a key grant used only
				// through Secrets Manager (kms:ViaService), which is how
				// GetSecretValue decrypts. Any other leaves the Allow out.
				via, err := viaSecretsManager(ev, cond)
				if err != nil {
					return nil, fmt.Errorf("policy statement on %v: Condition: %w", sm["Action"], err)
				}
				hasCond = !via
			}
			if notA || notR || hasCond {
				if deny {
					out = append(out, statement{deny: true, actions: []string{"*"}, resources: []string{"*"}})
				}
				continue
			}
			st := statement{deny: deny, actions: strs(sm["Action"])}
			if !matchesAny(st.actions, "secretsmanager:GetSecretValue") && !matchesAny(st.actions, "kms:Decrypt") {
				continue
			}
			res, err := resolveResources(t, ev, sm["Resource"])
			if err != nil {
				return nil, fmt.Errorf("policy statement on %v: Resource: %w", st.actions, err)
			}
			st.resources = res
			out = append(out, st)
		}
	}
	return out, nil
}

// viaSecretsManager reports whether cond is exactly StringEquals
// kms:ViaService with secretsmanager.<region>.<URL suffix> among its values.
func viaSecretsManager(ev *Evaluator, cond any) (bool, error) {
	c, ok := cond.(map[string]any)
	if !ok || len(c) != 1 {
		return false, nil
	}
	eq, ok := c["StringEquals"].(map[string]any)
	if !ok || len(eq) != 1 {
		return false, nil
	}
	raw, ok := eq["kms:ViaService"]
	if !ok {
		return false, nil
	}
	list, ok := raw.([]any)
	if !ok {
		list = []any{raw}
	}
	suffix, err := ev.Eval(map[string]any{"Ref": "AWS::URLSuffix"})
	if err != nil {
		return false, err
	}
	want := fmt.Sprintf("secretsmanager.%s.%v", ev.Region, suffix)
	for _, el := range list {
		v, err := ev.Eval(el)
		if err != nil {
			return false, err
		}
		if v == want {
			return true, nil
		}
	}
	return false, nil
}

// allowed is IAM's evaluation over stmts: an explicit Deny wins, then an
// Allow, else the implicit deny.
func allowed(stmts []statement, action, resource string) bool {
	ok := false
	for _, s := range stmts {
		if !matchesAny(s.actions, action) || !matchesAny(s.resources, resource) {
			continue
		}
		if s.deny {
			return false
		}
		ok = true
	}
	return ok
}

// matchesAny reports whether one of patterns (IAM's * and ? wildcards)
// matches v; actions are case-insensitive, which lowering both gives.
func matchesAny(patterns []string, v string) bool {
	for _, p := range patterns {
		if wildcard(strings.ToLower(p), strings.ToLower(v)) {
			return true
		}
	}
	return false
}

// wildcard matches IAM's * (any run, "/" included) and ? (one character).
func wildcard(p, v string) bool {
	// path.Match treats "/" specially and knows [ ]: escape those, and
	// match segment-free by replacing "/" on both sides.
	r := strings.NewReplacer("/", "\x00", "[", "\\[", "]", "\\]", "\\", "\\\\")
	ok, err := path.Match(r.Replace(p), strings.ReplaceAll(v, "/", "\x00"))
	return err == nil && ok
}

// resolveResources evaluates a statement's Resource (one or a list). The
// local cloud runs no KMS keys, so a key's Ref or Arn stands for itself as
// arn:aws:kms:<region>:<account>:key/<logical id>, the same on the
// secret's KmsKeyId and in the policies, which is all the check compares.
func resolveResources(t *Template, ev *Evaluator, v any) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		list = []any{v}
	}
	var out []string
	for _, el := range list {
		if id, _, ok := Ref(el); ok && t.Resources[id].Type == "AWS::KMS::Key" {
			out = append(out, fmt.Sprintf("arn:aws:kms:%s:%s:key/%s", ev.Region, ev.AccountID, id))
			continue
		}
		r, err := ev.Eval(el)
		if err != nil {
			return nil, err
		}
		out = append(out, strs(r)...)
	}
	return out, nil
}

func strs(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}
