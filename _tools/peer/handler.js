// The peer of issue 18's side-by-side benchmark: what a team would write
// instead of oncepay's api, with Powertools for AWS Lambda's idempotency
// utility (TypeScript, used here as plain ESM) guarding the whole handler.
// It does the api's business work for POST /payments: one charge through the
// PSP (Stripe's POST /v1/payment_intents, confirm=true, form-encoded) under
// the key oncepay derives from the caller+key scope, and a 201 with the
// payment's JSON. No ledger, no outbox: that difference is what is measured.
//
// Configuration is Powertools' documented defaults except what the brief
// names: payload validation over the five meaning fields, the record key
// from the caller and the Idempotency-Key header. ALL_OLD on a failed
// conditional put is not an option in this version: its DynamoDB layer
// always asks for it (ReturnValuesOnConditionCheckFailure: 'ALL_OLD').
import { createHash } from 'node:crypto';
import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { DynamoDBPersistenceLayer } from '@aws-lambda-powertools/idempotency/dynamodb';

// The DynamoDB client is the SDK's default one: it takes the endpoint from
// AWS_ENDPOINT_URL_DYNAMODB, as a deployed function would take none.
const persistenceStore = new DynamoDBPersistenceLayer({ tableName: process.env.PEER_IDEMPOTENCY_TABLE });

const config = new IdempotencyConfig({
  // Scoped by caller as oncepay's key record is: the same key from two
  // callers is two payments.
  eventKeyJmesPath: '[requestContext.authorizer.jwt.claims.sub, headers."idempotency-key"]',
  // The request's meaning (oncepay's fingerprint fields): a reused key with
  // another body fails validation instead of replaying.
  payloadValidationJmesPath: 'powertools_json(body).[merchant_id, order_id, amount, currency, payment_method]',
});

const pspURL = process.env.ONCEPAY_PSP_URL;
// The key every local PSP client sends (internal/boot.LocalPSPKey).
const pspKey = 'sk_test_oncepay_local';

// oncepay's ID chain (internal/ids): scope = payments#<caller, % and #
// escaped>#<key>; payment id = pay_ + the first 26 base32 characters of the
// scope's SHA-256, lower-cased; the PSP key is the payment id + ":charge".
function paymentId(caller, key) {
  const scope = `payments#${caller.replaceAll('%', '%25').replaceAll('#', '%23')}#${key}`;
  return `pay_${base32(createHash('sha256').update(scope).digest()).slice(0, 26).toLowerCase()}`;
}

function base32(buf) {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
  let bits = 0;
  let value = 0;
  let out = '';
  for (const byte of buf) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += alphabet[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += alphabet[(value << (5 - bits)) & 31];
  return out;
}

function json(statusCode, body) {
  return { statusCode, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) };
}

async function pay(event) {
  const caller = event.requestContext?.authorizer?.jwt?.claims?.sub ?? '';
  const key = event.headers?.['idempotency-key'] ?? '';
  let req;
  try {
    req = JSON.parse(event.body ?? '');
  } catch {
    return json(400, { title: 'invalid JSON body' });
  }
  if (!caller || !key) return json(400, { title: 'caller and Idempotency-Key are required' });
  const pid = paymentId(caller, key);
  const form = new URLSearchParams({
    amount: String(req.amount),
    currency: String(req.currency).toLowerCase(),
    payment_method: req.payment_method,
    confirm: 'true',
    'automatic_payment_methods[enabled]': 'true',
    'automatic_payment_methods[allow_redirects]': 'never',
    error_on_requires_action: 'true',
    'metadata[payment_id]': pid,
    'metadata[merchant_id]': req.merchant_id,
  });
  const res = await fetch(`${pspURL}/v1/payment_intents`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${pspKey}`,
      'content-type': 'application/x-www-form-urlencoded',
      'idempotency-key': `${pid}:charge`,
    },
    body: form,
    signal: AbortSignal.timeout(5000),
  });
  const body = await res.json();
  const base = { payment_id: pid, merchant_id: req.merchant_id, order_id: req.order_id, amount: req.amount, currency: req.currency };
  if (res.ok && body.status === 'succeeded') {
    return json(201, { ...base, state: 'SUCCEEDED', psp_charge: body.latest_charge ?? body.id });
  }
  if (res.status === 402) {
    return json(402, { ...base, state: 'FAILED', decline_code: body.error?.decline_code ?? body.error?.code });
  }
  // Anything else is thrown, as a handler with no outcome to record would:
  // Powertools deletes the in-progress record, so a retry charges again
  // under the same PSP key (the PSP's replay, while it remembers the key).
  throw new Error(`PSP answered ${res.status} (${body.status ?? body.error?.type ?? 'no status'})`);
}

// The whole handler is made idempotent: a repeat is answered with the stored
// response, and Powertools' errors (in progress, validation) are thrown out
// of the handler, which API Gateway answers 500.
export const handler = makeIdempotent(pay, { persistenceStore, config });
