-- How often a notification was sent again after a run died mid-send
-- (docs/mechanism.md#design-10; package inbox).
--
-- notif.resends counts the repeats of a send found under way (sending_at).
-- One repeat is the duplicate an email accepts; an attempt that finds a
-- repeat also died mid-send records the row UNKNOWN instead of a third
-- copy (a rare loss, counted).

-- +goose Up
ALTER TABLE notif ADD COLUMN resends SMALLINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE notif DROP COLUMN resends;
