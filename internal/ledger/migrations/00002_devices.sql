-- +goose Up
-- Push targets (package notify). A row maps an opaque caller to one SNS
-- platform endpoint; the device token itself stays inside SNS, so the ledger
-- holds no device identifier beyond the endpoint's ARN. Rows are written by a
-- device-registration endpoint of the API and read by the worker when it
-- pushes; a caller with no enabled row is notified through the push topic.

CREATE TABLE devices (
  caller_id    TEXT NOT NULL,
  endpoint_arn TEXT NOT NULL,           -- the SNS platform endpoint
  platform     TEXT NOT NULL,
  created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
  disabled_at  TIMESTAMPTZ,             -- set when SNS reports the endpoint disabled
  PRIMARY KEY (caller_id, endpoint_arn),
  CONSTRAINT devices_platform_valid CHECK (platform IN ('APNS', 'APNS_SANDBOX', 'GCM'))
);

-- +goose Down
DROP TABLE devices;
