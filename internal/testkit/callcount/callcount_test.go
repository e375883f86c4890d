package callcount

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The tracer's arithmetic: a commit and an autocommit write are durable
// writes; statements inside a transaction, BEGIN, ROLLBACK and reads are not.
func TestSQLWritesAreCommitsAndAutocommitWrites(t *testing.T) {
	c := New()
	conn := &pgx.Conn{}
	for _, sql := range []string{
		"INSERT INTO payments VALUES (1)", // autocommit: 1
		"SELECT 1",
		"begin",
		"UPDATE payments SET x = 1", // inside the transaction
		"commit",                    // 2
		"BEGIN",
		"DELETE FROM payments",
		"ROLLBACK",
		"  WITH moved AS (UPDATE payments SET y = 2 RETURNING 1) SELECT 1", // autocommit: 3
	} {
		c.TraceQueryStart(context.Background(), conn, pgx.TraceQueryStartData{SQL: sql})
	}
	s := c.Take()
	if s.Writes != 3 {
		t.Errorf("writes = %d, want 3 (%s)", s.Writes, s)
	}
	if s.RoundTrips() != 9 || s.Count("SQL.COMMIT") != 1 || s.Count("SQL.BEGIN") != 2 {
		t.Errorf("calls = %s", s)
	}
	if again := c.Take(); again.RoundTrips() != 0 || again.Writes != 0 {
		t.Errorf("Take did not reset: %s", again)
	}
}
