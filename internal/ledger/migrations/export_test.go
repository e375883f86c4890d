package migrations

import (
	"database/sql"

	"github.com/pressly/goose/v3"
)

// Provider exposes the provider to the external tests that step versions.
func Provider(db *sql.DB) (*goose.Provider, error) { return provider(db) }
