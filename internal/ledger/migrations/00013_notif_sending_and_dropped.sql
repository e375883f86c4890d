-- Sends that may have happened, and logical duplicates the gate dropped
-- (docs/mechanism.md#design-10; packages inbox and dedup).
--
-- notif.sending_at is set right before a send and cleared with its
-- outcome. An attempt that finds it set follows one that died between the
-- send and recording it: the message may have gone out. An email repeats
-- it (counted NotifResent); a type that chose loss over a duplicate
-- records it UNKNOWN instead (notify.Policies).
--
-- notif.state DROPPED: a logical message the dedup gate did not let
-- through (a duplicate within its window, or over the recipient's cap):
-- final, never sent.

-- +goose Up
ALTER TABLE notif ADD COLUMN sending_at TIMESTAMPTZ;
ALTER TABLE notif
  DROP CONSTRAINT notif_state_valid,
  ADD CONSTRAINT notif_state_valid CHECK (state IN ('PENDING', 'SENT', 'UNDELIVERABLE', 'STUCK', 'SUPERSEDED', 'UNKNOWN', 'DROPPED'));

-- +goose Down
UPDATE notif SET state = 'UNDELIVERABLE' WHERE state = 'DROPPED';
ALTER TABLE notif
  DROP CONSTRAINT notif_state_valid,
  ADD CONSTRAINT notif_state_valid CHECK (state IN ('PENDING', 'SENT', 'UNDELIVERABLE', 'STUCK', 'SUPERSEDED', 'UNKNOWN'));
ALTER TABLE notif DROP COLUMN sending_at;
