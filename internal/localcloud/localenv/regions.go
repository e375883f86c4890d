package localenv

// The second Region's local stores (issue 15: Across Regions), which `make
// up` starts beside the first Region's and writes into .local/env. They are
// local only: no function reads them and a deployed stack has none. moto
// serves both Regions (a client signing with R2Region gets its own queues),
// so the second Region has no endpoint of its own for it.
const (
	// LedgerAdminDSN is a superuser DSN of the first Region's ledger
	// cluster (database postgres): what creates databases, publications
	// and subscriptions there.
	LedgerAdminDSN = "ONCEPAY_LEDGER_ADMIN_DSN"
	// R2Region is the second Region's name (us-west-2).
	R2Region = "ONCEPAY_R2_REGION"
	// R2DynamoURL is the second Region's DynamoDB Local (and its streams).
	R2DynamoURL = "ONCEPAY_R2_DDB_URL"
	// R2LedgerAdminDSN is a superuser DSN of the second Region's ledger
	// cluster (database postgres), which holds the same roles and the same
	// migrated template database as the first.
	R2LedgerAdminDSN = "ONCEPAY_R2_LEDGER_ADMIN_DSN"
)
