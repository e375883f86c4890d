package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/testkit/story"
)

// edges are the payment's state moves (docs/mechanism.md#seed-part-5; "" is
// no row yet). States are sampled between steps and one step can make several
// moves (a request inserts PENDING and settles it), so a sampled move must be
// a path along these edges; a move out of a final state never is (a refund is
// its own row: the payment stays SUCCEEDED, or moves to REFUNDED if the
// ledger records it there).
var edges = map[string][]string{
	"":          {"PENDING", "VOID"},
	"PENDING":   {"UNKNOWN", "SUCCEEDED", "FAILED"},
	"UNKNOWN":   {"SUCCEEDED", "FAILED"},
	"SUCCEEDED": {"REFUNDED"},
}

func allowed(from, to string) bool {
	for _, next := range edges[from] {
		if next == to || allowed(next, to) {
			return true
		}
	}
	return false
}

func (s *schedule) pids() []string {
	out := make([]string, len(s.payments))
	for i, p := range s.payments {
		out[i] = p.pid
	}
	return out
}

// observe reads the schedule's payments' states and checks each move seen
// since the last look.
func (r *Runner) observe(ctx context.Context, s *schedule) error {
	rows, err := r.w.Pool.Query(ctx, `SELECT payment_id, state FROM payments WHERE payment_id = ANY($1)`, s.pids())
	if err != nil {
		return fmt.Errorf("observe: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var pid, st string
		if err := rows.Scan(&pid, &st); err != nil {
			return err
		}
		if prev := s.states[pid]; prev != st {
			if !allowed(prev, st) {
				s.violate("step %d: %s moved %q -> %q, outside the allowed edges", s.step, pid, prev, st)
			}
			s.states[pid] = st
		}
	}
	return rows.Err()
}

// row is a payment's ledger row as the checker reads it ("" state: none).
type row struct {
	state, charge, fingerprint, currency string
	amount                               int64
}

func (r *Runner) row(ctx context.Context, pid string) (row, error) {
	var x row
	err := r.w.Pool.QueryRow(ctx, `SELECT state, COALESCE(psp_charge, ''), COALESCE(fingerprint, ''), COALESCE(currency, ''), COALESCE(amount, 0)
		FROM payments WHERE payment_id = $1`, pid).Scan(&x.state, &x.charge, &x.fingerprint, &x.currency, &x.amount)
	if errors.Is(err, pgx.ErrNoRows) {
		return row{}, nil
	}
	if err != nil {
		return row{}, fmt.Errorf("check: read %s: %w", pid, err)
	}
	return x, nil
}

// askAgain is the client coming back after quiescence: what the key record
// stores (what every retry inside the window hears) and a fresh retry of
// the request the ledger holds. Both are answers the checker holds against
// the ledger. If the retry moved anything, the world settles again.
func (r *Runner) askAgain(ctx context.Context, s *schedule) error {
	w := r.w
	moved := false
	for _, p := range s.payments {
		x, err := r.row(ctx, p.pid)
		if err != nil {
			return err
		}
		if x.state == "" {
			continue // a retry now would start the payment: nothing to ask
		}
		// The record as a retry inside its window reads it: on the clock of
		// the schedule's end (quiescence moved the clock by hours).
		rec, found, err := w.Claims.Get(ctx, ids.Scope(p.caller, p.key), s.endClock)
		if err != nil {
			return fmt.Errorf("ask again: key record of %s: %w", p.pid, err)
		}
		if found {
			r.recordAnswer(s, p, rec, x)
		}
		reqBody := p.body
		if x.amount == p.amount+1 {
			reqBody = p.reuse // the reuse became the payment: its request is the one retried
		}
		resp, how, err := s.door.send(ctx, w.API, wireRNG(s), hreq{path: "/payments", caller: p.caller, key: p.key, body: reqBody, arrival: w.Clock.Now()})
		if err != nil {
			return err
		}
		s.record(p, "again", resp)
		s.log("again %s/%s [%s] -> %d %s%s", p.caller, p.key, how, resp.Status, stateOf(resp), problemOf(resp))
		if after, err := r.row(ctx, p.pid); err != nil {
			return err
		} else if after.state != x.state {
			moved = true
		}
	}
	open, err := w.InTransit(ctx)
	if err != nil {
		return err
	}
	if !s.notQuiet && (moved || open > 0) {
		s.log("the retries moved something: settle again")
		return r.settle(ctx, s)
	}
	return nil
}

// recordAnswer turns the stored key record into the answer it gives.
func (r *Runner) recordAnswer(s *schedule, p *payment, rec idem.Record, x row) {
	a := answer{step: s.step, p: p, kind: "record"}
	switch {
	case rec.State == idem.Void:
		a.status, a.ptype = http.StatusConflict, problem.TypeKeyVoided
	case rec.State == idem.Completed && rec.Answer != nil:
		var b body
		_ = json.Unmarshal(rec.Answer.Body, &b)
		a.status, a.state, a.charge, a.ptype = rec.Answer.Status, b.State, b.PSPCharge, b.Type
	default:
		return // IN_PROGRESS or a pointer: a retry is answered from the row
	}
	if rec.State == idem.Completed && rec.Fingerprint != "" && x.fingerprint != "" && rec.Fingerprint != x.fingerprint {
		s.violate("%s: the key record holds another request's fingerprint than the ledger row: the payment's retries hear 422", p.pid)
	}
	s.answers = append(s.answers, a)
	s.log("record %s/%s stores %d %s%s", p.caller, p.key, a.status, a.state, strings.TrimPrefix(a.ptype, problem.TypeBase))
}

// paymentOfKey is the payment a PSP idempotency key was derived from
// (<payment_id>:charge, :attempt-N:<psp>, :cancel:refund).
func paymentOfKey(key string) string {
	pid, _, _ := strings.Cut(key, ":")
	return pid
}

// check runs the invariants on the quiescent world.
func (r *Runner) check(ctx context.Context, s *schedule) error {
	w := r.w
	byPID := map[string]*payment{}
	for _, p := range s.payments {
		byPID[p.pid] = p
	}
	// The PSP's charges and refunds since the schedule began, matched by
	// the derived idempotency key each was made under, not by metadata.
	allCharges, err := pspsim.Charges(ctx, w.SimURL)
	if err != nil {
		return err
	}
	allRefunds, err := pspsim.Refunds(ctx, w.SimURL)
	if err != nil {
		return err
	}
	charges := map[string][]pspsim.Charge{}
	for _, c := range allCharges[min(s.chargesBefore, len(allCharges)):] {
		pid := paymentOfKey(c.IdempotencyKey)
		if byPID[pid] == nil {
			s.violate("PSP charge %s (key %q, %d %s) maps to no payment of the schedule", c.ID, c.IdempotencyKey, c.Amount, c.Currency)
			continue
		}
		charges[pid] = append(charges[pid], c)
	}
	pspRefunds := map[string][]pspsim.Refund{}
	for _, rf := range allRefunds[min(s.refundsBefore, len(allRefunds)):] {
		pid := paymentOfKey(rf.IdempotencyKey)
		if byPID[pid] == nil {
			s.violate("PSP refund %s (key %q, %d %s) maps to no payment of the schedule", rf.ID, rf.IdempotencyKey, rf.Amount, rf.Currency)
			continue
		}
		pspRefunds[pid] = append(pspRefunds[pid], rf)
	}

	pushes, err := r.awaitPushes(ctx, s)
	if err != nil {
		return err
	}
	notifs, err := r.notifStates(ctx, s)
	if err != nil {
		return err
	}
	refunds, err := r.refundRows(ctx, s)
	if err != nil {
		return err
	}
	// Credits per event: one at most, whatever the event.
	if rows, err := w.Pool.Query(ctx, `SELECT event_id, count(*) FROM credits WHERE event_id LIKE ANY($1) GROUP BY event_id HAVING count(*) > 1`,
		eventPatterns(s)); err != nil {
		return fmt.Errorf("check: %w", err)
	} else {
		for rows.Next() {
			var ev string
			var n int
			if err := rows.Scan(&ev, &n); err != nil {
				rows.Close()
				return err
			}
			s.violate("event %s credited %d times", ev, n)
		}
		rows.Close()
	}

	// The second event id of a change (charge.* beside payment_intent.*,
	// charge.refund.updated beside refund.updated) that reached the
	// handler: recorded in the inbox, moving nothing.
	second, err := w.Int(ctx, `SELECT count(*) FROM webhook_inbox WHERE payment_id = ANY($1)
		AND event_type IN ('charge.succeeded', 'charge.failed', 'charge.refund.updated')`, s.pids())
	if err != nil {
		return fmt.Errorf("check: webhook inbox: %w", err)
	}
	if second > 0 {
		s.covered[WebhookSecondEvent] += int(second)
	}

	wantBalance := map[string]int64{}
	for _, p := range s.payments {
		x, err := r.row(ctx, p.pid)
		if err != nil {
			return err
		}
		state, charge, amount := x.state, x.charge, x.amount
		// Whichever of the two requests for the key ran first is the
		// payment; the other one is the key reuse.
		otherFirst := amount == p.amount+1
		ch := charges[p.pid]
		if len(ch) > 1 {
			s.violate("%s: %d PSP charges", p.pid, len(ch))
		}
		for _, c := range ch {
			if state != "" && (c.Amount != amount || !strings.EqualFold(c.Currency, x.currency)) {
				s.violate("%s: PSP charge %s is %d %s, the ledger row %d %s", p.pid, c.ID, c.Amount, c.Currency, amount, x.currency)
			}
		}
		evID := ids.EventID(p.pid, "SUCCEEDED")
		credits, err := w.Int(ctx, `SELECT count(*) FROM credits WHERE event_id = $1`, evID)
		if err != nil {
			return err
		}
		mine := pushes[p.pid]
		// The refund's history: a FAILED refund that had SUCCEEDED first
		// (Stripe failed it later) recorded both its REFUNDED debit and the
		// REFUND_FAILED re-credit (migration 00006).
		rf, prf := refunds[p.pid], pspRefunds[p.pid]
		refundedOnce, err := w.Int(ctx, `SELECT count(*) FROM outbox_intents WHERE event_id = $1`, ids.EventID(p.pid, "REFUNDED"))
		if err != nil {
			return err
		}
		// Believed only where the PSP was made to do it: refund_fail_later
		// armed on the refund's key and fired (not the system's own outbox,
		// which a bug could write).
		failedLater, whyNot := refundFailedLater(s, p.pid, rf.state, refundedOnce > 0)
		if whyNot != "" {
			s.violate("%s", whyNot)
		}
		if !cardCanPay(s.cards[p.pid]) && (state == "SUCCEEDED" || state == "REFUNDED") {
			s.violate("%s %s, paid with %s, which the PSP never charges", p.pid, state, s.cards[p.pid])
		}
		switch state {
		case "SUCCEEDED", "REFUNDED":
			wantBalance[p.merchant] += amount
			if len(ch) != 1 || ch[0].ID != charge {
				s.violate("%s SUCCEEDED with charge %q, the PSP holds %d charges under its keys", p.pid, charge, len(ch))
			}
			if credits != 1 {
				s.violate("%s SUCCEEDED, credited %d times", p.pid, credits)
			}
			switch {
			case notifs[evID] == "SUPERSEDED" && (rf.state == "SUCCEEDED" || failedLater):
				// Its refund's notification was written before this one went
				// out, and replaces it on the phone: retired, never sent
				// (inbox.retireSuperseded). The refund's own is checked below.
			case notifs[evID] == "SUPERSEDED":
				s.violate("%s SUCCEEDED: its notification was retired as SUPERSEDED with no later one about the payment", p.pid)
			default:
				r.notified(s, p, evID, "SUCCEEDED", amount, mine, notifs)
			}
		case "UNKNOWN", "PENDING":
			if len(ch) > 0 {
				s.violate("%s still %s after quiescence, with a charge at the PSP", p.pid, state)
			}
			if credits != 0 {
				s.violate("%s %s but credited", p.pid, state)
			}
			s.checkOpen(p.pid, state, ids.ChargeKey(p.pid), "")
		case "FAILED":
			if len(ch) > 0 {
				s.violate("%s is FAILED but the PSP charged it", p.pid)
			}
			if credits != 0 {
				s.violate("%s is FAILED but credited", p.pid)
			}
			r.notified(s, p, ids.EventID(p.pid, "FAILED"), "FAILED", amount, mine, notifs)
		default: // VOID, or no row
			if len(ch) > 0 {
				s.violate("%s is %q but the PSP charged it", p.pid, state)
			}
			if credits != 0 {
				s.violate("%s is %q but credited", p.pid, state)
			}
		}
		// No push for a payment that ended open or void; no push for a
		// state it did not reach.
		for _, d := range mine {
			reached := d.State == state || (d.State == "SUCCEEDED" && state == "REFUNDED") ||
				(d.State == "REFUNDED" && (rf.state == "SUCCEEDED" || failedLater)) ||
				(d.State == "REFUND_FAILED" && failedLater)
			if !reached {
				s.violate("%s ended %q, yet the buyer was pushed %s (event %s)", p.pid, state, d.State, d.EventID)
			}
		}
		// Refunds: the ledger row against the PSP's own list and the
		// refund's status there now, the money and the notifications.
		if len(prf) > 1 {
			s.violate("%s: %d PSP refunds", p.pid, len(prf))
		}
		pspStatus := ""
		if len(prf) > 0 {
			pspStatus, _ = w.Sim.RefundStatus(prf[0].ID)
		}
		s.coverRefundSettled(p.pid, pspStatus)
		switch {
		case rf.state == "SUCCEEDED":
			wantBalance[p.merchant] -= rf.amount
			if len(prf) != 1 || prf[0].Amount != rf.amount {
				s.violate("%s refund SUCCEEDED for %d, the PSP holds %d refunds under its key", p.pid, rf.amount, len(prf))
			} else if pspStatus != "succeeded" {
				s.violate("%s refund SUCCEEDED, the PSP's refund %s is %s", p.pid, prf[0].ID, pspStatus)
			}
			r.notified(s, p, ids.EventID(p.pid, "REFUNDED"), "REFUNDED", rf.amount, mine, notifs)
			if err := r.consumedOnce(ctx, s, p, "REFUNDED"); err != nil {
				return err
			}
		case failedLater:
			// Debited, then credited back: the payment's money is the
			// merchant's again, and the buyer was told the refund failed.
			if len(prf) != 1 || prf[0].Amount != rf.amount || pspStatus != "failed" {
				s.violate("%s refund FAILED after it SUCCEEDED; the PSP holds %d refunds under its key (status %q)", p.pid, len(prf), pspStatus)
			}
			for _, st := range []string{"REFUNDED", "REFUND_FAILED"} {
				if err := r.consumedOnce(ctx, s, p, st); err != nil {
					return err
				}
			}
			n, err := w.Int(ctx, `SELECT count(*) FROM credits WHERE event_id = $1`, ids.EventID(p.pid, "REFUND_FAILED"))
			if err != nil {
				return err
			}
			if n != 1 {
				s.violate("%s refund failed later, its money credited back %d times", p.pid, n)
			}
			if st := notifs[ids.EventID(p.pid, "REFUNDED")]; st != "SENT" && st != "SUPERSEDED" {
				s.violate("%s refund failed later: its REFUNDED notification is %q", p.pid, st)
			}
			r.notified(s, p, ids.EventID(p.pid, "REFUND_FAILED"), "REFUND_FAILED", rf.amount, mine, notifs)
		case rf.state == "FAILED":
			// Refused before any money moved: the PSP holds none, or one it
			// failed (a pending refund that failed).
			if len(prf) > 0 && pspStatus != "failed" {
				s.violate("%s refund FAILED, the PSP's refund %s is %s", p.pid, prf[0].ID, pspStatus)
			}
		case len(prf) > 0:
			s.violate("%s: the PSP refunded %d (%s), the ledger's refund is %q", p.pid, prf[0].Amount, pspStatus, rf.state)
		case rf.state != "":
			s.checkOpen(p.pid, rf.state, ids.RefundKey(p.pid), "refund ")
		}
		for _, a := range s.answers {
			if a.p != p {
				continue
			}
			if msg := contradicts(a, a.other != otherFirst, state, charge, rf.state, failedLater); msg != "" {
				s.violate("step %d %s %s/%s answered %d %s %s%s: %s (final %s)", a.step, a.kind, p.caller, p.key, a.status, a.state, a.charge,
					strings.TrimPrefix(a.ptype, problem.TypeBase), msg, state)
			}
		}
	}
	for _, d := range schedulePushes(w, s) {
		if d.ReplaceID == "" || d.ReplaceID != d.PaymentID {
			s.violate("a push for %s carries replace id %q", d.PaymentID, d.ReplaceID)
		}
	}
	merchants := map[string]bool{}
	for _, p := range s.payments {
		merchants[p.merchant] = true
	}
	for m := range merchants {
		bal, err := w.Balance(ctx, m)
		if err != nil {
			return err
		}
		if bal != wantBalance[m] {
			s.violate("merchant %s: balance %d, the ledger's SUCCEEDED payments less their refunds sum to %d", m, bal, wantBalance[m])
		}
	}
	slices.Sort(s.viol)
	return nil
}

// refundFailedLater says whether a refund's FAILED after a REFUNDED event
// (refunded: its outbox holds one) is the history Stripe makes, a refund
// that succeeded and failed later: only when refund_fail_later was armed
// on its key and fired. Otherwise the system told REFUNDED for a refund
// the PSP never succeeded, and whyNot says so.
func refundFailedLater(s *schedule, pid, state string, refunded bool) (later bool, whyNot string) {
	if state != "FAILED" || !refunded {
		return false, ""
	}
	if !s.fired(ids.RefundKey(pid), pspsim.FaultRefundFailLater) {
		return false, fmt.Sprintf("%s refund FAILED after its REFUNDED event was written, but the PSP never failed a refund it had succeeded (no refund_fail_later fired)", pid)
	}
	return true, ""
}

// coverRefundSettled counts a refund fault as fired only once what it
// stands for happened at the PSP: refund_pending once the refund settled
// succeeded, refund_fail and refund_fail_later once it turned failed. A
// rule that shaped the refund it made but whose settlement never came is
// not coverage of the later settlement.
func (s *schedule) coverRefundSettled(pid, pspStatus string) {
	key := ids.RefundKey(pid)
	for kind, want := range map[pspsim.FaultKind]string{pspsim.FaultRefundPending: "succeeded",
		pspsim.FaultRefundFail: "failed", pspsim.FaultRefundFailLater: "failed"} {
		if s.fired(key, kind) && pspStatus == want {
			s.covered[pspPoint[kind]]++
		}
	}
}

// keyFault is a simulator fault kind on one idempotency key.
type keyFault struct {
	key  string
	kind pspsim.FaultKind
}

// armOn counts a rule the runner armed, by its key.
func (s *schedule) armOn(f pspsim.Fault) {
	if s.armedOn == nil {
		s.armedOn = map[keyFault]int{}
	}
	s.armedOn[keyFault{f.Match.IdempotencyKey, f.Kind}] += max(f.Times, 1)
}

// noteFiredByKey counts, per key and kind, the rules that fired: armed
// less what the simulator still holds (left, read before it is cleared).
func (s *schedule) noteFiredByKey(left []pspsim.Fault) {
	rest := map[keyFault]int{}
	for _, f := range left {
		rest[keyFault{f.Match.IdempotencyKey, f.Kind}] += f.Times
	}
	s.firedOn = map[keyFault]int{}
	for k, armed := range s.armedOn {
		if n := armed - rest[k]; n > 0 {
			s.firedOn[k] = n
		}
	}
}

// fired reports that a fault of kind fired on key during the schedule.
func (s *schedule) fired(key string, kind pspsim.FaultKind) bool {
	return s.firedOn[keyFault{key, kind}] > 0
}

// checkOpen judges a payment or refund still open (PENDING, UNKNOWN)
// after quiescence: every resolver pass, sweep and settlement has run, so
// the one documented open case left is a plain 5xx the PSP saved under
// its key (error_5xx: nothing ran, and every replay inside the key window
// answers the same 500, so the resolver can neither settle nor fail it).
// Anything else open is a row nothing will ever resolve or notify.
func (s *schedule) checkOpen(pid, state, key, what string) {
	if s.notQuiet || s.fired(key, pspsim.FaultError5xx) {
		return // never quiet is its own violation
	}
	s.violate("%s %sstill %s after quiescence with no saved 5xx at the PSP under %s: nothing will ever settle or notify it", pid, what, state, key)
}

// consumedOnce checks that the payment's event of state reached the
// consumer: its inbox row, once.
func (r *Runner) consumedOnce(ctx context.Context, s *schedule, p *payment, state string) error {
	n, err := r.w.Int(ctx, `SELECT count(*) FROM processed WHERE event_id = $1`, ids.EventID(p.pid, state))
	if err != nil {
		return err
	}
	if n != 1 {
		s.violate("%s: its %s event never reached the consumer", p.pid, state)
	}
	return nil
}

// cardCanPay reports a payment method the simulator may charge: a test
// card that pays, or a saved card (single-use: once).
func cardCanPay(pm string) bool {
	switch {
	case pm == "pm_card_chargeDeclined", pm == "pm_card_threeDSecure2Required", pm == "pm_card_authenticationRequired",
		strings.HasPrefix(pm, "pm_1Gone"):
		return false
	}
	return true
}

// notified checks an event's notification: its notif row SENT and a push
// with the event's amount on the phone.
func (r *Runner) notified(s *schedule, p *payment, eventID, state string, amount int64, mine []pushed, notifs map[string]string) {
	if st := notifs[eventID]; st != "SENT" {
		s.violate("%s %s: its notification is %q, not SENT", p.pid, state, st)
	}
	var got []pushed
	for _, d := range mine {
		if d.EventID == eventID {
			got = append(got, d)
		}
	}
	if len(got) == 0 {
		s.violate("%s %s, never notified", p.pid, state)
	}
	for _, d := range got {
		// A refund's push may carry the amount as a debit (negative).
		if d.Amount != amount && !(state == "REFUNDED" && d.Amount == -amount) {
			s.violate("%s %s: the push says %d, the ledger %d", p.pid, state, d.Amount, amount)
		}
	}
}

// pushed is one push the phone got.
type pushed struct {
	EventID, PaymentID, ReplaceID, State string
	Amount                               int64
}

// awaitPushes waits for the pushes the ledger marked SENT and returns the
// schedule's, by payment.
func (r *Runner) awaitPushes(ctx context.Context, s *schedule) (map[string][]pushed, error) {
	w := r.w
	// A push the worker published may still be on its way through the
	// topic to the watching queue, or be invisible for the watching
	// queue's visibility timeout after a receive lost on the wire: wait up
	// to five such timeouts for every one the ledger marked SENT.
	for range int(5 * story.WatchVisibility / (100 * time.Millisecond)) {
		sent, err := w.Int(ctx, `SELECT count(*) FROM notif WHERE state = 'SENT' AND event_id LIKE ANY($1)`, eventPatterns(s))
		if err != nil {
			return nil, fmt.Errorf("check: %w", err)
		}
		if _, err := w.CollectPushes(ctx); err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for _, d := range schedulePushes(w, s) {
			seen[d.EventID] = true
		}
		if int64(len(seen)) >= sent {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	out := map[string][]pushed{}
	for _, d := range schedulePushes(w, s) {
		out[d.PaymentID] = append(out[d.PaymentID], d)
	}
	return out, nil
}

// schedulePushes are the pushes on the phone for the schedule's payments.
func schedulePushes(w *story.World, s *schedule) []pushed {
	mine := map[string]bool{}
	for _, p := range s.payments {
		mine[p.pid] = true
	}
	var out []pushed
	for _, d := range w.PushLog() {
		if mine[d.PaymentID] || mine[ids.PaymentOfEvent(d.EventID)] {
			out = append(out, pushed{EventID: d.EventID, PaymentID: d.PaymentID, ReplaceID: d.ReplaceID, State: d.State, Amount: d.Amount})
		}
	}
	return out
}

func (r *Runner) notifStates(ctx context.Context, s *schedule) (map[string]string, error) {
	rows, err := r.w.Pool.Query(ctx, `SELECT event_id, state FROM notif WHERE event_id LIKE ANY($1)`, eventPatterns(s))
	if err != nil {
		return nil, fmt.Errorf("check: notif: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var ev, st string
		if err := rows.Scan(&ev, &st); err != nil {
			return nil, err
		}
		out[ev] = st
	}
	return out, rows.Err()
}

type refundRow struct {
	state  string
	amount int64
}

func (r *Runner) refundRows(ctx context.Context, s *schedule) (map[string]refundRow, error) {
	rows, err := r.w.Pool.Query(ctx, `SELECT payment_id, state, amount FROM refunds WHERE payment_id = ANY($1)`, s.pids())
	if err != nil {
		return nil, fmt.Errorf("check: refunds: %w", err)
	}
	defer rows.Close()
	out := map[string]refundRow{}
	for rows.Next() {
		var pid string
		var x refundRow
		if err := rows.Scan(&pid, &x.state, &x.amount); err != nil {
			return nil, err
		}
		out[pid] = x
	}
	return out, rows.Err()
}

// eventPatterns are LIKE patterns for the schedule's events.
func eventPatterns(s *schedule) []string {
	out := make([]string, len(s.payments))
	for i, p := range s.payments {
		out[i] = p.pid + ":%"
	}
	return out
}

// contradicts says how an answer contradicts the ledger's final state, or
// "". reused: the answer was to the request that is not the payment.
// refund is the final state of the payment's refund row ("" none);
// failedLater, that it FAILED after it had SUCCEEDED (a 201 then was true).
func contradicts(a answer, reused bool, final, charge, refund string, failedLater bool) string {
	switch a.kind {
	case "resolve", "record", "again":
		reused = false
	case "refund":
		switch {
		case a.status == http.StatusCreated && refund != "SUCCEEDED" && !failedLater:
			return "told the refund SUCCEEDED"
		case a.status == http.StatusBadGateway && a.ptype != "" && refund != "FAILED":
			return "told the refund FAILED"
		}
		return ""
	}
	// A 502 psp-rejected FAILED is as final as a 402 to the client
	// (internal/client: nothing charged, a new key may pay again).
	rejected := a.status == http.StatusBadGateway && a.ptype == problem.TypePSPRejected && a.state == "FAILED"
	switch {
	case reused && a.kind != "late":
		if a.status == http.StatusCreated || a.status == http.StatusAccepted || a.status == http.StatusPaymentRequired || rejected {
			return "a reused key with another amount was answered as a payment"
		}
		return ""
	case a.kind == "late":
		if a.status != http.StatusServiceUnavailable {
			return "a request older than the deadline was not refused"
		}
		return ""
	}
	settled := final == "SUCCEEDED" || final == "REFUNDED"
	switch {
	case a.status == http.StatusCreated && (!settled || a.state != "SUCCEEDED" || a.charge != charge):
		return "told SUCCEEDED"
	case a.status == http.StatusPaymentRequired && final != "FAILED":
		return "told FAILED"
	case rejected && final != "FAILED":
		return "told FAILED (the PSP rejected the request: nothing charged)"
	case a.kind == "resolve" && a.status == http.StatusOK && a.state == "VOID" && final != "VOID":
		return "told VOID"
	case a.status == http.StatusConflict && a.ptype == problem.TypeKeyVoided && final != "VOID" && final != "":
		return "told the key was voided"
	case a.status == http.StatusUnprocessableEntity:
		return "the same request was answered 422"
	}
	return ""
}
