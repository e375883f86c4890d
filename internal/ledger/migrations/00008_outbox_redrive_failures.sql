-- Failed re-drives are counted, so the sweep takes intents fewest failures
-- first: an intent whose re-drive fails every time stays due at every sweep
-- without standing in front of newer ones forever.

-- +goose Up
ALTER TABLE outbox_intents ADD COLUMN redrive_failures INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE outbox_intents DROP COLUMN redrive_failures;
