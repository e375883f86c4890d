package inbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// NotifSuperseded: a later notification about the same payment exists, so
// this one must never go out (see retireSuperseded). Final.
const NotifSuperseded = "SUPERSEDED"

// execer is what retireSuperseded needs of the worker's and the sweep's DB.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// retireSuperseded marks the PENDING notification of eventID SUPERSEDED
// when a later one about the same payment (the same replace id) has taken,
// or will take, its place on the phone, and reports whether it did. Every
// notification shares the payment's replace id, so one sent late — a
// failed push the sweep retries, an event re-driven after its refund's,
// two stream shards out of order — would replace the newer one on the
// phone and say the opposite of the ledger. The order is the payment's
// life: its result (SUCCEEDED or FAILED), then REFUNDED, then
// REFUND_FAILED. Both senders call it right before a send.
//
// The rule: a later notification retires this one only if it was, may
// have been, or will be delivered before this one could be:
//   - SENT, or UNKNOWN (it may have gone): it is on the phone.
//   - STUCK: its failed sends may have gone, and a human re-arms it.
//   - PENDING and not waiting for a device: in flight, or retried after a
//     failure until SENT or STUCK.
//   - PENDING and waiting for a device, when this one waits too: the
//     device that takes this one takes that one, and the latest carries
//     the payment's state now (the replace id would fold them anyway).
//
// A later one that is UNDELIVERABLE (no device came within its horizon)
// replaced nothing and never will, so it retires nothing; nor does one
// waiting for a device while this one is owed for another reason (an SNS
// outage): this one is sent, and the later one lands on top once the
// device comes.
func retireSuperseded(ctx context.Context, db execer, eventID, channel string) (bool, error) {
	tag, err := db.Exec(ctx, `
		UPDATE notif n SET state = 'SUPERSEDED', lease_until = NULL
		WHERE n.event_id = $1 AND n.channel = $2 AND n.state = 'PENDING'
		  AND EXISTS (
		    SELECT 1 FROM notif later
		    WHERE later.replace_id = n.replace_id AND later.channel = n.channel AND later.event_id <> n.event_id
		      AND `+notifRank("later.event_id")+` > `+notifRank("n.event_id")+`
		      AND (later.state IN ('SENT', 'UNKNOWN', 'STUCK')
		           OR (later.state = 'PENDING' AND (later.awaiting_device_since IS NULL OR n.awaiting_device_since IS NOT NULL))))`,
		eventID, channel)
	if err != nil {
		return false, fmt.Errorf("inbox: check %s for a later notification: %w", eventID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// notifRank is the SQL rank of an event id's state (<payment_id>:<state>).
func notifRank(col string) string {
	return `(CASE split_part(` + col + `, ':', 2) WHEN 'REFUND_FAILED' THEN 3 WHEN 'REFUNDED' THEN 2 ELSE 1 END)`
}
