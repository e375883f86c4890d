package pspsim_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
)

// FuzzAPI feeds arbitrary form bodies and search queries to the simulator's
// parsers: every answer is a Stripe-shaped status, never a panic.
func FuzzAPI(f *testing.F) {
	f.Add("amount=3000&currency=usd&confirm=true&payment_method=pm_card_visa&metadata[payment_id]=pay_1", "metadata['payment_id']:'pay_1'")
	f.Add("payment_intent=pi_t_1&amount=5", `metadata["a"]:"b" AND metadata['c']:'d'`)
	f.Add("metadata[]=x&amount=1e3&currency=USD", "status:'succeeded'")
	sim := pspsim.New(pspsim.Config{Logger: quiet()})
	f.Fuzz(func(t *testing.T, body, query string) {
		for _, path := range []string{"/v1/payment_intents", "/v1/refunds"} {
			req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer sk_test")
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Idempotency-Key", "k:"+body)
			rec := httptest.NewRecorder()
			sim.ServeHTTP(rec, req)
			if c := rec.Code; c != 200 && c != 400 && c != 402 {
				t.Fatalf("POST %s %q: status %d", path, body, c)
			}
		}
		req := httptest.NewRequest(http.MethodGet, "/v1/payment_intents/search?query="+url.QueryEscape(query), nil)
		req.Header.Set("Authorization", "Bearer sk_test")
		rec := httptest.NewRecorder()
		sim.ServeHTTP(rec, req)
		if c := rec.Code; c != 200 && c != 400 {
			t.Fatalf("search %q: status %d", query, c)
		}
	})
}
