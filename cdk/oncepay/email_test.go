package oncepay_test

import (
	"testing"

	"github.com/oncepay/oncepay/cdk/oncepay"
	"github.com/oncepay/oncepay/internal/stackenv"
)

// TestTheEmailChannel (nag and cfn-lint see it in the ALB variant): with
// oncepay:emailFrom the worker gets the email
// channel: the sender's SES identity, a configuration set that suppresses
// bounced and complaining addresses, ses:SendEmail on those two only, and
// the variables that turn the channel on; without it, none of them.
func TestTheEmailChannel(t *testing.T) {
	s := synthALB(t)
	w := s.stack.Worker
	if w.EmailIdentity == nil || w.EmailConfigurationSet == nil {
		t.Fatal("no identity or configuration set")
	}
	id := s.resource(t, s.logicalID(t, w.EmailIdentity))["Properties"].(map[string]any)
	if id["EmailIdentity"] != emailFrom {
		t.Errorf("identity %s", show(id))
	}
	set := s.resource(t, s.logicalID(t, w.EmailConfigurationSet))["Properties"].(map[string]any)
	if !jsonEqual(set["SuppressionOptions"], map[string]any{"SuppressedReasons": []any{"BOUNCE", "COMPLAINT"}}) {
		t.Errorf("suppression %s", show(set["SuppressionOptions"]))
	}
	g := grantsOf(s.json, s.logicalID(t, w.Function.Role))
	if rs := g["ses:SendEmail"]; len(rs) != 2 {
		t.Errorf("ses:SendEmail on %v, want the identity and the configuration set", rs)
	}
	for a := range g {
		if len(a) > 4 && a[:4] == "ses:" && a != "ses:SendEmail" {
			t.Errorf("the worker may %s", a)
		}
	}
	env := envOf(t, s, w.Function)
	if env[stackenv.EmailFrom] != emailFrom || env[stackenv.EmailConfigurationSet] == "" {
		t.Errorf("environment %v", env)
	}

	plain := synth(t, oncepay.ProfileSandbox)
	if plain.stack.Worker.EmailIdentity != nil {
		t.Error("an email identity with no oncepay:emailFrom")
	}
	if _, on := envOf(t, plain, plain.stack.Worker.Function)[stackenv.EmailFrom]; on {
		t.Error("the email channel is on with no oncepay:emailFrom")
	}
}
