package client_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/internal/client"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
)

const body42 = `{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_card_visa"}`

func post(t *testing.T, url, tok, key, body string) *http.Response {
	t.Helper()
	resp, err := send(url, tok, key, body)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func send(url, tok, key, body string) (*http.Response, error) {
	req, _ := http.NewRequest(http.MethodPost, url+"/payments", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return resp, nil
}

// A deploy bumps the fingerprint version while a key is in flight. The
// fingerprint the key record or the ledger row holds is v1; the retry is
// checked by the new build. It must be answered as the same request — a
// replay, or 409 while the original still runs — never 422 "key reused",
// which an app takes for "refused" and follows with a new key: a second
// charge. Each place the handler checks a stored fingerprint is reached:
// the completed key record (ALL_OLD), the in-progress one (with the ledger
// row behind it), and the ledger row alone after the key record expired.
func TestADeployThatBumpsTheFingerprintVersionStillAnswersTheKeyInFlight(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(t *testing.T, w *apitest.World, door, tok, key string) // the original, under v1
		want   int                                                         // the retry's status under the new version
	}{
		{"completed key record", func(t *testing.T, w *apitest.World, door, tok, key string) {
			if resp := post(t, door, tok, key, body42); resp.StatusCode != http.StatusCreated {
				t.Fatalf("original: %d", resp.StatusCode)
			}
		}, http.StatusCreated},
		{"in-progress key record, ledger row written", func(t *testing.T, w *apitest.World, door, tok, key string) {
			pid := ids.PaymentID(ids.Scope("u1", key))
			if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.ChargeKey(pid)}, Kind: pspsim.FaultSlow, DelayMS: 1500}); err != nil {
				t.Fatal(err)
			}
			go send(door, tok, key, body42) // still at the PSP when the deploy lands
			for deadline := time.Now().Add(3 * time.Second); w.Scalar(t, `SELECT count(*) FROM payments`) == 0; {
				if time.Now().After(deadline) {
					t.Fatal("the original never wrote its ledger row")
				}
				time.Sleep(10 * time.Millisecond)
			}
		}, http.StatusConflict},
		{"key record expired, the ledger row answers", func(t *testing.T, w *apitest.World, door, tok, key string) {
			if resp := post(t, door, tok, key, body42); resp.StatusCode != http.StatusCreated {
				t.Fatalf("original: %d", resp.StatusCode)
			}
			time.Sleep(w.Timing.KeyWindow + 100*time.Millisecond)
		}, http.StatusCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			timing := config.Default()
			if strings.Contains(tc.name, "expired") {
				timing.KeyWindow = 700 * time.Millisecond
			}
			w := apitest.New(t, timing)
			door := w.Door(t, nil)
			tok := w.Token(t, "u1")
			key := client.NewKey()
			tc.before(t, w, door.URL, tok, key)

			rollback := payment.DeployNextVersion()
			defer rollback()
			resp := post(t, door.URL, tok, key, body42)
			if resp.StatusCode != tc.want {
				t.Fatalf("the retry after the deploy: %d %s, want %d", resp.StatusCode, resp.Header.Get("Content-Type"), tc.want)
			}
			if tc.want == http.StatusCreated && resp.Header.Get("Idempotent-Replayed") != "true" {
				t.Fatal("the retry after the deploy was not marked as a replay")
			}
			// A key reuse is still a key reuse under the new version.
			reuse := post(t, door.URL, tok, key, strings.Replace(body42, "3000", "3500", 1))
			if tc.want == http.StatusCreated && reuse.StatusCode != http.StatusUnprocessableEntity {
				t.Fatalf("a different request under the key after the deploy: %d, want 422", reuse.StatusCode)
			}
			waitFor(t, func() bool { return len(w.Charges()) == 1 })
			time.Sleep(200 * time.Millisecond) // let a slow original finish
			if got := chargesFor(w, "u1", key); got != 1 || len(w.Charges()) != 1 {
				t.Fatalf("charges = %d (all %d), want 1", got, len(w.Charges()))
			}
		})
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
