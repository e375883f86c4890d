package pspsim_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
)

// FuzzAPI's finding: a request with two unknown parameters (or two bad
// metadata keys) was refused naming whichever one Go's map iteration met
// first, so the same request read two ways, and a chaos schedule's PSP
// answers were not a function of its seed. The refusal now names the first
// in name order, every time.
func TestTheSameBadRequestIsRefusedTheSameWayEveryTime(t *testing.T) {
	sim := pspsim.New(pspsim.Config{Logger: quiet()})
	for _, tc := range []struct{ path, body, param string }{
		{"/v1/refunds", "177&0", `"param": "0"`},
		{"/v1/payment_intents", "zz=1&amount=3000&currency=usd&confirm=true&payment_method=pm_card_visa&yy=2&aa=3", `"param": "aa"`},
		{"/v1/payment_intents", "amount=3000&currency=usd&confirm=true&payment_method=pm_card_visa&metadata[" +
			strings.Repeat("b", 41) + "]=1&metadata[" + strings.Repeat("a", 41) + "]=1", `"param": "metadata[` + strings.Repeat("a", 41)},
	} {
		var first []byte
		for i := range 64 {
			req := httptest.NewRequest(http.MethodPost, tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer sk_test")
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			rec := httptest.NewRecorder()
			sim.ServeHTTP(rec, req)
			if rec.Code != http.StatusBadRequest || !bytes.Contains(rec.Body.Bytes(), []byte(tc.param)) {
				t.Fatalf("%s %q (try %d): %d %s, want 400 naming %s", tc.path, tc.body, i, rec.Code, rec.Body, tc.param)
			}
			if i == 0 {
				first = rec.Body.Bytes()
			} else if !bytes.Equal(rec.Body.Bytes(), first) {
				t.Fatalf("%s %q: %s, then %s", tc.path, tc.body, first, rec.Body)
			}
		}
	}
}
