package main

import (
	"context"
	"testing"

	"github.com/aws/aws-lambda-go/cfn"
)

// TestARollbackDoesNotMigrate: CloudFormation rolls the custom resource back
// before the function, so the new binary receives the rollback's Update.
// It must answer it without a connection (none is configured here: a
// migration attempt fails on the missing endpoint).
func TestARollbackDoesNotMigrate(t *testing.T) {
	t.Setenv("ONCEPAY_LEDGER_SECRET_ARN", "")
	ev := cfn.Event{
		RequestType:           cfn.RequestUpdate,
		LogicalResourceID:     "MigrationSchema",
		ResourceProperties:    map[string]any{"AppUser": "oncepay_app", "Database": "oncepay", "Version": "7"},
		OldResourceProperties: map[string]any{"AppUser": "oncepay_app", "Database": "oncepay", "Version": "8"},
	}
	id, data, err := handle(context.Background(), ev)
	if err != nil || id != physicalID || data["Applied"] != "0" {
		t.Fatalf("rollback 8 -> 7: id %q data %v err %v, want the schema left alone", id, data, err)
	}
	// The same request going forward migrates, which here fails: the
	// guard above is what kept the rollback from reaching it.
	ev.ResourceProperties["Version"], ev.OldResourceProperties["Version"] = "8", "7"
	if _, _, err := handle(context.Background(), ev); err == nil {
		t.Fatal("update 7 -> 8 with no ledger configured succeeded: it did not try to migrate")
	}
}

func TestRollbackNeedsAnOlderVersion(t *testing.T) {
	for _, c := range []struct {
		typ      cfn.RequestType
		to, from any
		want     bool
	}{
		{cfn.RequestUpdate, "7", "8", true},
		{cfn.RequestUpdate, "9", "10", true}, // numbers, not strings: "9" > "10"
		{cfn.RequestUpdate, "8", "7", false},
		{cfn.RequestUpdate, "8", "8", false}, // a configuration change: migrate (a no-op)
		{cfn.RequestUpdate, "8", nil, false},
		{cfn.RequestUpdate, "x", "8", false},
		{cfn.RequestCreate, "7", "8", false},
	} {
		ev := cfn.Event{RequestType: c.typ, ResourceProperties: map[string]any{"Version": c.to}, OldResourceProperties: map[string]any{"Version": c.from}}
		if got := rollback(ev); got != c.want {
			t.Errorf("%s %v <- %v: rollback %v, want %v", c.typ, c.to, c.from, got, c.want)
		}
	}
}
