package inbox

import (
	"context"
	"fmt"
	"time"
)

// awaitDevice records that a send of eventID's notification found no
// device to go to (notify.ErrNoDevice): the row stays PENDING, marked
// waiting since the first such send (awaiting_device_since, migration
// 00016), due again after retryIn, with attempts attempts more. A
// registration makes it due at once (notify.WakeWaiting). One that
// committed between the send's read of the devices and this record found
// no mark to wake, so the record looks for the caller's live device itself
// and, finding one, makes the row due now; only a registration committing
// within this one statement waits for the back-off.
func awaitDevice(ctx context.Context, db execer, eventID, channel, why string, retryIn time.Duration, attempts int) error {
	if _, err := db.Exec(ctx, `
		UPDATE notif n SET awaiting_device_since = COALESCE(n.awaiting_device_since, now()), attempts = n.attempts + $5,
		       last_error = $3, lease_until = NULL, sending_at = NULL,
		       next_attempt_at = CASE WHEN EXISTS (
		         SELECT 1 FROM devices d WHERE d.caller_id = n.caller_id AND d.removed_at IS NULL AND d.disabled_at IS NULL)
		         THEN NULL ELSE now() + make_interval(secs => $4) END
		WHERE n.event_id = $1 AND n.channel = $2 AND n.state = 'PENDING'`,
		eventID, channel, why, retryIn.Seconds(), attempts); err != nil {
		return fmt.Errorf("inbox: record %s's %s waiting for a device: %w", eventID, channel, err)
	}
	return nil
}
