package oncepay_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/oncepay/oncepay/cdk/oncepay"
)

// looksSecret matches values that are, or fetch, a secret: a dynamic
// reference CloudFormation resolves into the configuration, a Stripe key
// or signing secret, a password in a URL.
var looksSecret = regexp.MustCompile(`\{\{resolve:|\b(sk|rk)_(test|live)_|whsec_|://[^/@:]+:[^/@]+@`)

// TestNoFunctionEnvironmentHoldsASecret (issue 17 item 2): no function of
// the sandbox, prod or ALB stacks, nor one with an imported PSP secret, has
// a secret value or a dynamic reference to one in its environment (which
// lambda:GetFunctionConfiguration shows); a variable that names a secret
// holds its ARN, a Ref to a secret of the stack or the imported ARN.
func TestNoFunctionEnvironmentHoldsASecret(t *testing.T) {
	imported := "arn:aws:secretsmanager:eu-west-1:111111111111:secret:oncepay/psp-AbCdEf"
	variants := map[string]*synthesized{
		"sandbox":  synth(t, oncepay.ProfileSandbox),
		"prod":     synth(t, oncepay.ProfileProd),
		"alb":      synthALB(t),
		"imported": synthVariant(t, "imported-psp", oncepay.ProfileSandbox, map[string]any{oncepay.ContextPSPSecretArn: imported}),
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
				case name == "imported" && k == oncepay.EnvPSPSecretArn && v == imported:
				default:
					t.Errorf("%s: %s: %s = %s, want a Ref to a secret of the stack", name, id, k, val)
				}
				readers++
			}
		}
		// The api, the resolver and the webhook read the PSP secret, the
		// migration the ledger's.
		if readers != 4 {
			t.Errorf("%s: %d functions are given a secret's ARN, want 4", name, readers)
		}
	}
}

// TestNoRegionDependentMapping (issue 17 item 5): no template holds a
// Mappings section or a Fn::FindInMap (the CDK's per-Region layer and
// account maps: a deploy to a Region outside the map fails).
func TestNoRegionDependentMapping(t *testing.T) {
	for name, s := range map[string]*synthesized{"sandbox": synth(t, oncepay.ProfileSandbox), "prod": synth(t, oncepay.ProfileProd), "alb": synthALB(t)} {
		if m, ok := s.json["Mappings"]; ok {
			t.Errorf("%s: Mappings %s", name, show(m))
		}
		if strings.Contains(show(s.json), "Fn::FindInMap") {
			t.Errorf("%s: a Fn::FindInMap is left in the template", name)
		}
	}
}

// TestAnImportedSecretsKeyIsGrantedToItsReaders: with
// oncepay:pspSecretKeyArn, the api, the resolver and the webhook may
// decrypt the imported secret's key (their reads are refused otherwise),
// and no other function may.
func TestAnImportedSecretsKeyIsGrantedToItsReaders(t *testing.T) {
	const key = "arn:aws:kms:eu-west-1:111111111111:key/11111111-2222-3333-4444-555555555555"
	s := synthVariant(t, "imported-psp-key", oncepay.ProfileSandbox, map[string]any{
		oncepay.ContextPSPSecretArn:    "arn:aws:secretsmanager:eu-west-1:111111111111:secret:oncepay/psp-AbCdEf",
		oncepay.ContextPSPSecretKeyArn: key,
	})
	st := s.stack
	for name, fn := range map[string]*oncepay.GoFunction{"api": st.Api.Function, "resolver": st.Resolver, "webhook": st.Webhook, "worker": st.Worker.Function, "relay": st.Relay.Function} {
		got := grantsOf(s.json, s.logicalID(t, fn.Role))["kms:Decrypt"]
		has := false
		for _, r := range got {
			has = has || r == key
		}
		if want := name == "api" || name == "resolver" || name == "webhook"; has != want {
			t.Errorf("%s: kms:Decrypt on the PSP secret's key = %v, want %v (%v)", name, has, want, got)
		}
	}
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

// TestVariantTemplates synthesizes the prod and ALB variants (what make
// test-cfn lints, written to $ONCEPAY_TEMPLATES_OUT) and checks each has
// the resources only it holds.
func TestVariantTemplates(t *testing.T) {
	if n := len(synth(t, oncepay.ProfileProd).resourcesOfType("AWS::RDS::DBProxy")); n != 1 {
		t.Errorf("prod: %d RDS proxies, want 1", n)
	}
	if n := len(synthALB(t).resourcesOfType("AWS::ElasticLoadBalancingV2::LoadBalancer")); n != 1 {
		t.Errorf("alb: %d load balancers, want 1", n)
	}
}
