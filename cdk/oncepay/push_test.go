package oncepay_test

import (
	"slices"
	"testing"

	"github.com/oncepay/oncepay/cdk/oncepay"
)

// Issue 13, defect 12: the push topic fallback shows every device-less
// caller's payments to any subscriber of the topic. It is a sandbox's choice:
// on in sandbox, off in prod, where neither the worker nor the resolver's
// notification sweep is told to use the topic or may publish to it.
func TestPushTopicFallbackIsSandboxOnly(t *testing.T) {
	for _, c := range []struct {
		profile  oncepay.Profile
		fallback string
	}{{oncepay.ProfileSandbox, "true"}, {oncepay.ProfileProd, "false"}} {
		t.Run(string(c.profile), func(t *testing.T) {
			if got := c.profile.PushTopicFallback(); got != (c.fallback == "true") {
				t.Fatalf("%s.PushTopicFallback() = %v", c.profile, got)
			}
			s := synth(t, c.profile)
			st := s.stack
			topic := "${" + s.logicalID(t, st.Data.Push.Topic) + "}"
			for name, fn := range map[string]*oncepay.GoFunction{"worker": st.Worker.Function, "resolver": st.Resolver} {
				vars := s.resource(t, s.logicalID(t, fn.Function))["Properties"].(map[string]any)["Environment"].(map[string]any)["Variables"].(map[string]any)
				if got := render(vars[oncepay.EnvPushTopicFallback]); got != c.fallback {
					t.Errorf("%s %s = %q, want %q", name, oncepay.EnvPushTopicFallback, got, c.fallback)
				}
				publish := grantsOf(s.json, s.logicalID(t, fn.Role))["sns:Publish"]
				if granted := slices.Contains(publish, topic); granted != (c.fallback == "true") {
					t.Errorf("%s sns:Publish %v: topic granted = %v, want %v", name, publish, granted, c.fallback == "true")
				}
			}
		})
	}
}
