package provision_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/localcloud/provision"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// Every function of the real template gets its whole environment resolved
// to local values: no intrinsic, dynamic reference or empty value is left,
// the DB cluster's endpoint is the local PostgreSQL (its port too, from the
// template's Endpoint.Port), the PSP secret's ARN is the provisioned
// secret's (no value of it is in any environment), and the SDK points at
// the emulators.
func TestEveryFunctionOfTheRealTemplateResolvesLocally(t *testing.T) {
	st := testenv.LocalStack(t)
	envs := st.Envs(t)
	fns := st.Template.OfType("AWS::Lambda::Function")
	if len(fns) < 6 {
		t.Fatalf("the template has %d functions, want the stack's 6: %v", len(fns), fns)
	}
	// The PSP's two secrets: the API key's and the signing secret's.
	type pspSecret struct {
		value, arn string
		readers    int
	}
	psp := map[string]*pspSecret{stackenv.PSPKeySecretArn: nil, stackenv.WebhookSecretArn: nil}
	for _, id := range st.Template.OfType("AWS::SecretsManager::Secret") {
		var v map[string]string
		switch {
		case strings.HasPrefix(id, "PspKeySecret"):
			if err := json.Unmarshal([]byte(st.Secret(t, id)), &v); err != nil {
				t.Fatal(err)
			}
			psp[stackenv.PSPKeySecretArn] = &pspSecret{value: v[stackenv.PSPSecretAPIKey], arn: st.Physical[id].Arn}
		case strings.HasPrefix(id, "PspWebhookSecret"):
			if err := json.Unmarshal([]byte(st.Secret(t, id)), &v); err != nil {
				t.Fatal(err)
			}
			psp[stackenv.WebhookSecretArn] = &pspSecret{value: v[stackenv.PSPSecretWebhookSecret], arn: st.Physical[id].Arn}
		}
	}
	for k, p := range psp {
		if p == nil || p.value == "" {
			t.Fatalf("no secret provisioned for %s", k)
		}
	}
	dsns := 0
	tokens := map[string]string{}
	for _, id := range fns {
		env, ok := envs[id]
		if !ok {
			t.Errorf("%s: no environment", id)
			continue
		}
		for k, v := range env {
			if v == "" || strings.Contains(v, "{{resolve:") || strings.Contains(v, "Fn::") || strings.Contains(v, "${") {
				t.Errorf("%s: %s=%q is not resolved", id, k, v)
			}
		}
		for k, want := range map[string]string{
			"AWS_ENDPOINT_URL": st.Config.AWSURL, "AWS_ENDPOINT_URL_DYNAMODB": st.Config.DynamoURL,
			"AWS_ENDPOINT_URL_DYNAMODB_STREAMS": st.Config.DynamoURL, "AWS_REGION": st.Config.Region,
			"AWS_LAMBDA_FUNCTION_NAME": id, stackenv.PSPURL: st.Config.PSPURL,
		} {
			if env[k] != want {
				t.Errorf("%s: %s=%q, want %q", id, k, env[k], want)
			}
		}
		// Each function has its own session token: it names the function to
		// the Secrets Manager gate.
		tok := env["AWS_SESSION_TOKEN"]
		if tok == "" || tok == provision.LocalSessionToken || tokens[tok] != "" {
			t.Errorf("%s: AWS_SESSION_TOKEN %q is empty, the shared one or %s's", id, tok, tokens[tok])
		}
		tokens[tok] = id
		if dsn, ok := env[stackenv.LedgerDSN]; ok {
			dsns++
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatalf("%s: DSN %q: %v", id, dsn, err)
			}
			if want := st.Config.PGHost + ":" + itoa(st.Config.PGPort); u.Host != want || u.Query().Get("sslmode") != "require" {
				t.Errorf("%s: DSN %s, want host %s with sslmode=require", id, dsn, want)
			}
		}
		for k, p := range psp {
			if v, ok := env[k]; ok {
				p.readers++
				if v != p.arn {
					t.Errorf("%s: %s %q, want the provisioned %q", id, k, v, p.arn)
				}
			}
			for ek, v := range env {
				if strings.Contains(v, p.value) {
					t.Errorf("%s: %s holds the value of the secret %s names", id, ek, k)
				}
			}
		}
	}
	if n := psp[stackenv.PSPKeySecretArn].readers; n != 3 {
		t.Errorf("%d functions are given the PSP key's secret, want the api, the resolver and the reconciliation", n)
	}
	if n := psp[stackenv.WebhookSecretArn].readers; n != 1 {
		t.Errorf("%d functions are given the signing secret, want the webhook", n)
	}
	if dsns < 4 {
		t.Errorf("%d functions got a ledger DSN, want the api, worker, resolver and webhook", dsns)
	}
	mig := envs["MigrationFunctionC04042BC"]
	if mig[stackenv.LedgerSecretArn] != st.Physical["DataLedgerSecret5C03D25B"].Arn || mig[stackenv.LedgerEndpoint] != st.Config.PGHost {
		t.Errorf("migration function: secret %q endpoint %q", mig[stackenv.LedgerSecretArn], mig[stackenv.LedgerEndpoint])
	}
}

// The api's DSN, opened the way the function opens it (boot.Ledger: an IAM
// token as the password), reaches the local ledger over TLS, since the
// template says sslmode=require.
func TestTheAPIsDSNConnectsToTheLocalLedgerOverTLS(t *testing.T) {
	st := testenv.LocalStack(t)
	api := st.Envs(t)["ApiFunction52E267E3"]
	admin := testenv.AdminConn(t)
	for _, k := range []string{stackenv.LedgerDSN, boot.LedgerIAMUser, "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
		t.Setenv(k, api[k])
	}
	// The app role is the migration's to create; the test stands in for it
	// only if no migration has run on this cluster yet.
	if _, err := admin.Exec(context.Background(), `DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'oncepay_app') THEN CREATE ROLE oncepay_app LOGIN; END IF; END $$`); err != nil {
		t.Fatal(err)
	}
	pool, err := boot.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var ssl bool
	var user string
	if err := pool.QueryRow(context.Background(), "SELECT ssl, current_user FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl, &user); err != nil {
		t.Fatalf("connect with the api's DSN %s: %v", api[stackenv.LedgerDSN], err)
	}
	if !ssl || user != "oncepay_app" {
		t.Errorf("connected as %s with ssl=%v, want oncepay_app over TLS", user, ssl)
	}
}

// A dynamic reference resolves to the provisioned secret's value, and the
// generated values follow the template's GenerateSecretString.
func TestADynamicReferenceResolvesToTheProvisionedSecret(t *testing.T) {
	st := testenv.LocalStack(t)
	ev := st.Config.Evaluator(st.Template, st.Physical, st.Secrets)
	ctx := context.Background()
	got, err := ev.String(ctx, map[string]any{"Fn::Join": []any{"", []any{
		"{{resolve:secretsmanager:", map[string]any{"Ref": webhookSecretID}, ":SecretString:webhook_secret::}}"}}})
	if err != nil {
		t.Fatal(err)
	}
	var webhook, key map[string]string
	if err := json.Unmarshal([]byte(st.Secret(t, webhookSecretID)), &webhook); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(st.Secret(t, keySecretID)), &key); err != nil {
		t.Fatal(err)
	}
	const punct = `!"#$%&'()*+,-./:;<=>?@[\]^_{|}~` + "`"
	if got != webhook["webhook_secret"] || len(got) != 40 || strings.ContainsAny(got, punct) || len(webhook) != 1 {
		t.Errorf("webhook_secret resolved to %q; the secret holds %v (want its one field, 40 characters, no punctuation)", got, webhook)
	}
	// The API key's placeholder is random until the deployer puts a Stripe
	// key there (the simulator takes any); the secret holds nothing else.
	if k := key["api_key"]; len(k) != 40 || strings.ContainsAny(k, punct) || len(key) != 1 {
		t.Errorf("the key secret holds %v, want one generated api_key", key)
	}
	var ledger map[string]any
	if err := json.Unmarshal([]byte(st.Secret(t, "DataLedgerSecret5C03D25B")), &ledger); err != nil {
		t.Fatal(err)
	}
	pw, _ := ledger["password"].(string)
	if len(pw) != 30 || strings.ContainsAny(pw, " %+~`#$&*()|[]{}:;<>?!'/@\"\\") || ledger["username"] != "oncepay_admin" {
		t.Errorf("ledger secret %v: want oncepay_admin with a 30-character password free of the excluded characters", ledger)
	}
	// The target attachment's fields: the local cluster.
	if ledger["host"] != st.Config.PGHost || ledger["port"] != float64(st.Config.PGPort) || ledger["engine"] != "postgres" || ledger["dbname"] != "oncepay" {
		t.Errorf("ledger secret %v: want host %s port %d engine postgres dbname oncepay", ledger, st.Config.PGHost, st.Config.PGPort)
	}
	// Provisioning again keeps the values, as CloudFormation keeps a secret.
	p := &provision.Provisioner{Secrets: st.Secrets, SecretPrefix: strings.TrimSuffix(st.Physical[webhookSecretID].Name, webhookSecretID)}
	again := map[string]provision.Physical{}
	for k, v := range st.Physical {
		again[k] = v
	}
	if err := p.ProvisionSecrets(ctx, st.Template, again); err != nil {
		t.Fatal(err)
	}
	if again[webhookSecretID].Arn != st.Physical[webhookSecretID].Arn || !strings.Contains(st.Secret(t, webhookSecretID), got) {
		t.Error("a second provision replaced the signing secret")
	}
	if _, err := ev.String(ctx, "{{resolve:secretsmanager:"+st.Physical[webhookSecretID].Arn+":SecretString:no_such_key::}}"); !errors.Is(err, provision.ErrUnresolvable) {
		t.Errorf("a missing JSON key resolved: %v", err)
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
