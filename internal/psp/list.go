package psp

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/form"
)

// Listed is one PaymentIntent as the list endpoint returns it, reduced to
// what reconciliation joins on.
type Listed struct {
	PaymentIntentID string
	// Outcome is fromPaymentIntent's classification (Succeeded, Declined,
	// Pending); Unknown for a status this client does not know.
	Outcome Outcome
	// ChargeID is the latest charge, when any.
	ChargeID string
	Amount   int64
	// Currency is upper case ISO 4217 (the ledger's form).
	Currency      string
	PaymentMethod string
	// Metadata holds our ids: payment_id, merchant_id, caller_id,
	// client_key, fingerprint (see MetaCallerID).
	Metadata map[string]string
	Created  time.Time
	// DeclineCode is the issuer's reason on a Declined outcome.
	DeclineCode string
}

// ListedRefund is one Refund from the list endpoint.
type ListedRefund struct {
	RefundID, PaymentIntentID, ChargeID string
	// Outcome is fromRefund's classification: Succeeded, Declined (failed
	// or canceled), Pending; Unknown for a status this client does not know.
	Outcome Outcome
	Amount  int64
	// Currency is upper case ISO 4217.
	Currency string
	Metadata map[string]string
	Created  time.Time
}

// maxListPage is the largest page Stripe's list endpoints serve.
const maxListPage = 100

// ListPaymentIntents calls each, newest first, for every PaymentIntent the
// PSP created in [from, to), read through GET /v1/payment_intents (a list,
// which unlike search is not served from a lagging index), page after page.
//
// Stripe's created is in whole seconds, so the span is too: from and to
// must be whole seconds (ErrInvalidRequest otherwise, nothing sent), sent as
// created[gte]=from and created[lt]=to. A nil error means the span was read
// whole. Any failed page (a transport error, a 5xx, a refusal) fails the
// whole list, after each has seen the earlier pages: the span was not read
// whole and must be read again. An error from each stops the list and is
// returned wrapped.
//
// Read a span that has closed (to in the past): the list is newest first,
// so an object created inside the span while it is paged lands before the
// cursor and is not seen.
func (c *Client) ListPaymentIntents(ctx context.Context, from, to time.Time, each func(Listed) error) error {
	return listSpan(ctx, c, "list_payment_intents", "/v1/payment_intents", from, to,
		func(pi *stripe.PaymentIntent) (string, int64) { return pi.ID, pi.Created },
		func(pi *stripe.PaymentIntent) error { return each(listedIntent(pi)) })
}

// ListRefunds is ListPaymentIntents for refunds (GET /v1/refunds), with
// the same span and the same all-or-error reading.
func (c *Client) ListRefunds(ctx context.Context, from, to time.Time, each func(ListedRefund) error) error {
	return listSpan(ctx, c, "list_refunds", "/v1/refunds", from, to,
		func(rf *stripe.Refund) (string, int64) { return rf.ID, rf.Created },
		func(rf *stripe.Refund) error { return each(listedRefund(rf)) })
}

// listPage is one page of a Stripe list.
type listPage[T any] struct {
	stripe.APIResource
	stripe.ListMeta
	Data []T `json:"data"`
}

// listSpan reads every page of a list endpoint over [from, to) and hands
// each object to each. ident gives an object's id (the next page's cursor)
// and created stamp.
func listSpan[T any](ctx context.Context, c *Client, op, path string, from, to time.Time,
	ident func(T) (string, int64), each func(T) error) error {
	if err := checkSpan(from, to); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if from.Equal(to) {
		return nil // an empty span: nothing to read
	}
	key, kerr := c.apiKey(ctx)
	if kerr != nil {
		return fmt.Errorf("%s: %w", op, kerr)
	}
	size := c.listPage
	if size == 0 {
		size = maxListPage
	}
	start := time.Now()
	res := Result{Outcome: Succeeded} // the span read whole, unless a page says otherwise
	err := func() error {
		after := ""
		for n := 1; ; n++ {
			lp := &stripe.ListParams{Context: ctx, Limit: stripe.Int64(size)}
			if after != "" {
				lp.StartingAfter = stripe.String(after)
			}
			query := &form.Values{}
			form.AppendTo(query, lp)
			// By hand: stripe-go's RangeQueryParams leaves out a zero
			// bound, which would send a span ending at the epoch unbounded.
			query.Add("created[gte]", strconv.FormatInt(from.Unix(), 10))
			query.Add("created[lt]", strconv.FormatInt(to.Unix(), 10))
			page := &listPage[T]{}
			used := key
			err := c.send(ctx, key, func(k string) error {
				used = k
				return c.api.CallRaw(http.MethodGet, path, k, []byte(query.Encode()), lp.GetParams(), page)
			})
			if err != nil {
				res, err = pageFailed(err)
				return fmt.Errorf("page %d: %w", n, err)
			}
			key = used // a key read afresh after a 401 serves the later pages
			if page.LastResponse != nil {
				res.HTTPStatus = page.LastResponse.StatusCode
			}
			for _, obj := range page.Data {
				id, created := ident(obj)
				if created < from.Unix() || created >= to.Unix() {
					// The PSP did not apply the filter: what it listed is not the span.
					return fmt.Errorf("page %d: %s created at %d, outside [%d, %d)", n, id, created, from.Unix(), to.Unix())
				}
				if err := each(obj); err != nil {
					return fmt.Errorf("stopped at %s: %w", id, err)
				}
				after = id
			}
			if !page.HasMore {
				return nil
			}
			if len(page.Data) == 0 {
				return fmt.Errorf("page %d: has_more with no data, no cursor to go on from", n)
			}
		}
	}()
	c.logCall(ctx, op, "", start, res, err)
	if err != nil {
		return fmt.Errorf("%s [%d, %d): %w", op, from.Unix(), to.Unix(), err)
	}
	return nil
}

// checkSpan refuses a span the created filter cannot say exactly.
func checkSpan(from, to time.Time) error {
	switch {
	case from.IsZero() || to.IsZero():
		return fmt.Errorf("%w: a list span needs both ends", ErrInvalidRequest)
	case from.Nanosecond() != 0 || to.Nanosecond() != 0:
		return fmt.Errorf("%w: a list span is in whole seconds (Stripe's created), got %s to %s",
			ErrInvalidRequest, from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))
	case to.Before(from):
		return fmt.Errorf("%w: a list span ends before it starts", ErrInvalidRequest)
	}
	return nil
}

// pageFailed turns a failed page into an error, always: classifyError
// reads a 5xx or a lost reply as Unknown with no error, which for a charge
// is an open outcome but for a list is a span not read.
func pageFailed(err error) (Result, error) {
	res, cerr := classifyError(err)
	switch {
	case cerr != nil:
		return res, cerr
	case res.Cause != nil:
		return res, fmt.Errorf("the list was not read whole: %w", res.Cause)
	default:
		return res, fmt.Errorf("the list was not read whole: psp answered %d", res.HTTPStatus)
	}
}

func listedIntent(pi *stripe.PaymentIntent) Listed {
	r := fromPaymentIntent(pi)
	l := Listed{
		PaymentIntentID: pi.ID,
		Outcome:         r.Outcome,
		ChargeID:        r.ChargeID,
		Amount:          pi.Amount,
		Currency:        strings.ToUpper(string(pi.Currency)),
		Metadata:        pi.Metadata,
		Created:         time.Unix(pi.Created, 0).UTC(),
		DeclineCode:     r.DeclineCode,
	}
	if pi.PaymentMethod != nil {
		l.PaymentMethod = pi.PaymentMethod.ID
	}
	switch pi.Status {
	case stripe.PaymentIntentStatusCanceled, stripe.PaymentIntentStatusProcessing, stripe.PaymentIntentStatusRequiresAction,
		stripe.PaymentIntentStatusRequiresCapture, stripe.PaymentIntentStatusRequiresConfirmation,
		stripe.PaymentIntentStatusRequiresPaymentMethod, stripe.PaymentIntentStatusSucceeded:
	default:
		// fromPaymentIntent reads any other status as Pending; a
		// reconciliation must not guess about a status it has never seen.
		l.Outcome = Unknown
	}
	return l
}

func listedRefund(rf *stripe.Refund) ListedRefund {
	r := fromRefund(rf)
	l := ListedRefund{
		RefundID:        rf.ID,
		PaymentIntentID: r.PaymentIntentID,
		ChargeID:        r.ChargeID,
		Outcome:         r.Outcome,
		Amount:          rf.Amount,
		Currency:        strings.ToUpper(string(rf.Currency)),
		Metadata:        rf.Metadata,
		Created:         time.Unix(rf.Created, 0).UTC(),
	}
	switch rf.Status {
	case stripe.RefundStatusCanceled, stripe.RefundStatusFailed, stripe.RefundStatusPending,
		stripe.RefundStatusRequiresAction, stripe.RefundStatusSucceeded:
	default:
		l.Outcome = Unknown // as for PaymentIntents: never a guess
	}
	return l
}
