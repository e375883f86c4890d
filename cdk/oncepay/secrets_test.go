package oncepay_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay"
)

// looksSecret matches values that are, or fetch, a secret: a dynamic
// reference CloudFormation resolves into the configuration, a Stripe key
// or signing secret, a password in a URL.
var looksSecret = regexp.MustCompile(`\{\{resolve:|\b(sk|rk)_(test|live)_|whsec_|://[^/@:]+:[^/@]+@`)

// Imported PSP secrets and their keys, for the variants that import them.
const (
	importedKeySecret     = "arn:aws:secretsmanager:eu-west-1:111111111111:secret:oncepay/psp-key-AbCdEf"
	importedWebhookSecret = "arn:aws:secretsmanager:eu-west-1:111111111111:secret:oncepay/psp-webhook-GhIjKl"
	importedKeyKms        = "arn:aws:kms:eu-west-1:111111111111:key/11111111-2222-3333-4444-555555555555"
	importedWebhookKms    = "arn:aws:kms:eu-west-1:111111111111:key/66666666-7777-8888-9999-000000000000"
)

// synthImported is the sandbox with both PSP secrets imported, each under
// a customer-managed key of its own.
func synthImported(t *testing.T) *synthesized {
	t.Helper()
	return synthVariant(t, "imported-psp", oncepay.ProfileSandbox, map[string]any{
		oncepay.ContextPSPKeySecretArn: importedKeySecret, oncepay.ContextPSPKeySecretKmsKey: importedKeyKms,
		oncepay.ContextWebhookSecretArn: importedWebhookSecret, oncepay.ContextWebhookSecretKmsKey: importedWebhookKms,
	})
}

// TestNoFunctionEnvironmentHoldsASecret (issue 17 item 2): no function of
// the sandbox, prod or ALB stacks, nor one with imported PSP secrets, has
// a secret value or a dynamic reference to one in its environment (which
// lambda:GetFunctionConfiguration shows); a variable that names a secret
// holds its ARN, a Ref to a secret of the stack or the imported ARN. The
// one other variable naming Secrets Manager is its endpoint.
func TestNoFunctionEnvironmentHoldsASecret(t *testing.T) {
	variants := map[string]*synthesized{
		"sandbox":  synth(t, oncepay.ProfileSandbox),
		"prod":     synth(t, oncepay.ProfileProd),
		"alb":      synthALB(t),
		"imported": synthImported(t),
	}
	for name, s := range variants {
		secrets := s.resourcesOfType("AWS::SecretsManager::Secret")
		readers := 0
		for id, r := range s.resourcesOfType("AWS::Lambda::Function") {
			env, _ := r["Properties"].(map[string]any)["Environment"].(map[string]any)
			vars, _ := env["Variables"].(map[string]any)
			for k, v := range vars {
				val := render(v)
				if looksSecret.MatchString(val) || strings.Contains(strings.ToLower(k), "password") {
					t.Errorf("%s: %s: %s holds a secret or fetches one: %s", name, id, k, val)
				}
				if k == oncepay.EnvSecretsManagerEndpoint {
					if val != "https://secretsmanager.${AWS::Region}.${AWS::URLSuffix}" {
						t.Errorf("%s: %s: %s = %s, want the endpoint", name, id, k, val)
					}
					continue
				}
				if !strings.HasSuffix(k, "_SECRET_ARN") && strings.Contains(k, "SECRET") {
					t.Errorf("%s: %s: %s names a secret but is no ARN of one: %s", name, id, k, val)
				}
				if !strings.HasSuffix(k, "_SECRET_ARN") {
					continue
				}
				m, _ := v.(map[string]any)
				ref, isRef := m["Ref"].(string)
				switch {
				case isRef && secrets[ref] != nil:
				case name == "imported" && k == oncepay.EnvPSPKeySecretArn && v == importedKeySecret:
				case name == "imported" && k == oncepay.EnvWebhookSecretArn && v == importedWebhookSecret:
				default:
					t.Errorf("%s: %s: %s = %s, want a Ref to a secret of the stack", name, id, k, val)
				}
				readers++
				// internal/secrets builds no host itself in the stack: the
				// Region alone gets amazonaws.eu and new partitions wrong.
				if _, ok := vars[oncepay.EnvSecretsManagerEndpoint]; !ok {
					t.Errorf("%s: %s reads a secret (%s) without %s", name, id, k, oncepay.EnvSecretsManagerEndpoint)
				}
			}
		}
		// The api, the resolver and the reconciliation read the PSP key's
		// secret, the webhook the signing secret's, the migration the
		// ledger's.
		if readers != 5 {
			t.Errorf("%s: %d functions are given a secret's ARN, want 5", name, readers)
		}
	}
}

// secretReaders lists, for the secret whose ARN renders as arn, the roles
// whose policies allow secretsmanager:GetSecretValue on it (or on "*"),
// and the function each role belongs to ("" for a role of no function).
func secretReaders(t *testing.T, s *synthesized, arn string) map[string]bool {
	t.Helper()
	roles := map[string]string{}
	for id, fn := range s.functions() {
		roles[s.logicalID(t, fn.Role)] = id
	}
	out := map[string]bool{}
	for pid, r := range s.resourcesOfType("AWS::IAM::Policy") {
		p := r["Properties"].(map[string]any)
		for _, st := range p["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			st := st.(map[string]any)
			if st["Effect"] != "Allow" || !slices.ContainsFunc(strs(st["Action"]), func(a string) bool {
				return a == "secretsmanager:GetSecretValue" || a == "secretsmanager:*" || a == "*"
			}) || !slices.ContainsFunc(strs(st["Resource"]), func(r string) bool { return r == arn || r == "*" }) {
				continue
			}
			for _, role := range p["Roles"].([]any) {
				fn, ok := roles[strings.Trim(render(role), "${}")]
				if !ok {
					fn = "policy " + pid + " of a role of no function"
				}
				out[fn] = true
			}
		}
	}
	return out
}

// functions are the stack's functions by name.
func (s *synthesized) functions() map[string]*oncepay.GoFunction {
	st := s.stack
	return map[string]*oncepay.GoFunction{
		"api": st.Api.Function, "relay": st.Relay.Function, "worker": st.Worker.Function,
		"resolver": st.Resolver, "webhook": st.Webhook, "migrate": st.Migration.Function,
		"reconcile": st.Reconciliation.Function,
	}
}

// The review of issue 17: with one PSP secret holding both fields, the
// internet-facing webhook could read the Stripe key that charges and
// refunds, and the api and the resolver the signing secret (a forged
// webhook). Each secret is now read by its own functions alone: the key by
// the api, the resolver and the reconciliation (the PSP's lists, its
// reversals' refunds), the signing secret by the webhook, in every variant,
// created or imported.
func TestEachPSPSecretIsReadOnlyByItsOwnFunctions(t *testing.T) {
	for name, s := range map[string]*synthesized{
		"sandbox": synth(t, oncepay.ProfileSandbox), "prod": synth(t, oncepay.ProfileProd),
		"alb": synthALB(t), "imported": synthImported(t),
	} {
		st := s.stack
		arn := func(sec constructs.IConstruct, imported string) string {
			if name == "imported" {
				return imported
			}
			return "${" + s.logicalID(t, sec) + "}"
		}
		for secret, c := range map[string]struct {
			arn  string
			want []string
		}{
			"the API key's":        {arn(st.Psp.KeySecret, importedKeySecret), []string{"api", "reconcile", "resolver"}},
			"the signing secret's": {arn(st.Psp.WebhookSecret, importedWebhookSecret), []string{"webhook"}},
		} {
			got := secretReaders(t, s, c.arn)
			var names []string
			for fn := range got {
				names = append(names, fn)
			}
			slices.Sort(names)
			if !slices.Equal(names, c.want) {
				t.Errorf("%s: %s secret (%s) may be read by %v, want %v alone", name, secret, c.arn, names, c.want)
			}
		}
		if st.Psp.KeySecret == st.Psp.WebhookSecret {
			t.Errorf("%s: one secret for both", name)
		}
	}
}

// TestNoRegionDependentMapping (issue 17 item 5): no template holds a
// Mappings section or a Fn::FindInMap (the CDK's per-Region layer and
// account maps: a deploy to a Region outside the map fails).
func TestNoRegionDependentMapping(t *testing.T) {
	variants := map[string]*synthesized{"sandbox": synth(t, oncepay.ProfileSandbox), "prod": synth(t, oncepay.ProfileProd), "alb": synthALB(t)}
	// Across Regions each stack names its Region, where CDK would fill
	// such maps in.
	for _, rs := range []*regionStacks{synthTwoRegions(t), synthTwoRegionsProd(t), synthStrongRegions(t)} {
		for _, s := range rs.each() {
			variants[s.String()+" ("+string(s.stack.Regions.Claims)+")"] = s
		}
	}
	for name, s := range variants {
		if m, ok := s.json["Mappings"]; ok {
			t.Errorf("%s: Mappings %s", name, show(m))
		}
		if strings.Contains(show(s.json), "Fn::FindInMap") {
			t.Errorf("%s: a Fn::FindInMap is left in the template", name)
		}
	}
}

// TestAnImportedSecretsKeyIsGrantedToItsReaders: each imported secret's
// customer-managed key may be used to decrypt by that secret's readers
// (their reads are refused otherwise), and by no other function.
func TestAnImportedSecretsKeyIsGrantedToItsReaders(t *testing.T) {
	s := synthImported(t)
	for name, fn := range s.functions() {
		got := grantsOf(s.json, s.logicalID(t, fn.Role))["kms:Decrypt"]
		for key, readers := range map[string][]string{importedKeyKms: {"api", "reconcile", "resolver"}, importedWebhookKms: {"webhook"}} {
			if has, want := slices.Contains(got, key), slices.Contains(readers, name); has != want {
				t.Errorf("%s: kms:Decrypt on %s = %v, want %v (%v)", name, key, has, want, got)
			}
		}
	}
	// With the AWS-managed key there is no key to grant.
	m := synthVariant(t, "imported-psp-aws-managed", oncepay.ProfileSandbox, map[string]any{
		oncepay.ContextPSPKeySecretArn: importedKeySecret, oncepay.ContextPSPKeySecretKmsKey: oncepay.AwsManagedKey,
	})
	if m.stack.Psp.KeySecretKey != nil {
		t.Errorf("aws-managed: a key %v", m.stack.Psp.KeySecretKey)
	}
	if got := grantsOf(m.json, m.logicalID(t, m.stack.Api.Function.Role))["secretsmanager:GetSecretValue"]; !slices.Contains(got, importedKeySecret) {
		t.Errorf("aws-managed: the api may not read the imported key secret: %v", got)
	}
}

// An imported PSP secret without its KMS key is refused at synth: with a
// customer-managed key, every read would be refused at run time and every
// payment wait as UNKNOWN, which nothing at synth or deploy shows. The
// deployer names the key, or says the secret uses the AWS-managed one.
// The gone single-secret contexts, a key without a secret and one secret
// for both are refused too.
func TestAnImportedPSPSecretNeedsItsKey(t *testing.T) {
	parse := func(extra map[string]any) error {
		ctx := cdkContext(t, "")
		for k, v := range extra {
			(*ctx)[k] = v
		}
		_, err := oncepay.StackPropsFromContext(awscdk.NewApp(&awscdk.AppProps{Context: ctx}))
		return err
	}
	for name, bad := range map[string]map[string]any{
		"the key secret without its key":     {oncepay.ContextPSPKeySecretArn: importedKeySecret},
		"the webhook secret without its key": {oncepay.ContextWebhookSecretArn: importedWebhookSecret},
		"a key without a secret":             {oncepay.ContextWebhookSecretKmsKey: importedWebhookKms},
		"an alias for the key": {oncepay.ContextPSPKeySecretArn: importedKeySecret,
			oncepay.ContextPSPKeySecretKmsKey: "arn:aws:kms:eu-west-1:111111111111:alias/oncepay"},
		"one secret for both": {oncepay.ContextPSPKeySecretArn: importedKeySecret, oncepay.ContextPSPKeySecretKmsKey: importedKeyKms,
			oncepay.ContextWebhookSecretArn: importedKeySecret, oncepay.ContextWebhookSecretKmsKey: importedKeyKms},
		"the gone single secret":     {oncepay.ContextPSPSecretArn: importedKeySecret},
		"the gone single secret key": {oncepay.ContextPSPSecretKeyArn: importedKeyKms},
	} {
		if err := parse(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for name, good := range map[string]map[string]any{
		"a customer-managed key": {oncepay.ContextPSPKeySecretArn: importedKeySecret, oncepay.ContextPSPKeySecretKmsKey: importedKeyKms},
		"the AWS-managed key":    {oncepay.ContextWebhookSecretArn: importedWebhookSecret, oncepay.ContextWebhookSecretKmsKey: oncepay.AwsManagedKey},
	} {
		if err := parse(good); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Code that builds the stack without context is held to the same rule.
	defer func() {
		if recover() == nil {
			t.Error("NewPsp took an imported secret without its key")
		}
	}()
	oncepay.NewPsp(awscdk.NewStack(awscdk.NewApp(nil), jsii.String("S"), nil), "Psp",
		&oncepay.PspProps{KeySecret: oncepay.ImportedSecret{Arn: importedKeySecret}})
}

// TestTheGoneRevisionContextIsRefused: oncepay:pspSecretRevision did a
// deploy's re-read; with run-time reads it would do nothing, so it is
// refused, as a string or as a number.
func TestTheGoneRevisionContextIsRefused(t *testing.T) {
	for _, v := range []any{"2", 2} {
		ctx := cdkContext(t, oncepay.ProfileSandbox)
		(*ctx)[oncepay.ContextPSPSecretRevision] = v
		app := awscdk.NewApp(&awscdk.AppProps{Context: ctx})
		if _, err := oncepay.StackPropsFromContext(app); err == nil {
			t.Errorf("%v: accepted", v)
		}
	}
}

// TestVariantTemplates synthesizes the prod and ALB variants and the
// stacks across Regions (what make test-cfn lints, written to
// $ONCEPAY_TEMPLATES_OUT) and checks each has the resources only it holds.
func TestVariantTemplates(t *testing.T) {
	if n := len(synth(t, oncepay.ProfileProd).resourcesOfType("AWS::RDS::DBProxy")); n != 1 {
		t.Errorf("prod: %d RDS proxies, want 1", n)
	}
	if n := len(synthALB(t).resourcesOfType("AWS::ElasticLoadBalancingV2::LoadBalancer")); n != 1 {
		t.Errorf("alb: %d load balancers, want 1", n)
	}
	// Across Regions: a stack per Region, the primary's with the global
	// tables and cluster (regions-<region>, regions-prod-…, regions-strong-…).
	for _, rs := range []*regionStacks{synthTwoRegions(t), synthTwoRegionsProd(t), synthStrongRegions(t)} {
		if n := len(rs.primary().resourcesOfType("AWS::RDS::GlobalCluster")); n != 1 {
			t.Errorf("%s: %d global clusters, want 1", rs.primary(), n)
		}
	}
}
