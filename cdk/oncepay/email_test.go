package oncepay_test

import (
	"strings"
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

// TestTheDedupCache (the ALB variant has the email channel, so the
// reminders and their cache): Valkey with eviction off, encrypted at rest
// with the customer key and in transit, on its own port in the private
// subnets, open to the worker's security group alone; the worker gets its
// rediss:// URL; its memory and the gate's fail-opens alarm.
func TestTheDedupCache(t *testing.T) {
	s := synthALB(t)
	c := s.stack.Cache
	if c == nil {
		t.Fatal("no dedup cache with the email channel")
	}
	rg := s.resource(t, s.logicalID(t, c.ReplicationGroup))["Properties"].(map[string]any)
	for k, want := range map[string]any{"Engine": "valkey", "AtRestEncryptionEnabled": true, "TransitEncryptionEnabled": true,
		"TransitEncryptionMode": "required", "Port": float64(oncepay.CachePort), "NumCacheClusters": float64(1),
		// ElastiCache's Valkey versions are 7.2, 8.0, 8.1, ...; 8.x takes the family valkey8.
		"EngineVersion": "8.0"} {
		if !jsonEqual(rg[k], want) {
			t.Errorf("%s = %v, want %v", k, rg[k], want)
		}
	}
	if rg["KmsKeyId"] == nil {
		t.Error("no customer key")
	}
	pg := s.resource(t, s.logicalID(t, c.ParameterGroup))["Properties"].(map[string]any)
	if pg["CacheParameterGroupFamily"] != "valkey8" {
		t.Errorf("parameter group family %v, want valkey8 (the engine version's)", pg["CacheParameterGroupFamily"])
	}
	if !jsonEqual(pg["Properties"], map[string]any{"maxmemory-policy": "noeviction"}) {
		t.Errorf("parameters %s", show(pg["Properties"]))
	}
	from := map[string]bool{}
	for _, r := range s.resourcesOfType("AWS::EC2::SecurityGroupIngress") {
		p := r["Properties"].(map[string]any)
		if jsonEqual(p["GroupId"], getAtt(s.logicalID(t, c.SecurityGroup), "GroupId")) {
			from[render(p["SourceSecurityGroupId"])] = true
		}
	}
	worker := "${" + s.logicalID(t, s.stack.Worker.Function.SecurityGroup) + ".GroupId}"
	if len(from) != 1 || !from[worker] {
		t.Errorf("cache ingress from %v, want the worker's alone", from)
	}
	if u := envOf(t, s, s.stack.Worker.Function)[stackenv.DedupCacheURL]; !strings.HasPrefix(u, "rediss://") {
		t.Errorf("the worker's cache URL %q", u)
	}
	for _, a := range []string{oncepay.AlarmCacheMemory, oncepay.AlarmCacheFailOpen} {
		if _, ok := s.stack.Monitoring.Alarms[a]; !ok {
			t.Errorf("no alarm %s", a)
		}
	}
	if synth(t, oncepay.ProfileSandbox).stack.Cache != nil {
		t.Error("a dedup cache without the email channel")
	}
}
