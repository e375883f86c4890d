-- One replace id carries every notification about a payment (its result,
-- then its refund, then a refund that failed later). A notification still
-- PENDING when a later one about the same payment exists must never go
-- out: sent late (a failed push the sweep retries, a re-driven event, two
-- stream shards) it would replace the newer one on the phone and tell the
-- buyer the opposite of what the ledger holds. It is retired SUPERSEDED.

-- +goose Up
ALTER TABLE notif
  DROP CONSTRAINT notif_state_valid,
  ADD CONSTRAINT notif_state_valid CHECK (state IN ('PENDING', 'SENT', 'UNDELIVERABLE', 'STUCK', 'SUPERSEDED'));

-- +goose Down
UPDATE notif SET state = 'SENT' WHERE state = 'SUPERSEDED';
ALTER TABLE notif
  DROP CONSTRAINT notif_state_valid,
  ADD CONSTRAINT notif_state_valid CHECK (state IN ('PENDING', 'SENT', 'UNDELIVERABLE', 'STUCK'));
