-- +goose Up
-- The ledger: the durable guard (docs/mechanism.md#seed-part-3), the journal, the outbox intent
-- and the PSP webhook inbox. Every state move is a compare-and-set along the
-- allowed edges; the trigger below refuses any other move, whoever attempts it.

CREATE TABLE payments (
  payment_id   TEXT PRIMARY KEY,     -- derived from the scope: pay_<hash>
  caller_id    TEXT NOT NULL,        -- the authenticated caller (u1)
  client_key   TEXT NOT NULL,        -- the Idempotency-Key (K1)
  fingerprint  TEXT,                 -- NULL only on a VOID row
  amount       BIGINT,               -- minor units; NULL only on a VOID row
  currency     CHAR(3),
  state        TEXT NOT NULL,
  psp_charge   TEXT,                 -- the PSP's id once known
  merchant_id  TEXT,                 -- NULL only on a VOID row
  order_id     TEXT,
  payment_method TEXT,
  decline_code TEXT,
  deadline_at  TIMESTAMPTZ,          -- arrival stamp + server deadline
  created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
  UNIQUE (caller_id, client_key),    -- the durable guard: lives as long as the row
  CONSTRAINT payments_state_valid CHECK (state IN ('PENDING', 'UNKNOWN', 'SUCCEEDED', 'FAILED', 'VOID')),
  CONSTRAINT payments_void_or_whole CHECK (
    state = 'VOID'
    OR (fingerprint IS NOT NULL AND amount IS NOT NULL AND amount > 0 AND currency IS NOT NULL AND merchant_id IS NOT NULL)
  )
);

-- The resolver's sweep: UNKNOWN rows, and PENDING rows past their deadline.
CREATE INDEX payments_unsettled ON payments (state, deadline_at) WHERE state IN ('PENDING', 'UNKNOWN');

-- +goose StatementBegin
CREATE FUNCTION payments_allowed_move() RETURNS trigger AS $$
BEGIN
  IF NEW.state = OLD.state THEN
    RETURN NEW;
  END IF;
  IF (OLD.state, NEW.state) IN (
       ('PENDING', 'UNKNOWN'), ('PENDING', 'SUCCEEDED'), ('PENDING', 'FAILED'),
       ('UNKNOWN', 'SUCCEEDED'), ('UNKNOWN', 'FAILED')) THEN
    NEW.updated_at := now();
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'payment %: move % -> % is not allowed', OLD.payment_id, OLD.state, NEW.state
    USING ERRCODE = 'check_violation';
END;
$$ LANGUAGE plpgsql;
-- +goose StatementEnd

CREATE TRIGGER payments_allowed_move BEFORE UPDATE OF state ON payments
  FOR EACH ROW EXECUTE FUNCTION payments_allowed_move();

-- Double-entry journal: every posting's entries sum to zero per currency.
CREATE TABLE journal_entries (
  entry_id    BIGSERIAL PRIMARY KEY,
  payment_id  TEXT NOT NULL REFERENCES payments (payment_id),
  posting     TEXT NOT NULL,          -- e.g. 'charge'; one posting per payment and kind
  account     TEXT NOT NULL,          -- e.g. 'psp_receivable', 'merchant_payable:m1'
  amount      BIGINT NOT NULL,        -- debit > 0, credit < 0
  currency    CHAR(3) NOT NULL,
  created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
  UNIQUE (payment_id, posting, account)
);

-- The outbox intent: recorded in the transaction that makes a payment final;
-- published_at is set once the outbox item is in DynamoDB.
CREATE TABLE outbox_intents (
  event_id     TEXT PRIMARY KEY,      -- <payment_id>:<state>, derived
  payment_id   TEXT NOT NULL REFERENCES payments (payment_id),
  merchant_id  TEXT NOT NULL,
  payload      JSONB NOT NULL,
  created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
  published_at TIMESTAMPTZ
);
CREATE INDEX outbox_intents_unpublished ON outbox_intents (created_at) WHERE published_at IS NULL;

-- The PSP webhook inbox, keyed by the sender's event id.
CREATE TABLE webhook_inbox (
  psp_event_id TEXT PRIMARY KEY,
  event_type   TEXT NOT NULL,
  payment_id   TEXT,
  received_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The consumer side (the worker, docs/mechanism.md#seed-part-7): inbox, credits, balances, notifications.
CREATE TABLE processed (
  event_id     TEXT PRIMARY KEY,
  processed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE credits (
  credit_id   BIGSERIAL PRIMARY KEY,
  merchant_id TEXT NOT NULL,
  cents       BIGINT NOT NULL CHECK (cents > 0),
  currency    CHAR(3) NOT NULL,
  event_id    TEXT NOT NULL UNIQUE,  -- a second credit for one event is impossible
  created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE merchant_balances (
  merchant_id TEXT NOT NULL,
  currency    CHAR(3) NOT NULL,
  balance     BIGINT NOT NULL DEFAULT 0,
  updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (merchant_id, currency)
);

CREATE TABLE notif (
  event_id   TEXT NOT NULL,
  channel    TEXT NOT NULL,
  state      TEXT NOT NULL CHECK (state IN ('PENDING', 'SENT')),
  replace_id TEXT NOT NULL,          -- = payment_id: a second copy replaces the first on the device
  caller_id  TEXT NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  sent_at    TIMESTAMPTZ,
  PRIMARY KEY (event_id, channel)
);

-- +goose Down
DROP TABLE notif;
DROP TABLE merchant_balances;
DROP TABLE credits;
DROP TABLE processed;
DROP TABLE webhook_inbox;
DROP TABLE outbox_intents;
DROP TABLE journal_entries;
DROP TABLE payments;
DROP FUNCTION payments_allowed_move();
