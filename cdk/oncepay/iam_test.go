package oncepay_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/aws/constructs-go/constructs/v10"

	"github.com/oncepay/oncepay/cdk/oncepay"
)

// resourceLess lists the only actions an identity policy here may allow on
// Resource "*", each with the reason no narrower resource exists.
var resourceLess = map[string]string{
	"xray:PutTraceSegments":          "X-Ray defines no resource type for it (Service Authorization Reference); active tracing needs it",
	"xray:PutTelemetryRecords":       "X-Ray defines no resource type for it; active tracing needs it",
	"ec2:DescribeNetworkInterfaces":  "EC2 Describe* actions support no resource-level permissions; Lambda needs it for a VPC function",
	"ec2:DescribeSubnets":            "EC2 Describe* actions support no resource-level permissions; Lambda needs it for a VPC function",
	"ec2:CreateNetworkInterface":     "Lambda creates a VPC function's ENIs with the function's role at run time; their ids do not exist at deploy",
	"ec2:DeleteNetworkInterface":     "as CreateNetworkInterface: the ENI ids exist only at run time",
	"ec2:AssignPrivateIpAddresses":   "as CreateNetworkInterface: the ENI ids exist only at run time",
	"ec2:UnassignPrivateIpAddresses": "as CreateNetworkInterface: the ENI ids exist only at run time",
	"dynamodb:ListStreams":           "DynamoDB defines no resource type for ListStreams; Lambda checks the role for it when it creates a stream mapping",
}

// starViolations walks every policy document in the template (identity
// policies, inline role policies, managed policies, and the resource
// policies of queues, topics and secrets) and reports each Allow of an
// action outside resourceLess on Resource "*". KMS key policies are the one
// place "*" is required and harmless: in a key policy it means "this key".
func starViolations(js map[string]any) []string {
	var out []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if k == "KeyPolicy" || k == "AssumeRolePolicyDocument" {
					continue
				}
				if k == "PolicyDocument" {
					doc, _ := e.(map[string]any)
					sts, _ := doc["Statement"].([]any)
					for _, st := range sts {
						st, _ := st.(map[string]any)
						if st["Effect"] != "Allow" {
							continue
						}
						star := false
						for _, r := range strs(st["Resource"]) {
							if r == "*" {
								star = true
							}
						}
						if !star {
							continue
						}
						for _, a := range strs(st["Action"]) {
							if _, ok := resourceLess[a]; !ok {
								out = append(out, fmt.Sprintf("%s: %s on *", path, a))
							}
						}
					}
					continue
				}
				walk(path+"/"+k, e)
			}
		case []any:
			for i, e := range x {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		}
	}
	walk("", js["Resources"])
	sort.Strings(out)
	return out
}

// TestNoStarWhereANameIsKnown scans every policy statement of every stack
// variant and of each construct alone.
func TestNoStarWhereANameIsKnown(t *testing.T) {
	for name, s := range map[string]func(*testing.T) *synthesized{
		"sandbox": func(t *testing.T) *synthesized { return synth(t, oncepay.ProfileSandbox) },
		"prod":    func(t *testing.T) *synthesized { return synth(t, oncepay.ProfileProd) },
		"alb":     synthALB,
	} {
		t.Run(name, func(t *testing.T) {
			js := s(t).json
			if v := starViolations(js); len(v) > 0 {
				t.Errorf("Resource * where a name is known:\n%s", strings.Join(v, "\n"))
			}
			// The allowlist is used, not just declared: every VPC function
			// and the tracing put the statements the list explains there.
			if n := countStar(js); n == 0 {
				t.Error("no statement on * at all: the scan found no policies")
			}
		})
	}
	for name, build := range aloneConstructs {
		t.Run("alone/"+name, func(t *testing.T) {
			_, _, js := synthAlone(t, build)
			if v := starViolations(js); len(v) > 0 {
				t.Errorf("Resource * where a name is known:\n%s", strings.Join(v, "\n"))
			}
		})
	}
}

func countStar(js map[string]any) int {
	n := 0
	for _, r := range ofType(js, "AWS::IAM::Policy") {
		for _, st := range r["Properties"].(map[string]any)["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			for _, res := range strs(st.(map[string]any)["Resource"]) {
				if res == "*" {
					n++
				}
			}
		}
	}
	return n
}

// TestStarScanCatchesAWildcard shows the scan can fail: a policy that
// allows a named-resource action on * is reported, wherever it sits.
func TestStarScanCatchesAWildcard(t *testing.T) {
	js := map[string]any{"Resources": map[string]any{
		"P": map[string]any{"Type": "AWS::IAM::Policy", "Properties": map[string]any{"PolicyDocument": map[string]any{
			"Statement": []any{
				map[string]any{"Effect": "Allow", "Action": []any{"xray:PutTraceSegments", "dynamodb:PutItem"}, "Resource": "*"},
				map[string]any{"Effect": "Deny", "Action": "sqs:*", "Resource": "*"},
			},
		}}},
		"R": map[string]any{"Type": "AWS::IAM::Role", "Properties": map[string]any{"Policies": []any{map[string]any{
			"PolicyDocument": map[string]any{"Statement": []any{
				map[string]any{"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": []any{"arn:x", "*"}},
			}},
		}}}},
		"K": map[string]any{"Type": "AWS::KMS::Key", "Properties": map[string]any{"KeyPolicy": map[string]any{"Statement": []any{
			map[string]any{"Effect": "Allow", "Action": "kms:*", "Resource": "*"},
		}}}},
	}}
	got := strings.Join(starViolations(js), "\n")
	for _, want := range []string{"dynamodb:PutItem on *", "secretsmanager:GetSecretValue on *"} {
		if !strings.Contains(got, want) {
			t.Errorf("scan missed %q; got:\n%s", want, got)
		}
	}
	for _, not := range []string{"xray:", "sqs:", "kms:"} {
		if strings.Contains(got, not) {
			t.Errorf("scan reported an allowed statement (%s):\n%s", not, got)
		}
	}
}

// TestGrants pins what each function of the sandbox stack may do.
func TestGrants(t *testing.T) {
	s := synth(t, oncepay.ProfileSandbox)
	st := s.stack
	lid := func(c constructs.IConstruct) string { return s.logicalID(t, c) }
	key := "${" + lid(st.Data.Key) + ".Arn}"
	claims := "${" + lid(st.Data.Claims.Table) + ".Arn}"
	outbox := "${" + lid(st.Data.Outbox.Table) + ".Arn}"
	stream := "${" + lid(st.Data.Outbox.Table) + ".StreamArn}"
	events := "${" + lid(st.Data.Events.Queue) + ".Arn}"
	topic := "${" + lid(st.Data.Push.Topic) + "}"
	ledgerSecret := "${" + lid(st.Data.Ledger.Secret) + "}"
	// Each PSP secret to its own readers; the stack encrypts both with the
	// data key, which keyWrite decrypts already.
	if lid(st.Psp.KeySecretKey) != lid(st.Data.Key) || lid(st.Psp.WebhookSecretKey) != lid(st.Data.Key) {
		t.Errorf("the PSP secrets are not under the data key")
	}
	readKey := map[string][]string{"secretsmanager:GetSecretValue": {"${" + lid(st.Psp.KeySecret) + "}"}}
	readWebhookSecret := map[string][]string{"secretsmanager:GetSecretValue": {"${" + lid(st.Psp.WebhookSecret) + "}"}}
	asyncDlq := "${" + lid(st.AsyncFailures) + ".Arn}"
	relayFailures := "${" + lid(st.Relay.FailureQueue) + ".Arn}"
	dbuser := "arn:${AWS::Partition}:rds-db:${AWS::Region}:${AWS::AccountId}:dbuser:${" + lid(st.Data.Ledger.Cluster) + ".DBClusterResourceId}/" + oncepay.LedgerAppUser
	star := "*"
	vpc := map[string][]string{
		"ec2:CreateNetworkInterface": {star}, "ec2:DescribeNetworkInterfaces": {star}, "ec2:DescribeSubnets": {star},
		"ec2:DeleteNetworkInterface": {star}, "ec2:AssignPrivateIpAddresses": {star}, "ec2:UnassignPrivateIpAddresses": {star},
	}
	base := func(fn *oncepay.GoFunction, inVpc bool, extra map[string][]string) map[string][]string {
		logs := "${" + lid(fn.LogGroup) + ".Arn}"
		m := map[string][]string{
			"logs:CreateLogStream": {logs}, "logs:PutLogEvents": {logs},
			"xray:PutTraceSegments": {star}, "xray:PutTelemetryRecords": {star},
		}
		if inVpc {
			for k, v := range vpc {
				m[k] = v
			}
		}
		for k, v := range extra {
			m[k] = append(m[k], v...)
			sort.Strings(m[k])
		}
		return m
	}
	keyWrite := map[string][]string{"kms:Decrypt": {key}, "kms:DescribeKey": {key}, "kms:Encrypt": {key}, "kms:GenerateDataKey": {key}}
	merge := func(ms ...map[string][]string) map[string][]string {
		out := map[string][]string{}
		for _, m := range ms {
			for k, v := range m {
				out[k] = append(out[k], v...)
			}
		}
		return out
	}
	cases := []struct {
		name string
		fn   *oncepay.GoFunction
		want map[string][]string
	}{
		{"api", st.Api.Function, base(st.Api.Function, true, merge(keyWrite, readKey, map[string][]string{
			"dynamodb:GetItem": {claims}, "dynamodb:PutItem": {claims, outbox}, "dynamodb:UpdateItem": {claims}, "dynamodb:DeleteItem": {claims},
			"rds-db:connect": {dbuser},
		}))},
		{"relay", st.Relay.Function, base(st.Relay.Function, false, map[string][]string{
			"dynamodb:DescribeStream": {stream}, "dynamodb:GetRecords": {stream}, "dynamodb:GetShardIterator": {stream},
			"dynamodb:ListStreams": {star},
			"kms:Decrypt":          {key}, "kms:DescribeKey": {key}, "kms:GenerateDataKey": {key},
			"sqs:SendMessage": {events, relayFailures}, "sqs:GetQueueAttributes": {relayFailures}, "sqs:GetQueueUrl": {relayFailures},
		})},
		{"worker", st.Worker.Function, base(st.Worker.Function, true, map[string][]string{
			"sqs:ReceiveMessage": {events}, "sqs:DeleteMessage": {events}, "sqs:ChangeMessageVisibility": {events}, "sqs:GetQueueAttributes": {events},
			"kms:Decrypt": {key}, "kms:GenerateDataKey": {key},
			"sns:Publish":    {topic},
			"rds-db:connect": {dbuser},
		})},
		{"resolver", st.Resolver, base(st.Resolver, true, merge(keyWrite, readKey, map[string][]string{
			"dynamodb:PutItem": {outbox}, "dynamodb:UpdateItem": {claims, outbox},
			"rds-db:connect":  {dbuser},
			"sqs:SendMessage": {asyncDlq},
		}))},
		{"webhook", st.Webhook, base(st.Webhook, true, merge(keyWrite, readWebhookSecret, map[string][]string{
			"dynamodb:PutItem": {outbox},
			"rds-db:connect":   {dbuser},
		}))},
		// The reconciliation: the ledger login, the PSP key (lists,
		// refunds), outbox puts and its DLQ; nothing of the claim table,
		// no outbox update, no webhook secret.
		{"reconcile", st.Reconciliation.Function, base(st.Reconciliation.Function, true, merge(keyWrite, readKey, map[string][]string{
			"dynamodb:PutItem": {outbox},
			"rds-db:connect":   {dbuser},
			"sqs:SendMessage":  {asyncDlq},
		}))},
		{"migrate", st.Migration.Function, base(st.Migration.Function, true, map[string][]string{
			"secretsmanager:GetSecretValue": {ledgerSecret},
			"kms:Decrypt":                   {key},
			"sqs:SendMessage":               {asyncDlq},
		})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := grantsOf(s.json, lid(c.fn.Role))
			for k := range c.want {
				sort.Strings(c.want[k])
			}
			if !jsonEqual(got, c.want) {
				t.Errorf("grants of %s:\n got %s\nwant %s", c.name, show(got), show(c.want))
			}
		})
	}
}
