package boot

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
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

// The api's and the resolver's PSP key is read from the key's own secret
// (ONCEPAY_PSP_KEY_SECRET_ARN), never from the webhook's, which the stack
// does not let them read: with both variables set only the key's secret is
// asked for, and with the webhook's alone Stripe gets no key.
func TestPSPReadsTheKeysSecretAndNotTheWebhooks(t *testing.T) {
	const keyArn, webhookArn = "arn:aws:secretsmanager:eu-west-1:111111111111:secret:key-AbCdEf", "arn:aws:secretsmanager:eu-west-1:111111111111:secret:webhook-GhIjKl"
	var mu sync.Mutex
	var asked []string
	sm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ SecretId string }
		_ = json.NewDecoder(r.Body).Decode(&in)
		mu.Lock()
		asked = append(asked, in.SecretId)
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]string{"ARN": in.SecretId, "SecretString": `{"api_key":"sk_test_boot"}`})
	}))
	defer sm.Close()
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", sm.URL)
	t.Setenv(stackenv.PSPKeySecretArn, keyArn)
	t.Setenv(stackenv.WebhookSecretArn, webhookArn)
	t.Setenv(stackenv.PSPURL, "http://127.0.0.1:1")
	ctx := context.Background()
	cfg, err := AWS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PSP(ctx, cfg, Logger("test")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(asked) != 1 || asked[0] != keyArn {
		t.Errorf("Secrets Manager was asked for %v, want the key's secret %s alone", asked, keyArn)
	}
	mu.Unlock()
	t.Setenv(stackenv.PSPKeySecretArn, "")
	t.Setenv(stackenv.PSPURL, "")
	if _, err := PSP(ctx, cfg, Logger("test")); err == nil || !strings.Contains(err.Error(), stackenv.PSPKeySecretArn) {
		t.Errorf("Stripe with only the webhook's secret: %v, want an error naming %s", err, stackenv.PSPKeySecretArn)
	}
}

// GOMAXPROCS follows the function's memory: one per 1,769 MB, at least one,
// at most the machine's CPUs; an explicit GOMAXPROCS or no Lambda memory
// size leaves it alone.
func TestFitProcsFollowsTheFunctionsCPUShare(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	machine := runtime.NumCPU()
	for _, c := range []struct {
		mem, procs string
		want       int
	}{
		{"512", "", 1},
		{"1769", "", 1},
		{"3008", "", 1},
		{"10240", "", min(5, machine)},
		{"", "", machine},
		{"512", "2", 2},
	} {
		runtime.GOMAXPROCS(machine)
		t.Setenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", c.mem)
		t.Setenv("GOMAXPROCS", c.procs)
		if c.procs != "" {
			runtime.GOMAXPROCS(2)
		}
		if got := FitProcs(log); got != c.want || runtime.GOMAXPROCS(0) != c.want {
			t.Errorf("memory %q, GOMAXPROCS %q: FitProcs = %d, runtime %d, want %d", c.mem, c.procs, got, runtime.GOMAXPROCS(0), c.want)
		}
	}
}
