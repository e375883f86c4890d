package psp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/psp"
)

func newClient(t *testing.T, baseURL string) *psp.Client {
	t.Helper()
	c, err := psp.New(psp.Config{
		APIKey:  "sk_test_unit",
		BaseURL: baseURL,
		Logger:  slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("psp.New: %v", err)
	}
	return c
}

var charge = psp.ChargeRequest{
	IdempotencyKey: "pay_7:charge",
	PaymentID:      "pay_7",
	MerchantID:     "m1",
	Amount:         3000,
	Currency:       "USD",
	PaymentMethod:  "pm_card_visa",
}

const (
	piSucceeded  = `{"id":"pi_1","object":"payment_intent","amount":3000,"currency":"usd","status":"succeeded","latest_charge":"ch_1","metadata":{"payment_id":"pay_7"}}`
	piProcessing = `{"id":"pi_1","object":"payment_intent","amount":3000,"currency":"usd","status":"processing","latest_charge":null,"metadata":{"payment_id":"pay_7"}}`
	piDeclined   = `{"id":"pi_0","object":"payment_intent","amount":3000,"currency":"usd","status":"requires_payment_method","latest_charge":"ch_0","last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"insufficient_funds"},"metadata":{"payment_id":"pay_7"}}`
)

// answer returns a handler that writes a fixed reply.
func answer(status int, body string, headers ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// hang holds the reply until the client gives up. (The server notices a
// closed connection only once the body has been read.)
func hang(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	select {
	case <-r.Context().Done():
	case <-time.After(10 * time.Second):
	}
}

func stripeError(typ, code, msg string) string {
	return fmt.Sprintf(`{"error":{"type":%q,"code":%q,"message":%q}}`, typ, code, msg)
}

// TestChargeClassification checks the rule of docs/mechanism.md#seed-part-1
// on every kind of answer: only a definite answer is definite; everything
// else is Unknown. It also checks that stripe-go never retries on its own
// (one request per call, even for the answers it would retry by default).
func TestChargeClassification(t *testing.T) {
	declineBody := `{"error":{"type":"card_error","code":"card_declined","decline_code":"generic_decline","message":"Your card was declined.","charge":"ch_9","payment_intent":{"id":"pi_9","object":"payment_intent","status":"requires_payment_method","latest_charge":"ch_9"}}}`
	cases := []struct {
		name        string
		handler     http.HandlerFunc
		timeout     time.Duration
		want        psp.Outcome
		wantErr     error
		wantStatus  int
		wantReplay  bool
		wantPI      string
		wantCharge  string
		wantDecline string
	}{
		{name: "timeout is unknown", handler: hang,
			timeout: 100 * time.Millisecond, want: psp.Unknown},
		{name: "connection dropped is unknown", handler: func(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) },
			want: psp.Unknown},
		{name: "500 is unknown", handler: answer(500, stripeError("api_error", "", "boom")), want: psp.Unknown, wantStatus: 500},
		{name: "replayed 500 is unknown and marked", handler: answer(500, stripeError("api_error", "", "boom"), "Idempotent-Replayed", "true"),
			want: psp.Unknown, wantStatus: 500, wantReplay: true},
		{name: "502 html is unknown", handler: answer(502, "<html>bad gateway</html>"), want: psp.Unknown},
		{name: "429 is unknown", handler: answer(429, stripeError("invalid_request_error", "rate_limit", "slow down")), want: psp.Unknown, wantStatus: 429},
		{name: "409 in flight is unknown", handler: answer(409, stripeError("idempotency_error", "idempotency_key_in_use", "in progress")),
			want: psp.Unknown, wantStatus: 409},
		{name: "402 is declined", handler: answer(402, declineBody), want: psp.Declined, wantStatus: 402,
			wantPI: "pi_9", wantCharge: "ch_9", wantDecline: "generic_decline"},
		{name: "400 idempotency_error is key reuse", handler: answer(400, stripeError("idempotency_error", "", "Keys for idempotent requests can only be used with the same parameters")),
			wantErr: psp.ErrKeyReuse, wantStatus: 400},
		{name: "400 invalid request", handler: answer(400, stripeError("invalid_request_error", "parameter_missing", "Missing required param: amount.")),
			wantErr: psp.ErrInvalidRequest, wantStatus: 400},
		{name: "401 bad key is invalid request", handler: answer(401, stripeError("invalid_request_error", "", "Invalid API Key")),
			wantErr: psp.ErrInvalidRequest, wantStatus: 401},
		{name: "200 succeeded", handler: answer(200, piSucceeded), want: psp.Succeeded, wantStatus: 200, wantPI: "pi_1", wantCharge: "ch_1"},
		{name: "200 replayed", handler: answer(200, piSucceeded, "Idempotent-Replayed", "true"), want: psp.Succeeded, wantStatus: 200,
			wantReplay: true, wantPI: "pi_1", wantCharge: "ch_1"},
		{name: "200 processing is pending", handler: answer(200, piProcessing), want: psp.Pending, wantStatus: 200, wantPI: "pi_1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				tc.handler(w, r)
			}))
			defer srv.Close()
			ctx := context.Background()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}

			res, err := newClient(t, srv.URL).Charge(ctx, charge)

			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("err = %v, want a classified result", err)
			} else if res.Outcome != tc.want {
				t.Fatalf("outcome = %v, want %v (cause %v)", res.Outcome, tc.want, res.Cause)
			}
			if tc.want == psp.Unknown && tc.wantErr == nil && res.Cause == nil {
				t.Error("an unknown outcome must say why (Cause)")
			}
			if tc.timeout > 0 && !errors.Is(res.Cause, context.DeadlineExceeded) {
				t.Errorf("cause = %v, want context.DeadlineExceeded", res.Cause)
			}
			if res.HTTPStatus != tc.wantStatus || res.Replayed != tc.wantReplay {
				t.Errorf("status, replayed = %d, %v; want %d, %v", res.HTTPStatus, res.Replayed, tc.wantStatus, tc.wantReplay)
			}
			if res.PaymentIntentID != tc.wantPI || res.ChargeID != tc.wantCharge || res.DeclineCode != tc.wantDecline {
				t.Errorf("pi, charge, decline = %q, %q, %q; want %q, %q, %q",
					res.PaymentIntentID, res.ChargeID, res.DeclineCode, tc.wantPI, tc.wantCharge, tc.wantDecline)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("the PSP saw %d requests, want 1: nothing may retry behind the resolver's back", n)
			}
		})
	}
}

// TestChargeRequestShape checks what goes on the wire: our key, confirm in
// one call, our ids in metadata, and nothing else (no personal data).
func TestChargeRequestShape(t *testing.T) {
	var got url.Values
	var header http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/payment_intents" {
			t.Errorf("request %s %s, want POST /v1/payment_intents", r.Method, r.URL.Path)
		}
		if err := r.ParseForm(); err != nil {
			t.Errorf("parse form: %v", err)
		}
		got, header = r.PostForm, r.Header
		answer(200, piSucceeded)(w, r)
	}))
	defer srv.Close()

	if _, err := newClient(t, srv.URL).Charge(context.Background(), charge); err != nil {
		t.Fatalf("Charge: %v", err)
	}
	if k := header.Get("Idempotency-Key"); k != "pay_7:charge" {
		t.Errorf("Idempotency-Key = %q, want pay_7:charge", k)
	}
	if a := header.Get("Authorization"); a != "Bearer sk_test_unit" {
		t.Errorf("Authorization = %q", a)
	}
	want := map[string]string{
		"amount":                             "3000",
		"currency":                           "usd",
		"confirm":                            "true",
		"error_on_requires_action":           "true",
		"payment_method":                     "pm_card_visa",
		"automatic_payment_methods[enabled]": "true",
		"automatic_payment_methods[allow_redirects]": "never",
		"metadata[payment_id]":                       "pay_7",
		"metadata[merchant_id]":                      "m1",
	}
	var names []string
	for k := range got {
		names = append(names, k)
	}
	sort.Strings(names)
	if len(got) != len(want) {
		t.Errorf("form fields = %v, want exactly %d fields", names, len(want))
	}
	for k, v := range want {
		if got.Get(k) != v {
			t.Errorf("form %s = %q, want %q", k, got.Get(k), v)
		}
	}
}

// TestChargeRefusesBadRequestsLocally: without a key stripe-go would invent
// a random one, making the charge impossible to replay; such a request must
// never leave the process.
func TestChargeRefusesBadRequestsLocally(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	defer srv.Close()
	c := newClient(t, srv.URL)
	for name, mutate := range map[string]func(*psp.ChargeRequest){
		"no key":            func(r *psp.ChargeRequest) { r.IdempotencyKey = "" },
		"no payment id":     func(r *psp.ChargeRequest) { r.PaymentID = "" },
		"zero amount":       func(r *psp.ChargeRequest) { r.Amount = 0 },
		"bad currency":      func(r *psp.ChargeRequest) { r.Currency = "dollars" },
		"no payment method": func(r *psp.ChargeRequest) { r.PaymentMethod = "" },
		"key too long":      func(r *psp.ChargeRequest) { r.IdempotencyKey = strings.Repeat("k", 256) },
	} {
		req := charge
		mutate(&req)
		if _, err := c.Charge(context.Background(), req); !errors.Is(err, psp.ErrInvalidRequest) {
			t.Errorf("%s: err = %v, want ErrInvalidRequest", name, err)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the PSP saw %d requests, want 0", n)
	}
}

func TestLookup(t *testing.T) {
	search := func(items ...string) string {
		return `{"object":"search_result","url":"/v1/payment_intents/search","has_more":false,"data":[` + strings.Join(items, ",") + `]}`
	}
	cases := []struct {
		name       string
		handler    http.HandlerFunc
		want       psp.Outcome
		wantPI     string
		wantDecl   string
		wantErr    error
		wantUnsure bool
	}{
		{name: "none is not found", handler: answer(200, search()), want: psp.NotFound},
		{name: "succeeded", handler: answer(200, search(piSucceeded)), want: psp.Succeeded, wantPI: "pi_1"},
		{name: "a success beats an earlier decline", handler: answer(200, search(piDeclined, piSucceeded)), want: psp.Succeeded, wantPI: "pi_1"},
		{name: "declined only", handler: answer(200, search(piDeclined)), want: psp.Declined, wantPI: "pi_0", wantDecl: "insufficient_funds"},
		{name: "pending beats declined", handler: answer(200, search(piDeclined, piProcessing)), want: psp.Pending, wantPI: "pi_1"},
		{name: "500 is unknown", handler: answer(500, stripeError("api_error", "", "boom")), want: psp.Unknown},
		{name: "400 is an error", handler: answer(400, stripeError("invalid_request_error", "", "search unavailable")), wantErr: psp.ErrInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/payment_intents/search" {
					t.Errorf("path = %s", r.URL.Path)
				}
				if q := r.URL.Query().Get("query"); q != "metadata['payment_id']:'pay_7'" {
					t.Errorf("query = %q", q)
				}
				tc.handler(w, r)
			}))
			defer srv.Close()
			res, err := newClient(t, srv.URL).Lookup(context.Background(), "pay_7")
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Lookup: %v", err)
			}
			if res.Outcome != tc.want || res.PaymentIntentID != tc.wantPI || res.DeclineCode != tc.wantDecl {
				t.Errorf("got %v %q %q, want %v %q %q", res.Outcome, res.PaymentIntentID, res.DeclineCode, tc.want, tc.wantPI, tc.wantDecl)
			}
		})
	}
	if _, err := newClient(t, "http://127.0.0.1:1").Lookup(context.Background(), "pay_7' OR 'x"); !errors.Is(err, psp.ErrInvalidRequest) {
		t.Errorf("a quote in the reference: err = %v, want ErrInvalidRequest", err)
	}
}

// TestLookupReadsEveryPage: a success on the search's second page still
// wins over a decline on the first (the client follows next_page with the
// same query, as stripe-go's iterator does), and a failed second page makes
// the lookup Unknown instead of a verdict from half the results.
func TestLookupReadsEveryPage(t *testing.T) {
	page1 := `{"object":"search_result","url":"/v1/payment_intents/search","has_more":true,"next_page":"cursor_2","data":[` + piDeclined + `]}`
	page2 := `{"object":"search_result","url":"/v1/payment_intents/search","has_more":false,"next_page":null,"data":[` + piSucceeded + `]}`
	for _, tc := range []struct {
		name   string
		second http.HandlerFunc
		want   psp.Outcome
		wantPI string
	}{
		{name: "a success on page 2 wins", second: answer(200, page2), want: psp.Succeeded, wantPI: "pi_1"},
		{name: "a failed page 2 is unknown", second: answer(500, stripeError("api_error", "", "boom")), want: psp.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pages atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				q := r.URL.Query()
				if q.Get("query") != "metadata['payment_id']:'pay_7'" || q.Get("limit") != "10" {
					t.Errorf("page %d: query %q limit %q", pages.Load()+1, q.Get("query"), q.Get("limit"))
				}
				switch pages.Add(1) {
				case 1:
					if q.Has("page") {
						t.Errorf("first page sent page=%q", q.Get("page"))
					}
					answer(200, page1)(w, r)
				case 2:
					if q.Get("page") != "cursor_2" {
						t.Errorf("second page sent page=%q, want cursor_2", q.Get("page"))
					}
					tc.second(w, r)
				default:
					t.Errorf("a third request: %s", r.URL)
				}
			}))
			defer srv.Close()
			res, err := newClient(t, srv.URL).Lookup(context.Background(), "pay_7")
			if err != nil {
				t.Fatalf("Lookup: %v", err)
			}
			if res.Outcome != tc.want || res.PaymentIntentID != tc.wantPI {
				t.Errorf("got %v %q, want %v %q", res.Outcome, res.PaymentIntentID, tc.want, tc.wantPI)
			}
			if tc.want == psp.Succeeded && res.HTTPStatus != http.StatusOK {
				t.Errorf("HTTPStatus = %d, want the search's 200", res.HTTPStatus)
			}
			if n := pages.Load(); n != 2 {
				t.Errorf("%d search requests, want 2", n)
			}
		})
	}
}

func TestRefund(t *testing.T) {
	refundOK := `{"id":"re_1","object":"refund","amount":3000,"charge":"ch_1","payment_intent":"pi_1","status":"succeeded"}`
	cases := []struct {
		name    string
		handler http.HandlerFunc
		want    psp.Outcome
		wantErr error
	}{
		{name: "succeeded", handler: answer(200, refundOK), want: psp.Succeeded},
		{name: "500 is unknown", handler: answer(500, stripeError("api_error", "", "boom")), want: psp.Unknown},
		{name: "key reuse", handler: answer(400, stripeError("idempotency_error", "", "same parameters")), wantErr: psp.ErrKeyReuse},
		{name: "nothing to refund", handler: answer(400, stripeError("invalid_request_error", "charge_already_refunded", "already refunded")), wantErr: psp.ErrInvalidRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_ = r.ParseForm()
				if r.URL.Path != "/v1/refunds" || r.PostForm.Get("payment_intent") != "pi_1" ||
					r.Header.Get("Idempotency-Key") != "pay_7:cancel:refund" || r.PostForm.Get("metadata[payment_id]") != "pay_7" {
					t.Errorf("unexpected request %s %v %q", r.URL.Path, r.PostForm, r.Header.Get("Idempotency-Key"))
				}
				tc.handler(w, r)
			}))
			defer srv.Close()
			res, err := newClient(t, srv.URL).Refund(context.Background(), psp.RefundRequest{
				IdempotencyKey: "pay_7:cancel:refund", PaymentIntentID: "pi_1", PaymentID: "pay_7",
			})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil || res.Outcome != tc.want {
				t.Fatalf("got %v, %v; want %v", res.Outcome, err, tc.want)
			}
			if tc.want == psp.Succeeded && (res.RefundID != "re_1" || res.ChargeID != "ch_1" || res.PaymentIntentID != "pi_1") {
				t.Errorf("ids = %+v", res)
			}
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := psp.New(psp.Config{}); err == nil {
		t.Error("an empty API key must be refused")
	}
	if _, err := psp.New(psp.Config{APIKey: "k", BaseURL: "localhost:8090"}); err == nil {
		t.Error("a base URL without a scheme must be refused")
	}
}
