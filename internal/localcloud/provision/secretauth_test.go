package provision_test

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/localcloud/provision"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

const (
	ledgerSecretID  = "DataLedgerSecret5C03D25B"
	keySecretID     = "PspKeySecret57605E34"     // the PSP API key's: the api and the resolver
	webhookSecretID = "PspWebhookSecretAA63E13E" // the webhook signing secret's: the webhook
	dataKeyID       = "DataKey5F086070"
	migrationFnID   = "MigrationFunctionC04042BC"
	apiFnID         = "ApiFunction52E267E3"
	ledgerARN       = "arn:aws:secretsmanager:us-east-1:000000000000:secret:DataLedgerSecret-AbCdEf"
	pspKeyARN       = "arn:aws:secretsmanager:us-east-1:000000000000:secret:PspKeySecret-GhIjKl"
	webhookARN      = "arn:aws:secretsmanager:us-east-1:000000000000:secret:PspWebhookSecret-MnOpQr"
	keyARN          = "arn:aws:kms:us-east-1:000000000000:key/0b1c2d3e"
)

// callers builds the Secrets Manager gate's table over tpl with the secrets and the
// key at fixed local ARNs and a token per function ("token-<logical id>").
func callers(t *testing.T, tpl *provision.Template) map[string]provisionCaller {
	t.Helper()
	phys := map[string]provision.Physical{
		ledgerSecretID:  {Type: "AWS::SecretsManager::Secret", Arn: ledgerARN},
		keySecretID:     {Type: "AWS::SecretsManager::Secret", Arn: pspKeyARN},
		webhookSecretID: {Type: "AWS::SecretsManager::Secret", Arn: webhookARN},
		dataKeyID:       {Type: "AWS::KMS::Key", Arn: keyARN},
	}
	envs := map[string]map[string]string{}
	for _, id := range tpl.OfType("AWS::Lambda::Function") {
		envs[id] = map[string]string{"AWS_SESSION_TOKEN": "token-" + id}
	}
	ev := &provision.Evaluator{Template: tpl, Physical: phys, Region: "us-east-1", AccountID: "000000000000", StackName: "Oncepay"}
	got, err := provision.SecretCallers(tpl, ev, envs)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]provisionCaller{}
	for tok, c := range got {
		if tok != "token-"+c.Function {
			t.Errorf("token %s names %s", tok, c.Function)
		}
		out[c.Function] = provisionCaller{read: c.MayRead}
	}
	return out
}

type provisionCaller struct {
	read func(string) bool
}

// On the real template only the migration function's role reads the
// ledger secret (and decrypts its key), only the api's, the resolver's
// and the reconciliation's read the PSP API key's secret, and only the
// webhook's the signing secret: the gate serves each function what its role grants on AWS, and
// nothing else. So the internet-facing webhook is refused the key that
// charges and refunds, and the api and the resolver the secret that would
// let them forge a webhook.
func TestEachFunctionMayReadOnlyTheSecretsItsRoleGrants(t *testing.T) {
	cs := callers(t, testenv.Template(t))
	if len(cs) < 6 {
		t.Fatalf("%d callers, want every function: %v", len(cs), cs)
	}
	readers := map[string][]string{}
	for id, c := range cs {
		for secret, arn := range map[string]string{"ledger": ledgerARN, "key": pspKeyARN, "webhook": webhookARN} {
			if c.read(arn) {
				readers[secret] = append(readers[secret], strings.TrimRightFunc(id, func(r rune) bool { return r >= '0' && r <= '9' || r >= 'A' && r <= 'F' }))
			}
		}
	}
	for secret, want := range map[string][]string{
		"ledger":  {"MigrationFunction"},
		"key":     {"ApiFunction", "ReconcileFunction", "ResolverFunction"},
		"webhook": {"WebhookFunction"},
	} {
		got := readers[secret]
		sort.Strings(got)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("the %s secret may be read by %v, want %v alone", secret, got, want)
		}
	}
	if _, ok := cs[apiFnID]; !ok {
		t.Error("the API function is not in the table")
	}
}

// editPolicy rewrites the migration role's policy statements with edit.
func editPolicy(t *testing.T, tpl *provision.Template, edit func([]any) []any) {
	t.Helper()
	for _, id := range tpl.OfType("AWS::IAM::Policy") {
		props := tpl.Resources[id].Properties
		if !strings.HasPrefix(id, "MigrationFunctionRole") {
			continue
		}
		doc := props["PolicyDocument"].(map[string]any)
		doc["Statement"] = edit(doc["Statement"].([]any))
		return
	}
	t.Fatal("no migration function policy in the template")
}

func statementsWithout(action string) func([]any) []any {
	return func(sts []any) []any {
		var out []any
		for _, s := range sts {
			b, _ := json.Marshal(s.(map[string]any)["Action"])
			if !strings.Contains(string(b), action) {
				out = append(out, s)
			}
		}
		return out
	}
}

// A template whose migration policy lacks the grant (or the key's
// decrypt, or adds a Deny) is refused: what AWS would answer
// AccessDenied is not served locally.
func TestAMigrationPolicyWithoutTheGrantIsRefused(t *testing.T) {
	for name, edit := range map[string]func([]any) []any{
		"no GetSecretValue": statementsWithout("secretsmanager:GetSecretValue"),
		"no kms:Decrypt":    statementsWithout("kms:Decrypt"),
		"a Deny with a Condition counts as a Deny": func(sts []any) []any {
			return append(sts, map[string]any{"Effect": "Deny", "Action": "secretsmanager:GetSecretValue", "Resource": "*",
				"Condition": map[string]any{"StringEquals": map[string]any{"aws:RequestedRegion": "us-east-1"}}})
		},
		"the key's decrypt only through another service": func(sts []any) []any {
			for _, st := range sts {
				st := st.(map[string]any)
				if b, _ := json.Marshal(st["Action"]); strings.Contains(string(b), "kms:Decrypt") {
					st["Condition"] = map[string]any{"StringEquals": map[string]any{"kms:ViaService": []any{"sqs.us-east-1.amazonaws.com"}}}
				}
			}
			return sts
		},
		"a wildcard Deny wins": func(sts []any) []any {
			return append(sts, map[string]any{"Effect": "Deny", "Action": "secretsmanager:Get*", "Resource": "*"})
		},
	} {
		tpl := testenv.Template(t)
		editPolicy(t, tpl, edit)
		if callers(t, tpl)[migrationFnID].read(ledgerARN) {
			t.Errorf("%s: the migration function may still read the ledger secret", name)
		}
	}
	// Wildcards grant as IAM's do.
	tpl := testenv.Template(t)
	editPolicy(t, tpl, func(sts []any) []any {
		sts = statementsWithout("secretsmanager:GetSecretValue")(sts)
		return append(sts, map[string]any{"Effect": "Allow", "Action": "secretsmanager:Get*",
			"Resource": "arn:aws:secretsmanager:*:*:secret:DataLedgerSecret-??????"})
	})
	if !callers(t, tpl)[migrationFnID].read(ledgerARN) {
		t.Error("a wildcard Allow on the ledger secret does not grant")
	}
}

// Function environments from before per-function tokens share one: the
// table cannot tell the callers apart and says to provision again.
func TestASharedSessionTokenIsAnError(t *testing.T) {
	tpl := testenv.Template(t)
	envs := map[string]map[string]string{}
	for _, id := range tpl.OfType("AWS::Lambda::Function") {
		envs[id] = map[string]string{"AWS_SESSION_TOKEN": provision.LocalSessionToken}
	}
	phys := map[string]provision.Physical{ledgerSecretID: {Type: "AWS::SecretsManager::Secret", Arn: ledgerARN}}
	phys[keySecretID] = provision.Physical{Type: "AWS::SecretsManager::Secret", Arn: pspKeyARN}
	phys[webhookSecretID] = provision.Physical{Type: "AWS::SecretsManager::Secret", Arn: webhookARN}
	ev := &provision.Evaluator{Template: tpl, Physical: phys, Region: "us-east-1", AccountID: "000000000000"}
	if _, err := provision.SecretCallers(tpl, ev, envs); err == nil || !strings.Contains(err.Error(), "make up") {
		t.Errorf("shared token: %v, want an error saying to provision again", err)
	}
}
