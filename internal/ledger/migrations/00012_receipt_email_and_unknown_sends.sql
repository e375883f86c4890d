-- The email channel (docs/mechanism.md#design-10; package notify).
--
-- payments.receipt_email is where a payment's emails go, written with the
-- PENDING row from the request's receipt_email (part of its meaning when
-- present: in the fingerprint). Personal data: the email channel
-- reads it at send time, so no event, queue message or log carries it.
--
-- notif.state UNKNOWN: a send whose outcome the provider never told (a
-- timeout, a 5xx) for a message type that chose loss over a duplicate
-- (notify.Policies): final, counted, never retried.

-- +goose Up
ALTER TABLE payments ADD COLUMN receipt_email TEXT CHECK (length(receipt_email) <= 254);
ALTER TABLE notif
  DROP CONSTRAINT notif_state_valid,
  ADD CONSTRAINT notif_state_valid CHECK (state IN ('PENDING', 'SENT', 'UNDELIVERABLE', 'STUCK', 'SUPERSEDED', 'UNKNOWN'));

-- +goose Down
UPDATE notif SET state = 'UNDELIVERABLE' WHERE state = 'UNKNOWN';
ALTER TABLE notif
  DROP CONSTRAINT notif_state_valid,
  ADD CONSTRAINT notif_state_valid CHECK (state IN ('PENDING', 'SENT', 'UNDELIVERABLE', 'STUCK', 'SUPERSEDED'));
ALTER TABLE payments DROP COLUMN receipt_email;
