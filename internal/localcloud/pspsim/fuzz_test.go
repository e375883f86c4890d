package pspsim_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
)

// FuzzAPI feeds arbitrary form bodies and search queries to the simulator
// and holds Stripe's documented contract for what it answers:
//   - every POST is answered 200, 400 or 402 with a JSON body: an object
//     with an id and a type on 200, Stripe's error object (a type and a
//     message) otherwise; a search is answered 200 (a search_result list of
//     payment_intents) or 400;
//   - a PaymentIntent created (200) has the form's amount and currency and
//     reads back from GET /v1/payment_intents/{id} as the same object;
//   - the same request under the same Idempotency-Key is answered the same
//     status and the byte-identical body, marked Idempotent-Replayed when
//     the first ran (200 or 402), so a retry never charges or refunds again;
//   - other parameters under a key whose request ran are refused with
//     400 idempotency_error;
//   - a search asked twice with nothing in between answers the same.
func FuzzAPI(f *testing.F) {
	f.Add("amount=3000&currency=usd&confirm=true&payment_method=pm_card_visa&metadata[payment_id]=pay_1", "metadata['payment_id']:'pay_1'")
	f.Add("amount=3000&currency=usd&confirm=true&payment_method=pm_card_chargeDeclined", "status:'requires_payment_method'")
	f.Add("payment_intent=pi_t_1&amount=5", `metadata["a"]:"b" AND metadata['c']:'d'`)
	f.Add("metadata[]=x&amount=1e3&currency=USD", "status:'succeeded'")
	sim := pspsim.New(pspsim.Config{Logger: quiet()})
	do := func(method, path, body, key string) (int, http.Header, []byte) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk_test")
		if method == http.MethodPost {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		sim.ServeHTTP(rec, req)
		return rec.Code, rec.Header(), rec.Body.Bytes()
	}
	f.Fuzz(func(t *testing.T, body, query string) {
		key := "k:" + body
		for _, path := range []string{"/v1/payment_intents", "/v1/refunds"} {
			code, _, got := do(http.MethodPost, path, body, key)
			if code != 200 && code != 400 && code != 402 {
				t.Fatalf("POST %s %q: status %d", path, body, code)
			}
			var obj struct {
				ID, Object, Currency string
				Amount               int64
				Error                *struct{ Type, Message string }
			}
			if err := json.Unmarshal(got, &obj); err != nil {
				t.Fatalf("POST %s %q: %d with a body that is not JSON: %q", path, body, code, got)
			}
			if code == 200 && (obj.ID == "" || obj.Object == "" || obj.Error != nil) ||
				code != 200 && (obj.Error == nil || obj.Error.Type == "" || obj.Error.Message == "") {
				t.Fatalf("POST %s %q: %d %s is not a Stripe object or error", path, body, code, got)
			}
			if code == 200 && path == "/v1/payment_intents" {
				form, _ := url.ParseQuery(body)
				amount, _ := strconv.ParseInt(form.Get("amount"), 10, 64)
				if obj.Object != "payment_intent" || obj.Amount != amount || obj.Currency != strings.ToLower(form.Get("currency")) {
					t.Fatalf("POST %q created %s", body, got)
				}
				rc, _, read := do(http.MethodGet, "/v1/payment_intents/"+url.PathEscape(obj.ID), "", "")
				var back struct {
					ID     string
					Amount int64
				}
				if rc != 200 || json.Unmarshal(read, &back) != nil || back.ID != obj.ID || back.Amount != obj.Amount {
					t.Fatalf("created %s, which reads back %d %s", got, rc, read)
				}
			}
			code2, h2, again := do(http.MethodPost, path, body, key)
			if code2 != code || !bytes.Equal(again, got) {
				t.Fatalf("POST %s %q under one key: %d %s, then %d %s", path, body, code, got, code2, again)
			}
			ran := code == 200 || code == 402
			if ran && h2.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("POST %s %q: the repeat of a request that ran is not marked replayed", path, body)
			}
			if ran && len(key) <= 255 {
				code3, _, other := do(http.MethodPost, path, body+"&description=pspsim-fuzz-other", key)
				var e struct{ Error struct{ Type string } }
				if code3 != 400 || json.Unmarshal(other, &e) != nil || e.Error.Type != "idempotency_error" {
					t.Fatalf("POST %s under the key of %q with other parameters: %d %s", path, body, code3, other)
				}
			}
		}
		search := "/v1/payment_intents/search?query=" + url.QueryEscape(query)
		code, _, got := do(http.MethodGet, search, "", "")
		if code != 200 && code != 400 {
			t.Fatalf("search %q: status %d", query, code)
		}
		if code == 200 {
			var list struct {
				Object string
				Data   []struct{ Object string }
			}
			if err := json.Unmarshal(got, &list); err != nil || list.Object != "search_result" {
				t.Fatalf("search %q: %s", query, got)
			}
			for _, o := range list.Data {
				if o.Object != "payment_intent" {
					t.Fatalf("search %q: %s", query, got)
				}
			}
		}
		if code2, _, again := do(http.MethodGet, search, "", ""); code2 != code || !bytes.Equal(again, got) {
			t.Fatalf("search %q twice: %d %s, then %d %s", query, code, got, code2, again)
		}
	})
}
