-- +goose Up
-- A refund can fail after it succeeded (Stripe's refund.failed, e.g. test
-- card 4000000000005126): SUCCEEDED -> FAILED is allowed, only for that.
-- The move reverses the refund's journal entries and records the
-- compensating <payment_id>:REFUND_FAILED outbox intent in the same
-- transaction (ledger.SettleRefund). A pending refund at the PSP is an
-- UNKNOWN row whose psp_refund is set: the resolver follows it by id.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION refunds_allowed_move() RETURNS trigger AS $$
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
  -- Only the PSP's refund that succeeded can fail later.
  IF OLD.state = 'SUCCEEDED' AND NEW.state = 'FAILED'
     AND OLD.psp_refund IS NOT NULL AND NEW.psp_refund IS NOT DISTINCT FROM OLD.psp_refund THEN
    NEW.updated_at := now();
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'refund of %: move % -> % is not allowed', OLD.payment_id, OLD.state, NEW.state
    USING ERRCODE = 'check_violation';
END;
$$ LANGUAGE plpgsql;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION refunds_allowed_move() RETURNS trigger AS $$
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
