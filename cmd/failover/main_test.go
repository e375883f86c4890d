package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/home"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// The command moves the failed Region's callers and the default, against
// DynamoDB Local, and refuses a move to the Region that failed.
func TestTheCommandMovesTheFailedRegionsCallers(t *testing.T) {
	db := testenv.DynamoDB(t)
	table := testenv.NewTable(t, db, "caller")
	m := home.NewMover(db, table)
	ctx := context.Background()
	// The local cloud's client signs for us-east-1: the Region taking over.
	for c, r := range map[string]string{"u1": "us-west-2", "u2": "us-east-1"} {
		if _, err := m.Move(ctx, c, r, 0); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"-table", table, "-from", "us-west-2", "-to", "us-east-1", "-default", "us-west-2"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		if r["region"] != "us-east-1" {
			t.Errorf("moved %v", r)
		}
		got[r["caller"].(string)] = r["version"].(float64)
	}
	if len(got) != 2 || got["u1"] != 2 || got[home.Everyone] != 1 {
		t.Errorf("moved %v, want u1 at version 2 and the default at 1", got)
	}
	if !strings.Contains(errOut.String(), "homed in us-east-1 (the default record, version 1)") {
		t.Errorf("the command's report: %s", errOut.String())
	}
	if err := run(ctx, []string{"-table", table, "-from", "us-east-1", "-to", "us-east-1", "-default", "us-east-1"}, &out, &errOut); err == nil {
		t.Error("a move to the failed Region itself was accepted")
	}
	if err := run(ctx, []string{"-table", table, "-from", "us-west-2", "-to", "eu-west-1", "-default", "us-west-2"}, &out, &errOut); err == nil {
		t.Error("a move written into another Region's replica than the client's was accepted")
	}
}

// A -default that is not the failed Region writes no default record; the
// command says that callers without a record stay where each stack's
// ONCEPAY_HOME_DEFAULT puts them, and how to move them.
func TestTheCommandWarnsWhenNoDefaultRecordExists(t *testing.T) {
	db := testenv.DynamoDB(t)
	table := testenv.NewTable(t, db, "caller")
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"-table", table, "-from", "us-west-2", "-to", "us-east-1", "-default", "us-east-1"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut.String(), "WARNING: no default record") || !strings.Contains(errOut.String(), "rerun with -default us-west-2") {
		t.Errorf("no warning: %s", errOut.String())
	}
}
