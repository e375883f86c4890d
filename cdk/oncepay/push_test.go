package oncepay_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/cdk/oncepay"
)

// Issue 13, defect 12: the push topic fallback shows every device-less
// caller's payments to any subscriber of the topic. It is a sandbox's choice:
// on in sandbox, off in prod, where the worker (which also runs the
// notification sweep) is neither told to use the topic nor may publish to
// it; no other function pushes.
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
			for name, fn := range map[string]*oncepay.GoFunction{"worker": st.Worker.Function} {
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

// A failed push is finished by its own durable trigger: the worker
// function's schedule (inbox.Function), every minute. No other function
// pushes: the resolver holds no publish right at all.
func TestTheWorkerScheduleFinishesPendingNotifications(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	st := s.stack
	rule := s.resource(t, s.logicalID(t, st.Worker.SweepSchedule))["Properties"].(map[string]any)
	if got := rule["ScheduleExpression"]; got != "rate(1 minute)" {
		t.Errorf("sweep schedule %v, want rate(1 minute)", got)
	}
	targets, _ := rule["Targets"].([]any)
	fn := s.logicalID(t, st.Worker.Function.Function)
	if len(targets) != 1 || !strings.Contains(render(targets[0].(map[string]any)["Arn"]), fn) {
		t.Errorf("sweep schedule targets %v, want the worker %s", targets, fn)
	}
	if p := grantsOf(s.json, s.logicalID(t, st.Resolver.Role))["sns:Publish"]; len(p) != 0 {
		t.Errorf("the resolver may publish %v: only the worker pushes", p)
	}
}
