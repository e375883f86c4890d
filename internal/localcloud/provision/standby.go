package provision

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// Standby readies this cluster (c.PGPort) as the standby of the ledger
// database c.Database on the primary's cluster (primaryPort), as an Aurora
// global database's secondary starts: with the primary's roles (their
// settings included) and its schema, objects owned as on the primary. The
// rows are not copied here: a replication link (internal/localcloud/pgrepl)
// copies them and keeps following. A database that already has the schema
// keeps it, so a second run changes nothing.
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
	has, err := primary.hasSchema(ctx)
	if err != nil {
		return err
	}
	if !has {
		return fmt.Errorf("localcloud: standby: %s on :%d has no ledger schema yet (the primary stack's migration makes it: start the primary Region first)", c.Database, primaryPort)
	}
	// Roles are cluster-wide; one that exists already is kept (psql goes
	// on past "already exists"), its settings are set again.
	roles, err := run(ctx, filepath.Join(bin, "pg_dumpall"), nil, "-h", c.PGHost, "-p", strconv.Itoa(primaryPort), "-U", "postgres", "--roles-only", "--no-role-passwords")
	if err != nil {
		return err
	}
	if _, err := run(ctx, filepath.Join(bin, "psql"), roles, "-h", c.PGHost, "-p", strconv.Itoa(c.PGPort), "-U", "postgres", "-d", "postgres", "-X", "-q"); err != nil {
		return err
	}
	if err := c.ensureDatabase(ctx, c.Database); err != nil {
		return err
	}
	if has, err := c.hasSchema(ctx); err != nil || has {
		return err
	}
	schema, err := run(ctx, filepath.Join(bin, "pg_dump"), nil, "-h", c.PGHost, "-p", strconv.Itoa(primaryPort), "-U", "postgres",
		"--schema-only", "--no-publications", "--no-subscriptions", c.Database)
	if err != nil {
		return err
	}
	if _, err := run(ctx, filepath.Join(bin, "psql"), schema, "-h", c.PGHost, "-p", strconv.Itoa(c.PGPort), "-U", "postgres", "-d", c.Database,
		"-X", "-q", "-v", "ON_ERROR_STOP=1"); err != nil {
		return err
	}
	if c.Log != nil {
		fmt.Fprintf(c.Log, "localcloud: standby: %s on :%d has the roles and schema of :%d\n", c.Database, c.PGPort, primaryPort)
	}
	return nil
}

// hasSchema reports whether c.Database exists and holds the migrations'
// bookkeeping table.
func (c Config) hasSchema(ctx context.Context) (bool, error) {
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return false, fmt.Errorf("localcloud: connect :%d: %w", c.PGPort, err)
	}
	var exists bool
	err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", c.Database).Scan(&exists)
	conn.Close(ctx)
	if err != nil || !exists {
		return false, err
	}
	db, err := pgx.Connect(ctx, c.DSN(c.Database))
	if err != nil {
		return false, fmt.Errorf("localcloud: connect %s on :%d: %w", c.Database, c.PGPort, err)
	}
	defer db.Close(ctx)
	var has bool
	if err := db.QueryRow(ctx, "SELECT to_regclass('public.goose_db_version') IS NOT NULL").Scan(&has); err != nil {
		return false, fmt.Errorf("localcloud: %s on :%d: %w", c.Database, c.PGPort, err)
	}
	return has, nil
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

// run runs a PostgreSQL client program with stdin and returns its output.
func run(ctx context.Context, name string, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("localcloud: %s: %w: %s", filepath.Base(name), err, bytes.TrimSpace(errb.Bytes()))
	}
	return out.Bytes(), nil
}
