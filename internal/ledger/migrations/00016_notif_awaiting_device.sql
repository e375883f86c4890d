-- A push whose caller has no enabled device waits for one (packages inbox,
-- notify and devices). The caller's first payment can come before the
-- app's first registration commits, or its token has just rotated: the
-- device shows up seconds later, and recording such a push UNDELIVERABLE
-- at once lost it for good.
--
-- notif.awaiting_device_since: set on a PENDING row when a send found no
-- device to go to (notify.ErrNoDevice); cleared when a send finds one. A
-- registration makes the caller's waiting rows due at once
-- (notify.WakeWaiting); the sweep retries them on its back-off meanwhile,
-- and records one still without a device past its horizon (a day from the
-- row's creation by default, inbox.SweepConfig.DeviceHorizon) UNDELIVERABLE,
-- final as before. A waiting row never goes STUCK: no human can give the
-- buyer a device.
--
-- Pushes the old rule gave up on in the last day (the default horizon) wait
-- again; any later one about the same payment that was delivered retires
-- them before they are sent (inbox's supersede rule).

-- +goose Up
ALTER TABLE notif ADD COLUMN awaiting_device_since TIMESTAMPTZ;
-- The registration's wake-up: a caller's waiting rows.
CREATE INDEX notif_awaiting_device ON notif (caller_id) WHERE state = 'PENDING' AND awaiting_device_since IS NOT NULL;
UPDATE notif SET state = 'PENDING', awaiting_device_since = now(), next_attempt_at = NULL, lease_until = NULL, sending_at = NULL
WHERE state = 'UNDELIVERABLE' AND channel = 'push' AND created_at > now() - interval '24 hours';

-- +goose Down
-- What the old rule makes of a push with no device.
UPDATE notif SET state = 'UNDELIVERABLE', lease_until = NULL WHERE state = 'PENDING' AND awaiting_device_since IS NOT NULL;
DROP INDEX notif_awaiting_device;
ALTER TABLE notif DROP COLUMN awaiting_device_since;
