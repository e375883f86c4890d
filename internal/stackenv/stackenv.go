// Package stackenv names the environment variables the stack gives its
// functions and the local cloud writes for tests and tools: one list, so the
// CDK code, the deployed handlers and the local cloud cannot drift apart.
// It holds names only; reading a local cloud's values is localcloud/localenv.
package stackenv

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
	// AlbArn is the load balancer whose signed claims the api accepts
	// (set by the stack when it has the ALB front door); AlbKeysURL
	// overrides where its public keys are read (GovCloud, tests).
	AlbArn     = "ONCEPAY_ALB_ARN"
	AlbKeysURL = "ONCEPAY_ALB_KEYS_URL"
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
}

// The PSP's credentials: the functions get the PSP secret's ARN in
// PSPSecretArn, never a value, and read its fields at run time
// (internal/secrets): the api and the resolver PSPSecretAPIKey, the webhook
// PSPSecretWebhookSecret. The local cloud hands the webhook secret to the
// PSP simulator in PSPSimWebhookSecret, so the simulator signs with what
// the function verifies.
const (
	PSPSecretArn           = "ONCEPAY_PSP_SECRET_ARN"
	PSPSecretAPIKey        = "api_key"        // Stripe secret key, sk_test_… in a sandbox
	PSPSecretWebhookSecret = "webhook_secret" // Stripe endpoint signing secret, whsec_…
	PSPSimWebhookSecret    = "PSPSIM_WEBHOOK_SECRET"
	// WebhookSecret holds a fixed signing secret for a webhook handler run
	// outside the stack (cmd/frontdoor, a benchmark); a function of the
	// stack never has it (a stack test checks), it reads PSPSecretArn.
	WebhookSecret = "ONCEPAY_WEBHOOK_SECRET"
)
