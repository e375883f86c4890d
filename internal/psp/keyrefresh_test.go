package psp_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/oncepay/oncepay/internal/psp"
)

// A key rolled while the old one sat in the cache: the PSP answers 401 to
// the old key, and the call is made once more with the key read afresh
// (the same Idempotency-Key: a 401 ran nothing). An unchanged key's 401
// stands, as a definite refusal. A key that cannot be read sends nothing.
func TestA401RetriesOnceWithTheKeyReadAfresh(t *testing.T) {
	var calls atomic.Int32
	var keys, idem []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		keys = append(keys, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		idem = append(idem, r.Header.Get("Idempotency-Key"))
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer sk_test_new" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}}`)
			return
		}
		_, _ = io.WriteString(w, `{"id":"pi_1","object":"payment_intent","status":"succeeded","amount":3000,"currency":"usd","latest_charge":"ch_1","metadata":{"payment_id":"pay_1"}}`)
	}))
	defer srv.Close()
	quiet := slog.New(slog.NewJSONHandler(io.Discard, nil))
	req := psp.ChargeRequest{IdempotencyKey: "pay_1:charge", PaymentID: "pay_1", Amount: 3000, Currency: "USD", PaymentMethod: "pm_card_visa"}
	ctx := context.Background()

	rolled, err := psp.New(psp.Config{BaseURL: srv.URL, Logger: quiet,
		Key:        func(context.Context) (string, error) { return "sk_test_old", nil },
		KeyRefresh: func(context.Context) (string, error) { return "sk_test_new", nil }})
	if err != nil {
		t.Fatal(err)
	}
	res, err := rolled.Charge(ctx, req)
	if err != nil || res.Outcome != psp.Succeeded || calls.Load() != 2 {
		t.Fatalf("rolled key: %+v, %v after %d calls, want Succeeded after 2", res, err, calls.Load())
	}
	if keys[0] != "sk_test_old" || keys[1] != "sk_test_new" || idem[0] != idem[1] || idem[0] != "pay_1:charge" {
		t.Errorf("keys %v, idempotency keys %v: want old then new under one key", keys, idem)
	}

	calls.Store(0)
	same, _ := psp.New(psp.Config{BaseURL: srv.URL, Logger: quiet,
		Key:        func(context.Context) (string, error) { return "sk_test_bad", nil },
		KeyRefresh: func(context.Context) (string, error) { return "sk_test_bad", nil }})
	if _, err := same.Charge(ctx, req); !errors.Is(err, psp.ErrInvalidRequest) || !psp.NotCharged(err, psp.FirstCall) || calls.Load() != 1 {
		t.Errorf("unchanged key: %v after %d calls, want the 401 (not charged) after 1", err, calls.Load())
	}

	calls.Store(0)
	unread, _ := psp.New(psp.Config{BaseURL: srv.URL, Logger: quiet,
		Key: func(context.Context) (string, error) { return "", errors.New("secrets manager down") }})
	if _, err := unread.Charge(ctx, req); !errors.Is(err, psp.ErrNotSent) || errors.Is(err, psp.ErrInvalidRequest) || psp.NotCharged(err, psp.FirstCall) || calls.Load() != 0 {
		t.Errorf("unreadable key: %v after %d calls, want ErrNotSent, no call, and not 'not charged'", err, calls.Load())
	}
}
