-- +goose Up
-- Reconciliation against the PSP's records (docs/reconcile.md): its runs
-- (one report row per run of a span, with a checkpoint so a run cut off
-- resumes), what it found that only a human can decide, and the refunds it
-- sends of charges the ledger does not hold as a payment's (a payment the
-- buyer was told failed or never ran, or a second charge of one payment).

CREATE TABLE reconcile_runs (
  run_id      BIGSERIAL PRIMARY KEY,
  span_from   TIMESTAMPTZ NOT NULL,
  span_to     TIMESTAMPTZ NOT NULL,
  started_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
  finished_at TIMESTAMPTZ,
  checkpoint  TEXT NOT NULL DEFAULT '',     -- the last payment id judged, in id order
  counts      JSONB NOT NULL DEFAULT '{}',  -- outcome -> payments
  CONSTRAINT reconcile_runs_span CHECK (span_from < span_to)
);
-- One unfinished run per span: a second invocation resumes it.
CREATE UNIQUE INDEX reconcile_runs_open ON reconcile_runs (span_from, span_to) WHERE finished_at IS NULL;

CREATE TABLE reconcile_findings (
  run_id     BIGINT NOT NULL REFERENCES reconcile_runs (run_id),
  payment_id TEXT NOT NULL,
  kind       TEXT NOT NULL,                 -- ledger_without_charge, amount_mismatch, unadoptable, ...
  detail     TEXT NOT NULL,                 -- ids and amounts only, no personal data
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, payment_id, kind)
);

-- A reversal: the refund of one PSP charge (PaymentIntent) the ledger does
-- not hold as its payment's. The key is derived from what any later run
-- re-creates: <payment_id>:reconcile:refund:<payment_intent>.
CREATE TABLE reversals (
  refund_key         TEXT PRIMARY KEY,
  payment_id         TEXT NOT NULL,
  psp_payment_intent TEXT NOT NULL UNIQUE,
  psp_charge         TEXT,
  amount             BIGINT NOT NULL CHECK (amount > 0),
  currency           CHAR(3) NOT NULL,
  merchant_id        TEXT NOT NULL,
  caller_id          TEXT NOT NULL,
  reason             TEXT NOT NULL CHECK (reason IN ('ledger_failed', 'ledger_void', 'extra_charge')),
  state              TEXT NOT NULL CHECK (state IN ('PENDING', 'UNKNOWN', 'SUCCEEDED', 'FAILED')),
  psp_refund         TEXT,
  failure_reason     TEXT,
  attempts           INTEGER NOT NULL DEFAULT 0,
  created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at         TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX reversals_open ON reversals (created_at) WHERE state IN ('PENDING', 'UNKNOWN');

-- +goose StatementBegin
CREATE FUNCTION reversals_allowed_move() RETURNS trigger AS $$
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
  RAISE EXCEPTION 'reversal %: move % -> % is not allowed', OLD.refund_key, OLD.state, NEW.state
    USING ERRCODE = 'check_violation';
END;
$$ LANGUAGE plpgsql;
-- +goose StatementEnd

CREATE TRIGGER reversals_allowed_move BEFORE UPDATE OF state ON reversals
  FOR EACH ROW EXECUTE FUNCTION reversals_allowed_move();

-- +goose Down
DROP TABLE reversals;
DROP FUNCTION reversals_allowed_move();
DROP TABLE reconcile_findings;
DROP TABLE reconcile_runs;
