// Package migrations holds the ledger's versioned SQL schema and applies it
// with goose. The same embedded files are applied locally by `make up` and,
// in AWS, by the deploy-time migration function.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// Apply brings the database at dsn to the newest schema version and returns
// the versions it applied (none when the schema was already current). It
// holds a PostgreSQL advisory lock, so concurrent callers apply each version once.
func Apply(ctx context.Context, dsn string) ([]int64, error) {
	cfg, err := pgxConfig(dsn)
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	return ApplyDB(ctx, db)
}

// ApplyDB is Apply over an open database handle.
func ApplyDB(ctx context.Context, db *sql.DB) ([]int64, error) {
	p, err := provider(db)
	if err != nil {
		return nil, err
	}
	res, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: up: %w", err)
	}
	var applied []int64
	for _, r := range res {
		if r.Error == nil && !r.Empty {
			applied = append(applied, r.Source.Version)
		}
	}
	return applied, nil
}

// provider is goose over the embedded files, holding the advisory lock.
func provider(db *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migrations: locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("migrations: provider: %w", err)
	}
	return p, nil
}

func pgxConfig(dsn string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("migrations: parse dsn: %w", err)
	}
	return cfg, nil
}
