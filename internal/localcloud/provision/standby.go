package provision

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Standby readies this cluster (c.PGPort) as the standby of the ledger
// database c.Database on the primary's cluster (primaryPort), as an Aurora
// global database's secondary starts: with the primary's roles (their
// settings included) and its schema, objects owned as on the primary, the
// database owned by the primary's owner. The rows are not copied here: a
// replication link (internal/localcloud/pgrepl) copies them and keeps
// following. A standby whose schema is the primary's (the same migrations
// applied) is kept; one behind or ahead is made again, its sessions ended,
// so a new migration reaches it with the next `make up-regions`.
//
// The copy is PostgreSQL's own (pg_dumpall --roles-only, pg_dump
// --schema-only): a physical replica holds exactly what the primary holds,
// and a dump is the nearest a local cluster gets to that. Publications and
// subscriptions stay behind: they are a replication link's, not the ledger's.
func (c Config) Standby(ctx context.Context, primaryPort int) error {
	bin, err := pgBin()
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, fmt.Sprintf("PostgreSQL at %s:%d", c.PGHost, c.PGPort), c.pgReady); err != nil {
		return err
	}
	primary := c
	primary.PGPort = primaryPort
	if err := primary.waitFor(ctx, fmt.Sprintf("the primary's PostgreSQL at %s:%d", c.PGHost, primaryPort), primary.pgReady); err != nil {
		return err
	}
	want, owner, err := primary.schemaVersion(ctx)
	if err != nil {
		return err
	}
	if want < 0 {
		return fmt.Errorf("localcloud: standby: %s on :%d has no ledger schema yet (the primary stack's migration makes it: start the primary Region first)", c.Database, primaryPort)
	}
	// Roles are cluster-wide; one that exists already is kept, its
	// settings and memberships set again.
	roles, _, err := run(ctx, filepath.Join(bin, "pg_dumpall"), nil, "-h", c.PGHost, "-p", strconv.Itoa(primaryPort), "-U", "postgres", "--roles-only", "--no-role-passwords")
	if err != nil {
		return fmt.Errorf("localcloud: standby: the primary's roles: %w", err)
	}
	if err := psqlTolerant(ctx, bin, c, "postgres", roles); err != nil {
		return fmt.Errorf("localcloud: standby: the roles on :%d: %w", c.PGPort, err)
	}
	got, _, err := c.schemaVersion(ctx)
	if err != nil {
		return err
	}
	if got == want {
		return nil
	}
	if got >= 0 || got == noSchema {
		if err := c.dropDatabase(ctx); err != nil {
			return err
		}
	}
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("localcloud: connect :%d: %w", c.PGPort, err)
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{c.Database}.Sanitize()+" OWNER "+pgx.Identifier{owner}.Sanitize())
	conn.Close(ctx)
	if err != nil {
		return fmt.Errorf("localcloud: standby: create %s on :%d: %w", c.Database, c.PGPort, err)
	}
	schema, _, err := run(ctx, filepath.Join(bin, "pg_dump"), nil, "-h", c.PGHost, "-p", strconv.Itoa(primaryPort), "-U", "postgres",
		"--schema-only", "--no-publications", "--no-subscriptions", c.Database)
	if err != nil {
		return fmt.Errorf("localcloud: standby: the primary's schema: %w", err)
	}
	if _, _, err := run(ctx, filepath.Join(bin, "psql"), schema, "-h", c.PGHost, "-p", strconv.Itoa(c.PGPort), "-U", "postgres", "-d", c.Database,
		"-X", "-q", "-v", "ON_ERROR_STOP=1"); err != nil {
		return fmt.Errorf("localcloud: standby: the schema on :%d: %w", c.PGPort, err)
	}
	if c.Log != nil {
		fmt.Fprintf(c.Log, "localcloud: standby: %s on :%d has the roles and schema (migration %d) of :%d\n", c.Database, c.PGPort, want, primaryPort)
	}
	return nil
}

// noSchema is schemaVersion's answer for a database that exists without
// the migrations' bookkeeping; -1 is no database at all.
const noSchema = -2

// schemaVersion is the highest migration applied to c.Database (-1: no
// such database, noSchema: no bookkeeping table) and the database's owner.
func (c Config) schemaVersion(ctx context.Context) (int64, string, error) {
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return 0, "", fmt.Errorf("localcloud: connect :%d: %w", c.PGPort, err)
	}
	var owner string
	err = conn.QueryRow(ctx, "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = $1", c.Database).Scan(&owner)
	conn.Close(ctx)
	if errors.Is(err, pgx.ErrNoRows) {
		return -1, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("localcloud: %s on :%d: %w", c.Database, c.PGPort, err)
	}
	db, err := pgx.Connect(ctx, c.DSN(c.Database))
	if err != nil {
		return 0, "", fmt.Errorf("localcloud: connect %s on :%d: %w", c.Database, c.PGPort, err)
	}
	defer db.Close(ctx)
	var has bool
	if err := db.QueryRow(ctx, "SELECT to_regclass('public.goose_db_version') IS NOT NULL").Scan(&has); err != nil {
		return 0, "", fmt.Errorf("localcloud: %s on :%d: %w", c.Database, c.PGPort, err)
	}
	if !has {
		return noSchema, owner, nil
	}
	var v int64
	if err := db.QueryRow(ctx, "SELECT coalesce(max(version_id), 0) FROM goose_db_version WHERE is_applied").Scan(&v); err != nil {
		return 0, "", fmt.Errorf("localcloud: %s on :%d: migrations: %w", c.Database, c.PGPort, err)
	}
	return v, owner, nil
}

// dropDatabase drops c.Database, ending its sessions first (a standby's
// functions keep pooled connections; a subscription left by a link that
// was never closed is dropped with its slot left alone).
func (c Config) dropDatabase(ctx context.Context) error {
	if db, err := pgx.Connect(ctx, c.DSN(c.Database)); err == nil {
		rows, err := db.Query(ctx, "SELECT subname FROM pg_subscription WHERE subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())")
		var subs []string
		if err == nil {
			subs, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		// As pgrepl.DetachSubscription does (not imported: pgrepl's tests
		// import the test kit, which imports this package).
		for _, sub := range subs {
			id := pgx.Identifier{sub}.Sanitize()
			for _, stmt := range []string{"ALTER SUBSCRIPTION " + id + " DISABLE", "ALTER SUBSCRIPTION " + id + " SET (slot_name = NONE)", "DROP SUBSCRIPTION " + id} {
				if _, err := db.Exec(ctx, stmt); err != nil {
					db.Close(ctx)
					return fmt.Errorf("localcloud: standby: %s: %w", stmt, err)
				}
			}
		}
		db.Close(ctx)
		if err != nil {
			return fmt.Errorf("localcloud: standby: subscriptions of %s: %w", c.Database, err)
		}
	}
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("localcloud: connect :%d: %w", c.PGPort, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{c.Database}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("localcloud: standby: drop %s on :%d: %w", c.Database, c.PGPort, err)
	}
	return nil
}

// psqlTolerant runs sql through psql on database db, going on past
// statements that fail because what they make exists already (a role the
// cluster has), and fails on any other error.
func psqlTolerant(ctx context.Context, bin string, c Config, db string, sql []byte) error {
	_, stderr, err := run(ctx, filepath.Join(bin, "psql"), sql, "-h", c.PGHost, "-p", strconv.Itoa(c.PGPort), "-U", "postgres", "-d", db, "-X", "-q")
	if err != nil {
		return err
	}
	for line := range strings.Lines(string(stderr)) {
		if strings.Contains(line, "ERROR:") && !strings.Contains(line, "already exists") {
			return fmt.Errorf("psql: %s", strings.TrimSpace(line))
		}
	}
	return nil
}

// pgBin is the newest installed PostgreSQL's bin directory (Debian's
// layout, as scripts/localcloud.sh finds it).
func pgBin() (string, error) {
	dirs, err := filepath.Glob("/usr/lib/postgresql/*/bin")
	if err != nil || len(dirs) == 0 {
		return "", fmt.Errorf("localcloud: no PostgreSQL under /usr/lib/postgresql (run make setup)")
	}
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return va - vb
	})
	return dirs[len(dirs)-1], nil
}

// run runs a PostgreSQL client program with stdin and returns its output
// and its error output.
func run(ctx context.Context, name string, stdin []byte, args ...string) (stdout, stderr []byte, err error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, errb.Bytes(), fmt.Errorf("localcloud: %s: %w: %s", filepath.Base(name), err, bytes.TrimSpace(errb.Bytes()))
	}
	return out.Bytes(), errb.Bytes(), nil
}
