package pspsim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Charges reads the simulator's charges from its admin API at baseURL
// (GET /_sim/charges): the PSP's own account of what it charged,
// independent of anything the stack wrote.
func Charges(ctx context.Context, baseURL string) ([]Charge, error) {
	return adminList[Charge](ctx, baseURL, "/_sim/charges")
}

// Refunds reads the simulator's refunds (GET /_sim/refunds).
func Refunds(ctx context.Context, baseURL string) ([]Refund, error) {
	return adminList[Refund](ctx, baseURL, "/_sim/refunds")
}

func adminList[T any](ctx context.Context, baseURL, path string) ([]T, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(baseURL, "/")+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("pspsim: GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("pspsim: GET %s: %s", path, resp.Status)
	}
	var out []T
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("pspsim: decode %s: %w", path, err)
	}
	return out, nil
}
