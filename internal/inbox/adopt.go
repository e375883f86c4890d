package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/event"
)

// adoption is what a SUCCEEDED event found of its payment's home row under
// Config.Adopt, and what it did to it.
type adoption struct {
	adopted bool   // no row: written from the event
	settled bool   // a PENDING or UNKNOWN row: settled from the event
	state   string // the row's state as the event found it; "" no row
	charge  string // its psp_charge
	// mismatch: a SUCCEEDED row with another charge than the event's.
	mismatch bool
	// refusal says why the event is not applied; "" it is.
	refusal string
}

// adoptStatement is adopt's one round trip: the row written if the ledger
// has none (with the adoption's fields), else settled if it is PENDING or
// UNKNOWN with the event's money; the charge's two journal entries for
// either; and the row as the statement found it. A statement's CTEs share
// one snapshot: home is the row before this statement, so it is NULL for
// a row adopted here and the old state for a row settled here.
const adoptStatement = `
WITH adopted AS (
  INSERT INTO payments (payment_id, caller_id, client_key, fingerprint, amount, currency, state, psp_charge, merchant_id)
  SELECT $1::text, $2::text, $3::text, $4::text, $5::bigint, $6::text, 'SUCCEEDED', $7::text, $8::text WHERE $9::boolean
  ON CONFLICT DO NOTHING
  RETURNING payment_id, amount, currency, merchant_id
), settled AS (
  UPDATE payments SET state = 'SUCCEEDED', psp_charge = $7::text, decline_code = NULL
  WHERE payment_id = $1::text AND state IN ('PENDING', 'UNKNOWN') AND $7::text <> ''
    AND amount = $5::bigint AND currency = $6::text AND merchant_id = $8::text
  RETURNING payment_id, amount, currency, merchant_id
), moved AS (
  SELECT * FROM adopted UNION ALL SELECT * FROM settled
), journal AS (
  INSERT INTO journal_entries (payment_id, posting, account, amount, currency)
  SELECT payment_id, 'charge', 'psp_receivable', amount, currency FROM moved
  UNION ALL
  SELECT payment_id, 'charge', 'merchant_payable:' || merchant_id, -amount, currency FROM moved
)
SELECT EXISTS (SELECT 1 FROM adopted), EXISTS (SELECT 1 FROM settled),
       COALESCE(home.state, ''), COALESCE(home.psp_charge, ''),
       COALESCE(home.amount = $5::bigint AND home.currency = $6::text AND home.merchant_id = $8::text, false)
FROM (VALUES (1)) one LEFT JOIN payments home ON home.payment_id = $1::text`

// adopt decides, in the inbox transaction, whether a SUCCEEDED event is
// applied across Regions (Config.Adopt). The event may be a failed
// Region's leftover copy (R1's relay sending once R1 is back) of a payment
// the home ledger holds otherwise, so it credits only what the home
// ledger's row backs with a charge journal:
//
//   - no row: adopted (a payment the failover's lag lost), and credited.
//   - SUCCEEDED: credited. The home's own SUCCEEDED event has this event's
//     derived id, so whichever copy comes first credits and the other is a
//     repeat; refusing this one would leave the payment never credited.
//     Another charge than the row's is credited all the same (the row's
//     journal backs one credit) and alarmed: the PSP may hold two.
//   - PENDING or UNKNOWN with the event's amount, currency and merchant:
//     settled SUCCEEDED with the event's charge and its journal, and
//     credited. Recording the copy without settling would make the home's
//     own SUCCEEDED event, once its resolver settles the row, a repeat of
//     it (the same derived id) that never credits; the PSP charged
//     (this is its answer), and the PSP key is derived from the payment,
//     so the resolver would find the same charge.
//   - FAILED or VOID, or money that differs from the row's: refused. The
//     PSP charged money the ledger says it did not take: that is the
//     reconciliation's to find and refund. The event is recorded, so its
//     redeliveries stop, and neither credited nor notified; counted
//     (AdoptionRefused) and logged as an error with its ids and charge.
//   - no row and no key, fingerprint or charge to adopt it with: refused
//     likewise.
//
// Without Adopt (one Region) every event comes from this ledger's own
// settle, and apply credits it as before.
func (w *Worker) adopt(ctx context.Context, tx pgx.Tx, e event.Event) (adoption, error) {
	var a adoption
	var sameMoney bool
	adoptable := e.ClientKey != "" && e.Fingerprint != "" && e.PSPCharge != ""
	err := tx.QueryRow(ctx, adoptStatement,
		e.PaymentID, e.CallerID, e.ClientKey, e.Fingerprint, e.Amount, e.Currency, e.PSPCharge, e.MerchantID, adoptable,
	).Scan(&a.adopted, &a.settled, &a.state, &a.charge, &sameMoney)
	if err != nil {
		return a, classify(fmt.Errorf("inbox: adopt %s: %w", e.PaymentID, err))
	}
	switch {
	case a.adopted, a.settled:
		return a, nil
	case (a.state == "PENDING" || a.state == "UNKNOWN") && !sameMoney:
		a.refusal = "the home row's amount, currency or merchant differ from the event's"
		return a, nil
	case (a.state == "PENDING" || a.state == "UNKNOWN") && e.PSPCharge == "":
		a.refusal = "the event carries no charge to settle the home row with"
		return a, nil
	case a.state == "PENDING" || a.state == "UNKNOWN":
		// The row moved between the statement's snapshot and its update
		// (the home's own settle committed meanwhile): read it as it is
		// now, a new snapshot under READ COMMITTED.
		err := tx.QueryRow(ctx, `SELECT state, COALESCE(psp_charge, '') FROM payments WHERE payment_id = $1`, e.PaymentID).Scan(&a.state, &a.charge)
		if err != nil {
			return a, fmt.Errorf("inbox: read the home row of %s: %w", e.PaymentID, err)
		}
		if a.state == "PENDING" || a.state == "UNKNOWN" {
			return a, fmt.Errorf("inbox: adopt %s: the home row is %s yet was not settled; the event is retried", e.PaymentID, a.state)
		}
	}
	switch a.state {
	case "SUCCEEDED":
		a.mismatch = e.PSPCharge != "" && a.charge != "" && a.charge != e.PSPCharge
	case "":
		a.refusal = "no home row, and the event lacks the key, fingerprint or charge to adopt it"
	default:
		a.refusal = "the home row is " + a.state
	}
	return a, nil
}

// report counts and logs what adopt did, after the commit.
func (a adoption) report(ctx context.Context, cfg Config, e event.Event) {
	attrs := []slog.Attr{slog.String("event_id", e.EventID), slog.String("payment_id", e.PaymentID), slog.String("psp_charge", e.PSPCharge)}
	switch {
	case a.adopted:
		cfg.Metrics.Count("PaymentAdopted", 1)
		cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "adopted a payment the ledger had no row of (lost in a failover): written SUCCEEDED from the event", attrs...)
	case a.settled:
		cfg.Metrics.Count("PaymentSettledByCopy", 1)
		cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "settled a pending payment from a failed Region's SUCCEEDED copy: written SUCCEEDED with its charge",
			append(attrs, slog.String("home_state", a.state))...)
	case a.mismatch:
		cfg.Metrics.Count("AdoptionChargeMismatch", 1)
		cfg.Logger.LogAttrs(ctx, slog.LevelError, "a SUCCEEDED copy names another charge than the ledger's row: credited once; the other charge is reconciliation's",
			append(attrs, slog.String("alert", "AdoptionChargeMismatch"), slog.String("home_psp_charge", a.charge))...)
	}
}

// declineCode is the payment's decline code ("" none, or no row).
func declineCode(ctx context.Context, tx pgx.Tx, paymentID string) (string, error) {
	var code string
	err := tx.QueryRow(ctx, `SELECT COALESCE(decline_code, '') FROM payments WHERE payment_id = $1`, paymentID).Scan(&code)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("inbox: read the decline code of %s: %w", paymentID, err)
	}
	return code, nil
}
