package oncepay_test

import (
	"testing"

	"github.com/oncepay/oncepay/cdk/oncepay"
	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
)

// TestDeviceRegistry: the devices function logs in to the ledger and, with
// a platform application configured, may make endpoints under it and
// enable or delete that application's endpoints, nothing else of SNS;
// without one it has no SNS right and no application in its environment
// (a registration then answers 422).
func TestDeviceRegistry(t *testing.T) {
	t.Run("with a platform application", func(t *testing.T) {
		s := synthALB(t)
		fn := s.stack.Devices.Function
		g := grantsOf(s.json, s.logicalID(t, fn.Role))
		if rs := g["sns:CreatePlatformEndpoint"]; len(rs) != 1 || rs[0] != pushApp {
			t.Errorf("CreatePlatformEndpoint on %v, want %s", rs, pushApp)
		}
		endpoints := oncepay.PlatformEndpointsArn(pushApp)
		for _, a := range []string{"sns:SetEndpointAttributes", "sns:DeleteEndpoint"} {
			if rs := g[a]; len(rs) != 1 || rs[0] != endpoints {
				t.Errorf("%s on %v, want %s", a, rs, endpoints)
			}
		}
		for _, never := range []string{"sns:Publish", "sns:CreateTopic", "sns:DeletePlatformApplication"} {
			if _, ok := g[never]; ok {
				t.Errorf("the devices role may %s", never)
			}
		}
		if v := envOf(t, s, fn)[stackenv.PushPlatformApps]; v != pushApp {
			t.Errorf("%s = %q", stackenv.PushPlatformApps, v)
		}
		if len(g["rds-db:connect"]) != 1 {
			t.Errorf("rds-db:connect %v, want the app user's", g["rds-db:connect"])
		}
	})
	t.Run("without", func(t *testing.T) {
		s := synth(t, oncepay.ProfileSandbox)
		fn := s.stack.Devices.Function
		for a := range grantsOf(s.json, s.logicalID(t, fn.Role)) {
			if len(a) > 4 && a[:4] == "sns:" {
				t.Errorf("the devices role may %s with no platform application", a)
			}
		}
		if v, ok := envOf(t, s, fn)[stackenv.PushPlatformApps]; ok {
			t.Errorf("%s = %q with no platform application", stackenv.PushPlatformApps, v)
		}
	})
}

// envOf is a function's environment in the template, rendered.
func envOf(t *testing.T, s *synthesized, fn *oncepay.GoFunction) map[string]string {
	t.Helper()
	out := map[string]string{}
	e, _ := s.resource(t, s.logicalID(t, fn.Function))["Properties"].(map[string]any)["Environment"].(map[string]any)
	vars, _ := e["Variables"].(map[string]any)
	for k, v := range vars {
		out[k] = render(v)
	}
	return out
}
