package oncepay_test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay"
	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
)

// What a first `cdk deploy` into a new account would break that cfn-lint
// and cdk-nag do not see: each test reads the synthesized templates.

// firstDeployVariants are the templates a new account receives.
func firstDeployVariants(t *testing.T) map[string]*synthesized {
	t.Helper()
	out := map[string]*synthesized{
		"sandbox": synth(t, oncepay.ProfileSandbox),
		"prod":    synth(t, oncepay.ProfileProd),
		"alb":     synthALB(t),
	}
	for _, s := range synthTwoRegions(t).each() {
		out["regions-"+s.region()] = s
	}
	return out
}

// A topic policy replaces the topic's default one, whose account-wide allow
// is what lets CloudWatch publish: the alarm topic's own policy must allow
// cloudwatch.amazonaws.com, for this account's alarms only, and so must
// its key's.
func TestAlarmTopicLetsCloudWatchPublish(t *testing.T) {
	for name, s := range firstDeployVariants(t) {
		t.Run(name, func(t *testing.T) {
			topic := s.logicalID(t, s.stack.Monitoring.Topic)
			var allows []map[string]any
			for _, p := range s.resourcesOfType("AWS::SNS::TopicPolicy") {
				props := p["Properties"].(map[string]any)
				if !jsonEqual(props["Topics"], []any{ref(topic)}) {
					continue
				}
				for _, st := range props["PolicyDocument"].(map[string]any)["Statement"].([]any) {
					st := st.(map[string]any)
					if st["Effect"] == "Allow" && jsonEqual(st["Principal"], map[string]any{"Service": "cloudwatch.amazonaws.com"}) {
						allows = append(allows, st)
					}
				}
			}
			if len(allows) != 1 {
				t.Fatalf("the alarm topic's policy has %d statements letting CloudWatch publish, want 1: every alarm action would fail", len(allows))
			}
			st := allows[0]
			if !slices.Equal(strs(st["Action"]), []string{"sns:Publish"}) {
				t.Errorf("CloudWatch may %v on the alarm topic, want sns:Publish alone", strs(st["Action"]))
			}
			wantSourceConditions(t, s, "the topic's statement", st)

			key := s.logicalID(t, s.stack.Data.Key)
			var keyStatements int
			for _, st := range s.resource(t, key)["Properties"].(map[string]any)["KeyPolicy"].(map[string]any)["Statement"].([]any) {
				st := st.(map[string]any)
				if jsonEqual(st["Principal"], map[string]any{"Service": "cloudwatch.amazonaws.com"}) {
					keyStatements++
					wantSourceConditions(t, s, "the key's statement", st)
				}
			}
			if keyStatements != 1 {
				t.Errorf("%d key statements for CloudWatch, want 1", keyStatements)
			}
		})
	}
}

// regionIn is how s's template names its Region: a Region stack's is
// fixed at synth.
func regionIn(s *synthesized) string {
	if s.stack.Regions != nil {
		return s.region()
	}
	return "${AWS::Region}"
}

func wantSourceConditions(t *testing.T, s *synthesized, what string, st map[string]any) {
	t.Helper()
	c, _ := st["Condition"].(map[string]any)
	account, _ := c["StringEquals"].(map[string]any)
	arn, _ := c["ArnLike"].(map[string]any)
	if !jsonEqual(account["aws:SourceAccount"], ref("AWS::AccountId")) {
		t.Errorf("%s: aws:SourceAccount %s, want this account", what, show(account["aws:SourceAccount"]))
	}
	if got := render(arn["aws:SourceArn"]); got != "arn:${AWS::Partition}:cloudwatch:"+regionIn(s)+":${AWS::AccountId}:alarm:*" {
		t.Errorf("%s: aws:SourceArn %s, want this account's alarms in this Region", what, got)
	}
}

// AWS keeps 100 executions unreserved (the whole quota when it is
// smaller), and a new account's quota is often 10 or 50: the sandbox
// reserves none. Prod keeps the resolver's one sweep at a time.
func TestTheSandboxReservesNoConcurrency(t *testing.T) {
	for name, s := range firstDeployVariants(t) {
		var reserved []string
		for id, fn := range s.resourcesOfType("AWS::Lambda::Function") {
			if _, ok := fn["Properties"].(map[string]any)["ReservedConcurrentExecutions"]; ok {
				reserved = append(reserved, id)
			}
		}
		if name == "prod" {
			resolver := s.logicalID(t, s.stack.Resolver.Function)
			if !slices.Equal(reserved, []string{resolver}) {
				t.Errorf("prod reserves for %v, want the resolver alone", reserved)
			}
			continue
		}
		if len(reserved) != 0 {
			t.Errorf("%s reserves concurrency for %v: a new account whose quota is 10 cannot deploy it", name, reserved)
		}
	}
}

// Every schedule and event-source mapping that runs a function which
// reads or writes the ledger waits for the migration (which waits for the
// writer instance): a tick before the schema exists errors, retries, parks
// in AsyncFailures and keeps its alarm on after a clean deploy. The
// functions are found by their ledger connection, not by a list, so a new
// trigger is held to it too.
func TestLedgerTriggersWaitForTheMigration(t *testing.T) {
	for _, name := range []string{"sandbox", "prod", "alb", "regions-us-east-1"} {
		s := firstDeployVariants(t)[name]
		t.Run(name, func(t *testing.T) {
			migration := s.logicalID(t, s.stack.Migration.Resource)
			ledgerFns := map[string]bool{}
			for id, fn := range s.resourcesOfType("AWS::Lambda::Function") {
				env, _ := fn["Properties"].(map[string]any)["Environment"].(map[string]any)
				vars, _ := env["Variables"].(map[string]any)
				if _, ok := vars[stackenv.LedgerDSN]; ok {
					ledgerFns[id] = true
				}
			}
			if len(ledgerFns) < 5 {
				t.Fatalf("only %d functions connect to the ledger: the test no longer finds them", len(ledgerFns))
			}
			checked := 0
			wait := func(kind, id string, fns []string) {
				for _, fn := range fns {
					if !ledgerFns[fn] {
						continue
					}
					checked++
					if !slices.Contains(strs(s.resource(t, id)["DependsOn"]), migration) {
						t.Errorf("%s %s runs %s, which needs the ledger, without waiting for the migration %s", kind, id, fn, migration)
					}
				}
			}
			for id, r := range s.resourcesOfType("AWS::Events::Rule") {
				var fns []string
				for _, tg := range r["Properties"].(map[string]any)["Targets"].([]any) {
					if a, ok := tg.(map[string]any)["Arn"].(map[string]any)["Fn::GetAtt"].([]any); ok {
						fns = append(fns, a[0].(string))
					}
				}
				wait("rule", id, fns)
			}
			for id, m := range s.resourcesOfType("AWS::Lambda::EventSourceMapping") {
				fn, _ := m["Properties"].(map[string]any)["FunctionName"].(map[string]any)["Ref"].(string)
				wait("mapping", id, []string{fn})
			}
			if checked < 4 {
				t.Errorf("%d ledger triggers checked, want at least the resolver's and the worker's schedules and the worker's and recount's mappings", checked)
			}
		})
	}
}

// The migration's rollback guard (lambdas/migrate) compares the function
// versions the custom resource names: the property must be the version.
func TestTheMigrationNamesItsFunctionVersion(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	props := s.resource(t, s.logicalID(t, s.stack.Migration.Resource))["Properties"].(map[string]any)
	v, ok := props["Version"].(map[string]any)["Fn::GetAtt"].([]any)
	if !ok || v[1] != "Version" || s.resource(t, v[0].(string))["Type"] != "AWS::Lambda::Version" {
		t.Fatalf("the migration's Version property %s is not its function's version number", show(props["Version"]))
	}
}

// The webhook route takes anyone's requests: it gets a throttle of its own,
// below the stage's, and the stage waits for the route (CloudFormation
// refuses route settings for a route key the API does not hold yet).
func TestTheWebhookRouteHasItsOwnThrottle(t *testing.T) {
	for _, name := range []string{"sandbox", "prod", "regions-us-west-2"} {
		s := firstDeployVariants(t)[name]
		stage := s.logicalID(t, s.stack.Api.Stage)
		props := s.resource(t, stage)["Properties"].(map[string]any)
		settings, _ := props["RouteSettings"].(map[string]any)
		route, _ := settings["POST "+oncepay.RouteWebhook].(map[string]any)
		if route["ThrottlingRateLimit"] != float64(oncepay.UnauthenticatedRateLimit) || route["ThrottlingBurstLimit"] != float64(oncepay.UnauthenticatedBurstLimit) {
			t.Errorf("%s: the webhook route's settings %s, want %d/s burst %d", name, show(route), oncepay.UnauthenticatedRateLimit, oncepay.UnauthenticatedBurstLimit)
		}
		stageDefault := props["DefaultRouteSettings"].(map[string]any)
		if oncepay.UnauthenticatedRateLimit >= stageDefault["ThrottlingRateLimit"].(float64) {
			t.Errorf("%s: the webhook's rate is not below the stage's %v", name, stageDefault["ThrottlingRateLimit"])
		}
		var webhookRoute string
		for id, r := range s.resourcesOfType("AWS::ApiGatewayV2::Route") {
			if r["Properties"].(map[string]any)["RouteKey"] == "POST "+oncepay.RouteWebhook {
				webhookRoute = id
			}
		}
		if webhookRoute == "" || !slices.Contains(strs(s.resource(t, stage)["DependsOn"]), webhookRoute) {
			t.Errorf("%s: the stage does not wait for the webhook route %q", name, webhookRoute)
		}
	}
}

// Every key grant to a function's role holds only through the services
// that keep data under the key (kms:ViaService), never for the KMS API.
func TestKeyGrantsHoldOnlyViaTheServices(t *testing.T) {
	for name, s := range firstDeployVariants(t) {
		grants := 0
		for id, p := range s.resourcesOfType("AWS::IAM::Policy") {
			for _, st := range p["Properties"].(map[string]any)["PolicyDocument"].(map[string]any)["Statement"].([]any) {
				st := st.(map[string]any)
				if !slices.ContainsFunc(strs(st["Action"]), func(a string) bool { return strings.HasPrefix(a, "kms:") }) {
					continue
				}
				grants++
				c, _ := st["Condition"].(map[string]any)
				eq, _ := c["StringEquals"].(map[string]any)
				via := eq["kms:ViaService"]
				if via == nil {
					t.Errorf("%s: %s grants %v on %v with no kms:ViaService", name, id, strs(st["Action"]), strs(st["Resource"]))
					continue
				}
				// Every service that holds data under a key, in this Region:
				// one left out breaks its reads silently on AWS (locally
				// only Secrets Manager's is enforced).
				got := render(via)
				for _, svc := range []string{"dynamodb", "sqs", "sns", "secretsmanager"} {
					if !strings.Contains(got, svc+"."+regionIn(s)+".${AWS::URLSuffix}") {
						t.Errorf("%s: %s kms:ViaService %s has no %s", name, id, got, svc)
					}
				}
			}
		}
		if grants < 5 {
			t.Errorf("%s: %d key grants found: the test no longer finds them", name, grants)
		}
	}
}

// Prod places its subnets by AZ id: account A's us-east-1a is another
// zone than account B's, and RDS Proxy does not run in some (use1-az3).
func TestProdPinsItsZonesById(t *testing.T) {
	s := synth(t, oncepay.ProfileProd)
	subnets := s.resourcesOfType("AWS::EC2::Subnet")
	zones := map[string]int{}
	for id, sn := range subnets {
		p := sn["Properties"].(map[string]any)
		if _, byName := p["AvailabilityZone"]; byName {
			t.Errorf("subnet %s names its zone by name %s", id, show(p["AvailabilityZone"]))
		}
		z, _ := p["AvailabilityZoneId"].(string)
		zones[z]++
	}
	if len(subnets) != 4 || zones["use1-az1"] != 2 || zones["use1-az2"] != 2 {
		t.Errorf("prod subnets by zone id %v, want two in each of use1-az1 and use1-az2", zones)
	}
	for id, sn := range synth(t, oncepay.ProfileSandbox).resourcesOfType("AWS::EC2::Subnet") {
		if _, ok := sn["Properties"].(map[string]any)["AvailabilityZone"]; !ok {
			t.Errorf("sandbox subnet %s has no zone: a sandbox without ids takes the Region's first two", id)
		}
	}
	// Across Regions each stack takes its own Region's two.
	for _, s := range synthTwoRegionsProd(t).each() {
		want := map[string]string{"us-east-1": "use1-az", "us-west-2": "usw2-az"}[s.region()]
		for id, sn := range s.resourcesOfType("AWS::EC2::Subnet") {
			if z, _ := sn["Properties"].(map[string]any)["AvailabilityZoneId"].(string); !strings.HasPrefix(z, want) {
				t.Errorf("%s subnet %s in zone %q", s.region(), id, z)
			}
		}
	}
}

// A stack that names its account checks a VPC's AZ names against the
// Region's: the ids must not pass for names there.
func TestZoneIdsInAStackThatNamesItsAccount(t *testing.T) {
	env := &awscdk.Environment{Account: jsii.String("111111111111"), Region: jsii.String("us-east-1")}
	_, _, js := synthAloneIn(t, env, func(stack awscdk.Stack) {
		oncepay.NewNetwork(stack, "Net", &oncepay.NetworkProps{AvailabilityZoneIds: []string{"use1-az4", "use1-az6"}})
	})
	zones := map[string]int{}
	for _, sn := range ofType(js, "AWS::EC2::Subnet") {
		p := sn["Properties"].(map[string]any)
		if _, byName := p["AvailabilityZone"]; byName {
			t.Errorf("a subnet names its zone by name %v", p["AvailabilityZone"])
		}
		z, _ := p["AvailabilityZoneId"].(string)
		zones[z]++
	}
	if zones["use1-az4"] != 2 || zones["use1-az6"] != 2 {
		t.Errorf("subnets by zone id %v, want two in each", zones)
	}
}

func TestProdNeedsZoneIds(t *testing.T) {
	for _, c := range []struct {
		ctx  map[string]any
		want string
	}{
		{map[string]any{oncepay.ContextAvailabilityZoneIds: ""}, "pins its two AZs by id"},
		{map[string]any{oncepay.ContextAvailabilityZoneIds: "use1-az1"}, "two different AZ ids"},
		{map[string]any{oncepay.ContextAvailabilityZoneIds: "use1-az1,use1-az1"}, "two different AZ ids"},
		{map[string]any{oncepay.ContextAvailabilityZoneIds: "us-east-1a,us-east-1b"}, "two different AZ ids"},
		{map[string]any{oncepay.ContextAvailabilityZoneIds: "use1-az1,use1-az2", oncepay.ContextRegions: "us-east-1,us-west-2",
			oncepay.ContextRegionURLs: urlsContext(regionURLs), oncepay.ContextJWTIssuer: regionsIssuer, oncepay.ContextJWTAudience: regionsAudience}, "for us-west-2"},
	} {
		ctx := cdkContext(t, oncepay.ProfileProd)
		for k, v := range c.ctx {
			(*ctx)[k] = v
		}
		_, err := oncepay.StackPropsFromContext(awscdk.NewApp(&awscdk.AppProps{Context: ctx}))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.ctx, err, c.want)
		}
	}
	for region, code := range map[string]string{"us-east-1": "use1", "ap-northeast-1": "apne1", "eu-central-1": "euc1", "us-gov-west-1": "usgw1", "ca-west-1": "caw1"} {
		if got := oncepay.AvailabilityZoneIdsIn(region, []string{code + "-az1", "x-az2", code + "-az3"}); !slices.Equal(got, []string{code + "-az1", code + "-az3"}) {
			t.Errorf("%s: %v", region, got)
		}
	}
}

// docs/deploy.md's alarm counts are the templates': the count a user
// checks the deploy against, and the one the cost table prices.
func TestTheDeployGuideCountsTheAlarms(t *testing.T) {
	raw, err := os.ReadFile("../../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	count := func(s *synthesized) int { return len(s.resourcesOfType("AWS::CloudWatch::Alarm")) }
	sandbox, all := count(synth(t, oncepay.ProfileSandbox)), count(synthALB(t))
	for _, c := range []struct{ pattern, want string }{
		{`<!-- alarms -->(\d+) alarms in the sandbox, (\d+) with every option on`, fmt.Sprintf("%d %d", sandbox, all)},
		{`<!-- alarms-cost -->(\d+) alarms`, fmt.Sprint(sandbox)},
	} {
		m := regexp.MustCompile(c.pattern).FindStringSubmatch(doc)
		if m == nil {
			t.Errorf("docs/deploy.md has no %q", c.pattern)
			continue
		}
		if got := strings.Join(m[1:], " "); got != c.want {
			t.Errorf("docs/deploy.md says %q alarms, the templates have %s", got, c.want)
		}
	}
}
