package preflight

import (
	"context"
	"testing"
)

func TestPlatformApp(t *testing.T) {
	const arn = "arn:aws:sns:us-east-1:123456789012:app/APNS/oncepay"
	for _, tc := range []struct {
		name     string
		arn      string
		apps     map[string]string
		status   Status
		contains []string
	}{
		{"enabled", arn, map[string]string{arn: "sns/get-platform-application-attributes-enabled.json"},
			OK, []string{"exists and is enabled"}},
		{"disabled", arn, map[string]string{arn: "sns/get-platform-application-attributes-disabled.json"},
			Fail, []string{"is disabled", "set-platform-application-attributes", "PlatformCredential"}},
		{"missing", arn, map[string]string{arn: "sns/not-found.json"},
			Fail, []string{"does not exist", "create-platform-application"}},
		{"in another Region", "arn:aws:sns:eu-west-1:123456789012:app/GCM/oncepay", nil,
			Fail, []string{"is in eu-west-1", "publishes in us-east-1"}},
		{"not an application's ARN", "arn:aws:sns:us-east-1:123456789012:pushes", nil,
			Fail, []string{"not a platform application ARN"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorded{t: t, apps: tc.apps}
			expect(t, checkPlatformApp(context.Background(), r, "us-east-1", tc.arn), tc.status, tc.contains...)
		})
	}
}
