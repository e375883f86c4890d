package chaos

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncepay/oncepay/internal/ledger"
)

// isLedgerError reports an error that is the ledger being unreachable:
// what the faultnet proxy's outage or lost reply makes pgx return (a
// refused connection, a session closed under a round trip, a closed
// connection reused: pgconn's error types, which all answer SafeToRetry),
// or the ledger package's own ErrUnavailable wrapping one. A hop that
// failed on one of these in an outage is what Lambda retries; any other
// error in the same hop is the code's own failure, and the schedule's.
func isLedgerError(err error) bool {
	if err == nil {
		return false
	}
	var connect *pgconn.ConnectError
	var pg interface{ SafeToRetry() bool } // pgconn's pgconnError, connLockError, errTimeout...
	return errors.Is(err, ledger.ErrUnavailable) || errors.As(err, &connect) || errors.As(err, &pg)
}
