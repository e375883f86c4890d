package testenv

import (
	"context"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/provision"
)

// SecretsManager returns a client for the local cloud's Secrets Manager (moto).
func SecretsManager(t testing.TB) *secretsmanager.Client {
	t.Helper()
	return secretsmanager.NewFromConfig(awsConfig(t))
}

// Stack is the real synthesized template (cdk.out) over the local cloud:
// the tables, queues and topics `make up` provisioned, the DB cluster as the
// local PostgreSQL, the functions and their versions, and the template's
// secrets provisioned into moto under names of the test's own (deleted when
// it ends), so a test never reads or changes the local cloud's secrets.
type Stack struct {
	Config   provision.Config
	Template *provision.Template
	Physical map[string]provision.Physical
	Secrets  *secretsmanager.Client
}

// LocalStack provisions the test's Stack. ONCEPAY_TEMPLATE names another
// synthesized template than cdk.out's.
func LocalStack(t testing.TB) *Stack {
	t.Helper()
	env := AWS(t)
	root, err := localenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	path := TemplatePath(t)
	tmpl := Template(t)
	cc, err := pgx.ParseConfig(env.Get(stackenv.LedgerDSN))
	if err != nil {
		unavailable(t, "%s: %v", stackenv.LedgerDSN, err)
	}
	Reachable(t, "PostgreSQL", net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	c := provision.Config{
		Template: path, StateDir: t.TempDir(), StackName: "Oncepay", Region: env.Get("AWS_REGION"),
		DynamoURL: env.Get("AWS_ENDPOINT_URL_DYNAMODB"), AWSURL: env.Get("AWS_ENDPOINT_URL"),
		PGHost: cc.Host, PGPort: int(cc.Port), Database: cc.Database, PSPURL: env.Get(stackenv.PSPURL),
	}
	phys, err := provision.ReadResources(filepath.Join(root, ".local"))
	if err != nil {
		unavailable(t, "the local cloud's resources: %v", err)
	}
	maps.Copy(phys, provision.LocalClusters(tmpl, c.Region, provision.AccountID, c.PGHost, c.PGPort))
	maps.Copy(phys, provision.Lambdas(tmpl, c.Region, provision.AccountID, nil))
	sm := SecretsManager(t)
	p := &provision.Provisioner{Secrets: sm, SecretPrefix: "t" + RandomID(4) + "-"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.ProvisionSecrets(ctx, tmpl, phys); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, id := range tmpl.OfType("AWS::SecretsManager::Secret") {
			_, _ = sm.DeleteSecret(context.Background(), &secretsmanager.DeleteSecretInput{
				SecretId: aws.String(phys[id].Arn), ForceDeleteWithoutRecovery: aws.Bool(true)})
		}
	})
	return &Stack{Config: c, Template: tmpl, Physical: phys, Secrets: sm}
}

// Secret returns the current SecretString of the template's secret id.
func (s *Stack) Secret(t testing.TB, id string) string {
	t.Helper()
	out, err := s.Secrets.GetSecretValue(context.Background(), &secretsmanager.GetSecretValueInput{SecretId: aws.String(s.Physical[id].Arn)})
	if err != nil {
		t.Fatalf("read secret %s: %v", id, err)
	}
	return aws.ToString(out.SecretString)
}

// Envs resolves every function's environment over the stack.
func (s *Stack) Envs(t testing.TB) map[string]map[string]string {
	t.Helper()
	envs, err := provision.Envs(context.Background(), s.Template, s.Physical, s.Config.EnvConfig(s.Secrets))
	if err != nil {
		t.Fatal(err)
	}
	return envs
}

// AdminConn connects to the local PostgreSQL cluster's postgres database as
// its superuser (trust over 127.0.0.1), closed when the test ends.
func AdminConn(t testing.TB) *pgx.Conn {
	t.Helper()
	env := Load(t)
	dsn := env.Get(stackenv.LedgerDSN)
	if dsn == "" {
		unavailable(t, "%s not set", stackenv.LedgerDSN)
	}
	conn, err := pgx.Connect(context.Background(), replaceDB(dsn, "postgres"))
	if err != nil {
		unavailable(t, "PostgreSQL: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// TemplatePath is the synthesized template: cdk.out's, or the one
// ONCEPAY_TEMPLATE names (synthesized elsewhere). Missing, the test skips
// outside CI and fails in it (make up and make test synthesize it first).
func TemplatePath(t testing.TB) string {
	t.Helper()
	path := os.Getenv("ONCEPAY_TEMPLATE")
	if path == "" {
		root, err := localenv.Root()
		if err != nil {
			t.Fatal(err)
		}
		path = filepath.Join(root, "cdk.out", "Oncepay.template.json")
	}
	if _, err := os.Stat(path); err != nil {
		unavailable(t, "the synthesized template (make synth): %v", err)
	}
	return path
}

// Template reads TemplatePath's template.
func Template(t testing.TB) *provision.Template {
	t.Helper()
	tpl, err := provision.ReadTemplate(TemplatePath(t))
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}
