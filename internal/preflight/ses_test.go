package preflight

import (
	"context"
	"testing"
)

func TestEmailIdentity(t *testing.T) {
	const from = "receipts@example.com"
	for _, tc := range []struct {
		name       string
		from       string
		identities map[string]string
		status     Status
		contains   []string
	}{
		{"an unverified address identity exists already", from,
			map[string]string{from: "ses/get-email-identity-address-pending.json"},
			Fail, []string{"not verified, PENDING", "AlreadyExists", "aws sesv2 delete-email-identity --email-identity receipts@example.com --region us-east-1"}},
		{"a verified address identity exists already: the stack cannot create it", from,
			map[string]string{from: "ses/get-email-identity-address-verified.json"},
			Fail, []string{"(verified)", "AlreadyExists", "delete-email-identity"}},
		{"the domain is verified", from,
			map[string]string{from: "ses/not-found-address.json", "example.com": "ses/get-email-identity-domain-verified.json"},
			OK, []string{"example.com is verified for sending"}},
		{"the domain's identity is not verified", from,
			map[string]string{from: "ses/not-found-address.json", "example.com": "ses/get-email-identity-domain-pending.json"},
			Warn, []string{"not verified (PENDING)", "DKIM", "refused"}},
		{"no identity yet: the link comes after the deploy", from,
			map[string]string{from: "ses/not-found-address.json", "example.com": "ses/not-found-domain.json"},
			Warn, []string{"neither", "every send is refused", "aws sesv2 create-email-identity --email-identity example.com --region us-east-1"}},
		{"not a bare address", "Receipts <receipts@example.com>", nil,
			Fail, []string{"not a bare email address"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorded{t: t, identities: tc.identities}
			got := checkEmailIdentity(context.Background(), r, "us-east-1", tc.from)
			expect(t, got, tc.status, tc.contains...)
		})
	}
}

func TestSESAccount(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answer   string
		status   Status
		contains []string
	}{
		{"in the sandbox", "ses/get-account-sandbox.json", Warn,
			[]string{"sandbox", "aws sesv2 put-account-details --production-access-enabled", "--region eu-west-1"}},
		{"production access", "ses/get-account-production.json", OK, []string{"out of the SES sandbox, 50000 messages a day"}},
		{"sending paused", "ses/get-account-paused.json", Fail, []string{"paused", "SHUTDOWN"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorded{t: t, account: tc.answer}
			expect(t, checkSESAccount(context.Background(), r, "eu-west-1"), tc.status, tc.contains...)
		})
	}
}
