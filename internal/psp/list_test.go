package psp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
)

// listT0 is the simulator's clock in the list tests: a whole second, so
// every created stamp is known exactly (Advance moves it).
var listT0 = time.Unix(1_900_000_000, 0).UTC()

// newListWorld is the simulator on a frozen clock behind a real server, and
// a client whose traffic goes through the spec check, with pages of two.
func newListWorld(t *testing.T) *simWorld {
	t.Helper()
	w := &simWorld{check: newSpecCheck(t)}
	w.sim = pspsim.New(pspsim.Config{
		Clock:  func() time.Time { return listT0 },
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	srv := httptest.NewServer(w.sim)
	t.Cleanup(func() { srv.Close(); w.sim.Close() })
	w.url = srv.URL
	var err error
	w.client, err = New(Config{APIKey: "sk_test_sim", BaseURL: srv.URL, HTTPClient: w.check.client(),
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w.client.listPage = 2
	return w
}

// gets counts the GETs of path the spec check saw.
func (w *simWorld) gets(path string) int {
	w.check.mu.Lock()
	defer w.check.mu.Unlock()
	n := 0
	for _, s := range w.check.seen {
		if strings.HasPrefix(s, "GET "+path+" ") {
			n++
		}
	}
	return n
}

func (w *simWorld) charge(t *testing.T, req ChargeRequest) Result {
	t.Helper()
	if req.IdempotencyKey == "" {
		req.IdempotencyKey = req.PaymentID + ":charge"
	}
	if req.Amount == 0 {
		req.Amount, req.Currency = 3000, "usd"
	}
	if req.PaymentMethod == "" {
		req.PaymentMethod = "pm_card_visa"
	}
	res, err := w.client.Charge(context.Background(), req)
	if err != nil || res.PaymentIntentID == "" {
		t.Fatalf("Charge %s: %+v, %v", req.PaymentID, res, err)
	}
	return res
}

func listIntents(t *testing.T, w *simWorld, from, to time.Time) []Listed {
	t.Helper()
	var got []Listed
	if err := w.client.ListPaymentIntents(context.Background(), from, to, func(l Listed) error {
		got = append(got, l)
		return nil
	}); err != nil {
		t.Fatalf("ListPaymentIntents [%s, %s): %v", from, to, err)
	}
	return got
}

func intentIDs(ls []Listed) []string {
	var ids []string
	for _, l := range ls {
		ids = append(ids, l.PaymentIntentID)
	}
	return ids
}

// Every PaymentIntent created in [from, to) is listed exactly once, newest
// first, across pages: from's second is in, to's is out. Each carries what
// reconciliation joins on, the charge's new metadata (a 255-character
// client key among it) included, and the outcome the charge was answered.
func TestListPaymentIntentsReadsTheSpanOnceAcrossPages(t *testing.T) {
	w := newListWorld(t)
	defer w.check.report(t, 14)
	t1, t2, t3 := listT0.Add(time.Second), listT0.Add(2*time.Second), listT0.Add(3*time.Second)

	before := w.charge(t, ChargeRequest{PaymentID: "pay_l0"})
	w.sim.Advance(time.Second)
	clientKey := strings.Repeat("k", 255)
	full := ChargeRequest{PaymentID: "pay_l1", MerchantID: "m1", CallerID: "caller-sub-1", ClientKey: clientKey,
		Fingerprint: strings.Repeat("f", 64), Amount: 4250, Currency: "EUR"}
	paid := w.charge(t, full)
	declined := w.charge(t, ChargeRequest{PaymentID: "pay_l2", PaymentMethod: "pm_card_chargeDeclinedInsufficientFunds"})
	pending := w.charge(t, ChargeRequest{PaymentID: "pay_l3", PaymentMethod: "pm_usBankAccount_success"})
	w.sim.Advance(time.Second)
	threeDS := w.charge(t, ChargeRequest{PaymentID: "pay_l4", PaymentMethod: "pm_card_threeDSecure2Required"})
	last := w.charge(t, ChargeRequest{PaymentID: "pay_l5"})
	w.sim.Advance(time.Second)
	after := w.charge(t, ChargeRequest{PaymentID: "pay_l6"})
	inSpan := []Result{last, threeDS, pending, declined, paid} // newest first

	pagesBefore := w.gets("/v1/payment_intents")
	got := listIntents(t, w, t1, t3)
	var want []string
	for _, r := range inSpan {
		want = append(want, r.PaymentIntentID)
	}
	if !slices.Equal(intentIDs(got), want) {
		t.Fatalf("[t1, t3) listed %v, want %v", intentIDs(got), want)
	}
	if n := w.gets("/v1/payment_intents") - pagesBefore; n != 3 {
		t.Errorf("%d pages read for 5 PaymentIntents in pages of 2, want 3", n)
	}
	for i, l := range got {
		r := inSpan[i]
		if l.Outcome != r.Outcome || l.ChargeID != r.ChargeID || l.DeclineCode != r.DeclineCode {
			t.Errorf("%s listed %v %q %q, charged %v %q %q", l.PaymentIntentID, l.Outcome, l.ChargeID, l.DeclineCode, r.Outcome, r.ChargeID, r.DeclineCode)
		}
	}
	if got[0].Created != t2 || got[4].Created != t1 {
		t.Errorf("created %s and %s, want %s and %s", got[0].Created, got[4].Created, t2, t1)
	}
	l := got[4]
	wantMeta := map[string]string{MetaPaymentID: "pay_l1", MetaMerchantID: "m1", MetaCallerID: "caller-sub-1",
		MetaClientKey: clientKey, MetaFingerprint: strings.Repeat("f", 64)}
	if l.Outcome != Succeeded || l.ChargeID == "" || l.Amount != 4250 || l.Currency != "EUR" || l.PaymentMethod != "pm_card_visa" ||
		!maps.Equal(l.Metadata, wantMeta) {
		t.Errorf("the full charge listed as %+v", l)
	}
	if got[3].Outcome != Declined || got[3].DeclineCode != "insufficient_funds" || got[2].Outcome != Pending ||
		got[1].Outcome != Declined || got[1].DeclineCode != "authentication_required" {
		t.Errorf("listed %+v", got)
	}

	all := listIntents(t, w, listT0, t3.Add(time.Second))
	if len(all) != 7 || all[0].PaymentIntentID != after.PaymentIntentID || all[6].PaymentIntentID != before.PaymentIntentID {
		t.Errorf("the whole span listed %v", intentIDs(all))
	}
	if one := listIntents(t, w, t3, t3.Add(time.Second)); len(one) != 1 || one[0].PaymentIntentID != after.PaymentIntentID {
		t.Errorf("[t3, t3+1s) listed %v", intentIDs(one))
	}
	sent := w.gets("/v1/payment_intents")
	if none := listIntents(t, w, t1, t1); len(none) != 0 || w.gets("/v1/payment_intents") != sent {
		t.Errorf("an empty span listed %v or was sent", intentIDs(none))
	}
}

// A page that fails after earlier pages were read fails the whole list:
// the span was not read whole, and the error says why (a 5xx, a dropped
// connection), never a short list passed off as complete.
func TestListFailsWholeWhenALaterPageFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault pspsim.Fault
		is500 bool
	}{
		{"5xx", pspsim.Fault{Match: pspsim.Match{PathPrefix: "/v1/payment_intents"}, Kind: pspsim.FaultError5xx}, true},
		// Twice: net/http resends an idempotent GET once by itself when a
		// reused connection closes before any reply byte.
		{"dropped", pspsim.Fault{Match: pspsim.Match{PathPrefix: "/v1/payment_intents"}, Kind: pspsim.FaultDropBefore, Times: 2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newListWorld(t)
			for i := range 5 {
				w.charge(t, ChargeRequest{PaymentID: fmt.Sprintf("pay_f%d", i)})
			}
			seen := 0
			err := w.client.ListPaymentIntents(context.Background(), listT0, listT0.Add(time.Second), func(Listed) error {
				seen++
				if seen == 1 { // the first page is in: the next one fails
					if err := w.sim.AddFault(tc.fault); err != nil {
						t.Fatal(err)
					}
				}
				return nil
			})
			var apiErr *APIError
			if err == nil || errors.Is(err, ErrInvalidRequest) || errors.As(err, &apiErr) != tc.is500 || (tc.is500 && apiErr.HTTPStatus != 500) {
				t.Fatalf("a failed second page: %v (after %d listed), want the list failed by it", err, seen)
			}
			if seen != 2 || !strings.Contains(err.Error(), "page 2") {
				t.Fatalf("%d listed before %v, want the first page's 2", seen, err)
			}
		})
	}
	t.Run("refunds", func(t *testing.T) {
		w := newListWorld(t)
		for i := range 3 {
			paid := w.charge(t, ChargeRequest{PaymentID: fmt.Sprintf("pay_rf%d", i)})
			if _, err := w.client.Refund(context.Background(), RefundRequest{IdempotencyKey: fmt.Sprintf("rf%d", i), ChargeID: paid.ChargeID}); err != nil {
				t.Fatal(err)
			}
		}
		seen := 0
		err := w.client.ListRefunds(context.Background(), listT0, listT0.Add(time.Second), func(ListedRefund) error {
			if seen++; seen == 1 {
				if err := w.sim.AddFault(pspsim.Fault{Match: pspsim.Match{PathPrefix: "/v1/refunds"}, Kind: pspsim.FaultError5xx}); err != nil {
					t.Fatal(err)
				}
			}
			return nil
		})
		var apiErr *APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatus != 500 || seen != 2 {
			t.Fatalf("a 500 on the second page of refunds: %v after %d listed", err, seen)
		}
	})
}

// An error from each stops the list where it is: no later page is read.
func TestListStopsWhereEachFails(t *testing.T) {
	w := newListWorld(t)
	for i := range 6 {
		w.charge(t, ChargeRequest{PaymentID: fmt.Sprintf("pay_s%d", i)})
	}
	stop := errors.New("ledger unavailable")
	seen := 0
	err := w.client.ListPaymentIntents(context.Background(), listT0, listT0.Add(time.Second), func(Listed) error {
		if seen++; seen == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || seen != 3 {
		t.Fatalf("each failing at the third: %v after %d", err, seen)
	}
	if n := w.gets("/v1/payment_intents"); n != 2 {
		t.Errorf("%d pages read, want 2 (the third item is on the second)", n)
	}
}

// A span the created filter cannot say exactly is refused before anything
// is sent.
func TestListRefusesASpanNotInWholeSeconds(t *testing.T) {
	w := newListWorld(t)
	nop := func(Listed) error { return nil }
	for name, span := range map[string][2]time.Time{
		"from with nanoseconds": {listT0.Add(time.Millisecond), listT0.Add(time.Hour)},
		"to with nanoseconds":   {listT0, listT0.Add(time.Hour - time.Nanosecond)},
		"to before from":        {listT0.Add(time.Hour), listT0},
		"no from":               {{}, listT0},
	} {
		if err := w.client.ListPaymentIntents(context.Background(), span[0], span[1], nop); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", name, err)
		}
		if err := w.client.ListRefunds(context.Background(), span[0], span[1], func(ListedRefund) error { return nil }); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("refunds, %s: %v, want ErrInvalidRequest", name, err)
		}
	}
	if n := len(w.check.seen); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

// Refunds are listed over the span the same way, each with its outcome as
// it stands: succeeded, pending, failed (Declined).
func TestListRefundsReadsTheSpanOnce(t *testing.T) {
	w := newListWorld(t)
	defer w.check.report(t, 10)
	ctx := context.Background()
	var charges []Result
	for i := range 4 {
		charges = append(charges, w.charge(t, ChargeRequest{PaymentID: fmt.Sprintf("pay_r%d", i), Amount: 5000, Currency: "gbp"}))
	}
	refund := func(i int, kind pspsim.FaultKind, delay time.Duration) Result {
		t.Helper()
		key := fmt.Sprintf("pay_r%d:cancel:refund", i)
		if kind != "" {
			if err := w.sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: key}, Kind: kind, DelayMS: delay.Milliseconds()}); err != nil {
				t.Fatal(err)
			}
		}
		res, err := w.client.Refund(ctx, RefundRequest{IdempotencyKey: key, ChargeID: charges[i].ChargeID, Amount: 1000 + int64(i), PaymentID: fmt.Sprintf("pay_r%d", i)})
		if err != nil || res.RefundID == "" {
			t.Fatalf("Refund %d: %+v, %v", i, res, err)
		}
		return res
	}
	t1, t3 := listT0.Add(time.Second), listT0.Add(3*time.Second)
	refund(0, "", 0)
	w.sim.Advance(time.Second)
	succeeded := refund(1, "", 0)
	pending := refund(2, pspsim.FaultRefundPending, time.Hour)
	w.sim.Advance(time.Second)
	failed := refund(3, pspsim.FaultRefundFail, 0) // settles failed by the next request
	w.sim.Advance(time.Second)
	if _, err := w.client.Refund(ctx, RefundRequest{IdempotencyKey: "late", ChargeID: charges[0].ChargeID, Amount: 100}); err != nil {
		t.Fatal(err)
	}

	var got []ListedRefund
	if err := w.client.ListRefunds(ctx, t1, t3, func(l ListedRefund) error { got = append(got, l); return nil }); err != nil {
		t.Fatalf("ListRefunds: %v", err)
	}
	want := []struct {
		res     Result
		outcome Outcome
		i       int
	}{{failed, Declined, 3}, {pending, Pending, 2}, {succeeded, Succeeded, 1}}
	if len(got) != len(want) {
		t.Fatalf("listed %+v, want 3 refunds", got)
	}
	for k, wt := range want {
		l := got[k]
		if l.RefundID != wt.res.RefundID || l.Outcome != wt.outcome || l.ChargeID != charges[wt.i].ChargeID ||
			l.PaymentIntentID != charges[wt.i].PaymentIntentID || l.Amount != 1000+int64(wt.i) || l.Currency != "GBP" ||
			l.Metadata[MetaPaymentID] != fmt.Sprintf("pay_r%d", wt.i) {
			t.Errorf("refund %d listed %+v, want %s %v", k, l, wt.res.RefundID, wt.outcome)
		}
	}
	if got[0].Created != listT0.Add(2*time.Second) || got[2].Created != t1 {
		t.Errorf("created %s, %s", got[0].Created, got[2].Created)
	}
	if n := w.gets("/v1/refunds"); n != 2 {
		t.Errorf("%d pages for 3 refunds in pages of 2, want 2", n)
	}
}

// A key rolled between pages: the 401 on the second page is met by the key
// read afresh, and the list goes on whole.
func TestListGoesOnWithAKeyRolledBetweenPages(t *testing.T) {
	w := newListWorld(t)
	c, err := New(Config{
		Key:        func(context.Context) (string, error) { return "sk_test_old", nil },
		KeyRefresh: func(context.Context) (string, error) { return "sk_test_new", nil },
		BaseURL:    w.url, HTTPClient: w.check.client(), Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	c.listPage = 2
	for i := range 5 {
		w.charge(t, ChargeRequest{PaymentID: fmt.Sprintf("pay_k%d", i)})
	}
	seen := 0
	err = c.ListPaymentIntents(context.Background(), listT0, listT0.Add(time.Second), func(Listed) error {
		if seen++; seen == 1 {
			if err := w.sim.AddFault(pspsim.Fault{Kind: pspsim.FaultUnauthorized}); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	})
	if err != nil || seen != 5 {
		t.Fatalf("a 401 on page 2 with a rolled key: %v after %d", err, seen)
	}
}

// What the PSP answers must be the span: a listed object outside it (the
// filter not applied) and has_more on an empty page (no cursor) fail the
// list rather than pass off something else as the span.
func TestListRefusesAnAnswerThatIsNotTheSpan(t *testing.T) {
	for name, body := range map[string]string{
		"outside the span": `{"object":"list","url":"/v1/payment_intents","has_more":false,"data":[{"id":"pi_old","object":"payment_intent","status":"succeeded","created":1000}]}`,
		"no cursor":        `{"object":"list","url":"/v1/payment_intents","has_more":true,"data":[]}`,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			rw.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(rw, body)
		}))
		c, err := New(Config{APIKey: "sk_test_unit", BaseURL: srv.URL, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		err = c.ListPaymentIntents(context.Background(), listT0, listT0.Add(time.Hour), func(Listed) error { seen++; return nil })
		if err == nil || seen != 0 {
			t.Errorf("%s: %v after %d listed, want the list failed", name, err, seen)
		}
		srv.Close()
	}
}

// stripe-mock (Stripe's own, which validates requests against the spec)
// takes the list calls as sent, and its answers decode: the shape, not the
// semantics (its fixtures ignore the filter; the span is wide to hold them).
func TestContractStripeMockLists(t *testing.T) {
	baseURL := startStripeMock(t)
	check := newSpecCheck(t)
	c, err := New(Config{APIKey: "sk_test_contract", BaseURL: baseURL, HTTPClient: check.client(),
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer check.report(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	from, to := time.Unix(0, 0), time.Unix(4_000_000_000, 0)
	intents, refunds := 0, 0
	if err := c.ListPaymentIntents(ctx, from, to, func(l Listed) error {
		if l.PaymentIntentID == "" {
			t.Errorf("listed %+v", l)
		}
		intents++
		return nil
	}); err != nil {
		t.Fatalf("ListPaymentIntents: stripe-mock refused it: %v", err)
	}
	if err := c.ListRefunds(ctx, from, to, func(l ListedRefund) error {
		if l.RefundID == "" {
			t.Errorf("listed %+v", l)
		}
		refunds++
		return nil
	}); err != nil {
		t.Fatalf("ListRefunds: stripe-mock refused it: %v", err)
	}
	if intents == 0 || refunds == 0 {
		t.Errorf("stripe-mock listed %d PaymentIntents and %d refunds, want its fixtures", intents, refunds)
	}
}
