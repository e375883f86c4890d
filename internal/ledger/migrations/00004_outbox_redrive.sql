-- +goose Up
-- The outbox sweep's re-drives (package outbox). published_at now means
-- "the consumer's inbox holds the event" (set by the resolver's sweep from
-- processed), no longer "the outbox item was put": an item can be in the
-- table and still never reach the queue (the relay's mapping gave up on it).
-- Every intent older than the grace and not yet consumed is re-driven: its
-- outbox item is rewritten, which puts a new stream record with the same event
-- id in front of the relay. redriven_at and redrives throttle that per intent
-- (measured on the database's clock) and say how often it was needed.
ALTER TABLE outbox_intents
  ADD COLUMN redrives    INTEGER NOT NULL DEFAULT 0,
  ADD COLUMN redriven_at TIMESTAMPTZ;

COMMENT ON COLUMN outbox_intents.published_at IS
  'set by the resolver''s sweep once processed (the consumer''s inbox) holds event_id: delivered, not merely put';

-- +goose Down
COMMENT ON COLUMN outbox_intents.published_at IS NULL;
ALTER TABLE outbox_intents DROP COLUMN redriven_at, DROP COLUMN redrives;
