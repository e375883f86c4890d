package provision_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/localcloud/phone"
	"github.com/oncepay/oncepay/internal/localcloud/provision"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// make up provisions the real template but leaves the ledger's schema to
// the migration custom resource: the cluster's database exists, owned by
// the master user, with no migration applied; the test kit's template
// database is migrated; every function's environment is written; the
// simulator gets the webhook function's secret; and a second Up changes
// nothing.
func TestUpLeavesTheLedgerToTheMigrationCustomResource(t *testing.T) {
	st := testenv.LocalStack(t)
	ctx := context.Background()
	db := "t_up_" + testenv.RandomID(4)
	var raw map[string]any
	b, err := os.ReadFile(st.Config.Template)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	raw["Resources"].(map[string]any)["DataLedgerCluster7B896067"].(map[string]any)["Properties"].(map[string]any)["DatabaseName"] = db
	b, _ = json.Marshal(raw)
	c := st.Config
	c.Template = filepath.Join(t.TempDir(), "template.json")
	if err := os.WriteFile(c.Template, b, 0o644); err != nil {
		t.Fatal(err)
	}
	c.Database, c.StateDir, c.SecretPrefix, c.Timeout = db, t.TempDir(), "t"+testenv.RandomID(4)+"-", 30*time.Second
	admin := testenv.AdminConn(t)
	tmpl, _ := provision.ReadTemplate(c.Template)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)")
		for _, id := range tmpl.OfType("AWS::SecretsManager::Secret") {
			_, _ = st.Secrets.DeleteSecret(context.Background(), &secretsmanager.DeleteSecretInput{
				SecretId: aws.String(c.SecretPrefix + id), ForceDeleteWithoutRecovery: aws.Bool(true)})
		}
	})

	env, err := provision.Up(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var owner string
	var goose *string
	if err := admin.QueryRow(ctx, "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = $1", db).Scan(&owner); err != nil {
		t.Fatalf("the cluster's database %s: %v", db, err)
	}
	ledger, err := pgx.Connect(ctx, c.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Close(ctx)
	if err := ledger.QueryRow(ctx, "SELECT to_regclass('public.goose_db_version')::text").Scan(&goose); err != nil {
		t.Fatal(err)
	}
	if owner != "oncepay_admin" || goose != nil {
		t.Errorf("the ledger database is owned by %s, migrated: %v; want the master user's, unmigrated", owner, goose != nil)
	}
	tdb, err := pgx.Connect(ctx, c.DSN(provision.TemplateDB))
	if err != nil {
		t.Fatal(err)
	}
	var version int
	err = tdb.QueryRow(ctx, "SELECT max(version_id) FROM goose_db_version").Scan(&version)
	tdb.Close(ctx)
	if err != nil || version < 9 {
		t.Errorf("the test kit's %s is at version %d (%v); want it migrated", provision.TemplateDB, version, err)
	}
	envs, err := provision.ReadFunctionEnvs(c.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(envs) != len(tmpl.OfType("AWS::Lambda::Function")) {
		t.Errorf("%d function environments written, want one per function", len(envs))
	}
	var pspSecret struct {
		WebhookSecret string `json:"webhook_secret"`
	}
	got, err := testenv.SecretsManager(t).GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(envs["WebhookFunction6FF7199F"][stackenv.WebhookSecretArn])})
	if err != nil || json.Unmarshal([]byte(aws.ToString(got.SecretString)), &pspSecret) != nil {
		t.Fatalf("the webhook function's signing secret: %v", err)
	}
	if s := env[stackenv.PSPSimWebhookSecret]; s == "" || s != pspSecret.WebhookSecret {
		t.Errorf("the simulator's webhook secret %q is not the webhook_secret of the webhook function's signing secret", s)
	}

	again, err := provision.Up(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	envs2, _ := provision.ReadFunctionEnvs(c.StateDir)
	if again.Format() != env.Format() {
		t.Errorf("a second Up changed .local/env:\n%s\nthen\n%s", env.Format(), again.Format())
	}
	b1, _ := json.Marshal(envs)
	b2, _ := json.Marshal(envs2)
	if string(b1) != string(b2) {
		t.Error("a second Up changed the functions' environments")
	}
	// The phone (local-only): its queue and application in .local/env and
	// beside the stack's outputs.
	out, err := os.ReadFile(filepath.Join(c.StateDir, "outputs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var outputs map[string]map[string]string
	if err := json.Unmarshal(out, &outputs); err != nil {
		t.Fatal(err)
	}
	stackOut := outputs[c.StackName]
	if u := env[phone.EnvQueueURL]; u == "" || stackOut[phone.OutputQueueURL] != u || stackOut[phone.OutputPlatformApplicationArn] != env[phone.EnvPlatformApplicationArn] || stackOut[phone.OutputQueueArn] == "" {
		t.Errorf("the phone: env %s=%q, outputs %v", phone.EnvQueueURL, u, stackOut)
	}
}
