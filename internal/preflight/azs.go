package preflight

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// RDSProxyUnsupportedAZIDs are the AZ ids RDS Proxy does not run in. From
// the RDS User Guide, "Limitations for RDS Proxy": "US East (N. Virginia)
// Region does not support RDS Proxy in the use1-az3 Availability Zone."
// A proxy given a subnet there fails or silently drops that subnet.
var RDSProxyUnsupportedAZIDs = []string{"use1-az3"}

// checkAZIDs checks the AZ ids the stack in region pins its VPC to against
// the Region's AZs as this account sees them: an AZ's name maps to a
// different zone in each account, so the stack pins ids, not names. EC2's
// DescribeAvailabilityZones is the one call that gives names, ids and
// state; no DNS name or lighter API does.
//
// With one Region the stack takes every id of oncepay:availabilityZoneIds;
// across Regions, each Region's stack takes the ids that start with its
// code (use1-az… for us-east-1), read here from the Region's own AZ ids.
// It returns the ids this Region took, and whether it read the Region's
// AZs, so Run can tell which ids no Region took.
func checkAZIDs(ctx context.Context, api EC2API, region string, s Settings) (r Result, mine []string, read bool) {
	const check = "az-ids"
	out, err := api.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{})
	if err != nil {
		return couldNot(region, check, "ec2:DescribeAvailabilityZones", err), nil, false
	}
	byID := map[string]ec2types.AvailabilityZone{}
	codes := map[string]bool{}
	for _, az := range out.AvailabilityZones {
		id := deref(az.ZoneId)
		byID[id] = az
		if isAZ(az) {
			code, _, _ := strings.Cut(id, "-az")
			codes[code] = true
		}
	}
	ids := s.AvailabilityZoneIDs
	if len(s.Regions) > 0 {
		ids = nil
		for _, id := range s.AvailabilityZoneIDs {
			if code, _, found := strings.Cut(id, "-az"); found && codes[code] {
				ids = append(ids, id)
			}
		}
	}
	choose := fmt.Sprintf("%s's AZs, as this account names them: %s", region, usableAZs(out.AvailabilityZones, s.LedgerProxy))
	if len(ids) == 0 {
		if !s.Prod {
			return Result{Status: OK, Region: region, Check: check, Detail: fmt.Sprintf(
				"no AZ ids for %s: the stack takes the Region's first two AZs by name", region)}, nil, true
		}
		return Result{Status: Fail, Region: region, Check: check, Detail: fmt.Sprintf(
			"the prod profile needs two AZ ids for %s: -c %s=<id>,<id>%s. %s",
			region, KeyAvailabilityZoneIDs, acrossRegions(s), choose)}, nil, true
	}
	var problems []string
	if len(ids) != 2 || ids[0] == ids[1] {
		problems = append(problems, fmt.Sprintf("%s must name exactly two different AZ ids for %s, got %q", KeyAvailabilityZoneIDs, region, strings.Join(ids, ",")))
	}
	for _, id := range ids {
		az, found := byID[id]
		switch {
		case !found:
			problems = append(problems, fmt.Sprintf("%s is not an AZ of %s", id, region))
		case !isAZ(az):
			problems = append(problems, fmt.Sprintf("%s is a %s, not an Availability Zone", id, deref(az.ZoneType)))
		case az.State != ec2types.AvailabilityZoneStateAvailable:
			problems = append(problems, fmt.Sprintf("%s (%s) is %s", id, deref(az.ZoneName), az.State))
		case s.LedgerProxy && slices.Contains(RDSProxyUnsupportedAZIDs, id):
			problems = append(problems, fmt.Sprintf("RDS Proxy (on: the prod profile, or %s) does not run in %s (%s)", KeyLedgerProxy, id, deref(az.ZoneName)))
		}
	}
	if len(problems) > 0 {
		return Result{Status: Fail, Region: region, Check: check, Detail: fmt.Sprintf(
			"%s: choose two of %s", strings.Join(problems, "; "), choose)}, ids, true
	}
	var named []string
	for _, id := range ids {
		named = append(named, fmt.Sprintf("%s (%s)", id, deref(byID[id].ZoneName)))
	}
	return Result{Status: OK, Region: region, Check: check, Detail: strings.Join(named, ", ") + ": available"}, ids, true
}

// unclaimedAZIDs reports the ids of oncepay:availabilityZoneIds no
// Region's stack takes (across Regions the app ignores them: a typo there
// pins nothing).
func unclaimedAZIDs(s Settings, claimed []string) (Result, bool) {
	var left []string
	for _, id := range s.AvailabilityZoneIDs {
		if !slices.Contains(claimed, id) {
			left = append(left, id)
		}
	}
	if len(left) == 0 {
		return Result{}, false
	}
	return Result{Status: Warn, Region: "-", Check: "az-ids", Detail: fmt.Sprintf(
		"%s names %s, an AZ of none of %s (%s): no stack uses it; correct or drop it",
		KeyAvailabilityZoneIDs, strings.Join(left, ", "), KeyRegions, strings.Join(s.Regions, ","))}, true
}

func acrossRegions(s Settings) string {
	if len(s.Regions) == 0 {
		return ""
	}
	return " (across Regions one list holds two ids of each Region)"
}

// isAZ: Local and Wavelength Zones are listed too once opted in.
func isAZ(az ec2types.AvailabilityZone) bool {
	t := deref(az.ZoneType)
	return t == "" || t == "availability-zone"
}

// usableAZs lists the Region's available AZs as name -> id, those RDS
// Proxy cannot use marked when the proxy is on.
func usableAZs(azs []ec2types.AvailabilityZone, proxy bool) string {
	var out []string
	for _, az := range azs {
		if !isAZ(az) || az.State != ec2types.AvailabilityZoneStateAvailable {
			continue
		}
		s := deref(az.ZoneName) + " -> " + deref(az.ZoneId)
		if proxy && slices.Contains(RDSProxyUnsupportedAZIDs, deref(az.ZoneId)) {
			s += " (no RDS Proxy)"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	if len(out) == 0 {
		return "none available"
	}
	return strings.Join(out, ", ")
}
