package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncepay/oncepay/internal/testkit/testenv"
	"github.com/oncepay/oncepay/internal/totals"
)

func TestBadUsageIsExitTwoAndReadsNothing(t *testing.T) {
	for _, args := range [][]string{nil, {"--merchant", "m1", "--day", "2026-13-01"}, {"--merchant", "m1", "--currency", "eur"}, {"--merchant", "m1", "extra"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 || out.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q", args, code, out.String())
		}
	}
}

// The partials of two shards are summed, and the other currency's and
// day's totals stay out.
func TestAMerchantsDayIsTheSumOfItsShardsPartials(t *testing.T) {
	db := testenv.DynamoDB(t)
	name := "t-totals-" + testenv.RandomID(6)
	if _, err := db.CreateTable(context.Background(), totals.TableSchema(name)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name}) })
	sink, err := totals.NewTable(db, name)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	eur := totals.Key{Merchant: "m1", Day: "2026-12-01", Currency: "EUR"}
	for shard, n := range map[string]int64{"shard-a": 12000, "shard-b": 3000} {
		if err := sink.Put(ctx, shard, 1, map[totals.Key]int64{eur: n,
			{Merchant: "m1", Day: "2026-12-01", Currency: "USD"}: 7, {Merchant: "m1", Day: "2026-12-02", Currency: "EUR"}: 9}); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"--merchant", "m1", "--day", "2026-12-01", "--table", name}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var r Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if !r.Found || r.Total != 15000 || len(r.Partials) != 2 || r.Partials["shard-a"] != 12000 || r.Currency != "EUR" {
		t.Errorf("report %+v, want 15,000 EUR from two partials", r)
	}
}
