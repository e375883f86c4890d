package oncepay_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay"
	"github.com/oncepay/oncepay/cdk/oncepay/nag"
)

var nagPacks = []string{"AwsSolutions-.*", "Serverless-.*"}

// findings lists the stack's unsuppressed nag errors and warnings.
func findings(t *testing.T, stack awscdk.Stack) []string {
	t.Helper()
	var out []string
	// The messages are read through JSON: their Go type (cxapi) is deprecated.
	add := func(level string, found any) {
		b, err := json.Marshal(found)
		if err != nil {
			t.Fatal(err)
		}
		var msgs []struct {
			ID    string `json:"id"`
			Entry struct {
				Data any `json:"data"`
			} `json:"entry"`
		}
		if err := json.Unmarshal(b, &msgs); err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			out = append(out, fmt.Sprintf("%s %s: %v", level, m.ID, m.Entry.Data))
		}
	}
	check(t, "annotations", func() {
		a := assertions.Annotations_FromStack(stack)
		for _, pack := range nagPacks {
			add("error", a.FindError(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String(pack))))
			add("warning", a.FindWarning(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String(pack))))
		}
	})
	sort.Strings(out)
	return out
}

func TestNagClean(t *testing.T) {
	for _, p := range []oncepay.Profile{oncepay.ProfileSandbox, oncepay.ProfileProd} {
		t.Run(string(p), func(t *testing.T) {
			nagClean(t, synth(t, p).stack.Stack)
		})
	}
	t.Run("alb", func(t *testing.T) { nagClean(t, synthALB(t).stack.Stack) })
}

// TestNagCatchesFindings shows the check above can fail: a bare queue
// (no TLS policy, no DLQ) must be reported by both packs.
func TestNagCatchesFindings(t *testing.T) {
	app := awscdk.NewApp(&awscdk.AppProps{Context: cdkContext(t, "")})
	stack := awscdk.NewStack(app, jsii.String("Oncepay"), nil)
	awssqs.NewQueue(stack, jsii.String("Bare"), nil)
	nag.AddPacks(app)
	f := strings.Join(findings(t, stack), "\n")
	for _, rule := range []string{"AwsSolutions-SQS3", "AwsSolutions-SQS4", "Serverless-SQSRedrivePolicy"} {
		if !strings.Contains(f, "/Oncepay/Bare/Resource: "+rule) {
			t.Errorf("%s not reported for the bare queue; findings:\n%s", rule, f)
		}
	}
}

// TestNagSuppressions pins every suppression to one resource and one rule,
// each with a reason, so a new one is a reviewed change.
func TestNagSuppressions(t *testing.T) {
	for _, variant := range []string{"sandbox", "prod", "alb"} {
		t.Run(variant, func(t *testing.T) {
			var s *synthesized
			switch variant {
			case "alb":
				s = synthALB(t)
			default:
				s = synth(t, oncepay.Profile(variant))
			}
			st := s.stack
			d := st.Data
			id := func(c constructs.IConstruct) string { return s.logicalID(t, c) }
			policy := func(fn *oncepay.GoFunction) string {
				return id(fn.Role.Node().FindChild(jsii.String("DefaultPolicy")))
			}
			want := []string{
				id(d.Events.Dlq) + " Serverless-SQSRedrivePolicy",
				id(d.Ledger.Secret) + " AwsSolutions-SMG4",
				id(st.Psp.KeySecret) + " AwsSolutions-SMG4",
				id(st.Psp.WebhookSecret) + " AwsSolutions-SMG4",
				id(st.AsyncFailures) + " Serverless-SQSRedrivePolicy",
				id(st.Relay.FailureQueue) + " AwsSolutions-SQS3",
				id(st.Relay.FailureQueue) + " Serverless-SQSRedrivePolicy",
				id(st.Totals.RecountDlq) + " Serverless-SQSRedrivePolicy",
				id(st.Totals.RecountMappings[0]) + " Serverless-LambdaEventSourceMappingDestination",
				id(st.Totals.RecountMappings[1]) + " Serverless-LambdaEventSourceMappingDestination",
				id(st.Worker.Mapping) + " Serverless-LambdaEventSourceMappingDestination",
				id(st.Worker.SweepSchedule) + " Serverless-EventBusDLQ", // a tick carries no data
				id(st.Api.Routes[3]) + " AwsSolutions-APIG4",            // the webhook route
			}
			// Synchronous or mapping-driven: no DLQ.
			for _, fn := range []*oncepay.GoFunction{st.Api.Function, st.Relay.Function, st.Worker.Function, st.Webhook, st.Totals.Function, st.Totals.RecountFunction, st.Devices.Function} {
				want = append(want, id(fn.Function)+" Serverless-LambdaDLQ")
			}
			// The resource-less actions (X-Ray, VPC ENIs, ListStreams).
			for _, fn := range []*oncepay.GoFunction{st.Api.Function, st.Relay.Function, st.Worker.Function, st.Resolver, st.Webhook, st.Migration.Function, st.Totals.Function, st.Totals.RecountFunction, st.Devices.Function, st.Reconciliation.Function} {
				want = append(want, policy(fn)+" AwsSolutions-IAM5")
			}
			if !st.Profile.IsProd() {
				want = append(want,
					id(d.Ledger.Cluster)+" AwsSolutions-RDS10",
					id(st.Api.UserPool)+" AwsSolutions-COG2",
					id(st.Api.UserPool)+" AwsSolutions-COG8")
			}
			// Interface endpoints admit the VPC's CIDR, which nag cannot read.
			for _, sg := range endpointSecurityGroups(d.Network) {
				want = append(want, id(sg)+" CdkNagValidationFailure")
			}
			if st.Alb != nil {
				want = append(want,
					id(st.Alb.SecurityGroup)+" AwsSolutions-EC23",
					id(st.Alb.LoadBalancer)+" AwsSolutions-ELB2",
					policy(st.Worker.Function)+" AwsSolutions-IAM5", // the platform endpoints
					policy(st.Devices.Function)+" AwsSolutions-IAM5")
			}
			if st.Cache != nil {
				want = append(want, id(st.Cache.ReplicationGroup)+" AwsSolutions-AEC6")
				if !st.Profile.IsProd() {
					want = append(want, id(st.Cache.ReplicationGroup)+" AwsSolutions-AEC4")
				}
			}
			sort.Strings(want)
			var got []string
			for id, r := range s.json["Resources"].(map[string]any) {
				md, _ := r.(map[string]any)["Metadata"].(map[string]any)
				nag, _ := md["cdk_nag"].(map[string]any)
				rules, _ := nag["rules_to_suppress"].([]any)
				for _, x := range rules {
					rule := x.(map[string]any)
					if reason, _ := rule["reason"].(string); len(reason) < 40 {
						t.Errorf("%s %v: reason too thin: %q", id, rule["id"], reason)
					}
					if rule["id"] == "AwsSolutions-IAM5" && rule["applies_to"] == nil {
						t.Errorf("%s: an IAM5 suppression must name the findings it covers (appliesTo)", id)
					}
					got = append(got, fmt.Sprintf("%s %v", id, rule["id"]))
				}
			}
			sort.Strings(got)
			if !jsonEqual(got, want) {
				t.Errorf("suppressions:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
			}
			if md, ok := s.json["Metadata"].(map[string]any); ok {
				if _, ok := md["cdk_nag"]; ok {
					t.Errorf("stack-wide suppression: %s", show(md["cdk_nag"]))
				}
			}
		})
	}
}

// endpointSecurityGroups are the security groups of the network's
// interface endpoints.
func endpointSecurityGroups(n *oncepay.Network) []constructs.IConstruct {
	var out []constructs.IConstruct
	for _, c := range *n.Vpc.Node().Children() {
		if ep, ok := c.(awsec2.InterfaceVpcEndpoint); ok {
			for _, sg := range *ep.Connections().SecurityGroups() {
				out = append(out, sg)
			}
		}
	}
	return out
}
