package oncepay_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay"
	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
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
	rs := g["ses:SendEmail"]
	identity, configSet := false, false
	for _, r := range rs {
		identity = identity || strings.HasSuffix(r, ":identity/${"+s.logicalID(t, w.EmailIdentity)+"}") // its Ref: the address
		configSet = configSet || strings.Contains(r, ":configuration-set/${"+s.logicalID(t, w.EmailConfigurationSet)+"}")
	}
	if len(rs) != 2 || !identity || !configSet {
		t.Errorf("ses:SendEmail on %v, want the sender's identity and the configuration set", rs)
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

// A highly available cache (the prod profile's): two nodes in two zones
// with automatic failover, and a memory alarm on the fuller of the two,
// since the primary is -002 after a failover.
func TestAHighlyAvailableCacheAlarmsOnEitherNode(t *testing.T) {
	var c *oncepay.DedupCache
	_, _, js := synthAlone(t, func(stack awscdk.Stack) {
		vpc := awsec2.NewVpc(stack, jsii.String("Vpc"), &awsec2.VpcProps{MaxAzs: jsii.Number(2), NatGateways: jsii.Number(1)})
		c = oncepay.NewDedupCache(stack, "Cache", &oncepay.DedupCacheProps{Vpc: vpc, HighlyAvailable: true})
		awscloudwatch.NewAlarm(stack, jsii.String("Memory"), &awscloudwatch.AlarmProps{
			Metric: c.MemoryMetric(awscdk.Duration_Minutes(jsii.Number(5))), Threshold: jsii.Number(80), EvaluationPeriods: jsii.Number(1),
		})
	})
	for _, rg := range ofType(js, "AWS::ElastiCache::ReplicationGroup") {
		p := rg["Properties"].(map[string]any)
		if p["NumCacheClusters"] != float64(2) || p["AutomaticFailoverEnabled"] != true || p["MultiAZEnabled"] != true {
			t.Errorf("replication group %s", show(p))
		}
	}
	for _, a := range ofType(js, "AWS::CloudWatch::Alarm") {
		got := show(a["Properties"].(map[string]any)["Metrics"])
		for _, want := range []string{"MAX([node1,node2])", "-001", "-002", "DatabaseMemoryUsagePercentage"} {
			if !strings.Contains(got, want) {
				t.Errorf("the memory alarm's metrics lack %q: %s", want, got)
			}
		}
	}
}
