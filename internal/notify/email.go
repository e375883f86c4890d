package notify

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"
	sestypes "github.com/aws/aws-sdk-go-v2/service/sesv2/types"
	"github.com/aws/smithy-go"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/event"
)

// The email channels' names in the notif table (the push is "push"): the
// payment's own emails, and the card-declined reminder (a logical message,
// package dedup).
const (
	ChannelEmail    = "email"
	ChannelReminder = "reminder"
)

// ErrOutcomeUnknown wraps a send the provider may or may not have made: a
// timeout, a 5xx, a connection that died before the answer. Retrying it is
// a duplicate if it had gone; not retrying it is a loss if it had not.
// Which one a message accepts is its Policy.
var ErrOutcomeUnknown = errors.New("notify: the provider's answer is unknown")

// MessageType names what an email says.
type MessageType string

// The message types.
const (
	PaymentReceipt MessageType = "payment-receipt" // SUCCEEDED
	PaymentFailed  MessageType = "payment-failed"  // FAILED
	RefundIssued   MessageType = "refund-issued"   // REFUNDED
	RefundReversed MessageType = "refund-reversed" // REFUND_FAILED: the refund failed later, the payment stands
	ChargeReturned MessageType = "charge-returned" // REVERSED: a charge made in error is being returned
	// CardDeclinedReminder asks the buyer to update a card that was
	// declined; raised by each decline of the same card, sent once per
	// window (logical duplicates, package dedup).
	CardDeclinedReminder MessageType = "card-declined-reminder"
)

// Policy is what a message type does with a send whose outcome is unknown.
type Policy struct {
	// RetryUnknown: send it again (a rare duplicate accepted), or record
	// it UNKNOWN and never again (a rare loss accepted).
	RetryUnknown bool
	Why          string
}

// Policies is the one table of those choices (docs/mechanism.md#design-10).
var Policies = map[MessageType]Policy{
	PaymentReceipt: {true, "a buyer without a receipt asks support and may pay again; a second copy of a receipt is harmless"},
	PaymentFailed:  {true, "a buyer not told of a decline thinks the order is placed; a second notice says the same"},
	RefundIssued:   {true, "the refund is money the buyer watches for; a second notice says the same"},
	RefundReversed: {true, "the buyer was told of a refund that did not happen: that must be corrected, twice rather than never"},
	ChargeReturned: {true, "the buyer was charged after being told they were not; being told twice that the money is coming back is better than never"},
	CardDeclinedReminder: {false, "a nudge, raised again by the next decline: a duplicate nag costs more goodwill than a missed one, " +
		"so an unknown send is not repeated"},
}

// Logical reports whether typ is a logical message: raised by events for a
// reason a later event may raise again, so sent through a dedup gate
// (inbox.Raise), never once per event.
func Logical(typ MessageType) bool { return typ == CardDeclinedReminder }

// IssuerDecline reports whether a FAILED payment's decline code is the
// card's issuer declining it: not empty (no reason given is no evidence
// against the card) and none of the codes oncepay writes itself, which all
// begin "psp_" (psp_invalid_request: the PSP refused our request, a
// rotated key say; psp_no_charge: nothing carries our reference). Those
// say nothing about the card: a reminder to update it would go to every
// buyer of an incident.
func IssuerDecline(declineCode string) bool {
	return declineCode != "" && !strings.HasPrefix(declineCode, OwnDeclinePrefix)
}

// OwnDeclinePrefix begins every decline code oncepay writes itself.
const OwnDeclinePrefix = "psp_"

// Raises reports whether a FAILED payment with declineCode raises the
// logical message typ: the card-declined reminder only for an issuer's
// decline; any other message regardless.
func Raises(typ MessageType, declineCode string) bool {
	if typ == CardDeclinedReminder {
		return IssuerDecline(declineCode)
	}
	return true
}

// TypeOf is the message type an event's email is.
func TypeOf(state string) (MessageType, bool) {
	switch state {
	case event.Succeeded:
		return PaymentReceipt, true
	case event.Failed:
		return PaymentFailed, true
	case event.Refunded:
		return RefundIssued, true
	case event.RefundFailed:
		return RefundReversed, true
	case event.Reversed:
		return ChargeReturned, true
	}
	return "", false
}

// SESAPI is the SES v2 call an EmailSender makes.
type SESAPI interface {
	SendEmail(ctx context.Context, in *sesv2.SendEmailInput, opts ...func(*sesv2.Options)) (*sesv2.SendEmailOutput, error)
}

// RecipientDB reads a payment's receipt address (the ledger's pool).
type RecipientDB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// EmailSender sends a payment's emails through SES: to the receipt
// address its payment row holds, from From, under ConfigurationSet. The
// address is read at send time and never logged, so no event, queue
// message or log line carries it.
type EmailSender struct {
	SES              SESAPI
	DB               RecipientDB
	From             string
	ConfigurationSet string // "" none
	// Type, when set, is what every email of this sender says (the
	// reminder's); "" is each event's own (TypeOf).
	Type MessageType
	// Timeout bounds each send (default DefaultEmailTimeout).
	Timeout time.Duration
}

// Send implements the worker's sender for the email channel: ErrNoTarget
// when the payment has no receipt address (or the event no email); an
// error wrapping ErrOutcomeUnknown when SES's answer is unknown; any other
// error is a send SES refused (nothing went out).
func (s EmailSender) Send(ctx context.Context, p Push) error {
	typ, ok := s.Type, s.Type != ""
	if !ok {
		typ, ok = TypeOf(p.State)
	}
	if !ok {
		return fmt.Errorf("%w: no email for a %s event", ErrNoTarget, p.State)
	}
	var to *string
	err := s.DB.QueryRow(ctx, `SELECT receipt_email FROM payments WHERE payment_id = $1`, p.PaymentID).Scan(&to)
	switch {
	case errors.Is(err, pgx.ErrNoRows), err == nil && (to == nil || *to == ""):
		return fmt.Errorf("%w: payment %s has no receipt address", ErrNoTarget, p.PaymentID)
	case err != nil:
		return fmt.Errorf("notify: read the receipt address of %s: %w", p.PaymentID, err)
	}
	subject, body := Compose(typ, p)
	in := &sesv2.SendEmailInput{
		FromEmailAddress: aws.String(s.From),
		Destination:      &sestypes.Destination{ToAddresses: []string{*to}},
		Content: &sestypes.EmailContent{Simple: &sestypes.Message{
			Subject: &sestypes.Content{Data: aws.String(subject), Charset: aws.String("UTF-8")},
			Body:    &sestypes.Body{Text: &sestypes.Content{Data: aws.String(body), Charset: aws.String("UTF-8")}},
		}},
		EmailTags: []sestypes.MessageTag{{Name: aws.String("message_type"), Value: aws.String(string(typ))}},
	}
	if s.ConfigurationSet != "" {
		in.ConfigurationSetName = aws.String(s.ConfigurationSet)
	}
	timeout := s.Timeout
	if timeout == 0 {
		timeout = DefaultEmailTimeout
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := s.SES.SendEmail(sctx, in); err != nil {
		// SES's messages can name the recipient ("... failed the check in
		// region X: buyer@example.com", an identity ARN), and this error is
		// logged and stored: only the code is kept.
		// A 4xx is a refusal by its status, modeled or not (SES answers an
		// unmodeled AccessDeniedException, whose fault the SDK cannot tell).
		var resp *awshttp.ResponseError
		var api smithy.APIError
		if errors.As(err, &api) {
			if errors.As(err, &resp) && resp.HTTPStatusCode() >= 400 && resp.HTTPStatusCode() < 500 {
				return fmt.Errorf("notify: SES refused the %s email of %s: %d %s", typ, p.PaymentID, resp.HTTPStatusCode(), api.ErrorCode())
			}
			return fmt.Errorf("%w: the %s email of %s: SES answered %s", ErrOutcomeUnknown, typ, p.PaymentID, api.ErrorCode())
		}
		// No answer (a timeout, a connection that died): what remains of
		// the error is the transport's, which names the endpoint, not the
		// recipient.
		return fmt.Errorf("%w: the %s email of %s: %w", ErrOutcomeUnknown, typ, p.PaymentID, err)
	}
	return nil
}

// DefaultEmailTimeout bounds one SES call: well inside the worker's 30 s,
// so a stalled call is an unknown send recorded by this run, not a worker
// killed mid-send.
const DefaultEmailTimeout = 10 * time.Second

// Compose is an email's subject and text: the payment's facts, its id,
// and nothing about the buyer.
func Compose(typ MessageType, p Push) (subject, body string) {
	amount := strconv.FormatInt(p.Amount, 10) + " " + p.Currency + " (minor units)"
	switch typ {
	case PaymentReceipt:
		subject = "Your payment to " + p.MerchantID + " went through"
	case PaymentFailed:
		subject = "Your payment to " + p.MerchantID + " was declined"
	case RefundIssued:
		subject = "Your payment to " + p.MerchantID + " was refunded"
	case RefundReversed:
		subject = "Your refund from " + p.MerchantID + " did not go through: your payment stands"
	case ChargeReturned:
		subject = "A charge from " + p.MerchantID + " was made in error and is being returned"
	case CardDeclinedReminder:
		subject = "Your card was declined: please update your payment method"
	}
	body = subject + ".\n\nAmount: " + amount + "\nMerchant: " + p.MerchantID + "\nPayment: " + p.PaymentID + "\n"
	return subject, body
}
