-- The stream job's recount (package recount) reads the events of a closed
-- day from the outbox intents, the same events the outbox stream carried,
-- by creation time and merchant. Built concurrently: every settle inserts
-- into outbox_intents, and a plain CREATE INDEX would hold those writes for
-- as long as it builds. A concurrent build that fails leaves an INVALID
-- index behind, and goose records this version only once it succeeds: a
-- rerun drops what a failed one left, then builds.

-- +goose NO TRANSACTION
-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS outbox_intents_created;
CREATE INDEX CONCURRENTLY outbox_intents_created ON outbox_intents (created_at, merchant_id);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS outbox_intents_created;
