package boot

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// With the stack's IAM user set, every new connection carries a freshly
// signed RDS auth token as its password, for that user and endpoint.
func TestIAMAuthSignsATokenPerConnection(t *testing.T) {
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv(LedgerIAMUser, "oncepay_app")
	pc, err := pgxpool.ParseConfig("postgres://ignored@ledger.example:5432/oncepay?sslmode=require")
	if err != nil {
		t.Fatal(err)
	}
	if err := iamAuth(context.Background(), pc); err != nil {
		t.Fatal(err)
	}
	if pc.ConnConfig.User != "oncepay_app" || pc.BeforeConnect == nil {
		t.Fatalf("user %q, hook set %v", pc.ConnConfig.User, pc.BeforeConnect != nil)
	}
	cc := pc.ConnConfig.Copy()
	if err := pc.BeforeConnect(context.Background(), cc); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse("https://" + cc.Password)
	if err != nil {
		t.Fatalf("token %q: %v", cc.Password, err)
	}
	q := u.Query()
	if u.Host != "ledger.example:5432" || q.Get("Action") != "connect" || q.Get("DBUser") != "oncepay_app" ||
		!strings.Contains(q.Get("X-Amz-Credential"), "eu-west-1/rds-db/aws4_request") || q.Get("X-Amz-Signature") == "" {
		t.Fatalf("token = %s", cc.Password)
	}
}

func TestOutboxIsNilWithoutATableAndAPublisherWithOne(t *testing.T) {
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("ONCEPAY_OUTBOX_TABLE", "")
	cfg, err := AWS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	log := Logger("test")
	if pub, err := Outbox(cfg, log); err != nil || pub != nil {
		t.Fatalf("without a table: %v, %v", pub, err)
	}
	t.Setenv("ONCEPAY_OUTBOX_TABLE", "outbox")
	if pub, err := Outbox(cfg, log); err != nil || pub == nil {
		t.Fatalf("with a table: %v, %v", pub, err)
	}
}
