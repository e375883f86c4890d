// Package reconcile is the last word (docs/mechanism.md#seed-part-4, "the
// nightly reconciliation against the PSP's records has the last word"): a
// run reads every PaymentIntent and every refund the PSP created in a span
// through its list endpoints (never search, whose index lags), joins each to
// the ledger by the payment id oncepay writes in every call's metadata, and
// settles every difference by an allowed state move of the ledger or a
// refund under a derived key, each with the ordinary event wherever money
// or what the buyer sees changes, so the credit, the debit and the
// notification follow the ordinary path once:
//
//   - PSP succeeded, ledger PENDING or UNKNOWN: settled (ledger.Settle).
//   - PSP succeeded, no ledger row (a failover lost it inside the
//     replication lag): the row adopted from the charge's metadata, with
//     its journal and event (ledger.Adopt).
//   - PSP succeeded, ledger FAILED or VOID (the buyer was told "not
//     charged" and may have paid again), and a second charge of one
//     payment: reversed, a refund under ids.ReversalKey, the buyer told.
//   - a refund the PSP finished while the ledger has it open: settled; a
//     refund the PSP failed after it succeeded: the ledger's reopened and
//     the merchant credited back once (ledger.SettleRefund).
//   - what only a human can decide (a SUCCEEDED row with no charge,
//     differing amounts, a charge with no row and no metadata to adopt it
//     by): a finding row and a metric the stack alarms on, never a change.
//
// Idempotent by construction: every move is a compare-and-set or an
// insert-if-absent, every refund carries a derived key, so a re-run over
// the same span moves nothing; a run records a checkpoint as it goes, and
// an invocation finding its span's run unfinished resumes it.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/psp"
)

// PSP is what a run asks of the PSP (psp.Client).
type PSP interface {
	ListPaymentIntents(ctx context.Context, from, to time.Time, each func(psp.Listed) error) error
	ListRefunds(ctx context.Context, from, to time.Time, each func(psp.ListedRefund) error) error
	Refund(ctx context.Context, req psp.RefundRequest) (psp.Result, error)
	FindRefund(ctx context.Context, paymentIntentID, chargeID, paymentID string) (psp.Result, error)
	Lookup(ctx context.Context, paymentID string) (psp.Result, error)
}

// Ledger is what a run reads and writes of the ledger (ledger.Store).
type Ledger interface {
	PaymentsByID(ctx context.Context, ids []string) (map[string]ledger.Payment, error)
	SucceededIDsCreated(ctx context.Context, from, to time.Time) ([]string, error)
	RefundsByPayment(ctx context.Context, ids []string) (map[string]ledger.Refund, error)
	Reversals(ctx context.Context, ids []string) ([]ledger.Reversal, error)
	Settle(ctx context.Context, paymentID string, o ledger.Outcome, now time.Time, hooks ...ledger.Hook) (ledger.Payment, *event.Event, bool, error)
	Adopt(ctx context.Context, p ledger.Payment, now time.Time) (ledger.Payment, *event.Event, bool, error)
	SettleRefund(ctx context.Context, paymentID string, o ledger.RefundOutcome) (ledger.Refund, bool, error)
	InsertReversal(ctx context.Context, r ledger.Reversal) (ledger.Reversal, bool, error)
	SettleReversal(ctx context.Context, key string, o ledger.RefundOutcome) (ledger.Reversal, *event.Event, bool, error)
	RecordReversalAttempt(ctx context.Context, key string, sent bool, pspRefund string) (ledger.Reversal, error)
	BeginReconcileRun(ctx context.Context, from, to time.Time) (ledger.ReconcileRun, error)
	CheckpointReconcileRun(ctx context.Context, id int64, checkpoint string, counts map[string]int, finish bool) error
	RecordFinding(ctx context.Context, f ledger.Finding) error
}

// Publisher puts an event on the outbox after its intent committed
// (outbox.Publisher). A failed put is not lost: the resolver's sweep
// re-puts every intent left unpublished.
type Publisher interface {
	Publish(ctx context.Context, e event.Event) error
}

// Metrics counts (metrics.Emitter).
type Metrics interface {
	Count(name string, n int)
}

// Config is a reconciler's configuration; zero fields take the defaults.
type Config struct {
	// Before and After widen the span the PSP's lists are read over, for
	// the join only: a PaymentIntent is created on the PSP's clock after
	// its row on the database's, and a takeover's or the resolver's first
	// call can come up to the PSP's key window after the row. Outcomes are
	// judged only for payments with a PaymentIntent, a refund or a
	// SUCCEEDED row created inside the span itself. Defaults: 1 h before,
	// 25 h after (the 24 h key window and an hour), never past now.
	Before, After time.Duration
	// Due: an open row is judged FAILED from declined attempts only when
	// its deadline passed this long ago (default 1 h: the resolver's
	// turn first).
	Due time.Duration
	// CheckpointEvery: payments judged between two checkpoints (default 50).
	CheckpointEvery int
	// CallTimeout bounds one PSP call (default 10 s).
	CallTimeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Before == 0 {
		c.Before = time.Hour
	}
	if c.After == 0 {
		c.After = 25 * time.Hour
	}
	if c.Due == 0 {
		c.Due = time.Hour
	}
	if c.CheckpointEvery == 0 {
		c.CheckpointEvery = 50
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = 10 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Deps are a reconciler's collaborators. Publisher and Metrics may be nil.
type Deps struct {
	Ledger    Ledger
	PSP       PSP
	Publisher Publisher
	Metrics   Metrics
	Log       *slog.Logger
}

// Reconciler runs reconciliations. It is safe for concurrent use.
type Reconciler struct {
	cfg Config
	d   Deps
}

// New returns a Reconciler.
func New(cfg Config, d Deps) (*Reconciler, error) {
	if d.Ledger == nil || d.PSP == nil {
		return nil, errors.New("reconcile: a ledger and a PSP are required")
	}
	cfg.setDefaults()
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return &Reconciler{cfg: cfg, d: d}, nil
}

// Report is one run's report: its row's id, span and counts per outcome.
type Report struct {
	RunID    int64          `json:"run_id"`
	From     time.Time      `json:"from"`
	To       time.Time      `json:"to"`
	Resumed  bool           `json:"resumed"` // a run cut off earlier was resumed
	Counts   map[string]int `json:"counts"`
	Findings int            `json:"findings"` // this invocation's findings

	driven map[string]bool // reversals this invocation drove already
}

// Run reconciles [from, to): whole seconds, UTC. It returns an error, and
// leaves the run open for the next invocation to resume, when the PSP's
// lists could not be read whole or a move could not be made.
func (r *Reconciler) Run(ctx context.Context, from, to time.Time) (Report, error) {
	from, to = from.UTC(), to.UTC()
	if !from.Before(to) || from.Truncate(time.Second) != from || to.Truncate(time.Second) != to {
		return Report{}, fmt.Errorf("reconcile: span [%s, %s) is not whole seconds in order", from, to)
	}
	log := r.d.Log.With("span_from", from.Format(time.RFC3339), "span_to", to.Format(time.RFC3339))
	run, err := r.d.Ledger.BeginReconcileRun(ctx, from, to)
	if err != nil {
		return Report{}, fmt.Errorf("reconcile: %w", err)
	}
	rep := Report{RunID: run.ID, From: from, To: to, Resumed: run.Checkpoint != "" || len(run.Counts) > 0, Counts: run.Counts,
		driven: map[string]bool{}}
	log = log.With("run_id", run.ID)

	all, inSpan, err := r.read(ctx, from, to)
	if err != nil {
		return rep, err
	}
	ids := make([]string, 0, len(inSpan))
	for id := range inSpan {
		if id > run.Checkpoint {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	log.Info("reconciliation run", "resumed", rep.Resumed, "payments", len(ids), "checkpoint", run.Checkpoint)

	for start := 0; start < len(ids); start += r.cfg.CheckpointEvery {
		batch := ids[start:min(len(ids), start+r.cfg.CheckpointEvery)]
		if err := r.judgeBatch(ctx, run.ID, batch, all, &rep, log); err != nil {
			return rep, err
		}
		if err := r.d.Ledger.CheckpointReconcileRun(ctx, run.ID, batch[len(batch)-1], rep.Counts, false); err != nil {
			return rep, fmt.Errorf("reconcile: %w", err)
		}
	}
	// Reversals left open by earlier runs, of any span, are driven too: a
	// refund whose outcome is open is never left to nobody.
	if err := r.driveOpenReversals(ctx, run.ID, &rep, log); err != nil {
		return rep, err
	}
	if err := r.d.Ledger.CheckpointReconcileRun(ctx, run.ID, run.Checkpoint, rep.Counts, true); err != nil {
		return rep, fmt.Errorf("reconcile: %w", err)
	}
	log.Info("reconciliation run finished", "counts", rep.Counts, "findings", rep.Findings)
	return rep, nil
}

// records is what the PSP's lists hold, by our payment id.
type records struct {
	intents map[string][]psp.Listed
	refunds map[string][]psp.ListedRefund
}

// read lists the PSP's PaymentIntents and refunds over the widened span
// and the ledger's SUCCEEDED rows of the span. inSpan holds the payment
// ids to judge.
func (r *Reconciler) read(ctx context.Context, from, to time.Time) (records, map[string]bool, error) {
	lfrom, lto := from.Add(-r.cfg.Before), to.Add(r.cfg.After)
	if now := r.cfg.Now().Truncate(time.Second).Add(time.Second); lto.After(now) {
		lto = now
	}
	all := records{intents: map[string][]psp.Listed{}, refunds: map[string][]psp.ListedRefund{}}
	inSpan := map[string]bool{}
	within := func(t time.Time) bool { return !t.Before(from) && t.Before(to) }
	foreign := 0
	err := r.d.PSP.ListPaymentIntents(ctx, lfrom, lto, func(l psp.Listed) error {
		id := l.Metadata[psp.MetaPaymentID]
		if id == "" {
			if within(l.Created) {
				foreign++
			}
			return nil
		}
		all.intents[id] = append(all.intents[id], l)
		if within(l.Created) {
			inSpan[id] = true
		}
		return nil
	})
	if err != nil {
		return records{}, nil, fmt.Errorf("reconcile: list the PSP's payment intents: %w", err)
	}
	err = r.d.PSP.ListRefunds(ctx, lfrom, lto, func(l psp.ListedRefund) error {
		id := l.Metadata[psp.MetaPaymentID]
		if id == "" {
			return nil
		}
		all.refunds[id] = append(all.refunds[id], l)
		if within(l.Created) {
			inSpan[id] = true
		}
		return nil
	})
	if err != nil {
		return records{}, nil, fmt.Errorf("reconcile: list the PSP's refunds: %w", err)
	}
	succeeded, err := r.d.Ledger.SucceededIDsCreated(ctx, from, to)
	if err != nil {
		return records{}, nil, fmt.Errorf("reconcile: %w", err)
	}
	for _, id := range succeeded {
		inSpan[id] = true
	}
	// Oldest first: the first succeeded attempt is the payment's charge.
	for _, ls := range all.intents {
		slices.SortFunc(ls, func(a, b psp.Listed) int {
			return cmpCreated(a.Created, b.Created, a.PaymentIntentID, b.PaymentIntentID)
		})
	}
	if foreign > 0 && r.d.Metrics != nil {
		r.d.Metrics.Count("ReconcileForeign", foreign)
	}
	return all, inSpan, nil
}

func cmpCreated(a, b time.Time, ida, idb string) int {
	if c := a.Compare(b); c != 0 {
		return c
	}
	return strings.Compare(ida, idb)
}

// judgeBatch judges and settles a batch of payments.
func (r *Reconciler) judgeBatch(ctx context.Context, runID int64, ids []string, all records, rep *Report, log *slog.Logger) error {
	rows, err := r.d.Ledger.PaymentsByID(ctx, ids)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	refunds, err := r.d.Ledger.RefundsByPayment(ctx, ids)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	reversals, err := r.d.Ledger.Reversals(ctx, ids)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	now := r.cfg.Now()
	for _, id := range ids {
		f := facts{id: id, intents: all.intents[id], refunds: all.refunds[id]}
		if row, ok := rows[id]; ok {
			f.row = &row
			f.due = !row.DeadlineAt.IsZero() && row.DeadlineAt.Add(r.cfg.Due).Before(now)
		}
		if rf, ok := refunds[id]; ok {
			f.refund = &rf
		}
		for _, v := range reversals {
			if v.PaymentID == id {
				f.reversals = append(f.reversals, v)
			}
		}
		p := judge(f)
		if r.confirmed(ctx, f, p) {
			p = plan{outcome: Agree}
		}
		plog := log.With("payment_id", id, "outcome", string(p.outcome))
		outcome, more, err := r.carry(ctx, f, p, rep.driven, plog)
		if err != nil {
			return err
		}
		for _, fd := range append(p.findings, more...) {
			if err := r.d.Ledger.RecordFinding(ctx, ledger.Finding{RunID: runID, PaymentID: id, Kind: fd.kind, Detail: fd.detail}); err != nil {
				return fmt.Errorf("reconcile: %w", err)
			}
			rep.Findings++
			plog.Error("reconciliation finding: a human must decide", "kind", fd.kind, "detail", fd.detail)
		}
		rep.Counts[string(outcome)]++
		r.count(outcome)
		if outcome != Agree {
			plog.Info("reconciled")
		}
	}
	return nil
}

// confirmed reports whether the PSP holds, after all, the charge of a
// SUCCEEDED row that the lists did not show: a row judged only for its
// refund (its charge older than the read span), or a charge the widened
// span still missed. The look-up is search, whose lag only matters for a
// charge made in the last minutes, which the lists would have shown.
func (r *Reconciler) confirmed(ctx context.Context, f facts, p plan) bool {
	if f.row == nil || f.row.State != ledger.Succeeded || len(p.findings) != 1 || p.findings[0].kind != FindLedgerWithoutCharge {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	res, err := r.d.PSP.Lookup(cctx, f.id)
	return err == nil && res.Outcome == psp.Succeeded && f.row.PSPCharge != "" &&
		(res.ChargeID == f.row.PSPCharge || res.PaymentIntentID == f.row.PSPCharge)
}

func (r *Reconciler) count(o Outcome) {
	if r.d.Metrics == nil || o == Agree {
		return
	}
	r.d.Metrics.Count(MetricOf(o), 1)
}

// MetricOf names the metric counting an outcome: Reconcile + the outcome in
// CamelCase (ReconcileNeedsHuman, ReconcileAdopted, ...).
func MetricOf(o Outcome) string {
	var b strings.Builder
	b.WriteString("Reconcile")
	for _, w := range strings.Split(string(o), "_") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

// carry makes the plan's moves, in order, and returns the outcome they
// reached (a reversal whose refund is still open reports ReversalOpen) and
// the findings the moves themselves made. A move another settler made
// first (the row or the refund moved since the read) ends the payment's
// turn as Open: the next run judges it afresh, and nothing planned on the
// stale read (a reversal of the charge the other settler kept) is sent.
func (r *Reconciler) carry(ctx context.Context, f facts, p plan, driven map[string]bool, log *slog.Logger) (Outcome, []finding, error) {
	now := r.cfg.Now()
	outcome := p.outcome
	if p.adopt != nil {
		_, ev, adopted, err := r.d.Ledger.Adopt(ctx, *p.adopt, now)
		if err != nil {
			return "", nil, fmt.Errorf("reconcile: %w", err)
		}
		if !adopted {
			// A row appeared since the read (the buyer's retry, a late
			// replication): the next run judges it.
			log.Warn("a row appeared before the adoption; left to the next run")
			return Open, nil, nil
		}
		r.publish(ctx, ev, log)
	}
	if p.settle != nil {
		_, ev, moved, err := r.d.Ledger.Settle(ctx, f.id, *p.settle, now)
		if err != nil {
			return "", nil, fmt.Errorf("reconcile: %w", err)
		}
		if !moved {
			log.Warn("the row was settled by another since the read; left to the next run")
			return Open, nil, nil
		}
		r.publish(ctx, ev, log)
	}
	if p.refund != nil {
		rf, moved, err := r.d.Ledger.SettleRefund(ctx, f.id, *p.refund)
		if err != nil {
			return "", nil, fmt.Errorf("reconcile: %w", err)
		}
		if !moved {
			log.Warn("the refund was settled by another since the read; left to the next run")
			return Open, nil, nil
		}
		if e, ok := ledger.SettledRefundEvent(rf, f.refund != nil && f.refund.State == ledger.RefundSucceeded); ok {
			r.publish(ctx, &e, log)
		}
	}
	var found []finding
	for _, v := range p.reverse {
		row := ledger.Reversal{
			PaymentID: f.id, PSPPaymentIntent: v.intent.PaymentIntentID, PSPCharge: v.intent.ChargeID,
			Amount: v.intent.Amount, Currency: strings.ToUpper(v.intent.Currency), Reason: v.reason,
			MerchantID: v.intent.Metadata[psp.MetaMerchantID], CallerID: v.intent.Metadata[psp.MetaCallerID],
		}
		if f.row != nil {
			row.CallerID = f.row.CallerID
			if f.row.MerchantID != "" {
				row.MerchantID = f.row.MerchantID
			}
		}
		rv, _, err := r.d.Ledger.InsertReversal(ctx, row)
		if errors.Is(err, ledger.ErrPaymentsOwnCharge) {
			log.Warn("the charge became the payment's own since the read; not reversed", "payment_intent", v.intent.PaymentIntentID)
			return Open, found, nil
		}
		if err != nil {
			return "", nil, fmt.Errorf("reconcile: %w", err)
		}
		driven[rv.Key] = true
		done, fd, err := r.drive(ctx, rv, log)
		if err != nil {
			return "", nil, err
		}
		switch {
		case fd != nil:
			found = append(found, *fd)
			outcome = NeedsHuman
		case !done && outcome != NeedsHuman:
			outcome = ReversalOpen
		}
	}
	return outcome, found, nil
}

// driveOpenReversals drives every reversal still open that no payment of
// this invocation drove (one attempt per reversal and invocation).
// Each run counts every reversal it leaves open (ReconcileReversalOpen),
// so the alarm stays on, day after day, while one is.
func (r *Reconciler) driveOpenReversals(ctx context.Context, runID int64, rep *Report, log *slog.Logger) error {
	open, err := r.d.Ledger.Reversals(ctx, nil)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	for _, v := range open {
		if v.State.Final() || rep.driven[v.Key] {
			continue
		}
		vlog := log.With("payment_id", v.PaymentID)
		done, fd, err := r.drive(ctx, v, vlog)
		if err != nil {
			return err
		}
		if fd != nil {
			if err := r.d.Ledger.RecordFinding(ctx, ledger.Finding{RunID: runID, PaymentID: v.PaymentID, Kind: fd.kind, Detail: fd.detail}); err != nil {
				return fmt.Errorf("reconcile: %w", err)
			}
			rep.Findings++
			r.count(NeedsHuman)
			vlog.Error("reconciliation finding: a human must decide", "kind", fd.kind, "detail", fd.detail)
		}
		switch {
		case done:
			rep.Counts["reversal_settled"]++
		default:
			rep.Counts[string(ReversalOpen)]++
			r.count(ReversalOpen)
		}
	}
	return nil
}

// drive takes a reversal to its end as far as the PSP allows now: first it
// looks the refund up by the charge (a list, no lag: a refund an earlier
// attempt made whose answer was lost is found, never sent twice), and only
// when the PSP holds none sends it under the reversal's derived key. done
// reports a final row.
//
// A refund the PSP refuses stays open (a rotated or restricted key, a 4xx
// of ours: the next run tries again) with a finding, except when the
// charge was refunded already (by hand, with none of our metadata): then
// the buyer has the money, the reversal ends FAILED, and a human is told.
func (r *Reconciler) drive(ctx context.Context, v ledger.Reversal, log *slog.Logger) (done bool, fd *finding, err error) {
	if v.State.Final() {
		return true, nil, nil
	}
	log = log.With("refund_key", v.Key, "payment_intent", v.PSPPaymentIntent, "reason", string(v.Reason))
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	found, ferr := r.d.PSP.FindRefund(cctx, v.PSPPaymentIntent, "", v.PaymentID)
	cancel()
	res, sent := found, false
	if ferr == nil && found.Outcome == psp.NotFound {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		res, err = r.d.PSP.Refund(cctx, psp.RefundRequest{
			IdempotencyKey: v.Key, PaymentIntentID: v.PSPPaymentIntent, Amount: v.Amount, PaymentID: v.PaymentID,
		})
		cancel()
		sent = !errors.Is(err, psp.ErrNotSent)
		var apiErr *psp.APIError
		if err != nil && errors.Is(err, psp.ErrInvalidRequest) && !errors.Is(err, psp.ErrKeyReuse) {
			sent = false // refused before it ran: nothing under the key
			if errors.As(err, &apiErr) && apiErr.Code == "charge_already_refunded" {
				if _, _, _, serr := r.d.Ledger.SettleReversal(ctx, v.Key, ledger.RefundOutcome{State: ledger.RefundFailed, FailureReason: "already_refunded"}); serr != nil {
					return false, nil, fmt.Errorf("reconcile: %w", serr)
				}
				return true, &finding{FindReversalRefused, fmt.Sprintf("PaymentIntent %s was refunded already, not by a reversal (by hand?): check the buyer has the %d %s back",
					v.PSPPaymentIntent, v.Amount, v.Currency)}, nil
			}
			fd = &finding{FindReversalRefused, fmt.Sprintf("the PSP refused the refund of PaymentIntent %s (%d %s): %v; it stays open and every run tries again",
				v.PSPPaymentIntent, v.Amount, v.Currency, err)}
		}
	} else if ferr != nil {
		err = ferr
	}
	switch {
	case err == nil && res.Outcome == psp.Succeeded:
		_, ev, _, serr := r.d.Ledger.SettleReversal(ctx, v.Key, ledger.RefundOutcome{State: ledger.RefundSucceeded, PSPRefund: res.RefundID})
		if serr != nil {
			return false, nil, fmt.Errorf("reconcile: %w", serr)
		}
		log.Warn("reversed a charge the ledger does not hold as its payment's", "refund", res.RefundID, "amount", v.Amount)
		r.publish(ctx, ev, log)
		return true, nil, nil
	case err == nil && res.Outcome == psp.Declined:
		_, _, _, serr := r.d.Ledger.SettleReversal(ctx, v.Key, ledger.RefundOutcome{State: ledger.RefundFailed, PSPRefund: res.RefundID, FailureReason: "psp_failed"})
		if serr != nil {
			return false, nil, fmt.Errorf("reconcile: %w", serr)
		}
		return true, &finding{FindReversalRefused, fmt.Sprintf("the PSP failed refund %s of PaymentIntent %s (%d %s): the buyer does not have the money back",
			res.RefundID, v.PSPPaymentIntent, v.Amount, v.Currency)}, nil
	}
	// Unknown, pending or refused: recorded; the next run looks it up first.
	if _, rerr := r.d.Ledger.RecordReversalAttempt(ctx, v.Key, sent, res.RefundID); rerr != nil {
		return false, nil, fmt.Errorf("reconcile: %w", rerr)
	}
	log.Warn("a reversal's refund is still open; the next run drives it", "outcome", res.Outcome.String(), "err", err)
	return false, fd, nil
}

func (r *Reconciler) publish(ctx context.Context, ev *event.Event, log *slog.Logger) {
	if ev == nil || r.d.Publisher == nil {
		return
	}
	if err := r.d.Publisher.Publish(ctx, *ev); err != nil {
		log.Warn("outbox put failed; the resolver's sweep will re-put it", "event_id", ev.EventID, "err", err)
	}
}
