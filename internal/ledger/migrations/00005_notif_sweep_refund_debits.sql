-- +goose Up
-- The consumer side's notifications finished by their own durable trigger,
-- and refunds debited (issue 13, defects 6 and 11).
--
-- A committed credit never waits on a push: the worker tries the push once
-- after its commit, and a PENDING row it could not send is finished by the
-- sweep (inbox.NotifSweeper, run by the resolver) with a backoff. The row
-- carries the event it announces (payload), so the sweep needs nothing from
-- the producer's tables. States:
--   PENDING        owed; the worker or the sweep sends it
--   SENT           handed to SNS
--   UNDELIVERABLE  no channel can take it (no enabled device, and the push
--                  topic fallback is off, as in prod): final, counted
--   STUCK          still failing after the give-up horizon: kept, alarmed;
--                  an operator re-arms it (see inbox.NotifSweeper.Rearm)
ALTER TABLE notif DROP CONSTRAINT notif_state_check;
ALTER TABLE notif
  ADD COLUMN payload         JSONB,                               -- the event (event.Event JSON)
  ADD COLUMN attempts        INTEGER NOT NULL DEFAULT 0,          -- sends that did not go out
  ADD COLUMN next_attempt_at TIMESTAMPTZ,                         -- the sweep's next try; NULL: due
  ADD COLUMN lease_until     TIMESTAMPTZ,                         -- a sweep run holds the row until then
  ADD COLUMN last_error      TEXT,
  ADD COLUMN armed_at        TIMESTAMPTZ NOT NULL DEFAULT now(),  -- the give-up horizon counts from here
  ADD COLUMN stuck_at        TIMESTAMPTZ,
  ADD CONSTRAINT notif_state_valid CHECK (state IN ('PENDING', 'SENT', 'UNDELIVERABLE', 'STUCK'));

-- Rows written before this migration: their event is the producer's intent.
UPDATE notif n SET payload = o.payload
FROM outbox_intents o
WHERE o.event_id = n.event_id AND n.payload IS NULL;

CREATE INDEX notif_pending ON notif (created_at) WHERE state = 'PENDING';
CREATE INDEX notif_stuck ON notif (stuck_at) WHERE state = 'STUCK';

-- A refund's debit: the counterpart of credits, once per REFUNDED event.
CREATE TABLE debits (
  debit_id    BIGSERIAL PRIMARY KEY,
  merchant_id TEXT NOT NULL,
  cents       BIGINT NOT NULL CHECK (cents > 0),
  currency    CHAR(3) NOT NULL,
  event_id    TEXT NOT NULL UNIQUE,  -- a second debit for one event is impossible
  created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE debits;
DROP INDEX notif_stuck;
DROP INDEX notif_pending;
UPDATE notif SET state = 'PENDING' WHERE state IN ('UNDELIVERABLE', 'STUCK');
ALTER TABLE notif
  DROP CONSTRAINT notif_state_valid,
  DROP COLUMN stuck_at, DROP COLUMN armed_at, DROP COLUMN last_error, DROP COLUMN lease_until,
  DROP COLUMN next_attempt_at, DROP COLUMN attempts, DROP COLUMN payload,
  ADD CONSTRAINT notif_state_check CHECK (state IN ('PENDING', 'SENT'));
