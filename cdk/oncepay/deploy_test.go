package oncepay_test

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
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

// elbContentTypes are the content types ELBv2 accepts in a fixed response
// (FixedResponseActionConfig), written here rather than read from the
// package, so the check does not trust the code it checks.
var elbContentTypes = []string{"text/plain", "text/css", "text/html", "application/javascript", "application/json"}

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
						if ct, _ := fr["ContentType"].(string); !slices.Contains(elbContentTypes, ct) {
							t.Errorf("%s: %s: fixed-response content type %q; ELB accepts only %v", name, id, ct, elbContentTypes)
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
// stacks in one account do not collide. It is deterministic
// (Names.uniqueResourceName hashes the path): a replacement of the proxy
// still wants its own name while the old proxy holds it, and fails, so a
// change that replaces it needs a new construct id (docs/deploy.md).
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

// The ALB variant watches its own 5xx and its targets': a Lambda target
// that fails behind the ALB shows there, not in the HTTP API's metrics, and
// the api's own 5xx answers (503, a replayed 502) are the target's, which
// HTTPCode_ELB_5XX_Count does not count.
func TestTheAlbVariantAlarmsOnItsOwn5xxAndItsTargets(t *testing.T) {
	s := synthALB(t)
	lb := s.logicalID(t, s.stack.Alb.LoadBalancer)
	for name, metric := range map[string]string{oncepay.AlarmAlb5xx: "HTTPCode_ELB_5XX_Count", oncepay.AlarmAlbTarget5xx: "HTTPCode_Target_5XX_Count"} {
		a, ok := s.stack.Monitoring.Alarms[name]
		if !ok {
			t.Errorf("no alarm %s", name)
			continue
		}
		p := s.resource(t, s.logicalID(t, a))["Properties"].(map[string]any)
		dims := show(p["Dimensions"])
		if p["Namespace"] != "AWS/ApplicationELB" || p["MetricName"] != metric || p["Statistic"] != "Sum" || p["Threshold"] != 1.0 ||
			p["ComparisonOperator"] != "GreaterThanOrEqualToThreshold" || !strings.Contains(dims, `"LoadBalancer"`) || !strings.Contains(dims, lb) {
			t.Errorf("%s: %s", name, show(p))
		}
	}
	for _, name := range []string{oncepay.AlarmAlb5xx, oncepay.AlarmAlbTarget5xx} {
		if _, ok := synth(t, oncepay.ProfileSandbox).stack.Monitoring.Alarms[name]; ok {
			t.Errorf("%s in a stack without an ALB", name)
		}
	}
}

// The ALB's own 404 is the published spec's application/json 404
// (GatewayMessage: {"message": …}, as the HTTP API's own 404), not a
// problem-shaped body under a content type that says plain JSON.
func TestTheAlbsOwn404IsTheSpecsGatewayMessage(t *testing.T) {
	s := synthALB(t)
	n := 0
	for id, r := range s.resourcesOfType("AWS::ElasticLoadBalancingV2::Listener") {
		for _, a := range r["Properties"].(map[string]any)["DefaultActions"].([]any) {
			fr, ok := a.(map[string]any)["FixedResponseConfig"].(map[string]any)
			if !ok {
				continue
			}
			n++
			var body map[string]any
			if err := json.Unmarshal([]byte(fr["MessageBody"].(string)), &body); err != nil {
				t.Fatalf("%s: body %v: %v", id, fr["MessageBody"], err)
			}
			if fr["StatusCode"] != "404" || fr["ContentType"] != "application/json" || !jsonEqual(body, map[string]any{"message": "Not Found"}) {
				t.Errorf("%s: fixed response %s, want 404 application/json {\"message\":\"Not Found\"}", id, show(fr))
			}
		}
	}
	if n != 1 {
		t.Errorf("%d fixed responses, want the listener's default", n)
	}
}

// The api reads the ALB's public keys where the stack says, for its Region
// and partition (https://public-keys.auth.elb.<Region>.<URL suffix>),
// not from a host it builds from the Region alone; a deployer sets
// another base with oncepay:albKeysUrl (GovCloud publishes its keys on S3).
func TestTheApiIsToldWhereTheAlbsKeysAre(t *testing.T) {
	keysURL := func(s *synthesized) string {
		vars := s.resource(t, s.logicalID(t, s.stack.Api.Function.Function))["Properties"].(map[string]any)["Environment"].(map[string]any)["Variables"].(map[string]any)
		if v, ok := vars[oncepay.EnvAlbKeysURL]; ok {
			return render(v)
		}
		return ""
	}
	if got := keysURL(synthALB(t)); got != "https://public-keys.auth.elb.${AWS::Region}.${AWS::URLSuffix}" {
		t.Errorf("%s = %s", oncepay.EnvAlbKeysURL, got)
	}
	const gov = "https://s3-us-gov-west-1.amazonaws.com/aws-elb-public-keys-prod-us-gov-west-1"
	s := synthVariant(t, "alb-govcloud", oncepay.ProfileSandbox, map[string]any{
		oncepay.ContextAlbCertificateArn: albCertificate, oncepay.ContextAlbCognitoDomainPrefix: "oncepay-test",
		oncepay.ContextAlbKeysURL: gov,
	})
	if got := keysURL(s); got != gov {
		t.Errorf("with %s: %s = %s", oncepay.ContextAlbKeysURL, oncepay.EnvAlbKeysURL, got)
	}
	if got := keysURL(synth(t, oncepay.ProfileSandbox)); got != "" {
		t.Errorf("without an ALB: %s = %s", oncepay.EnvAlbKeysURL, got)
	}
}

// The ledger exports its PostgreSQL log (failed logins, and DDL by its
// parameter group), with no fixed cluster identifier: prod retains the
// cluster, and a fixed name would fail the redeploy after a destroy.
func TestTheLedgerExportsItsLog(t *testing.T) {
	for name, s := range map[string]*synthesized{"sandbox": synth(t, oncepay.ProfileSandbox), "prod": synth(t, oncepay.ProfileProd)} {
		props := s.resource(t, s.logicalID(t, s.stack.Data.Ledger.Cluster))["Properties"].(map[string]any)
		if !jsonEqual(props["EnableCloudwatchLogsExports"], []string{"postgresql"}) {
			t.Errorf("%s: cluster exports %v", name, props["EnableCloudwatchLogsExports"])
		}
		if id, ok := props["DBClusterIdentifier"]; ok {
			t.Errorf("%s: a fixed cluster identifier %v", name, id)
		}
		found := false
		for _, r := range s.resourcesOfType("AWS::RDS::DBClusterParameterGroup") {
			if params, _ := r["Properties"].(map[string]any)["Parameters"].(map[string]any); params["log_statement"] == "ddl" {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no parameter group logs DDL", name)
		}
	}
}

// The ledger logs DDL, ALTER ROLE … PASSWORD '…' included, and Secrets
// Manager's PostgreSQL rotation sets passwords that way in plain text: so
// no secret of a stack whose cluster logs DDL rotates (docs/deploy.md, The
// ledger's log), and the ledger secret's suppression says why.
func TestNoRotationWritesPasswordsIntoTheDDLLog(t *testing.T) {
	for name, s := range variants(t) {
		if n := len(s.resourcesOfType("AWS::SecretsManager::RotationSchedule")); n != 0 {
			t.Errorf("%s: %d rotation schedules, with log_statement=ddl", name, n)
		}
		meta, _ := s.resource(t, s.logicalID(t, s.stack.Data.Ledger.Secret))["Metadata"].(map[string]any)
		if reason := show(meta); !strings.Contains(reason, "log_statement=ddl") {
			t.Errorf("%s: the ledger secret's SMG4 reason does not say why it does not rotate: %s", name, reason)
		}
	}
}

// Every VPC has DynamoDB's gateway endpoint (free); prod adds interface
// endpoints for SNS and Secrets Manager, the sandbox none (they cost by
// the hour).
func TestVpcEndpointsPerProfile(t *testing.T) {
	for name, want := range map[oncepay.Profile][]string{
		oncepay.ProfileSandbox: {},
		oncepay.ProfileProd:    {"secretsmanager", "sns"},
	} {
		s := synth(t, name)
		var gateway, iface []string
		for _, r := range s.resourcesOfType("AWS::EC2::VPCEndpoint") {
			p := r["Properties"].(map[string]any)
			svc := show(p["ServiceName"])
			switch p["VpcEndpointType"] {
			case "Gateway":
				gateway = append(gateway, svc)
			case "Interface":
				if p["PrivateDnsEnabled"] != true {
					t.Errorf("%s: endpoint %s without private DNS", name, svc)
				}
				iface = append(iface, svc)
			}
		}
		if len(gateway) != 1 || !strings.Contains(gateway[0], "dynamodb") {
			t.Errorf("%s: gateway endpoints %v, want DynamoDB's", name, gateway)
		}
		if len(iface) != len(want) {
			t.Errorf("%s: interface endpoints %v, want %v", name, iface, want)
		}
		for _, w := range want {
			if !slices.ContainsFunc(iface, func(s string) bool { return strings.Contains(s, "."+w) }) {
				t.Errorf("%s: no %s interface endpoint in %v", name, w, iface)
			}
		}
	}
}
