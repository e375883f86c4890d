package blackbox

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// charge is a charge the PSP made (GET /_sim/charges' element; Stripe's
// succeeded PaymentIntent when deployed).
type charge struct {
	ID             string            `json:"id"`
	IdempotencyKey string            `json:"idempotency_key"`
	Amount         int64             `json:"amount"`
	Currency       string            `json:"currency"`
	Metadata       map[string]string `json:"metadata"`
}

// psp counts the charges the PSP holds per payment.
type psp interface {
	// charges returns the charges made for each of paymentIDs.
	charges(ctx context.Context, paymentIDs ...string) (map[string][]charge, error)
}

// simulator is the PSP simulator's admin API (internal/localcloud/pspsim,
// admin.go).
type simulator struct {
	url   string
	httpc *http.Client
	mu    sync.Mutex // one /_sim/charges read at a time: it lists every charge the stack made
}

// fault is the body of POST /_sim/faults.
type fault struct {
	Match struct {
		IdempotencyKey string `json:"idempotency_key,omitempty"`
	} `json:"match"`
	Kind    string `json:"kind"`
	DelayMS int64  `json:"delay_ms,omitempty"`
	Times   int    `json:"times,omitempty"`
}

// arm adds a fault on the requests carrying key (a payment's derived
// charge key, so it never fires on another case's payment).
func (s *simulator) arm(ctx context.Context, key, kind string, delay time.Duration, times int) error {
	f := fault{Kind: kind, DelayMS: delay.Milliseconds(), Times: times}
	f.Match.IdempotencyKey = key
	if _, err := post(ctx, s.httpc, s.url+"/_sim/faults", f, nil); err != nil {
		return fmt.Errorf("arm %s on %s: %w", kind, key, err)
	}
	return nil
}

// fired is how many times the fault rule kind armed on key with times
// fired so far: GET /_sim/faults lists the rules still armed with their
// remaining times, and drops a rule once it has run out.
func (s *simulator) fired(ctx context.Context, key, kind string, times int) (int, error) {
	var armed []fault
	if _, err := get(ctx, s.httpc, s.url+"/_sim/faults", &armed); err != nil {
		return 0, fmt.Errorf("read the armed faults: %w", err)
	}
	for _, f := range armed {
		if f.Match.IdempotencyKey == key && f.Kind == kind {
			return times - f.Times, nil
		}
	}
	return times, nil
}

func (s *simulator) charges(ctx context.Context, paymentIDs ...string) (map[string][]charge, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []charge
	if _, err := get(ctx, s.httpc, s.url+"/_sim/charges", &all); err != nil {
		return nil, err
	}
	want := map[string]bool{}
	out := map[string][]charge{}
	for _, id := range paymentIDs {
		want[id] = true
		out[id] = nil
	}
	for _, c := range all {
		if pid := c.Metadata["payment_id"]; want[pid] {
			out[pid] = append(out[pid], c)
		}
	}
	return out, nil
}

// stripeCharges counts a deployed stack's charges at Stripe: the succeeded
// PaymentIntents whose metadata names the payment (the PSP client writes
// payment_id there). Stripe's search lags writes by up to a minute, so the
// cases read it through eventually.
type stripeCharges struct {
	url, key string
	httpc    *http.Client
}

func (s stripeCharges) charges(ctx context.Context, paymentIDs ...string) (map[string][]charge, error) {
	if s.key == "" {
		return nil, fmt.Errorf("%s is not set: a deployed run counts charges with the Stripe test key", envPSPKey)
	}
	out := map[string][]charge{}
	for _, pid := range paymentIDs {
		q := url.Values{"query": {fmt.Sprintf("metadata['payment_id']:'%s'", pid)}, "limit": {"10"}}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/v1/payment_intents/search?"+q.Encode(), nil)
		if err != nil {
			return nil, err
		}
		req.SetBasicAuth(s.key, "")
		var page struct {
			Data []struct {
				ID           string            `json:"id"`
				Status       string            `json:"status"`
				Amount       int64             `json:"amount"`
				Currency     string            `json:"currency"`
				Metadata     map[string]string `json:"metadata"`
				LatestCharge string            `json:"latest_charge"`
			} `json:"data"`
		}
		if err := decodeResponse(s.httpc, req, &page); err != nil {
			return nil, fmt.Errorf("stripe search %s: %w", pid, err)
		}
		out[pid] = nil
		for _, pi := range page.Data {
			if pi.Status == "succeeded" {
				out[pid] = append(out[pid], charge{ID: pi.LatestCharge, Amount: pi.Amount, Currency: pi.Currency, Metadata: pi.Metadata})
			}
		}
	}
	return out, nil
}
