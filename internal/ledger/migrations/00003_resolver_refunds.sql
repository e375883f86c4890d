-- +goose Up
-- The resolver's lease on the payments it is settling, and refunds as a
-- compensation (docs/mechanism.md#seed-part-4, "When a compensation times out").

-- A resolver run claims the rows it will settle by setting a short lease, so
-- two runs at once do not replay the same payments (the CAS and the derived
-- PSP key already make double work harmless; the lease makes it rare).
-- Measured on the resolver's clock. resolve_attempts counts the claims.
ALTER TABLE payments
  ADD COLUMN resolve_lease_until TIMESTAMPTZ,
  ADD COLUMN resolve_attempts    INTEGER NOT NULL DEFAULT 0;

-- One full refund per payment. The intent is recorded BEFORE the PSP call,
-- and every attempt carries the derived key <payment_id>:cancel:refund, so a
-- retry is the same refund. An UNKNOWN refund is retried with backoff and,
-- after the retry budget, alerted on; it never becomes a guess.
CREATE TABLE refunds (
  payment_id         TEXT PRIMARY KEY REFERENCES payments (payment_id),
  caller_id          TEXT NOT NULL,
  refund_key         TEXT NOT NULL,           -- the refund request's own Idempotency-Key
  fingerprint        TEXT NOT NULL,           -- the refund request's meaning
  amount             BIGINT NOT NULL CHECK (amount > 0),
  currency           CHAR(3) NOT NULL,
  merchant_id        TEXT NOT NULL,
  state              TEXT NOT NULL,
  psp_charge         TEXT,                    -- the payment's charge, copied at intent time
  psp_payment_intent TEXT,                    -- the PaymentIntent refunded, once known
  psp_refund         TEXT,                    -- the PSP's refund id once known
  failure_reason     TEXT,
  attempts           INTEGER NOT NULL DEFAULT 0,  -- PSP attempts that left the outcome open
  deadline_at        TIMESTAMPTZ NOT NULL,    -- the request's deadline: a PENDING row past it (+ margin) lost its owner
  next_attempt_at    TIMESTAMPTZ,             -- when the resolver may try again
  lease_until        TIMESTAMPTZ,             -- a resolver run holds it until then
  alerted_at         TIMESTAMPTZ,             -- first time the retry budget ran out
  created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
  UNIQUE (caller_id, refund_key),
  CONSTRAINT refunds_state_valid CHECK (state IN ('PENDING', 'UNKNOWN', 'SUCCEEDED', 'FAILED'))
);

-- The resolver's refund sweep: open refunds by due time.
CREATE INDEX refunds_unsettled ON refunds (next_attempt_at) WHERE state IN ('PENDING', 'UNKNOWN');

-- +goose StatementBegin
CREATE FUNCTION refunds_allowed_move() RETURNS trigger AS $$
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
  RAISE EXCEPTION 'refund of %: move % -> % is not allowed', OLD.payment_id, OLD.state, NEW.state
    USING ERRCODE = 'check_violation';
END;
$$ LANGUAGE plpgsql;
-- +goose StatementEnd

CREATE TRIGGER refunds_allowed_move BEFORE UPDATE OF state ON refunds
  FOR EACH ROW EXECUTE FUNCTION refunds_allowed_move();

-- +goose Down
DROP TABLE refunds;
DROP FUNCTION refunds_allowed_move();
ALTER TABLE payments DROP COLUMN resolve_attempts, DROP COLUMN resolve_lease_until;
