package pspsim

// chargeObject is Stripe's Charge object, for charge.* events: the fields
// stripe-go and oncepay read, and those that say where the money is.
type chargeObject struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	AmountCaptured int64             `json:"amount_captured"`
	AmountRefunded int64             `json:"amount_refunded"`
	BillingDetails billingDetails    `json:"billing_details"`
	Captured       bool              `json:"captured"`
	Created        int64             `json:"created"`
	Currency       string            `json:"currency"`
	Disputed       bool              `json:"disputed"`
	FailureCode    *string           `json:"failure_code"`
	FailureMessage *string           `json:"failure_message"`
	Livemode       bool              `json:"livemode"`
	Metadata       map[string]string `json:"metadata"`
	Paid           bool              `json:"paid"`
	PaymentIntent  string            `json:"payment_intent"`
	PaymentMethod  string            `json:"payment_method"`
	Refunded       bool              `json:"refunded"`
	Status         string            `json:"status"`
}

// billingDetails is a charge's billing details: none collected (oncepay
// sends no personal data), so every field is null, as Stripe renders it.
type billingDetails struct {
	Address *struct{} `json:"address"`
	Email   *string   `json:"email"`
	Name    *string   `json:"name"`
	Phone   *string   `json:"phone"`
	TaxID   *string   `json:"tax_id"`
}

// chargeOfLocked renders a charge the simulator made.
func (s *Sim) chargeOfLocked(c *Charge) chargeObject {
	pm := ""
	if pi := s.intents[c.PaymentIntent]; pi != nil {
		pm = pi.PaymentMethod
	}
	return chargeObject{
		ID: c.ID, Object: "charge", Amount: c.Amount, AmountCaptured: c.Amount, AmountRefunded: c.AmountRefunded,
		Captured: true, Created: c.Created, Currency: c.Currency, Metadata: c.Metadata, Paid: true,
		PaymentIntent: c.PaymentIntent, PaymentMethod: pm, Refunded: c.AmountRefunded >= c.Amount, Status: "succeeded",
	}
}

// chargeViewLocked renders the latest charge of pi: the one it made, or
// the failed attempt its last payment error names.
func (s *Sim) chargeViewLocked(pi *paymentIntent) chargeObject {
	for _, c := range s.charges {
		if c.PaymentIntent == pi.ID {
			return s.chargeOfLocked(c)
		}
	}
	id := ""
	if pi.LatestCharge != nil {
		id = *pi.LatestCharge
	}
	out := chargeObject{
		ID: id, Object: "charge", Amount: pi.Amount, Created: pi.Created, Currency: pi.Currency,
		Metadata: pi.Metadata, PaymentIntent: pi.ID, PaymentMethod: pi.PaymentMethod, Status: "failed",
	}
	if e := pi.LastPaymentError; e != nil {
		code, msg := e.Code, e.Message
		if e.DeclineCode != "" {
			code = e.DeclineCode
		}
		out.FailureCode, out.FailureMessage = &code, &msg
	}
	return out
}
