-- Published means consumed (00004). Intents marked published under the old
-- rule — an outbox item had been put, nothing proved the worker got it —
-- include every event the relay gave up on and every event dead-lettered
-- behind a failed push: nobody would ever re-drive them. Re-arm each one the
-- consumer's inbox does not hold; the sweep re-drives it (same event id, so
-- the inbox drops it if it was consumed after all) and marks it on proof.

-- +goose Up
UPDATE outbox_intents i SET published_at = NULL
WHERE i.published_at IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM processed p WHERE p.event_id = i.event_id);

-- +goose Down
-- Nothing to undo: the re-armed intents are marked again once consumed.
SELECT 1;
