package notify_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/awsclient/sesclient"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/notify"
)

// addressRow answers the receipt address look-up.
type addressRow string

func (a addressRow) QueryRow(context.Context, string, ...any) pgx.Row { return a }
func (a addressRow) Scan(dest ...any) error {
	to := string(a)
	*(dest[0].(**string)) = &to
	return nil
}

const buyer = "buyer-7f3a@example.com"

// SES's own answers through the real SDK: a 4xx is a refusal (nothing went
// out), a 5xx or no answer is unknown; and the error, which is logged and
// stored, never carries the recipient, though SES's message names it.
func TestSESAnswersAreClassifiedAndNeverNameTheRecipient(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  int
		errType string
		unknown bool
	}{
		{"sandbox rejection", http.StatusBadRequest, "MessageRejected", false},
		{"not authorized on the recipient's identity", http.StatusForbidden, "AccessDeniedException", false},
		{"throttled", http.StatusTooManyRequests, "TooManyRequestsException", false},
		{"an internal failure", http.StatusInternalServerError, "InternalFailure", true},
		{"no answer in time", 0, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			block := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.status == 0 {
					<-block
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("X-Amzn-ErrorType", tc.errType)
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(`{"message":"Email address is not verified. The following identities failed the check in region US-EAST-1: ` + buyer + `, arn:aws:ses:us-east-1:123456789012:identity/` + buyer + `"}`))
			}))
			defer srv.Close()
			defer close(block) // before the server's Close, which waits for the handler
			ses := sesclient.NewSender(aws.Config{Region: "us-east-1", Credentials: aws.AnonymousCredentials{}, BaseEndpoint: aws.String(srv.URL)})
			s := notify.EmailSender{SES: ses, DB: addressRow(buyer), From: "receipts@example.com", Timeout: 300 * time.Millisecond}
			err := s.Send(context.Background(), notify.Push{PaymentID: "pay_1", EventID: "pay_1:SUCCEEDED", State: event.Succeeded, MerchantID: "m1", Amount: 3000, Currency: "USD"})
			if err == nil {
				t.Fatal("no error")
			}
			if got := errors.Is(err, notify.ErrOutcomeUnknown); got != tc.unknown {
				t.Errorf("unknown = %v, want %v: %v", got, tc.unknown, err)
			}
			if strings.Contains(err.Error(), "buyer-7f3a") {
				t.Errorf("the error names the recipient: %v", err)
			}
		})
	}
}

// The card-declined reminder is raised by an issuer's decline only: the
// codes oncepay writes for its own refusals (a rotated PSP key, nothing at
// the PSP) and a decline without a reason say nothing about the card.
func TestOnlyAnIssuersDeclineRaisesTheCardReminder(t *testing.T) {
	for code, want := range map[string]bool{
		"generic_decline": true, "insufficient_funds": true, "card_declined": true, "expired_card": true,
		"psp_invalid_request": false, "psp_no_charge": false, "psp_anything_new": false, "": false,
	} {
		if got := notify.Raises(notify.CardDeclinedReminder, code); got != want {
			t.Errorf("decline code %q raises the reminder: %v, want %v", code, got, want)
		}
	}
	if !notify.Raises(notify.MessageType("another-logical-message"), "psp_invalid_request") {
		t.Error("the decline filter is the reminder's, not every message's")
	}
}
