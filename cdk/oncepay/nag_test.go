package oncepay_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay"
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
			s := synth(t, p)
			if f := findings(t, s.stack.Stack); len(f) > 0 {
				t.Errorf("%d cdk-nag findings:\n%s", len(f), strings.Join(f, "\n"))
			}
		})
	}
}

// TestNagCatchesFindings shows the check above can fail: a bare queue
// (no TLS policy, no DLQ) must be reported by both packs.
func TestNagCatchesFindings(t *testing.T) {
	app := awscdk.NewApp(&awscdk.AppProps{Context: cdkContext(t, "")})
	stack := oncepay.NewStack(app, "Oncepay", &oncepay.StackProps{})
	awssqs.NewQueue(stack.Stack, jsii.String("Bare"), nil)
	oncepay.AddNagPacks(app)
	f := strings.Join(findings(t, stack.Stack), "\n")
	for _, rule := range []string{"AwsSolutions-SQS3", "AwsSolutions-SQS4", "Serverless-SQSRedrivePolicy"} {
		if !strings.Contains(f, "/Oncepay/Bare/Resource: "+rule) {
			t.Errorf("%s not reported for the bare queue; findings:\n%s", rule, f)
		}
	}
}

// TestNagSuppressions pins every suppression to one resource and one rule,
// each with a reason, so a new one is a reviewed change.
func TestNagSuppressions(t *testing.T) {
	for _, p := range []oncepay.Profile{oncepay.ProfileSandbox, oncepay.ProfileProd} {
		t.Run(string(p), func(t *testing.T) {
			s := synth(t, p)
			d := s.stack.Data
			want := []string{
				s.logicalID(t, d.Events.Dlq) + " Serverless-SQSRedrivePolicy",
				s.logicalID(t, d.Ledger.Secret) + " AwsSolutions-SMG4",
			}
			if !p.IsProd() {
				want = append(want, s.logicalID(t, d.Ledger.Cluster)+" AwsSolutions-RDS10")
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
