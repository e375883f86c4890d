package testenv

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/awsclient/dynamoclient"
	"github.com/oncepay/oncepay/internal/awsclient/streamsclient"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
)

// The second Region's stores (issue 15), which `make up` runs beside the
// first's: missing, a test skips outside CI and fails in it.

// R2Region is the second Region's name (localenv.R2Region; us-west-2 when
// the env file names none).
func R2Region(t testing.TB) string {
	t.Helper()
	if r := Load(t).Get(localenv.R2Region); r != "" {
		return r
	}
	return "us-west-2"
}

// R2Ledger is Ledger on the second Region's PostgreSQL cluster: a fresh,
// migrated clone of its template database, dropped when the test ends.
func R2Ledger(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	dsn := Load(t).Get(localenv.R2LedgerAdminDSN)
	if dsn == "" {
		unavailable(t, "%s not set (the second Region's PostgreSQL)", localenv.R2LedgerAdminDSN)
	}
	return ledgerOn(t, "the second Region's PostgreSQL", dsn)
}

// R2DynamoDB returns a client for the second Region's DynamoDB Local,
// signing with R2Region.
func R2DynamoDB(t testing.TB) *dynamodb.Client {
	t.Helper()
	url, region := r2Dynamo(t)
	return dynamoclient.New(awsConfig(t), func(o *dynamodb.Options) {
		o.BaseEndpoint, o.Region = aws.String(url), region
	})
}

// R2DynamoDBStreams returns a DynamoDB Streams client for the second
// Region's DynamoDB Local, signing with R2Region.
func R2DynamoDBStreams(t testing.TB) *dynamodbstreams.Client {
	t.Helper()
	url, region := r2Dynamo(t)
	return streamsclient.New(awsConfig(t), func(o *dynamodbstreams.Options) {
		o.BaseEndpoint, o.Region = aws.String(url), region
	})
}

func r2Dynamo(t testing.TB) (url, region string) {
	t.Helper()
	AWS(t)
	url = Load(t).Get(localenv.R2DynamoURL)
	if url == "" {
		unavailable(t, "%s not set (the second Region's DynamoDB Local)", localenv.R2DynamoURL)
	}
	Reachable(t, "the second Region's DynamoDB Local", url)
	return url, R2Region(t)
}

// LiveRegion is one Region of the two-Region local cloud, two live stacks
// that `make up-regions` (scripts/localcloud.sh regions-up) runs beside the
// one-Region stack: its environment file, .local/regions/<region>/env, not
// exported (each Region has endpoints of its own). Missing, or its front
// door closed, a test skips outside CI and fails in it.
func LiveRegion(t testing.TB, region string) localenv.Env {
	t.Helper()
	root, err := localenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, ".local", "regions", region, "env")
	f, err := os.Open(path)
	if err != nil {
		unavailable(t, "the two-Region local cloud's %s (run `make up-regions`): %v", region, err)
	}
	defer f.Close()
	env, err := localenv.Parse(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	Reachable(t, region+"'s front door", env.Get(stackenv.FrontDoorURL))
	return env
}
