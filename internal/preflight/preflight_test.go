package preflight

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// Across Regions every per-Region check runs in each Region, with that
// Region's clients.
func TestRunEachRegion(t *testing.T) {
	s := settings(t, "oncepay:profile=prod", "oncepay:regions=us-east-1,us-west-2", "oncepay:emailFrom=receipts@example.com",
		"oncepay:availabilityZoneIds=use1-az1,use1-az2,usw2-az1,usw2-az4,euw1-az2")
	recordings := map[string]*recorded{
		"us-east-1": {t: t, settings: "lambda/get-account-settings-quota-1000.json", account: "ses/get-account-production.json",
			identities: map[string]string{"receipts@example.com": "ses/not-found-address.json", "example.com": "ses/get-email-identity-domain-verified.json"},
			azs:        "ec2/describe-availability-zones-us-east-1.json"},
		"us-west-2": {t: t, settings: "lambda/get-account-settings-quota-10.json", account: "ses/get-account-sandbox.json",
			identities: map[string]string{"receipts@example.com": "ses/get-email-identity-address-pending.json"},
			azs:        "ec2/describe-availability-zones-us-west-2.json"},
	}
	var asked []string
	results := Run(context.Background(), s, s.Regions, func(region string) Clients {
		asked = append(asked, region)
		return recordings[region].clients()
	})
	if !slices.Equal(asked, []string{"us-east-1", "us-west-2"}) {
		t.Fatalf("clients asked for %v", asked)
	}
	var got []string
	for _, r := range results {
		got = append(got, r.Status.String()+" "+r.Region+" "+r.Check)
	}
	want := []string{
		"ok us-east-1 lambda-concurrency", "ok us-east-1 ses-identity", "ok us-east-1 ses-account", "ok us-east-1 az-ids",
		"FAIL us-west-2 lambda-concurrency", "FAIL us-west-2 ses-identity", "warn us-west-2 ses-account", "FAIL us-west-2 az-ids",
		"warn - az-ids",
	}
	if !slices.Equal(got, want) {
		t.Errorf("results\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !Failed(results) {
		t.Error("Failed is false")
	}
	expect(t, results[7], Fail, "usw2-az4 (us-west-2d) is constrained")
	expect(t, results[8], Warn, "names euw1-az2, an AZ of none of oncepay:regions")
}

// The sandbox with nothing optional makes one check.
func TestRunSandboxDefaults(t *testing.T) {
	r := &recorded{t: t, settings: "lambda/get-account-settings-quota-1000.json"}
	results := Run(context.Background(), settings(t), []string{"eu-west-1"}, func(string) Clients { return r.clients() })
	if len(results) != 1 || results[0].Check != "lambda-concurrency" || Failed(results) {
		t.Errorf("results %+v", results)
	}
}

func TestPrint(t *testing.T) {
	var b strings.Builder
	err := Print(&b, []Result{
		{Status: OK, Region: "us-east-1", Check: "lambda-concurrency", Detail: "quota 1000"},
		{Status: Warn, Region: "us-east-1", Check: "ses-account", Detail: "sandbox"},
		{Status: Fail, Region: "us-east-1", Check: "az-ids", Detail: "choose"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "ok    us-east-1  lambda-concurrency  quota 1000\n" +
		"warn  us-east-1  ses-account         sandbox\n" +
		"FAIL  us-east-1  az-ids              choose\n" +
		"preflight: 1 ok, 1 warn, 1 FAIL\n"
	if b.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", b.String(), want)
	}
}
