// Package oncepay holds the CDK constructs of the oncepay stack, written to be
// copied: each takes props with safe defaults, exposes what it creates as
// exported fields, and accepts an Override hook that sees the final L2 props
// before the resource is made.
//
// Data plane (this file set): the claim table (idem), the outbox table, the
// FIFO event queue with its DLQ, the push topic, the VPC and the Aurora
// PostgreSQL ledger, all encrypted with one customer-managed KMS key.
package oncepay
