package api_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/home"
	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/psp"
	"github.com/oncepay/oncepay/internal/testkit/albsign"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

var regionURLs = map[string]string{"us-east-1": "https://r1.example.test", "us-west-2": "https://r2.example.test"}

// inRegion rebuilds the world's api as the api of region, routing callers by
// a home record table of the test's own (fallback home: us-east-1).
func (w *world) inRegion(t *testing.T, region string, store *home.Store) {
	t.Helper()
	rt, err := home.NewRouter(store, region, "us-east-1", regionURLs)
	if err != nil {
		t.Fatal(err)
	}
	w.h = api.New(api.Deps{
		Claims: w.claims, Ledger: w.ledger, PSP: w.psp, Publisher: w.outbox, Clock: w.clock, Timing: w.timing,
		Log: slog.New(slog.NewJSONHandler(w.logs, nil)), Metrics: metrics.New(w.logs, "api"),
		ALB: albsign.Default.Verifier(w.clock.Now), Homes: rt,
	})
}

type misdirected struct {
	Type        string `json:"type"`
	Status      int    `json:"status"`
	HomeRegion  string `json:"home_region"`
	HomeURL     string `json:"home_url"`
	HomeVersion int64  `json:"home_version"`
}

// Every route answers a caller homed elsewhere 421 with the home's URL, and
// nothing is claimed, written or charged.
func TestAMisdirectedRequestIs421AndChangesNothing(t *testing.T) {
	w := newWorld(t)
	store := home.NewStore(w.db, testenv.NewTable(t, w.db, "caller"))
	w.inRegion(t, "us-west-2", store)
	calls := []api.Request{
		{Method: http.MethodPost, Path: "/payments", Body: []byte(body3000)},
		{Method: http.MethodPost, Path: "/payments/K1/resolve"},
		{Method: http.MethodPost, Path: "/payments/K1/refund"},
	}
	for _, c := range calls {
		c.Headers = http.Header{"Idempotency-Key": {"K1"}, "Content-Type": {"application/json"}}
		c.Caller, c.Arrival = "u1", w.clock.Now()
		r := w.h.Serve(context.Background(), c)
		if r.Status != http.StatusMisdirectedRequest || r.Headers.Get("Content-Type") != problem.ContentType {
			t.Fatalf("%s: %d %s %s, want 421 problem+json", c.Path, r.Status, r.Headers.Get("Content-Type"), r.Body)
		}
		var m misdirected
		if err := json.Unmarshal(r.Body, &m); err != nil {
			t.Fatal(err)
		}
		if m.Type != problem.TypeMisdirected || m.Status != 421 || m.HomeRegion != "us-east-1" || m.HomeURL != regionURLs["us-east-1"] || m.HomeVersion != 0 {
			t.Errorf("%s: body %+v", c.Path, m)
		}
		if _, err := url.Parse(m.HomeURL); err != nil {
			t.Errorf("home_url %q: %v", m.HomeURL, err)
		}
	}
	if _, found := w.record("u1", "K1"); found {
		t.Error("a misdirected request claimed the key")
	}
	if n := w.countRows(`SELECT count(*) FROM payments`); n != 0 {
		t.Errorf("%d payment rows after misdirected requests", n)
	}
	if n := len(w.charges()); n != 0 {
		t.Errorf("%d charges after misdirected requests", n)
	}
	if n := metrics.Sum(w.logs.Bytes(), "Misdirected"); n != 3 {
		t.Errorf("Misdirected = %v, want 3", n)
	}
}

// The failover's move (version + 1) turns the answers around at once: the
// new home serves the caller and the old one sends it there.
func TestAMovedCallerIsServedInItsNewHomeOnly(t *testing.T) {
	w := newWorld(t)
	mover := home.NewMover(w.db, testenv.NewTable(t, w.db, "caller"))
	store := mover.Store()
	w.inRegion(t, "us-east-1", store)
	expectStatus(t, w.pay("u1", "K1", body3000), http.StatusCreated)
	if _, err := mover.Failover(context.Background(), "us-east-1", "us-west-2", "us-east-1"); err != nil {
		t.Fatal(err)
	}
	r := w.pay("u1", "K1", body3000)
	var m misdirected
	_ = json.Unmarshal(r.Body, &m)
	if r.Status != http.StatusMisdirectedRequest || m.HomeRegion != "us-west-2" || m.HomeVersion != 1 {
		t.Fatalf("the old home after the move: %d %s", r.Status, r.Body)
	}
	w.inRegion(t, "us-west-2", store)
	if a := expectStatus(t, w.pay("u1", "K1", body3000), http.StatusCreated); a.State != "SUCCEEDED" {
		t.Errorf("the new home's replay: %+v", a)
	}
	if n := len(w.charges()); n != 1 {
		t.Errorf("%d charges, want 1", n)
	}
}

// An unreadable home record fails closed: 503, Retry-After, nothing run.
func TestAnUnreadableHomeIs503AndChangesNothing(t *testing.T) {
	w := newWorld(t)
	w.inRegion(t, "us-east-1", home.NewStore(unreachableDynamo(), "homes"))
	r := w.pay("u1", "K1", body3000)
	if r.Status != http.StatusServiceUnavailable || r.Headers.Get("Retry-After") == "" {
		t.Fatalf("%d %v %s, want 503 with Retry-After", r.Status, r.Headers, r.Body)
	}
	if a := decode(t, r); a.Type != problem.TypeHomeUnavailable {
		t.Errorf("type %q", a.Type)
	}
	if _, found := w.record("u1", "K1"); found || len(w.charges()) != 0 || w.countRows(`SELECT count(*) FROM payments`) != 0 {
		t.Error("an unreadable home still ran something")
	}
}

func (w *world) resolveKey(caller, key string) api.Response {
	return w.h.Serve(context.Background(), api.Request{Method: http.MethodPost, Path: "/payments/" + key + "/resolve",
		Headers: http.Header{}, Caller: caller, Arrival: w.clock.Now()})
}

// Across Regions an absent row may be one lost with a failed Region's last
// writes while the PSP charged it (docs/regions.md): the resolve asks the
// PSP before it voids, and keeps the key open when the PSP knows the
// payment; the retry with the same key then runs it here and the PSP
// replays its charge. One charge, never "nothing ran". A key the PSP does
// not know is voided as in one Region.
func TestAResolveAcrossRegionsDoesNotVoidAPaymentThePSPKnows(t *testing.T) {
	w := newWorld(t)
	mover := home.NewMover(w.db, testenv.NewTable(t, w.db, "caller"))
	w.inRegion(t, "us-east-1", mover.Store())
	pid := ids.PaymentID(ids.Scope("u1", "K1"))
	// The failed Region's charge: the PSP holds it, this Region's ledger
	// and key store do not.
	if _, err := w.psp.Charge(context.Background(), lostCharge(t, pid, "u1", "K1")); err != nil {
		t.Fatal(err)
	}
	r := w.resolveKey("u1", "K1")
	if a := decode(t, r); r.Status != http.StatusConflict || a.Type != problem.TypeInProgress {
		t.Fatalf("resolve of a key the PSP charged: %d %s; want 409 in-progress, never VOID", r.Status, r.Body)
	}
	if n := w.countRows(`SELECT count(*) FROM payments WHERE payment_id = $1`, pid); n != 0 {
		t.Fatalf("the resolve wrote %d rows (a VOID)", n)
	}
	if n := metrics.Sum(w.logs.Bytes(), "ResolveLostRow"); n != 1 {
		t.Errorf("ResolveLostRow = %v, want 1", n)
	}
	a := expectStatus(t, w.pay("u1", "K1", body3000), http.StatusCreated)
	if a.State != "SUCCEEDED" || len(w.charges()) != 1 || a.PSPCharge != w.charges()[0].ID {
		t.Errorf("the retry: %+v with %d charges; want the PSP's one charge replayed", a, len(w.charges()))
	}
	// A key the PSP never saw is voided.
	if r := w.resolveKey("u1", "K2"); r.Status != http.StatusOK {
		t.Errorf("resolve of a key nobody saw: %d %s; want 200 VOID", r.Status, r.Body)
	}
}

// Within an hour of a caller's move (a failover), an absent key is not
// voided even when the PSP's search does not know it: the search lags
// charges (up to an hour in an outage), and what a failover loses was
// charged just before the move. After the hour the PSP's answer decides.
func TestAResolveRightAfterAMoveHoldsTheKeyOpen(t *testing.T) {
	w := newWorld(t)
	mover := home.NewMover(w.db, testenv.NewTable(t, w.db, "caller"))
	if _, err := mover.Failover(context.Background(), "us-west-2", "us-east-1", "us-west-2"); err != nil {
		t.Fatal(err)
	}
	w.clock.Set(time.Now())
	w.inRegion(t, "us-east-1", mover.Store())
	r := w.resolveKey("u1", "K1")
	if a := decode(t, r); r.Status != http.StatusConflict || a.Type != problem.TypeInProgress {
		t.Fatalf("resolve right after the move: %d %s; want 409, the key held open", r.Status, r.Body)
	}
	if n := w.countRows(`SELECT count(*) FROM payments`); n != 0 || metrics.Sum(w.logs.Bytes(), "ResolveHeld") != 1 {
		t.Fatalf("%d rows, ResolveHeld %v; want no VOID and one hold", n, metrics.Sum(w.logs.Bytes(), "ResolveHeld"))
	}
	w.clock.Set(time.Now().Add(61 * time.Minute))
	if r := w.resolveKey("u1", "K1"); r.Status != http.StatusOK {
		t.Errorf("resolve an hour after the move, the PSP knowing nothing: %d %s; want 200 VOID", r.Status, r.Body)
	}
}

// A PSP that cannot be asked keeps the key open too: never "nothing ran"
// on a guess.
func TestAResolveAcrossRegionsWithThePSPDownHoldsTheKeyOpen(t *testing.T) {
	w := newWorld(t)
	down, err := psp.New(psp.Config{APIKey: "sk_test_x", BaseURL: "http://127.0.0.1:1",
		HTTPClient: &http.Client{Timeout: time.Second}, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w.psp = down
	w.inRegion(t, "us-east-1", home.NewMover(w.db, testenv.NewTable(t, w.db, "caller")).Store())
	r := w.resolveKey("u1", "K1")
	if r.Status != http.StatusConflict || w.countRows(`SELECT count(*) FROM payments`) != 0 {
		t.Fatalf("resolve with the PSP down: %d %s; want 409 and no VOID", r.Status, r.Body)
	}
}

// Across Regions a first insert is no proof that no call was made under the
// derived key (the failed Region may have charged in its last lag): a PSP
// refusal that comes before the key is looked at (401, a bad or restricted
// API key in the Region that took over) leaves the payment UNKNOWN for the
// resolver, never FAILED with "nothing was charged". One Region answers
// the same refusal 502 FAILED (contract test, "PSP refuses the request").
func TestAcrossRegionsARefusedFirstCallIsNotNothingCharged(t *testing.T) {
	w := newWorld(t)
	w.refuseCharges(http.StatusUnauthorized)
	w.inRegion(t, "us-east-1", home.NewStore(w.db, testenv.NewTable(t, w.db, "caller")))
	r := w.pay("u1", "K1", body3000)
	if r.Status != http.StatusAccepted {
		t.Fatalf("a refused first call across Regions: %d %s; want 202 (outcome unknown)", r.Status, r.Body)
	}
	pid := ids.PaymentID(ids.Scope("u1", "K1"))
	if n := w.countRows(`SELECT count(*) FROM payments WHERE payment_id = $1 AND state = 'UNKNOWN'`, pid); n != 1 {
		t.Errorf("%d UNKNOWN rows; want the payment left UNKNOWN for the resolver", n)
	}
	if n := w.countRows(`SELECT count(*) FROM payments WHERE payment_id = $1 AND state = 'FAILED'`, pid); n != 0 {
		t.Errorf("the payment was settled FAILED")
	}
}

// Across Regions the key record replicates apart from the ledger: a failed
// Region's pointer record (its reply was lost, the row went UNKNOWN) can
// arrive while the row does not. The retry with the same key then runs the
// payment here under the derived ids (the PSP replays the failed Region's
// charge) instead of answering 503 until the key window ends. One Region
// keeps the 503: there a pointer without its row is a damaged ledger.
func TestAPointerWhoseRowWasLostInAFailoverIsRunAgain(t *testing.T) {
	ctx := context.Background()
	pid := ids.PaymentID(ids.Scope("u1", "K1"))
	lostPointer := func(w *world) {
		t.Helper()
		// The failed Region's charge, and its pointer record: no row here.
		if _, err := w.psp.Charge(ctx, lostCharge(t, pid, "u1", "K1")); err != nil {
			t.Fatal(err)
		}
		req, err := payment.Parse([]byte(body3000))
		if err != nil {
			t.Fatal(err)
		}
		now := w.clock.Now()
		if err := w.claims.Claim(ctx, idem.Claim{Scope: ids.Scope("u1", "K1"), Fingerprint: req.Fingerprint(), Owner: "r1-owner", PaymentID: pid,
			Now: now, InProgressUntil: now.Add(w.timing.Deadline), ExpiresAt: now.Add(w.timing.KeyWindow)}); err != nil {
			t.Fatal(err)
		}
		if err := w.claims.Complete(ctx, ids.Scope("u1", "K1"), "r1-owner", nil, now.Add(w.timing.KeyWindow)); err != nil {
			t.Fatal(err)
		}
	}

	w := newWorld(t)
	lostPointer(w)
	w.inRegion(t, "us-east-1", home.NewStore(w.db, testenv.NewTable(t, w.db, "caller")))
	a := expectStatus(t, w.pay("u1", "K1", body3000), http.StatusCreated)
	if a.State != "SUCCEEDED" || len(w.charges()) != 1 || a.PSPCharge != w.charges()[0].ID {
		t.Errorf("the retry: %+v with %d charges; want the PSP's one charge replayed", a, len(w.charges()))
	}
	if n := w.countRows(`SELECT count(*) FROM payments WHERE payment_id = $1 AND state = 'SUCCEEDED'`, pid); n != 1 {
		t.Errorf("%d SUCCEEDED rows; want the row recreated and settled", n)
	}
	if n := metrics.Sum(w.logs.Bytes(), "PointerRowLost"); n != 1 {
		t.Errorf("PointerRowLost = %v, want 1", n)
	}
	// A repeat now replays from the pointer and the row.
	if r := w.pay("u1", "K1", body3000); r.Status != http.StatusCreated || r.Headers.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the repeat: %d %v; want a 201 replay", r.Status, r.Headers)
	}

	one := newWorld(t)
	lostPointer(one)
	if r := one.pay("u1", "K1", body3000); r.Status != http.StatusServiceUnavailable {
		t.Errorf("one Region, a pointer without its row: %d %s; want 503", r.Status, r.Body)
	}
}

// refusingComplete is the claim store with every completion refused as a
// lost owner, while the record stays the request's own: what an MRSC
// write conflict that outlasts Complete's retries looks like.
type refusingComplete struct{ *idem.Store }

func (refusingComplete) Complete(context.Context, string, string, *idem.Answer, time.Time) error {
	return idem.ErrNotOwner
}

// A completion refused while the record is still this request's (an MRSC
// write conflict past its retries) does not turn the request that charged
// into a 409 from its own in-progress record: it answers its charge, and a
// repeat after the lease takes over and replays the ledger row.
func TestACompletionRefusedWhileStillOwnedAnswersTheCharge(t *testing.T) {
	w := newWorld(t)
	w.h = api.New(api.Deps{
		Claims: refusingComplete{w.claims}, Ledger: w.ledger, PSP: w.psp, Publisher: w.outbox, Clock: w.clock, Timing: w.timing,
		Log: slog.New(slog.NewJSONHandler(w.logs, nil)), Metrics: metrics.New(w.logs, "api"), ALB: albsign.Default.Verifier(w.clock.Now),
	})
	a := expectStatus(t, w.pay("u1", "K1", body3000), http.StatusCreated)
	if a.State != "SUCCEEDED" || len(w.charges()) != 1 {
		t.Fatalf("the paying request: %+v with %d charges; want its 201", a, len(w.charges()))
	}
	w.rebuild()
	w.clock.Advance(w.timing.Deadline + w.timing.Margin + time.Second)
	if r := w.pay("u1", "K1", body3000); r.Status != http.StatusCreated || len(w.charges()) != 1 {
		t.Errorf("the repeat after the lease: %d %s with %d charges; want the same 201", r.Status, r.Body, len(w.charges()))
	}
}

// lostCharge is the charge the failed Region's api sent for body3000: the
// same parameters, metadata included, that the api here sends for it, so
// the PSP replays it (a charge with other metadata would be a key reuse).
func lostCharge(t *testing.T, pid, caller, key string) psp.ChargeRequest {
	t.Helper()
	req, err := payment.Parse([]byte(body3000))
	if err != nil {
		t.Fatal(err)
	}
	return psp.ChargeRequest{IdempotencyKey: ids.ChargeKey(pid), PaymentID: pid, MerchantID: "m1", CallerID: caller,
		ClientKey: key, Fingerprint: req.Fingerprint(), Amount: 3000, Currency: "USD", PaymentMethod: "pm_card_visa"}
}
