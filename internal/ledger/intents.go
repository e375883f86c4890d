package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/oncepay/oncepay/internal/event"
)

// IntentsCreated returns the events of the outbox intents created in
// [from, to), of the given merchants (every merchant when none is given),
// oldest first. They are the events the outbox stream carried, payloads
// and all: a recount of the stream job's totals reads its truth here
// (package recount). created_at is the database's clock at the settle
// transaction's start, while an event's occurred_at is the settling
// function's clock: callers widen the window by a margin and pick by
// OccurredAt.
func (s *Store) IntentsCreated(ctx context.Context, from, to time.Time, merchants ...string) ([]event.Event, error) {
	q := `SELECT payload::text FROM outbox_intents WHERE created_at >= $1 AND created_at < $2`
	args := []any{from, to}
	if len(merchants) > 0 {
		q += ` AND merchant_id = ANY($3)`
		args = append(args, merchants)
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY created_at`, args...)
	if err != nil {
		return nil, unavailable("read outbox intents", err)
	}
	defer rows.Close()
	var out []event.Event
	for rows.Next() {
		var payload string
		if err := rows.Scan(&payload); err != nil {
			return nil, unavailable("read outbox intents", err)
		}
		e, err := event.Unmarshal([]byte(payload))
		if err != nil {
			return nil, fmt.Errorf("ledger: outbox intent: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable("read outbox intents", err)
	}
	return out, nil
}
