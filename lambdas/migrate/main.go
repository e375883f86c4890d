// Command migrate is the deploy-time migration function: a CloudFormation
// custom resource (Custom::LedgerMigrations) that applies the ledger's
// embedded migrations (internal/ledger/migrations) as the admin, then makes
// sure the application role exists, logs in with IAM tokens only (rds_iam)
// and holds no more than data privileges. Create and Update migrate; a
// rollback's Update (to an older function version) and Delete leave the
// schema to the data it holds.
//
// The admin password is read from the ledger secret at run time
// (internal/secrets, uncached: a deploy reads it once), so it never sits in
// the environment, and no Region-specific layer is needed to fetch it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/ledger/migrations"
	"github.com/oncepay/oncepay/internal/secrets"
)

// physicalID names the one schema this resource stands for.
const physicalID = "oncepay-ledger-schema"

var log = boot.Logger("migrate")

func main() {
	boot.FitProcs(log)
	lambda.Start(cfn.LambdaWrap(handle))
}

func handle(ctx context.Context, ev cfn.Event) (string, map[string]any, error) {
	log.Info("custom resource", "request", string(ev.RequestType), "logical_id", ev.LogicalResourceID)
	if ev.RequestType == cfn.RequestDelete {
		return physicalID, nil, nil
	}
	if rollback(ev) {
		// A rollback reverts this resource before the function, so the code
		// running here is the new one: migrating would run the migration that
		// failed again and leave the stack UPDATE_ROLLBACK_FAILED. The
		// migrations only add (the older code runs on the newer schema), so
		// the schema stays as it is.
		log.Warn("rollback: the schema is left as it is", "version", ev.ResourceProperties["Version"], "from", ev.OldResourceProperties["Version"])
		return physicalID, map[string]any{"Applied": "0"}, nil
	}
	user, _ := ev.ResourceProperties["AppUser"].(string)
	db, _ := ev.ResourceProperties["Database"].(string)
	if !identifier.MatchString(user) || !identifier.MatchString(db) {
		return physicalID, nil, fmt.Errorf("migrate: AppUser %q and Database %q must be plain identifiers", user, db)
	}
	dsn, err := adminDSN(ctx, db)
	if err != nil {
		return physicalID, nil, err
	}
	applied, err := migrations.Apply(ctx, dsn)
	if err != nil {
		return physicalID, nil, err
	}
	if err := ensureAppRole(ctx, dsn, user); err != nil {
		return physicalID, nil, err
	}
	log.Info("ledger migrated", "applied", applied, "app_user", user)
	return physicalID, map[string]any{"Applied": fmt.Sprint(applied)}, nil
}

// rollback reports whether ev is a rollback's update: the function version
// it names (the construct's Version property) is older than the one it
// replaces. A version is a number CloudFormation passes as a string.
func rollback(ev cfn.Event) bool {
	if ev.RequestType != cfn.RequestUpdate {
		return false
	}
	to, err1 := strconv.Atoi(fmt.Sprint(ev.ResourceProperties["Version"]))
	from, err2 := strconv.Atoi(fmt.Sprint(ev.OldResourceProperties["Version"]))
	return err1 == nil && err2 == nil && to < from
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// adminDSN builds the admin's connection string from the ledger secret
// (username, password) and the writer's endpoint.
func adminDSN(ctx context.Context, db string) (string, error) {
	arn, err := boot.Require(stackenv.LedgerSecretArn)
	if err != nil {
		return "", err
	}
	host, err := boot.Require(stackenv.LedgerEndpoint)
	if err != nil {
		return "", err
	}
	raw, err := secretString(ctx, arn)
	if err != nil {
		return "", err
	}
	var s struct {
		Username string `json:"username"`
		Password string `json:"password"`
		Port     int    `json:"port"`
	}
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return "", fmt.Errorf("migrate: ledger secret is not the RDS JSON shape: %w", err)
	}
	if s.Port == 0 {
		s.Port = 5432
	}
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(s.Username, s.Password),
		Host:     fmt.Sprintf("%s:%d", host, s.Port),
		Path:     "/" + db,
		RawQuery: "sslmode=require&connect_timeout=10",
	}
	return u.String(), nil
}

// secretString reads the secret, as the function's role may (the stack
// grants GetSecretValue on this one secret).
func secretString(ctx context.Context, arn string) (string, error) {
	cfg, err := boot.AWS(ctx)
	if err != nil {
		return "", err
	}
	// No cache to speak of: a deploy's one run reads it once, and a rotated
	// password must not be missed by a retry.
	store, err := secrets.New(cfg, secrets.Options{TTL: time.Nanosecond, MaxStale: -1, Logger: log})
	if err != nil {
		return "", fmt.Errorf("migrate: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := store.String(ctx, arn)
	if err != nil {
		return "", fmt.Errorf("migrate: ledger secret: %w", err)
	}
	return v, nil
}

// The app role's session limits (see ensureAppRole): well above the
// slowest statement the functions send (a sweep's batch), well below the
// recount's settle margin.
const (
	appStatementTimeout  = "30s"
	appLockTimeout       = "10s"
	appIdleInTransaction = "60s"
)

// ensureAppRole creates the application role if absent and grants it data
// privileges on the schema's tables and sequences, nothing on goose's
// bookkeeping, and IAM login (rds_iam: a password login stops working).
//
// Its sessions get time limits of their own (set on the role, so they hold
// through RDS Proxy without pinning a connection): no statement runs past
// appStatementTimeout, no lock is waited for past appLockTimeout, no
// transaction idles past appIdleInTransaction. A function that is killed
// or frozen can then not leave a write that commits minutes later: a settle
// stamps its event with the function's clock, and the stream job's recount
// takes a day as final 16 minutes after it ends (package recount).
func ensureAppRole(ctx context.Context, dsn, user string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Close(ctx)
	role := pgx.Identifier{user}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42710" { // duplicate_object: a previous run made it
			return fmt.Errorf("migrate: create role %s: %w", user, err)
		}
	}
	for _, stmt := range []string{
		"GRANT rds_iam TO " + role,
		"GRANT USAGE ON SCHEMA public TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO " + role,
		"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO " + role,
		"REVOKE ALL ON TABLE goose_db_version FROM " + role,
		"ALTER ROLE " + role + " SET statement_timeout = '" + appStatementTimeout + "'",
		"ALTER ROLE " + role + " SET lock_timeout = '" + appLockTimeout + "'",
		"ALTER ROLE " + role + " SET idle_in_transaction_session_timeout = '" + appIdleInTransaction + "'",
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("migrate: %s: %w", stmt, err)
		}
	}
	return nil
}
