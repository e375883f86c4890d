package preflight

import (
	"context"
	"strings"
	"testing"
)

func TestAZIDs(t *testing.T) {
	const east, west = "ec2/describe-availability-zones-us-east-1.json", "ec2/describe-availability-zones-us-west-2.json"
	for _, tc := range []struct {
		name     string
		region   string
		answer   string
		context  []string
		status   Status
		contains []string
	}{
		{"prod without ids lists the Region's", "us-east-1", east, []string{"oncepay:profile=prod"},
			Fail, []string{"-c oncepay:availabilityZoneIds=<id>,<id>.", "us-east-1a -> use1-az6", "us-east-1e -> use1-az3 (no RDS Proxy)", "us-east-1f -> use1-az5"}},
		{"use1-az3 with RDS Proxy", "us-east-1", east, []string{"oncepay:profile=prod", "oncepay:availabilityZoneIds=use1-az1,use1-az3"},
			Fail, []string{"RDS Proxy", "does not run in use1-az3 (us-east-1e)"}},
		{"use1-az3 without the proxy", "us-east-1", east, []string{"oncepay:profile=prod", "oncepay:ledgerProxy=false", "oncepay:availabilityZoneIds=use1-az1,use1-az3"},
			OK, []string{"use1-az1 (us-east-1b), use1-az3 (us-east-1e)"}},
		{"prod with two good ids", "us-east-1", east, []string{"oncepay:profile=prod", "oncepay:availabilityZoneIds=use1-az1, use1-az2"},
			OK, []string{"use1-az1 (us-east-1b), use1-az2 (us-east-1c): available"}},
		{"an id of another Region", "us-east-1", east, []string{"oncepay:profile=prod", "oncepay:availabilityZoneIds=use1-az1,usw2-az1"},
			Fail, []string{"usw2-az1 is not an AZ of us-east-1"}},
		{"a Local Zone", "us-east-1", east, []string{"oncepay:availabilityZoneIds=use1-az1,use1-bos1-az1"},
			Fail, []string{"use1-bos1-az1 is a local-zone"}},
		{"three ids", "us-east-1", east, []string{"oncepay:availabilityZoneIds=use1-az1,use1-az2,use1-az4"},
			Fail, []string{"exactly two"}},
		{"the same id twice", "us-east-1", east, []string{"oncepay:availabilityZoneIds=use1-az1,use1-az1"},
			Fail, []string{"exactly two different"}},
		{"a constrained AZ", "us-west-2", west, []string{"oncepay:profile=prod", "oncepay:availabilityZoneIds=usw2-az1,usw2-az4"},
			Fail, []string{"usw2-az4 (us-west-2d) is constrained"}},
		{"across Regions each takes its own two", "us-west-2", west, []string{"oncepay:profile=prod", "oncepay:regions=us-east-1,us-west-2",
			"oncepay:availabilityZoneIds=use1-az1,use1-az2,usw2-az1,usw2-az3"},
			OK, []string{"usw2-az1 (us-west-2b), usw2-az3 (us-west-2c): available"}},
		{"across Regions, none for this one in prod", "us-west-2", west, []string{"oncepay:profile=prod", "oncepay:regions=us-east-1,us-west-2",
			"oncepay:availabilityZoneIds=use1-az1,use1-az2"},
			Fail, []string{"two AZ ids for us-west-2", "two ids of each Region", "us-west-2b -> usw2-az1"}},
		{"across Regions, none for this one in a sandbox", "us-west-2", west, []string{"oncepay:regions=us-east-1,us-west-2",
			"oncepay:availabilityZoneIds=use1-az1,use1-az2"},
			OK, []string{"first two AZs by name"}},
		{"across Regions, one of this Region's that does not exist", "us-east-1", east, []string{"oncepay:profile=prod", "oncepay:regions=us-east-1,us-west-2",
			"oncepay:availabilityZoneIds=use1-az1,use1-az9,usw2-az1,usw2-az3"},
			Fail, []string{"use1-az9 is not an AZ of us-east-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorded{t: t, azs: tc.answer}
			got, _, read := checkAZIDs(context.Background(), r, tc.region, settings(t, tc.context...))
			if !read {
				t.Error("the AZs read as unread")
			}
			expect(t, got, tc.status, tc.contains...)
			if got.Status == Fail && strings.Contains(got.Detail, "bos") && !strings.Contains(tc.name, "Local Zone") {
				t.Errorf("a Local Zone is offered as a choice: %s", got.Detail)
			}
		})
	}
}
