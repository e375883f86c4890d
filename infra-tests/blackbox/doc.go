// Package blackbox tests the running stack as a client, a PSP and an operator
// see it, and nothing else (issue 14, docs/mechanism.md#design-6b): the HTTP
// API (stack output HttpApiUrl) with a caller's bearer token, the webhook
// route (WebhookUrl), a queue of the suite's own subscribed to the push topic
// (PushTopicArn), the PSP simulator's admin API (/_sim/: faults, charges),
// the local cloud's admin API (/_local/status, /_local/kill) and the
// documented read interface `inspect` (one payment's row, credits and
// notification intents as JSON). It imports no handler, store or runner: a
// stack that passes here passes for its users.
//
// Locally it runs in `make test` against the stack `make up` started (with
// CI set and the stack missing it fails, as testenv's rule says); against a
// deployed stack it reads ONCEPAY_OUTPUTS (docs/deploy.md, "The black-box
// suite").
//
// Every case uses callers and merchants of its own, so parallel runs and
// other tests on the shared stack never touch its counts.
package blackbox
