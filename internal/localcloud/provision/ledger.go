package provision

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// LocalCluster makes the local PostgreSQL the DB cluster the template
// declares, the way RDS creates one: the master user (MasterUsername and
// MasterUserPassword, dynamic references into the ledger secret) as a login
// role that may create roles but is no superuser (Aurora's master holds
// rds_superuser, not superuser), the rds_iam role IAM-authenticated users
// are granted (on Aurora it exists from the start; the migration grants it
// to the app role), and the DatabaseName owned by the master user. A
// database an older local cloud made as postgres is handed over to the
// master user with its schema objects, so the migration function (which
// logs in as that user) can alter them.
//
// Authentication stays trust for 127.0.0.1: the functions send an RDS IAM
// token as the app role's password, which only RDS can verify, so locally
// the role's name decides and the token is ignored. What a role may do is
// still PostgreSQL's privileges, granted by the migration.
func (c Config) LocalCluster(ctx context.Context, ev *Evaluator, clusterID string) error {
	return c.localCluster(ctx, ev, clusterID, true)
}

// localCluster is LocalCluster; withDatabase false makes the roles alone
// (the second Region's cluster, whose ledger database a test clones).
func (c Config) localCluster(ctx context.Context, ev *Evaluator, clusterID string, withDatabase bool) error {
	r := ev.Template.Resources[clusterID]
	ph := ev.Physical[clusterID]
	user, err := ev.String(ctx, r.Properties["MasterUsername"])
	if err != nil {
		return fmt.Errorf("localcloud: cluster %s: MasterUsername: %w", clusterID, err)
	}
	password, err := ev.String(ctx, r.Properties["MasterUserPassword"])
	if err != nil {
		return fmt.Errorf("localcloud: cluster %s: MasterUserPassword: %w", clusterID, err)
	}
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("localcloud: connect: %w", err)
	}
	defer conn.Close(ctx)
	// The stack's DSNs require TLS (Aurora's rds.force_ssl): a cluster
	// without it would fail every function's first connection instead.
	var ssl string
	if err := conn.QueryRow(ctx, "SHOW ssl").Scan(&ssl); err != nil {
		return fmt.Errorf("localcloud: cluster %s: %w", clusterID, err)
	}
	if ssl != "on" {
		return fmt.Errorf("localcloud: cluster %s: the local PostgreSQL has ssl=%s but the stack connects with sslmode=require: run scripts/localcloud.sh up, which turns TLS on", clusterID, ssl)
	}
	role := pgx.Identifier{user}.Sanitize()
	for _, stmt := range []string{
		ifNoRole("rds_iam", "CREATE ROLE rds_iam NOLOGIN"),
		ifNoRole(user, "CREATE ROLE "+role),
		"ALTER ROLE " + role + " LOGIN CREATEROLE NOSUPERUSER PASSWORD " + literal(password),
		"GRANT rds_iam TO " + role + " WITH ADMIN OPTION",
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("localcloud: cluster %s: %s: %w", clusterID, strings.SplitN(stmt, " PASSWORD", 2)[0], err)
		}
	}
	if ph.Database == "" || !withDatabase {
		return nil
	}
	return c.ownedDatabase(ctx, conn, ph.Database, user)
}

// ifNoRole wraps a CREATE ROLE so a second Up changes nothing.
func ifNoRole(name, stmt string) string {
	return fmt.Sprintf("DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %s) THEN EXECUTE %s; END IF; END $$",
		literal(name), literal(stmt))
}

func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func (c Config) ownedDatabase(ctx context.Context, conn *pgx.Conn, db, owner string) error {
	var current string
	err := conn.QueryRow(ctx, "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = $1", db).Scan(&current)
	if err == pgx.ErrNoRows {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()+" OWNER "+pgx.Identifier{owner}.Sanitize()); err != nil {
			return fmt.Errorf("localcloud: create database %s: %w", db, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("localcloud: look up database %s: %w", db, err)
	}
	if current == owner {
		return nil
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" OWNER TO "+pgx.Identifier{owner}.Sanitize()); err != nil {
		return fmt.Errorf("localcloud: database %s: hand to %s: %w", db, owner, err)
	}
	dc, err := pgx.Connect(ctx, c.DSN(db))
	if err != nil {
		return fmt.Errorf("localcloud: connect %s: %w", db, err)
	}
	defer dc.Close(ctx)
	// Sequences that belong to a column move with their table.
	if _, err := dc.Exec(ctx, `DO $$ DECLARE r record; BEGIN
  FOR r IN SELECT format('ALTER %s %I.%I OWNER TO %I',
      CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END,
      n.nspname, c.relname, `+literal(owner)+`) AS q
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'public' AND c.relkind IN ('r','p','v','m','S')
      AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype IN ('a','i') AND c.relkind = 'S')
  LOOP EXECUTE r.q; END LOOP;
  FOR r IN SELECT format('ALTER ROUTINE %I.%I(%s) OWNER TO %I', n.nspname, p.proname, pg_get_function_identity_arguments(p.oid), `+literal(owner)+`) AS q
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'
  LOOP EXECUTE r.q; END LOOP;
END $$`); err != nil {
		return fmt.Errorf("localcloud: database %s: hand its objects to %s: %w", db, owner, err)
	}
	return nil
}
