-- Devices ordered by one counter (the source document's Part 5, Branch V;
-- package devices). A caller's device is one row per device id, which the
-- app makes once and keeps; every registration, update or removal carries
-- the device's own counter from its journal, and the row keeps the highest
-- counter it has applied: a request at or below it changes nothing. The
-- row never expires, and a removal leaves it as a tombstone (removed_at
-- set, no endpoint), so a late re-registration cannot bring the device
-- back. Nothing is ordered by a time the phone sent.
--
-- Rows made before this version (by hand, locally) keep working: their
-- device id is their endpoint's ARN, their counter 0.

-- +goose Up
ALTER TABLE devices
  ADD COLUMN device_id  TEXT,
  ADD COLUMN counter    BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN removed_at TIMESTAMPTZ;
UPDATE devices SET device_id = endpoint_arn;
ALTER TABLE devices DROP CONSTRAINT devices_pkey;
ALTER TABLE devices
  ALTER COLUMN device_id SET NOT NULL,
  ALTER COLUMN endpoint_arn DROP NOT NULL,
  ALTER COLUMN platform DROP NOT NULL,
  ADD PRIMARY KEY (caller_id, device_id),
  ADD CONSTRAINT devices_counter_valid CHECK (counter >= 0),
  ADD CONSTRAINT devices_tombstone CHECK ((removed_at IS NULL) = (endpoint_arn IS NOT NULL AND platform IS NOT NULL));
-- The worker's read: a caller's live endpoints.
CREATE INDEX devices_live ON devices (caller_id) WHERE removed_at IS NULL AND disabled_at IS NULL;
-- Whether any row still points at an endpoint before it is deleted.
CREATE INDEX devices_endpoint ON devices (endpoint_arn) WHERE endpoint_arn IS NOT NULL;

-- +goose Down
DELETE FROM devices WHERE removed_at IS NOT NULL;
-- The old key holds one row per (caller, endpoint): keep the newest.
DELETE FROM devices a USING devices b
WHERE a.caller_id = b.caller_id AND a.endpoint_arn = b.endpoint_arn
  AND (a.counter, a.device_id) < (b.counter, b.device_id);
DROP INDEX devices_endpoint;
DROP INDEX devices_live;
ALTER TABLE devices
  DROP CONSTRAINT devices_tombstone,
  DROP CONSTRAINT devices_counter_valid,
  DROP CONSTRAINT devices_pkey,
  ALTER COLUMN platform SET NOT NULL,
  ALTER COLUMN endpoint_arn SET NOT NULL,
  ADD PRIMARY KEY (caller_id, endpoint_arn),
  DROP COLUMN removed_at,
  DROP COLUMN counter,
  DROP COLUMN device_id;
