package pspsim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/psp"
)

// listed is one element of a list reply, as these tests read it.
type listed struct {
	ID      string `json:"id"`
	Created int64  `json:"created"`
	Status  string `json:"status"`
}

// listPage GETs one page of a Stripe list and checks its shape.
func listPage(t *testing.T, e *env, path string) (ids []string, items []json.RawMessage, hasMore bool) {
	t.Helper()
	status, body := stripeGet(t, e, path)
	var page struct {
		Object  string            `json:"object"`
		URL     string            `json:"url"`
		HasMore bool              `json:"has_more"`
		Data    []json.RawMessage `json:"data"`
	}
	base, _, _ := strings.Cut(path, "?")
	if err := json.Unmarshal([]byte(body), &page); err != nil || status != http.StatusOK || page.Object != "list" || page.URL != base {
		t.Fatalf("GET %s: %d %s (%v), want 200 and a list", path, status, body, err)
	}
	for _, raw := range page.Data {
		var it listed
		if err := json.Unmarshal(raw, &it); err != nil || it.ID == "" {
			t.Fatalf("GET %s listed %s (%v)", path, raw, err)
		}
		ids = append(ids, it.ID)
	}
	return ids, page.Data, page.HasMore
}

// listAll follows starting_after from the first page to the last, and
// returns every id in order and each page's size.
func listAll(t *testing.T, e *env, path string) (ids []string, sizes []int) {
	t.Helper()
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	next := path
	for range 100 {
		page, _, more := listPage(t, e, next)
		ids = append(ids, page...)
		sizes = append(sizes, len(page))
		if !more {
			return ids, sizes
		}
		if len(page) == 0 {
			t.Fatalf("GET %s: has_more with an empty page", next)
		}
		next = path + sep + "starting_after=" + page[len(page)-1]
	}
	t.Fatalf("GET %s: more than 100 pages", path)
	return nil, nil
}

// atWholeSecond moves the simulator's clock to the start of the next
// second, so created stamps are known exactly.
func atWholeSecond(e *env) time.Time {
	now := e.sim.Now()
	next := now.Truncate(time.Second).Add(time.Second)
	e.clock.Advance(next.Sub(now))
	return next
}

func intentID(t *testing.T, e *env, req psp.ChargeRequest) string {
	t.Helper()
	res := mustCharge(t, e, req)
	if res.PaymentIntentID == "" {
		t.Fatalf("charge %s: %+v, no PaymentIntent", req.PaymentID, res)
	}
	return res.PaymentIntentID
}

// GET /v1/payment_intents pages newest first: following starting_after
// from page to page visits every PaymentIntent exactly once, whatever its
// status, two made in the same second included; the default page is 10.
func TestPaymentIntentListPagesNewestFirstVisitingEachOnce(t *testing.T) {
	e := setup(t)
	atWholeSecond(e)
	var made []string
	for i := range 12 {
		req := chargeReq(fmt.Sprintf("pay_pg%d", i))
		switch i % 4 {
		case 1:
			req.PaymentMethod = "pm_card_chargeDeclined"
		case 2:
			req.PaymentMethod = "pm_usBankAccount_success"
		}
		made = append(made, intentID(t, e, req))
		if i != 5 { // 5 and 6 share a second
			e.clock.Advance(time.Second)
		}
	}
	newestFirst := slices.Clone(made)
	slices.Reverse(newestFirst)

	got, sizes := listAll(t, e, "/v1/payment_intents?limit=5")
	if !slices.Equal(got, newestFirst) || !slices.Equal(sizes, []int{5, 5, 2}) {
		t.Fatalf("pages of 5: %v (sizes %v), want %v", got, sizes, newestFirst)
	}
	first, _, more := listPage(t, e, "/v1/payment_intents")
	if len(first) != 10 || !more || !slices.Equal(first, newestFirst[:10]) {
		t.Fatalf("default page: %v (has_more %v), want the newest 10", first, more)
	}
	all, _, more := listPage(t, e, "/v1/payment_intents?limit=100")
	if !slices.Equal(all, newestFirst) || more {
		t.Fatalf("limit 100: %v (has_more %v), want all 12", all, more)
	}
}

// The created filter bounds both ends as Stripe's does: gte and lte
// include their second, gt and lt exclude it, a bare created is equality,
// and paging within a filter (or from a cursor outside it) keeps to it.
func TestPaymentIntentListCreatedFilterBoundsBothEnds(t *testing.T) {
	e := setup(t)
	t0 := atWholeSecond(e).Unix()
	a := intentID(t, e, chargeReq("pay_ca"))
	e.clock.Advance(time.Second)
	b := intentID(t, e, chargeReq("pay_cb"))
	c := intentID(t, e, chargeReq("pay_cc"))
	e.clock.Advance(time.Second)
	d := intentID(t, e, chargeReq("pay_cd"))
	e.clock.Advance(time.Second)
	x := intentID(t, e, chargeReq("pay_ce"))
	t1, t3 := t0+1, t0+3

	for _, tc := range []struct {
		query string
		want  []string
	}{
		{fmt.Sprintf("created[gte]=%d&created[lt]=%d", t1, t3), []string{d, c, b}},
		{fmt.Sprintf("created[gt]=%d&created[lte]=%d", t1, t3), []string{x, d}},
		{fmt.Sprintf("created=%d", t1), []string{c, b}},
		{fmt.Sprintf("created[lt]=%d", t1), []string{a}},
		{fmt.Sprintf("created[gte]=%d", t3+1), nil},
		{fmt.Sprintf("created[gte]=%d&created[lt]=%d&limit=1", t1, t3), []string{d, c, b}},
	} {
		got, _ := listAll(t, e, "/v1/payment_intents?"+tc.query)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.query, got, tc.want)
		}
	}
	for after, want := range map[string][]string{x: {d, c, b}, c: {b}} {
		q := fmt.Sprintf("/v1/payment_intents?created[gte]=%d&created[lt]=%d&starting_after=%s", t1, t3, after)
		if got, _, more := listPage(t, e, q); !slices.Equal(got, want) || more {
			t.Errorf("%s: %v (has_more %v), want %v", q, got, more, want)
		}
	}
	_, items, _ := listPage(t, e, fmt.Sprintf("/v1/payment_intents?created=%d", t3))
	var it listed
	if len(items) != 1 || json.Unmarshal(items[0], &it) != nil || it.Created != t3 {
		t.Fatalf("created=%d listed %s", t3, items)
	}
}

// Each listed PaymentIntent is what a retrieve would answer now: a bank
// debit due to settle is settled (and charged) by being listed.
func TestPaymentIntentListShowsEachAsARetrieveWould(t *testing.T) {
	e := setup(t)
	req := chargeReq("pay_ld")
	req.PaymentMethod = "pm_usBankAccount_success"
	id := intentID(t, e, req)
	declined := chargeReq("pay_lx")
	declined.PaymentMethod = "pm_card_chargeDeclined"
	intentID(t, e, declined)
	e.clock.Advance(4 * 24 * time.Hour)
	wantCharges(t, e, 0)

	_, items, _ := listPage(t, e, "/v1/payment_intents")
	if len(items) != 2 {
		t.Fatalf("listed %d, want 2", len(items))
	}
	var it listed
	if err := json.Unmarshal(items[1], &it); err != nil || it.ID != id || it.Status != "succeeded" {
		t.Fatalf("the bank debit listed as %s, want it settled", items[1])
	}
	if ch := wantCharges(t, e, 1); ch[0].PaymentIntent != id {
		t.Fatalf("charge %+v", ch[0])
	}
	for _, raw := range items {
		var fromList, fromGet map[string]any
		var one listed
		_ = json.Unmarshal(raw, &one)
		status, body := stripeGet(t, e, "/v1/payment_intents/"+one.ID)
		if err := json.Unmarshal(raw, &fromList); err != nil || status != http.StatusOK || json.Unmarshal([]byte(body), &fromGet) != nil {
			t.Fatalf("GET %s: %d %s", one.ID, status, body)
		}
		if !reflect.DeepEqual(fromList, fromGet) {
			t.Errorf("listed %s\nretrieved %s", raw, body)
		}
	}
	wantCharges(t, e, 1) // settled once
}

// What Stripe refuses on its list endpoints is refused the same way: 400
// invalid_request_error naming the parameter. A payment_method on the list
// is an unknown parameter, not a confirm's single-use check (the list
// shares the create's path).
func TestListsRefuseWhatStripeRefuses(t *testing.T) {
	e := setup(t)
	if err := e.sim.AddPaymentMethod("pm_1Listed"); err != nil {
		t.Fatal(err)
	}
	used := chargeReq("pay_lr")
	used.PaymentMethod = "pm_1Listed"
	intentID(t, e, used)
	for _, tc := range []struct{ path, code, param string }{
		{"/v1/payment_intents?starting_after=pi_t_missing", "resource_missing", "starting_after"},
		{"/v1/payment_intents?created[gte]=abc", "parameter_invalid_integer", "created[gte]"},
		{"/v1/payment_intents?created[lt]=1.5", "parameter_invalid_integer", "created[lt]"},
		{"/v1/payment_intents?created[gte]=", "parameter_invalid_integer", "created[gte]"},
		{"/v1/payment_intents?created=yesterday", "parameter_invalid_integer", "created"},
		{"/v1/payment_intents?created[lt]=1&created[gte]=x", "parameter_invalid_integer", "created[gte]"},
		{"/v1/payment_intents?created[between]=1", "parameter_unknown", "created[between]"},
		{"/v1/payment_intents?created=1&created[gte]=1", "", "created"},
		{"/v1/payment_intents?limit=0", "parameter_invalid_integer", "limit"},
		{"/v1/payment_intents?limit=101", "parameter_invalid_integer", "limit"},
		{"/v1/payment_intents?ending_before=pi_x", "", "ending_before"},
		{"/v1/payment_intents?payment_method=pm_1Listed", "parameter_unknown", "payment_method"},
		{"/v1/refunds?starting_after=re_t_missing", "resource_missing", "starting_after"},
		{"/v1/refunds?created[gte]=abc", "parameter_invalid_integer", "created[gte]"},
		{"/v1/refunds?created[lte]=1e9", "parameter_invalid_integer", "created[lte]"},
		{"/v1/refunds?created[from]=1", "parameter_unknown", "created[from]"},
	} {
		status, body := stripeGet(t, e, tc.path)
		var got struct {
			Error struct{ Type, Code, Param, Message string }
		}
		if err := json.Unmarshal([]byte(body), &got); err != nil || status != http.StatusBadRequest ||
			got.Error.Type != "invalid_request_error" || got.Error.Code != tc.code || got.Error.Param != tc.param || got.Error.Message == "" {
			t.Errorf("GET %s: %d %s, want 400 invalid_request_error %q naming %q", tc.path, status, body, tc.code, tc.param)
		}
	}
	if n := e.sim.Stats().PaymentMethodReused; n != 0 {
		t.Errorf("a list counted %d single-use refusals", n)
	}
}

// GET /v1/refunds takes the same created filter, with the charge= and
// payment_intent= filters.
func TestRefundListCreatedFilterBoundsBothEnds(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	t0 := atWholeSecond(e).Unix()
	paid := mustCharge(t, e, chargeReq("pay_rl"))
	other := mustCharge(t, e, chargeReq("pay_ro"))
	refund := func(key, chargeID string) string {
		t.Helper()
		res, err := e.psp.Refund(ctx, psp.RefundRequest{IdempotencyKey: key, ChargeID: chargeID, Amount: 500})
		if err != nil || res.RefundID == "" {
			t.Fatalf("refund %s: %+v, %v", key, res, err)
		}
		return res.RefundID
	}
	e.clock.Advance(time.Second)
	r1 := refund("r1", paid.ChargeID)
	o1 := refund("o1", other.ChargeID)
	e.clock.Advance(time.Second)
	r2 := refund("r2", paid.ChargeID)
	e.clock.Advance(time.Second)
	r3 := refund("r3", paid.ChargeID)

	for _, tc := range []struct {
		query string
		want  []string
	}{
		{fmt.Sprintf("created[gte]=%d&created[lt]=%d", t0+1, t0+3), []string{r2, o1, r1}},
		{fmt.Sprintf("created[gte]=%d&created[lt]=%d&limit=1", t0+1, t0+3), []string{r2, o1, r1}},
		{fmt.Sprintf("created[gt]=%d&created[lte]=%d", t0+1, t0+3), []string{r3, r2}},
		{fmt.Sprintf("created=%d", t0+1), []string{o1, r1}},
		{fmt.Sprintf("charge=%s&created[gte]=%d&created[lt]=%d", paid.ChargeID, t0+1, t0+3), []string{r2, r1}},
		{fmt.Sprintf("payment_intent=%s&created[lt]=%d", paid.PaymentIntentID, t0+2), []string{r1}},
		{fmt.Sprintf("created[lt]=%d", t0+1), nil},
	} {
		got, _ := listAll(t, e, "/v1/refunds?"+tc.query)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.query, got, tc.want)
		}
	}
}
