package preflight

import (
	"context"
	"testing"
)

func TestConcurrency(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answer   string
		context  []string
		status   Status
		contains []string
	}{
		{"prod on a new account: quota 10, the resolver reserves 1", "lambda/get-account-settings-quota-10.json", []string{"oncepay:profile=prod"},
			Fail, []string{"reserves 1", "leave 9", "at least 10", "L-B99A9384", "-c oncepay:resolverReservedConcurrency=0", "--region us-east-1"}},
		{"prod with the reservation off on quota 10", "lambda/get-account-settings-quota-10.json", []string{"oncepay:profile=prod", "oncepay:resolverReservedConcurrency=0"},
			Warn, []string{"quota is 10", "throttled", "L-B99A9384"}},
		{"the sandbox reserves nothing: quota 10 only warns", "lambda/get-account-settings-quota-10.json", nil,
			Warn, []string{"quota is 10", "L-B99A9384"}},
		{"quota 50: Lambda keeps all 50 unreserved", "lambda/get-account-settings-quota-50.json", []string{"oncepay:profile=prod"},
			Fail, []string{"leave 49", "at least 50"}},
		{"quota 1000 with 900 reserved elsewhere: 100 must stay unreserved", "lambda/get-account-settings-quota-1000-900-reserved.json", []string{"oncepay:profile=prod"},
			Fail, []string{"leave 99", "at least 100"}},
		{"the sandbox asking for a reservation gets the same check", "lambda/get-account-settings-quota-10.json", []string{"oncepay:resolverReservedConcurrency=1"},
			Fail, []string{"reserves 1"}},
		{"quota 1000", "lambda/get-account-settings-quota-1000.json", []string{"oncepay:profile=prod"},
			OK, []string{"quota 1000, 1000 unreserved", "reserves 1"}},
		{"no permission", "lambda/access-denied.json", nil,
			Fail, []string{"could not check", "lambda:GetAccountSettings", "AccessDeniedException"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorded{t: t, settings: tc.answer}
			got := checkConcurrency(context.Background(), r, "us-east-1", settings(t, tc.context...))
			expect(t, got, tc.status, tc.contains...)
			if got.Check != "lambda-concurrency" || got.Region != "us-east-1" {
				t.Errorf("result names %s in %s", got.Check, got.Region)
			}
		})
	}
}
