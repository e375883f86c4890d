package regions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/psp"
	"github.com/oncepay/oncepay/internal/resolver"
	"github.com/oncepay/oncepay/internal/testkit/story"
)

// Count is what the money and the notifications came to, over the ledgers
// that hold m1's money.
type Count struct {
	Charges int   // charges the PSP made
	Charged int64 // cents the PSP charged
	Credits int64 // credit rows for m1
	M1      int64 // m1's money: its balances summed over the ledgers
	Pushes  int   // pushes sent, both Regions
	// Payments are the payment rows in each ledger counted.
	Payments []int64
}

// Answer is the part of an API answer the scenarios read.
type Answer struct {
	Status      int
	Replayed    bool
	PaymentID   string `json:"payment_id"`
	State       string `json:"state"`
	PSPCharge   string `json:"psp_charge"`
	Type        string `json:"type"`
	HomeRegion  string `json:"home_region"`
	HomeURL     string `json:"home_url"`
	HomeVersion int64  `json:"home_version"`
}

func read(r api.Response) Answer {
	a := Answer{Status: r.Status, Replayed: r.Headers.Get("Idempotent-Replayed") == "true"}
	_ = json.Unmarshal(r.Body, &a)
	return a
}

// Follow is what a client does with a 421: the Region whose URL it names
// (and nil for a URL of no Region: the client would not follow).
func (s *System) Follow(a Answer) *story.World {
	if a.Status != http.StatusMisdirectedRequest || URLs[a.HomeRegion] != a.HomeURL {
		return nil
	}
	if a.HomeRegion == R1 {
		return s.R1
	}
	return s.R2
}

// Counted reads the count over the ledgers of ws.
func (s *System) Counted(ctx context.Context, ws ...*story.World) (Count, error) {
	c := Count{}
	for _, ch := range s.Sim.Charges() {
		c.Charges++
		c.Charged += ch.Amount
	}
	for _, w := range ws {
		n, err := w.Int(ctx, `SELECT count(*) FROM credits WHERE merchant_id = 'm1'`)
		if err != nil {
			return c, err
		}
		b, err := w.Balance(ctx, "m1")
		if err != nil {
			return c, err
		}
		p, err := w.Int(ctx, `SELECT count(*) FROM payments`)
		if err != nil {
			return c, err
		}
		c.Credits += n
		c.M1 += b
		c.Payments = append(c.Payments, p)
	}
	c.Pushes = len(s.R1.PushLog()) + len(s.R2.PushLog())
	return c, nil
}

// F2 is branch F2's outcome.
type F2 struct {
	Count
	// A1 is the original's answer in R1; Away the resend's in R2; Home,
	// when R2 answered 421, the resend's where the client followed it.
	A1, Away, Home Answer
	// Gap is the real time between A1's claim in R1 and the resend's
	// arrival in R2: inside the lag, R2's replica has no claim yet.
	Gap time.Duration
}

// PlayF2 plays branch F2 (docs/mechanism.md#seed-part-9): A1 claims K1 in R1 at 0.02 and
// charges; before it answers, the phone's resend A1' is routed to R2 at
// 0.45, inside the lag. What happens next is the System's: without home
// routing and with eventual claims both Regions claim; with home routing R2
// answers 421 and the client follows to R1; with strong claims R2's claim
// sees R1's.
func (s *System) PlayF2(ctx context.Context) (F2, error) {
	var out F2
	t := s.R1.Table
	pid := story.PaymentID("u1", "K1")
	t.Alias(pid, "pay_7")
	t.Section(fmt.Sprintf("Across Regions, branch F2: the resend lands in R2 inside the lag (%v)", s.Lag), s.T0)
	// u1 is placed in R1 by a record of its own (not the default), written
	// in R1 and replicated to R2 before the tap.
	if _, err := s.Homes[R1].Move(ctx, "u1", R1, 0); err != nil {
		return out, err
	}
	if err := s.CaughtUp(ctx); err != nil {
		return out, err
	}
	var claimedAt time.Time
	s.R1.SetAPIHooks(api.Hooks{
		AfterClaim: func(context.Context) error {
			claimedAt = time.Now()
			t.Add("R1 api", "A1 claims K1 in R1's replica of the claim table", ids.Scope("u1", "K1"))
			return nil
		},
		AfterPSPReply: func(ctx context.Context) error {
			s.setClock(0.45)
			out.Gap = time.Since(claimedAt)
			out.Away = read(s.R2.Pay(ctx, "u1", "K1", story.Body, s.R2.At(0.45)))
			t.Add("R2 api", fmt.Sprintf("A1' (the phone's resend) lands in R2, %v after A1's claim: answers %d %s%s", out.Gap.Round(time.Millisecond), out.Away.Status, out.Away.State, out.Away.Type), pid)
			if w := s.Follow(out.Away); w != nil {
				s.setClock(0.46)
				out.Home = read(w.Pay(ctx, "u1", "K1", story.Body, w.At(0.46)))
				t.Add("phone", fmt.Sprintf("follows the 421 to %s (home version %d): answered %d %s", out.Away.HomeRegion, out.Away.HomeVersion, out.Home.Status, out.Home.Type), pid)
			}
			return nil
		},
	})
	s.setClock(0.02)
	out.A1 = read(s.R1.Pay(ctx, "u1", "K1", story.Body, s.R1.At(0.02)))
	s.R1.SetAPIHooks(api.Hooks{})
	t.Add("R1 api", fmt.Sprintf("A1 answers %d %s", out.A1.Status, out.A1.State), pid)
	for _, w := range []*story.World{s.R1, s.R2} {
		if err := w.Settle(ctx); err != nil {
			return out, fmt.Errorf("settle %s: %w", w.Region, err)
		}
	}
	if err := s.CaughtUp(ctx); err != nil {
		return out, err
	}
	var err error
	if out.Count, err = s.Counted(ctx, s.R1, s.R2); err != nil {
		return out, err
	}
	t.Add("both", fmt.Sprintf("settled: %d charge, %d credit(s), m1 = %d over both Regions' ledgers, %d push(es)", out.Charges, out.Credits, out.M1, out.Pushes), pid)
	return out, nil
}

// Switches are branch F's counterfactuals (test-only).
type Switches struct {
	// RegionKey makes R2's resolver replay with a per-Region attempt key
	// (pay_7:R2:1) instead of the derived pay_7:charge.
	RegionKey bool
	// RandomEventID makes R1's outbox copy carry a random event id instead
	// of the derived pay_7:SUCCEEDED.
	RandomEventID bool
}

// F is branch F's outcome.
type F struct {
	Count
	// A1 is the original's answer in R1 (the lost reply: 202); AfterFailover
	// the retry's in R2 once R2 took R1's callers; Back the retry's in R1
	// after it came back.
	A1, AfterFailover, Back Answer
	// StandbyBefore and StandbyAtFailure are the payment's state in R2's
	// standby when replication had caught up, and when R1 failed.
	StandbyBefore, StandbyAtFailure ledger.State
	// Failover is the real time from R1 down to R2 answering R1's caller.
	Failover time.Duration
	Moved    int // home records the failover moved
	// Leftover is the messages R1's worker handled when R1 came back (its
	// leftover outbox copy).
	Leftover int
	// EventIDs are the outbox intents' ids in the home ledger after R2's
	// replay.
	EventIDs []string
}

// regionKeyPSP is the first counterfactual: the PSP key carries the Region
// and an attempt counter.
type regionKeyPSP struct{ resolver.PSP }

func (p regionKeyPSP) Charge(ctx context.Context, req psp.ChargeRequest) (psp.Result, error) {
	req.IdempotencyKey = req.PaymentID + ":R2:1"
	return p.PSP.Charge(ctx, req)
}

// randomIDs is the second: an outbox copy with a random event id.
type randomIDs struct{ resolver.Publisher }

func (p randomIDs) Publish(ctx context.Context, e event.Event) error {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	e.EventID = "ev_" + hex.EncodeToString(b)
	return p.Publisher.Publish(ctx, e)
}

// PlayF plays branch F (docs/mechanism.md#seed-part-9) on a System with a standby: the main
// line's lost reply in R1 (pay_7 UNKNOWN, replicated); R1's resolver
// settles it and R1 fails before that second replicates; R2 is promoted,
// takes R1's callers (version + 1) and its resolver replays pay_7; R1 comes
// back, its leftover outbox copy reaches the home inbox, and its API, once
// its home replica caught up, sends u1 to R2.
func (s *System) PlayF(ctx context.Context, sw Switches) (F, error) {
	var out F
	if s.Ledger == nil {
		return out, errors.New("regions: branch F needs a standby (Options.Standby)")
	}
	t := s.R1.Table
	pid := story.PaymentID("u1", "K1")
	chargeKey, eventID := ids.ChargeKey(pid), ids.EventID(pid, string(ledger.Succeeded))
	t.Alias(eventID, "ev_7") // before pay_7, which it contains
	t.Alias(pid, "pay_7")
	t.Section(fmt.Sprintf("Across Regions, branch F: R1 fails in the middle of replication (lag %v)%s", s.Lag, sw.label()), s.T0)

	// The main line's lost reply: at the deadline the row is UNKNOWN.
	if err := s.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: chargeKey}, Kind: pspsim.FaultLoseReply, Times: 1}); err != nil {
		return out, err
	}
	s.R1.OnPSP = func(key string, err error) {
		if key == chargeKey && err != nil {
			if ch := s.R1.Charges(chargeKey); len(ch) > 0 {
				t.Alias(ch[0].ID, "ch_1")
			}
			t.Add("PSP", "charges the card; the reply is lost", chargeKey)
			s.setClock(5.021)
		}
	}
	s.setClock(0.02)
	out.A1 = read(s.R1.Pay(ctx, "u1", "K1", story.Body, s.R1.At(0.02)))
	s.R1.OnPSP = nil
	t.Add("R1 api", fmt.Sprintf("deadline: PENDING -> UNKNOWN, answers %d %s", out.A1.Status, out.A1.State), pid)
	if err := s.CaughtUp(ctx); err != nil {
		return out, err
	}
	row, err := s.R2.Ledger.Get(ctx, pid)
	if err != nil {
		return out, fmt.Errorf("R2's standby: %w", err)
	}
	out.StandbyBefore = row.State
	t.Add("R2 ledger", fmt.Sprintf("the standby has replicated the row: %s", row.State), pid)

	// R1's resolver settles pay_7, and R1 fails inside the lag.
	s.setClock(10.5)
	r1res, err := s.R1.ResolverWith(func(d *resolver.Deps) {
		if sw.RandomEventID {
			d.Publisher = randomIDs{d.Publisher}
		}
	})
	if err != nil {
		return out, err
	}
	rep, err := r1res.Run(ctx)
	if err != nil {
		return out, fmt.Errorf("R1's resolver: %w", err)
	}
	s.Fail()
	t.Add("R1 resolver", fmt.Sprintf("replays %s: saved charge; UNKNOWN -> SUCCEEDED + outbox (settled %d)", chargeKey, rep.Succeeded), pid)
	s.setClock(10.6)
	t.Add("R1", "fails: its replication stops mid-stream; its last second never reaches R2", "")
	time.Sleep(s.Lag + 200*time.Millisecond) // anything still on its way would have arrived
	if row, err = s.R2.Ledger.Get(ctx, pid); err != nil {
		return out, err
	}
	out.StandbyAtFailure = row.State

	// The failover, timed from the operator's first step (detection and the
	// decision are not the system's to measure).
	down := time.Now()
	moved, err := s.Failover(ctx)
	if err != nil {
		return out, err
	}
	out.Moved = len(moved)
	s.setClock(11)
	t.Add("operator", fmt.Sprintf("promotes R2's standby; moves %d home record(s) to R2 (version + 1)", out.Moved), "")
	out.AfterFailover = read(s.R2.Pay(ctx, "u1", "K1", story.Body, s.R2.At(11)))
	out.Failover = time.Since(down)
	t.Add("R2 api", fmt.Sprintf("u1's retry: %d %s (R2 serves R1's callers, %v after the failover began)", out.AfterFailover.Status, out.AfterFailover.State, out.Failover.Round(time.Millisecond)), pid)

	// R2's resolver replays the payment it inherited.
	s.setClock(11.5)
	r2res, err := s.R2.ResolverWith(func(d *resolver.Deps) {
		if sw.RegionKey {
			d.PSP = regionKeyPSP{d.PSP}
		}
	})
	if err != nil {
		return out, err
	}
	rep, err = r2res.Run(ctx)
	if err != nil {
		return out, fmt.Errorf("R2's resolver: %w", err)
	}
	key := chargeKey
	if sw.RegionKey {
		key = pid + ":R2:1"
	}
	t.Add("R2 resolver", fmt.Sprintf("replays %s: the PSP answers %s; settled %d", key, s.chargeIDs(), rep.Succeeded), pid)
	rows, err := s.R2.Pool.Query(ctx, `SELECT event_id FROM outbox_intents WHERE payment_id = $1 ORDER BY event_id`, pid)
	if err != nil {
		return out, err
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return out, err
		}
		out.EventIDs = append(out.EventIDs, id)
	}
	rows.Close()
	if err := s.R2.Settle(ctx); err != nil {
		return out, fmt.Errorf("settle R2: %w", err)
	}
	t.Add("R2 worker", "credits m1 once through the home inbox; pushes once", eventID)

	// R1 comes back: its relay sends the leftover copy; its worker writes
	// through the ledger's writer endpoint, now R2's.
	s.setClock(20)
	// Caught up, not drained: a drain ends at its first quiet polls, and
	// DynamoDB Local's stream can show a record later than that.
	if _, err := s.R1.RelayCaughtUp(ctx); err != nil {
		return out, fmt.Errorf("R1's relay: %w", err)
	}
	consumer, err := s.R1.ConsumerOn(s.R2.Pool)
	if err != nil {
		return out, err
	}
	if _, err := consumer.Drain(ctx); err != nil {
		return out, fmt.Errorf("R1's worker: %w", err)
	}
	if _, err := s.R1.AwaitPushes(ctx, 2*time.Second); err != nil {
		return out, err
	}
	if _, err := s.R2.CollectPushes(ctx); err != nil {
		return out, err
	}
	st := consumer.Stats()
	out.Leftover = st.Received
	t.Add("R1 worker", fmt.Sprintf("R1 is back: its relay sends its leftover outbox copy; its worker meets the home inbox (%d message(s) handled)", st.Received), eventID)
	if err := s.RestoreR1(ctx); err != nil {
		return out, err
	}
	s.setClock(21)
	out.Back = read(s.R1.Pay(ctx, "u1", "K1", story.Body, s.R1.At(21)))
	t.Add("R1 api", fmt.Sprintf("its home replica caught up: u1's retry answers %d, home %s version %d", out.Back.Status, out.Back.HomeRegion, out.Back.HomeVersion), pid)
	if out.Count, err = s.Counted(ctx, s.R2); err != nil {
		return out, err
	}
	t.Add("both", fmt.Sprintf("final: %d charge(s) (%d cents), %d credit(s), m1 = %d, %d push(es)", out.Charges, out.Charged, out.Credits, out.M1, out.Pushes), "")
	return out, nil
}

func (sw Switches) label() string {
	switch {
	case sw.RegionKey && sw.RandomEventID:
		return "; counterfactuals: a per-Region attempt key and a random event id"
	case sw.RegionKey:
		return "; counterfactual: a per-Region attempt key"
	case sw.RandomEventID:
		return "; counterfactual: a random event id in R1"
	}
	return ""
}

// setClock moves the shared fake clock to sec seconds after the tap, never
// back (Settle moves it forward by minutes).
func (s *System) setClock(sec float64) {
	if t := s.R1.At(sec); t.After(s.Clock.Now()) {
		s.Clock.Set(t)
	}
}

// chargeIDs lists the PSP's charges.
func (s *System) chargeIDs() string {
	out := ""
	for i, c := range s.Sim.Charges() {
		if i > 0 {
			out += ", "
		}
		out += c.ID
	}
	return out
}
