// Package infratests holds the integration tests that run against the local
// cloud (after `make up`) or against a deployed stack whose outputs file is
// named by ONCEPAY_OUTPUTS. They never skip silently in CI: testenv fails
// them when CI is set and a service is missing.
package infratests
