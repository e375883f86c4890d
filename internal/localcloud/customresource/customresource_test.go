package customresource_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/awsclient"
	"github.com/oncepay/oncepay/internal/localcloud/customresource"
	"github.com/oncepay/oncepay/internal/localcloud/invoke"
	"github.com/oncepay/oncepay/internal/localcloud/provision"
	"github.com/oncepay/oncepay/internal/localcloud/secretsgate"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

const (
	migrationFn = "MigrationFunctionC04042BC"
	schemaCR    = "MigrationSchema8F783001"
	clusterID   = "DataLedgerCluster7B896067"
	apiFn       = "ApiFunction52E267E3"
)

// world is the real template's migration custom resource over a database
// of the test's own on the local cluster, its function the real migrate
// bootstrap under aws-lambda-rie, reading the admin secret through the
// Secrets Manager gate (as localcloud serve points it).
type world struct {
	st       *testenv.Stack
	db       string
	driver   *customresource.Driver
	mu       sync.Mutex
	requests []cfn.Event
}

// newWorld builds the world; with older, the test's database is first made
// the way an older local cloud made the ledger (a clone of the migrated
// template database, every object owned by postgres).
func newWorld(t *testing.T, older bool) *world {
	st := testenv.LocalStack(t)
	ctx := context.Background()
	w := &world{st: st, db: "t_cr_" + testenv.RandomID(4)}
	admin := testenv.AdminConn(t)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{w.db}.Sanitize()+" WITH (FORCE)")
	})
	if older {
		for {
			_, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{w.db}.Sanitize()+" TEMPLATE "+provision.TemplateDB)
			var pgErr *pgconn.PgError
			if err == nil {
				break
			}
			if !errors.As(err, &pgErr) || pgErr.Code != "55006" { // the template has another session: retry
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The cluster's DatabaseName and the resource's Database are the
	// test's database, so the migration runs on it and not the ledger.
	cl := st.Physical[clusterID]
	cl.Database = w.db
	st.Physical[clusterID] = cl
	st.Template.Resources[schemaCR].Properties["Database"] = w.db
	ev := st.Config.Evaluator(st.Template, st.Physical, st.Secrets)
	if err := st.Config.LocalCluster(ctx, ev, clusterID); err != nil {
		t.Fatal(err)
	}
	envs := st.Envs(t)
	callers, err := provision.SecretCallers(st.Template, ev, envs)
	if err != nil {
		t.Fatal(err)
	}
	gate := httptest.NewServer(&secretsgate.Handler{Secrets: st.Secrets, Region: st.Config.Region, Callers: callers})
	t.Cleanup(gate.Close)
	env := envs[migrationFn]
	env[awsclient.ServiceEndpointVar("Secrets Manager")] = gate.URL // as localcloud serve points it
	var list []string
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	fl := testenv.StartLambda(t, testenv.BuildLambda(t, "migrate"), list)
	w.driver = &customresource.Driver{Evaluator: ev, StateDir: st.Config.StateDir, Invoker: invoke.Func{
		migrationFn: func(ctx context.Context, payload []byte) ([]byte, error) {
			var ev cfn.Event
			if err := json.Unmarshal(payload, &ev); err != nil {
				return nil, err
			}
			w.mu.Lock()
			w.requests = append(w.requests, ev)
			w.mu.Unlock()
			return fl.Invoke(json.RawMessage(payload), 2*time.Minute)
		}}}
	return w
}

func (w *world) sent() []cfn.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]cfn.Event(nil), w.requests...)
}

// The migration custom resource, driven as CloudFormation drives it: Create
// on a fresh cloud migrates the fresh database and is recorded; a second
// run sends nothing; a new function version sends Update with the old
// properties; and the app role the migration makes holds data privileges
// only.
func TestTheMigrationCustomResourceCreatesUpdatesAndOtherwiseLeavesTheLedger(t *testing.T) {
	w := newWorld(t, false)
	ctx := context.Background()

	out, err := w.driver.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reqs := w.sent()
	if len(out) != 1 || out[0].Request != cfn.RequestCreate || out[0].PhysicalID != "oncepay-ledger-schema" || len(reqs) != 1 {
		t.Fatalf("first run: %+v after %d requests; want one Create answered with the schema's physical id", out, len(reqs))
	}
	create := reqs[0]
	if create.ResourceType != "Custom::LedgerMigrations" || create.LogicalResourceID != schemaCR || create.ResourceProperties["Version"] != "1" ||
		create.ResourceProperties["Database"] != w.db || !strings.HasPrefix(create.StackID, "arn:aws:cloudformation:") || create.RequestID == "" ||
		!strings.HasPrefix(create.ResponseURL, "http://127.0.0.1:") || create.ResourceProperties["ServiceToken"] != w.st.Physical[migrationFn].Arn {
		t.Errorf("Create request %+v", create)
	}
	var tables, version int
	dbConn := w.connect(t)
	if err := dbConn.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename IN ('payments', 'credits', 'notif')").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if err := dbConn.QueryRow(ctx, "SELECT max(version_id) FROM goose_db_version").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if tables != 3 || version < 9 {
		t.Errorf("after Create: %d of the ledger's tables, schema version %d; want the migrated schema", tables, version)
	}
	recs, err := customresource.ReadRecords(w.st.Config.StateDir)
	if err != nil || recs[schemaCR].PhysicalResourceID != "oncepay-ledger-schema" || recs[schemaCR].Properties["Version"] != "1" {
		t.Errorf("record after Create: %+v, %v", recs, err)
	}

	// Unchanged: nothing is sent.
	out, err = w.driver.Run(ctx)
	if err != nil || len(out) != 1 || out[0].Request != "" || len(w.sent()) != 1 {
		t.Errorf("second run: %+v, %v after %d requests; want nothing sent", out, err, len(w.sent()))
	}

	// The function changed: the CDK names a new version resource, the local
	// cloud publishes it as version 2, and the resource's Version differs.
	tm := w.st.Template
	var oldV string
	for _, id := range tm.OfType("AWS::Lambda::Version") {
		oldV = id
	}
	tm.Resources[oldV+"Changed"] = tm.Resources[oldV]
	delete(tm.Resources, oldV)
	tm.Resources[schemaCR].Properties["Version"] = map[string]any{"Fn::GetAtt": []any{oldV + "Changed", "Version"}}
	maps.Copy(w.st.Physical, provision.Lambdas(tm, w.st.Config.Region, provision.AccountID, w.st.Physical))
	out, err = w.driver.Run(ctx)
	reqs = w.sent()
	if err != nil || len(out) != 1 || out[0].Request != cfn.RequestUpdate || len(reqs) != 2 {
		t.Fatalf("after the version changed: %+v, %v after %d requests; want an Update", out, err, len(reqs))
	}
	up := reqs[1]
	if up.RequestType != cfn.RequestUpdate || up.PhysicalResourceID != "oncepay-ledger-schema" ||
		up.ResourceProperties["Version"] != "2" || up.OldResourceProperties["Version"] != "1" {
		t.Errorf("Update request: type %s physical %q version %v old %v", up.RequestType, up.PhysicalResourceID,
			up.ResourceProperties["Version"], up.OldResourceProperties["Version"])
	}

	// The app role: the api's own DSN, on the test's database, over TLS.
	api := w.st.Envs(t)[apiFn][stackenv.LedgerDSN]
	au, _ := url.Parse(api)
	au.Path = "/" + w.db
	app, err := pgx.Connect(ctx, au.String())
	if err != nil {
		t.Fatalf("connect as the api (%s): %v", au.Redacted(), err)
	}
	defer app.Close(ctx)
	var n int
	if err := app.QueryRow(ctx, "SELECT count(*) FROM payments").Scan(&n); err != nil {
		t.Errorf("the app role cannot read payments: %v", err)
	}
	// Its sessions are time-bounded: no write of a killed function commits
	// minutes later (lambdas/migrate's ensureAppRole).
	for setting, want := range map[string]string{"statement_timeout": "30s", "lock_timeout": "10s", "idle_in_transaction_session_timeout": "1min"} {
		var got string
		if err := app.QueryRow(ctx, "SHOW "+setting).Scan(&got); err != nil || got != want {
			t.Errorf("the app role's %s = %q (%v), want %s", setting, got, err, want)
		}
	}
	for _, stmt := range []string{"DROP TABLE credits", "CREATE TABLE mine (x int)", "SELECT count(*) FROM goose_db_version", "TRUNCATE payments"} {
		_, err := app.Exec(ctx, stmt)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" { // insufficient_privilege
			t.Errorf("the app role ran %q: %v; want permission denied", stmt, err)
		}
	}
}

// A FAILED response is an error carrying the function's Reason, and nothing
// is recorded: the next run sends Create again.
func TestAFailedCustomResourceIsAnErrorWithItsReason(t *testing.T) {
	w := newWorld(t, false)
	w.st.Template.Resources[schemaCR].Properties["Database"] = "Not-An-Identifier"
	_, err := w.driver.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "failed") || !strings.Contains(err.Error(), "plain identifiers") {
		t.Fatalf("Run: %v; want the FAILED response's reason", err)
	}
	if _, err := os.Stat(filepath.Join(w.st.Config.StateDir, customresource.StateFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed Create was recorded: %v", err)
	}
	w.st.Template.Resources[schemaCR].Properties["Database"] = w.db
	out, err := w.driver.Run(context.Background())
	if err != nil || len(out) != 1 || out[0].Request != cfn.RequestCreate {
		t.Errorf("after the failure: %+v, %v; want Create again", out, err)
	}
}

// connect opens the test's database as the cluster's superuser.
func (w *world) connect(t *testing.T) *pgx.Conn {
	t.Helper()
	c := w.st.Config
	conn, err := pgx.Connect(context.Background(), c.DSN(w.db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// A ledger an older local cloud migrated as postgres is handed to the
// cluster's master user with its objects, so the custom resource's Create
// (run as that user, as on Aurora) can take it over: nothing to apply, the
// app role granted.
func TestAnOlderLocalCloudsLedgerIsHandedToTheMasterUser(t *testing.T) {
	w := newWorld(t, true)
	ctx := context.Background()
	var notOwned int
	if err := w.connect(t).QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'S') AND pg_get_userbyid(c.relowner) <> 'oncepay_admin'`).Scan(&notOwned); err != nil {
		t.Fatal(err)
	}
	if notOwned != 0 {
		t.Errorf("%d tables or sequences are not the master user's", notOwned)
	}
	out, err := w.driver.Run(ctx)
	if err != nil || len(out) != 1 || out[0].Request != cfn.RequestCreate || out[0].Data["Applied"] != "[]" {
		t.Fatalf("Create on the older ledger: %+v, %v; want a Create that applied nothing", out, err)
	}
}

// What CloudFormation does with a function that misbehaves, the driver does
// too, and records nothing (the next run sends Create again): an invocation
// that fails before any response, a response PUT that is not a valid
// response, and no response within the resource's ServiceTimeout.
func TestAMisbehavingCustomResourceFunctionFailsTheResourceAndRecordsNothing(t *testing.T) {
	w := newWorld(t, false)
	put := func(ev cfn.Event, body string) error {
		req, err := http.NewRequest(http.MethodPut, ev.ResponseURL, strings.NewReader(body))
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	for _, c := range []struct {
		name, timeout, want string
		fn                  func(cfn.Event) error
	}{
		{"fails before a response", "", "invoke " + migrationFn, func(cfn.Event) error { return errors.New("Runtime.ExitError") }},
		{"malformed response", "", "malformed response", func(ev cfn.Event) error {
			return put(ev, `{"Status":"MAYBE","RequestId":"`+ev.RequestID+`"}`)
		}},
		{"no response", "1", "no response from " + migrationFn + " at the ResponseURL within 1s", func(cfn.Event) error { return nil }},
	} {
		t.Run(c.name, func(t *testing.T) {
			props := w.st.Template.Resources[schemaCR].Properties
			if c.timeout != "" {
				props["ServiceTimeout"] = c.timeout
				defer delete(props, "ServiceTimeout")
			}
			w.driver.Invoker = invoke.Func{migrationFn: func(_ context.Context, payload []byte) ([]byte, error) {
				var ev cfn.Event
				if err := json.Unmarshal(payload, &ev); err != nil {
					return nil, err
				}
				return nil, c.fn(ev)
			}}
			_, err := w.driver.Run(context.Background())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run: %v; want an error naming %q", err, c.want)
			}
			if _, err := os.Stat(filepath.Join(w.st.Config.StateDir, customresource.StateFile)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the failed Create was recorded: %v", err)
			}
		})
	}
}
