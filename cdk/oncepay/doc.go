// Package oncepay holds the CDK constructs of the oncepay stack, written to be
// copied: each takes props with safe defaults (encryption with a
// customer-managed key, TLS-only policies, RETAIN, deletion protection,
// DLQs), exposes what it creates as exported fields, and accepts Override
// hooks that see the final L2 props before a resource is made.
//
// Each also works in someone else's stack (docs/constructs.md): a queue,
// topic or table made elsewhere is a literal of EventQueue, PushTopic,
// ClaimTable or OutboxTable over its interface type; Role and Vpc take a
// platform team's role and VPC, and the grants land on whatever role the
// function ends up with; what cannot be read from a template is stated and
// checked at synth. Code (the handler's bootstrap) is always required, and
// each construct has its own alarms unless AlarmProps.Disabled.
//
// The package's module is one of its own, and the package compiles the CDK
// alone: a consumer's module graph gets nothing of the handlers'
// (docs/constructs.md).
//
// The constructs an architect lifts into another stack, each usable alone in
// an empty stack:
//   - IdempotentApi: the claim table, the api function and the HTTP API front
//     door with a JWT authorizer (a Cognito user pool by default).
//   - OutboxRelay: the outbox table's stream -> relay function -> events FIFO
//     queue, with an on-failure destination.
//   - InboxWorker: the events FIFO queue (with its DLQ) -> worker function ->
//     push topic.
//
// Their parts: ClaimTable, OutboxTable, EventQueue, PushTopic, Network and
// Ledger (Aurora PostgreSQL Serverless v2 with IAM authentication, RDS Proxy
// optional), GoFunction (arm64 provided.al2023 with its own role and log
// group), Psp (the Stripe secret), LedgerMigration (the deploy-time schema
// migration), AlbFrontDoor (the alternative front door). NewStack wires them
// into the deployable stack with alarms and a dashboard; Profile picks
// sandbox or prod settings. Across Regions (docs/regions.md),
// NewRegionStacks makes a stack per Region, with NewGlobalClaimTable,
// HomeTable and the ledger in an Aurora global database (LedgerGlobal).
package oncepay
