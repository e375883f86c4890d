// Package stackenv names the environment variables the stack gives its
// functions and the local cloud writes for tests and tools: one list, so the
// CDK code, the deployed handlers and the local cloud cannot drift apart.
// It holds names, and the parser of the one list-valued variable
// (PlatformApps); reading a local cloud's values is localcloud/localenv.
//
// It lives in the constructs' module (which depends on nothing of the
// handlers') and the handlers import it from here: the constructs say what
// a function gets, the handlers read it.
package stackenv

import (
	"fmt"
	"strings"
)

// PushTopicFallback chooses the topic fallback for a deployed function
// that pushes: "true" in a sandbox, "false" (or unset) in production.
const PushTopicFallback = "ONCEPAY_PUSH_TOPIC_FALLBACK"

// MetricsNamespace is the CloudWatch namespace of every metric the handlers
// emit (EMF, dimension Function = the lambdas/<fn> name); the constructs'
// alarms watch it.
const MetricsNamespace = "oncepay"

// The variables the provisioner writes and the handlers read. The stack's
// outputs map onto them one to one (see OutputVars).
const (
	IdemTable       = "ONCEPAY_IDEM_TABLE"
	OutboxTable     = "ONCEPAY_OUTBOX_TABLE"
	OutboxStreamArn = "ONCEPAY_OUTBOX_STREAM_ARN"
	EventsQueueURL  = "ONCEPAY_EVENTS_QUEUE_URL"
	EventsQueueArn  = "ONCEPAY_EVENTS_QUEUE_ARN"
	EventsDlqURL    = "ONCEPAY_EVENTS_DLQ_URL"
	EventsDlqArn    = "ONCEPAY_EVENTS_DLQ_ARN"
	PushTopicArn    = "ONCEPAY_PUSH_TOPIC_ARN"
	LedgerSecretArn = "ONCEPAY_LEDGER_SECRET_ARN"
	LedgerEndpoint  = "ONCEPAY_LEDGER_ENDPOINT"
	LedgerDSN       = "ONCEPAY_LEDGER_DSN"
	PSPURL          = "ONCEPAY_PSP_URL"
	FrontDoorURL    = "ONCEPAY_FRONTDOOR_URL"
	// The stream job's sink table, its recount queue, its mapping's
	// on-failure queue (both consumed by the recount), and which version
	// of its counting rule it runs (1 or 2: the story's v1 and v2).
	TotalsTable           = "ONCEPAY_TOTALS_TABLE"
	RecountQueueURL       = "ONCEPAY_RECOUNT_QUEUE_URL"
	TotalsFailureQueueURL = "ONCEPAY_TOTALS_FAILURE_QUEUE_URL"
	TotalsVersion         = "ONCEPAY_TOTALS_VERSION"
	// EmailFrom is the SES identity the payment emails are sent from; unset,
	// the worker has no email channel. EmailConfigurationSet is the SES
	// configuration set they are sent under ("" none).
	EmailFrom             = "ONCEPAY_EMAIL_FROM"
	EmailConfigurationSet = "ONCEPAY_EMAIL_CONFIGURATION_SET"
	// DedupCacheURL is the dedup cache (redis:// or rediss://): logical
	// duplicates of a message (package dedup); unset, the worker raises no
	// reminders.
	DedupCacheURL = "ONCEPAY_DEDUP_CACHE_URL"
	// PushPlatformApps lists the SNS platform application ARNs
	// (comma-separated, one per platform) devices are registered under.
	PushPlatformApps = "ONCEPAY_PUSH_PLATFORM_APPLICATIONS"
	// AlbArn is the load balancer whose signed claims the api accepts
	// (set by the stack when it has the ALB front door); AlbKeysURL
	// overrides where its public keys are read (GovCloud, tests).
	AlbArn     = "ONCEPAY_ALB_ARN"
	AlbKeysURL = "ONCEPAY_ALB_KEYS_URL"
	// Across Regions (docs/regions.md). HomesTable is the home record table
	// (a global table; unset: one Region, no home routing). HomeDefault is
	// the Region a caller without a record is homed in. RegionURLs maps each
	// Region to its API's base URL (JSON object), for the 421's home URL.
	HomesTable = "ONCEPAY_HOMES_TABLE"
	// StandbyCheck ("true", in a deployment across Regions) makes the
	// resolver and the worker's sweeps first ask whether their ledger is a
	// standby's (read-only) and wait if so. One Region has no standby, and
	// the check would be a round trip for nothing.
	StandbyCheck = "ONCEPAY_STANDBY_CHECK"
	// ClaimsSweep ("true") makes the resolver delete expired key records:
	// the MRSC claim table has no TTL.
	ClaimsSweep = "ONCEPAY_CLAIMS_SWEEP"
	// AdoptLost ("true", across Regions) makes the worker write the row of
	// a succeeded payment its ledger has none of, from the event (a failed
	// Region's copy of a payment the failover lost; inbox.Config.Adopt).
	AdoptLost   = "ONCEPAY_ADOPT_LOST_PAYMENTS"
	HomeDefault = "ONCEPAY_HOME_DEFAULT"
	RegionURLs  = "ONCEPAY_REGION_URLS"
)

// OutputVars maps each stack output id to the variable that carries it.
var OutputVars = map[string]string{
	"IdemTableName":   IdemTable,
	"OutboxTableName": OutboxTable,
	"OutboxStreamArn": OutboxStreamArn,
	"EventsQueueUrl":  EventsQueueURL,
	"EventsQueueArn":  EventsQueueArn,
	"EventsDlqUrl":    EventsDlqURL,
	"EventsDlqArn":    EventsDlqArn,
	"PushTopicArn":    PushTopicArn,
	"LedgerSecretArn": LedgerSecretArn,
	"LedgerEndpoint":  LedgerEndpoint,
	"TotalsTableName": TotalsTable,
	"RecountQueueUrl": RecountQueueURL,
}

// The PSP's credentials are two secrets, each read only by the functions
// that use it: the Stripe API key (which charges and refunds) by the api and
// the resolver, the webhook signing secret by the webhook, so the
// internet-facing webhook cannot read the key and the key's readers cannot
// forge webhooks. A function gets its own secret's ARN, never a value, and
// reads the field at run time (internal/secrets). The local cloud hands the
// webhook secret to the PSP simulator in PSPSimWebhookSecret, so the
// simulator signs with what the function verifies.
const (
	// PSPKeySecretArn names the secret whose PSPSecretAPIKey field is the
	// Stripe API key (api, resolver).
	PSPKeySecretArn = "ONCEPAY_PSP_KEY_SECRET_ARN"
	// WebhookSecretArn names the secret whose PSPSecretWebhookSecret field
	// is the webhook signing secret (webhook).
	WebhookSecretArn = "ONCEPAY_WEBHOOK_SECRET_ARN"

	PSPSecretAPIKey        = "api_key"        // Stripe secret key, sk_test_… in a sandbox
	PSPSecretWebhookSecret = "webhook_secret" // Stripe endpoint signing secret, whsec_…
	PSPSimWebhookSecret    = "PSPSIM_WEBHOOK_SECRET"
	// WebhookSecret holds a fixed signing secret for a webhook handler run
	// outside the stack (cmd/frontdoor, a benchmark); a function of the
	// stack never has it (a stack test checks), it reads WebhookSecretArn.
	WebhookSecret = "ONCEPAY_WEBHOOK_SECRET"
)

// SecretsManagerEndpoint is Secrets Manager's endpoint as the stack names
// it for its Region and partition (Fn::Sub over AWS::URLSuffix), which
// internal/secrets prefers to its own guess: a host built from the Region
// alone is wrong in partitions it does not know (amazonaws.eu). The SDK's
// AWS_ENDPOINT_URL_SECRETS_MANAGER and AWS_ENDPOINT_URL still win.
const SecretsManagerEndpoint = "ONCEPAY_SECRETS_MANAGER_ENDPOINT"

// Push platforms an SNS platform application in PushPlatformApps may be of.
var pushPlatforms = map[string]bool{"APNS": true, "APNS_SANDBOX": true, "GCM": true}

// PlatformApps reads PushPlatformApps' value: SNS platform application
// ARNs, comma-separated, at most one per platform (APNS, APNS_SANDBOX,
// GCM), by platform. The stack checks its list with it at synth; the
// functions read theirs with it at start.
func PlatformApps(list string) (map[string]string, error) {
	apps := map[string]string{}
	for _, arn := range strings.Split(list, ",") {
		arn = strings.TrimSpace(arn)
		if arn == "" {
			continue
		}
		_, rest, ok := strings.Cut(arn, ":app/")
		platform, _, ok2 := strings.Cut(rest, "/")
		if !ok || !ok2 {
			return nil, fmt.Errorf("devices: %q is not a platform application ARN", arn)
		}
		if !pushPlatforms[platform] {
			return nil, fmt.Errorf("devices: platform application %q: platform %q", arn, platform)
		}
		if _, dup := apps[platform]; dup {
			return nil, fmt.Errorf("devices: two platform applications for %s", platform)
		}
		apps[platform] = arn
	}
	return apps, nil
}
