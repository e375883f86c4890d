package psp_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/oncepay/oncepay/internal/psp"
)

// The one rule for what a refusal proves (the API's first calls and
// takeovers, the resolver's replays): a first call's refusal proves nothing
// was charged; a replay's only when the PSP refused the very parameters.
func TestNotChargedFirstCallVersusReplay(t *testing.T) {
	refused := func(status int, typ string) error {
		return fmt.Errorf("charge payment pay_1: %w", fmt.Errorf("%w: %w", psp.ErrInvalidRequest, &psp.APIError{HTTPStatus: status, Type: typ}))
	}
	for _, tc := range []struct {
		name          string
		err           error
		first, replay bool
	}{
		{"400 invalid request", refused(400, "invalid_request_error"), true, true},
		{"401 rotated key", refused(401, "invalid_request_error"), true, false},
		{"403 restricted key", refused(403, "invalid_request_error"), true, false},
		{"404 no such route", refused(404, "invalid_request_error"), true, false},
		{"our client's own checks: never sent", fmt.Errorf("%w: empty payment method", psp.ErrInvalidRequest), true, true},
		{"key reuse", fmt.Errorf("%w: %w", psp.ErrKeyReuse, refused(400, "idempotency_error")), false, false},
		{"a timeout", context.DeadlineExceeded, false, false},
		{"no error", nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := psp.NotCharged(tc.err, psp.FirstCall); got != tc.first {
				t.Errorf("first call: NotCharged = %v, want %v", got, tc.first)
			}
			if got := psp.NotCharged(tc.err, psp.Replay); got != tc.replay {
				t.Errorf("replay: NotCharged = %v, want %v", got, tc.replay)
			}
		})
	}
}
