package payment

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/relay"
)

// bodyWithMerchant is a valid body but for its merchant id.
func bodyWithMerchant(t testing.TB, merchant string) []byte {
	t.Helper()
	m, err := json.Marshal(merchant)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(`{"merchant_id":` + string(m) + `,"order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_card_visa"}`)
}

// Issue 13, defect 3: the merchant id is the events queue's message group
// id, so the API takes only what SQS takes there (letters, digits, ASCII
// punctuation, 1-128). A space used to pass, and then stalled the relay.
func TestAMerchantIDWithASpaceIsRefused(t *testing.T) {
	for _, tc := range []struct {
		merchant string
		ok       bool
	}{
		{"m1", true},
		{"acme-eu/store#42:main", true},
		{"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", true},
		{strings.Repeat("m", 128), true},
		{"m 1", false},
		{"acme store", false},
		{" m1", false},
		{"m\t1", false},
		{"mé", false},
		{strings.Repeat("m", 129), false},
		{"", false},
	} {
		r, err := Parse(bodyWithMerchant(t, tc.merchant))
		var fe *FieldError
		switch {
		case tc.ok && (err != nil || r.MerchantID != tc.merchant):
			t.Errorf("merchant %q: %+v, %v; want it accepted as sent", tc.merchant, r, err)
		case !tc.ok && (!errors.As(err, &fe) || fe.Field != FieldMerchantID):
			t.Errorf("merchant %q: %v; want a FieldError on %s", tc.merchant, err, FieldMerchantID)
		}
	}
}

// FuzzParseMerchantID: Parse takes a merchant id exactly when SQS would
// take it as a FIFO message group id (the relay's check of SQS's documented
// rule), and names merchant_id when it refuses one.
func FuzzParseMerchantID(f *testing.F) {
	for _, s := range []string{"m1", "m 1", " ", "", "m\u00a01", "\x7f", "a\"b\\c", strings.Repeat("m", 129), "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, merchant string) {
		if len(merchant) > 1024 {
			return // far over both limits, and the body's own limit would answer first
		}
		_, err := Parse(bodyWithMerchant(t, merchant))
		sqsOK := relay.CheckMessageID(merchant) == nil
		if (err == nil) != sqsOK {
			t.Fatalf("merchant %q: Parse = %v, SQS takes it as a group id: %v", merchant, err, sqsOK)
		}
		var fe *FieldError
		if err != nil && (!errors.As(err, &fe) || fe.Field != FieldMerchantID) {
			t.Fatalf("merchant %q: %v names the wrong field", merchant, err)
		}
	})
}
