// Package testenv gives integration tests the local cloud (or a deployed
// stack's endpoints) and enforces the rule that a missing service fails the
// run in CI: outside CI a test skips with the reason, with CI set it fails.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/ledger/migrations"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
)

// TemplateDB is the migrated database fresh test databases are cloned from
// (kept in step with localcloud.TemplateDB).
const TemplateDB = "oncepay_tmpl"

// unavailable skips outside CI and fails in CI.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("CI: required service unavailable: "+format, args...)
	}
	t.Skipf("service unavailable (run `make up`): "+format, args...)
}

// Load returns the local cloud's environment, exported into the process so
// the SDK's default config uses the emulators' endpoints.
func Load(t testing.TB) localenv.Env {
	t.Helper()
	env, err := localenv.Load()
	if err != nil {
		unavailable(t, "%v", err)
	}
	if err := env.Export(); err != nil {
		t.Fatal(err)
	}
	return env
}

// Reachable checks that a TCP connection to the host of rawURL succeeds.
func Reachable(t testing.TB, name, rawURL string) {
	t.Helper()
	host := rawURL
	if u, err := url.Parse(rawURL); err == nil && u.Host != "" {
		host = u.Host
	}
	c, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		unavailable(t, "%s at %s: %v", name, host, err)
		return
	}
	c.Close()
}

// AWS loads the environment and checks that DynamoDB and the moto/LocalStack
// endpoint are reachable.
func AWS(t testing.TB) localenv.Env {
	t.Helper()
	env := Load(t)
	if u := env.Get("AWS_ENDPOINT_URL_DYNAMODB"); u != "" {
		Reachable(t, "DynamoDB", u)
	}
	if u := env.Get("AWS_ENDPOINT_URL"); u != "" {
		Reachable(t, "moto/LocalStack", u)
	}
	return env
}

// Ledger creates a fresh, migrated PostgreSQL database for the test (cloned
// from the template database), drops it when the test ends, and returns a
// pool and its DSN. Each test gets its own world: no shared rows.
func Ledger(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	env := Load(t)
	dsn := env.Get(stackenv.LedgerDSN)
	if dsn == "" {
		unavailable(t, "%s not set", stackenv.LedgerDSN)
	}
	return ledgerOn(t, "PostgreSQL", dsn)
}

// ledgerOn is Ledger on the cluster dsn names (any database of it, as a
// user that may create databases).
func ledgerOn(t testing.TB, cluster, dsn string) (*pgxpool.Pool, string) {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", dsn, err)
	}
	Reachable(t, cluster, net.JoinHostPort(cfg.Host, itoa(cfg.Port)))
	admin := replaceDB(dsn, "postgres")
	name := "t_" + strings.ToLower(sanitize(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	name += "_" + RandomID(4)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		unavailable(t, "%s: %v", cluster, err)
	}
	defer conn.Close(ctx)
	// Cloning needs the template to have no other sessions; parallel clones retry.
	for {
		_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+TemplateDB)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("create test database: %v", err)
	}
	testDSN := replaceDB(dsn, name)
	// The template is migrated by `make up`; a tree with newer migration
	// files than the running template brings its clone up to date, so a test
	// always sees the schema of the code it tests.
	if _, err := migrations.Apply(ctx, testDSN); err != nil {
		t.Fatalf("migrate test database: %v", err)
	}
	pool, err := pgxpool.New(context.Background(), testDSN)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		// A replication slot left on the database (a replication test
		// that died before its cleanup) would keep the drop from happening
		// and hold the cluster's WAL for good.
		_, _ = c.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active", name)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	return pool, testDSN
}

// RandomID returns n random bytes, hex-encoded: unique names for test data.
func RandomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func replaceDB(dsn, db string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	u.Path = "/" + db
	return u.String()
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		if (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

// UnreachableLedger is a pool to a ledger that never answers: a host
// ending in .invalid does not resolve (the resolver's own not-found
// answer, given without asking the machine's DNS, which a test cannot
// count on); any other host is dialed as it is (127.0.0.1:1 refuses).
func UnreachableLedger(t testing.TB, host string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig("postgres://oncepay@" + host + "/oncepay?connect_timeout=1&sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.LookupFunc = func(ctx context.Context, name string) ([]string, error) {
		if strings.HasSuffix(name, ".invalid") {
			return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
		}
		return net.DefaultResolver.LookupHost(ctx, name)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
