package oncepay_test

import (
	"regexp"
	"slices"
	"testing"

	"github.com/oncepay/oncepay/cdk/oncepay"
)

// What synth, cfn-lint and cdk-nag accept and AWS refuses at deploy time,
// checked here so a green synth means a stack that deploys.

// variants are the templates a deployer can synthesize.
func variants(t *testing.T) map[string]*synthesized {
	return map[string]*synthesized{
		"sandbox": synth(t, oncepay.ProfileSandbox),
		"prod":    synth(t, oncepay.ProfileProd),
		"alb":     synthALB(t),
	}
}

// ELB accepts five content types in a fixed response; problem+json, what
// the API answers with, is not one of them.
func TestFixedResponsesUseAContentTypeELBAccepts(t *testing.T) {
	seen := 0
	for name, s := range variants(t) {
		for _, typ := range []string{"AWS::ElasticLoadBalancingV2::Listener", "AWS::ElasticLoadBalancingV2::ListenerRule"} {
			for id, r := range s.resourcesOfType(typ) {
				props, _ := r["Properties"].(map[string]any)
				for _, key := range []string{"DefaultActions", "Actions"} {
					actions, _ := props[key].([]any)
					for _, a := range actions {
						fr, ok := a.(map[string]any)["FixedResponseConfig"].(map[string]any)
						if !ok {
							continue
						}
						seen++
						if ct, _ := fr["ContentType"].(string); !slices.Contains(oncepay.FixedResponseContentTypes, ct) {
							t.Errorf("%s: %s: fixed-response content type %q; ELB accepts only %v", name, id, ct, oncepay.FixedResponseContentTypes)
						}
					}
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no fixed-response action in any variant: the check checked nothing")
	}
}

// proxyName is what RDS accepts as a DBProxyName: a letter first, letters,
// digits and single hyphens, no hyphen last, at most 63.
var proxyName = regexp.MustCompile(`^[A-Za-z](?:[A-Za-z0-9]|-[A-Za-z0-9]){0,62}$`)

// uniqueName is CDK's Names.uniqueResourceName under the stack Oncepay:
// the path's ids and a hash of the path.
var uniqueName = regexp.MustCompile(`^OncepayProd[A-Za-z0-9]+[0-9A-F]{8}$`)

// The prod proxy's physical name is unique to its stack and path, so two
// stacks in one account do not collide and a replacement does not fail on
// its own name.
func TestTheLedgerProxyNameIsUniqueToItsStack(t *testing.T) {
	proxies := synth(t, oncepay.ProfileProd).resourcesOfType("AWS::RDS::DBProxy")
	if len(proxies) != 1 {
		t.Fatalf("prod has %d proxies, want 1", len(proxies))
	}
	for id, r := range proxies {
		name, _ := r["Properties"].(map[string]any)["DBProxyName"].(string)
		if !uniqueName.MatchString(name) {
			t.Errorf("%s: DBProxyName %q: want the stack's name, the path and a hash", id, name)
		}
		if !proxyName.MatchString(name) {
			t.Errorf("%s: DBProxyName %q is not a name RDS accepts", id, name)
		}
	}
}

// The two profiles are two stacks: their names differ, and the sandbox
// keeps the name the local cloud and the docs use.
func TestProfilesNameDifferentStacks(t *testing.T) {
	if s, p := oncepay.ProfileSandbox.StackName(), oncepay.ProfileProd.StackName(); s != "Oncepay" || p == s {
		t.Errorf("stack names: sandbox %q, prod %q", s, p)
	}
}
