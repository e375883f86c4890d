package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/psp"
	"github.com/oncepay/oncepay/internal/testkit/albsign"
)

// samples collects per-operation latencies; the benchmarks report their
// percentiles, and each ratio is taken against a baseline measured in the
// same loop, interleaved, so machine noise hits both sides alike.
type samples []time.Duration

func (s samples) pct(p float64) time.Duration {
	c := slices.Clone(s)
	slices.Sort(c)
	if len(c) == 0 {
		return 0
	}
	return c[min(len(c)-1, int(float64(len(c))*p))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func report(b *testing.B, name string, s samples) {
	b.ReportMetric(ms(s.pct(0.50)), name+"-p50-ms")
	b.ReportMetric(ms(s.pct(0.99)), name+"-p99-ms")
}

// floor runs the round trips the design cannot avoid, bare: the claim's
// conditional put, the guard insert, the PSP call, the final commit.
func (w *world) floor(ctx context.Context, b *testing.B, i int) string {
	id := fmt.Sprintf("floor-%d-%d", time.Now().UnixNano(), i)
	_, err := w.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(w.table),
		Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: id}, "state": &types.AttributeValueMemberS{Value: "IN_PROGRESS"},
			"expires_at": &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Unix()+3600, 10)},
		},
		ConditionExpression:       aws.String("attribute_not_exists(pk) OR expires_at < :now"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Unix(), 10)}},
	})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := w.pool.Exec(ctx, `INSERT INTO payments (payment_id, caller_id, client_key, fingerprint, amount, currency, merchant_id, state)
		VALUES ($1, 'bench', $1, 'H', 3000, 'USD', 'm1', 'PENDING')`, id); err != nil {
		b.Fatal(err)
	}
	res, err := w.psp.Charge(ctx, psp.ChargeRequest{IdempotencyKey: id + ":charge", PaymentID: id, MerchantID: "m1", Amount: 3000, Currency: "USD", PaymentMethod: "pm_card_visa"})
	if err != nil || res.Outcome != psp.Succeeded {
		b.Fatalf("psp: %v %v", res.Outcome, err)
	}
	// The final commit: one autocommit statement moving the row.
	if _, err := w.pool.Exec(ctx, `UPDATE payments SET state = 'SUCCEEDED', psp_charge = $2 WHERE payment_id = $1 AND state = 'PENDING'`, id, res.ChargeID); err != nil {
		b.Fatal(err)
	}
	return id
}

// completion is the design's fifth round trip, bare: the owner-conditional
// update that stores the final answer in the key record the floor claimed.
func (w *world) completion(ctx context.Context, b *testing.B, id string) {
	_, err := w.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(w.table),
		Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: id}},
		UpdateExpression:          aws.String("SET #s = :c, answer = :a"),
		ConditionExpression:       aws.String("#s = :p"),
		ExpressionAttributeNames:  map[string]string{"#s": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":c": &types.AttributeValueMemberS{Value: "COMPLETED"}, ":p": &types.AttributeValueMemberS{Value: "IN_PROGRESS"}, ":a": &types.AttributeValueMemberS{Value: `{"status":201,"body":"{\"payment_id\":\"x\",\"state\":\"SUCCEEDED\",\"amount\":3000}"}`}},
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkFirstCall: the whole happy path (claim, PENDING row, PSP, settle
// transaction, outbox put and completion side by side) against the floor,
// and against the design's own floor (the floor plus the completion, its
// fifth sequential round trip), so the report can tell the design's price
// from the implementation's.
func BenchmarkFirstCall(b *testing.B) { firstCall(b, 0) }

// BenchmarkFirstCallPSP300 is FirstCall with the simulator holding every
// charge 300 ms, the order of a card network's answer through a real PSP
// (an assumption, stated in BENCHMARKS.md): the same round trips, weighed
// against a PSP call of realistic length. Run it with a small count.
func BenchmarkFirstCallPSP300(b *testing.B) { firstCall(b, 300) }

// timedFirstCall sends a first call with a fresh key through h and adds
// its time to into.
func (w *world) timedFirstCall(b *testing.B, h *api.Handler, into *samples, prefix string, i int) {
	w.h = h
	start := time.Now()
	r := w.payAt("bench", fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), i), body3000, time.Now())
	*into = append(*into, time.Since(start))
	if r.Status != http.StatusCreated {
		b.Fatalf("answer %d %s", r.Status, r.Body)
	}
}

func firstCall(b *testing.B, pspDelayMS int64) {
	w := newWorld(b)
	w.timing = config.Default()
	w.clock = nil
	w.rebuildRealClock()
	if pspDelayMS > 0 {
		if err := w.sim.AddFault(pspsim.Fault{Match: pspsim.Match{PathPrefix: "/v1/payment_intents"}, Kind: pspsim.FaultSlow, DelayMS: pspDelayMS, Times: 1 << 30}); err != nil {
			b.Fatal(err)
		}
	}
	// The same handler without its outbox put (the event then waits for the
	// resolver's sweep): not a configuration anyone should run, only the
	// measure of what the side-by-side put costs on this machine.
	full := w.h
	bare := api.New(api.Deps{Claims: w.claims, Ledger: w.ledger, PSP: w.psp, Timing: w.timing,
		Log: slog.New(slog.NewJSONHandler(io.Discard, nil)), ALB: albsign.Default.Verifier(time.Now)})
	ctx := context.Background()
	var floor, design, withPut, noPut samples
	pay := func(h *api.Handler, into *samples, i int) { w.timedFirstCall(b, h, into, "first", i) }
	steps := []func(i int){
		func(i int) {
			start := time.Now()
			id := w.floor(ctx, b, i)
			floor = append(floor, time.Since(start))
			w.completion(ctx, b, id)
			design = append(design, time.Since(start))
		},
		func(i int) { pay(full, &withPut, i) },
		func(i int) { pay(bare, &noPut, i) },
	}
	interleave(b, steps)
	w.h = full
	report(b, "floor", floor)
	report(b, "design", design)
	report(b, "api", withPut)
	report(b, "api-no-outbox-put", noPut)
	b.ReportMetric(ms(withPut.pct(0.5))/ms(floor.pct(0.5)), "ratio-p50")
	b.ReportMetric(ms(withPut.pct(0.99))/ms(floor.pct(0.99)), "ratio-p99")
	b.ReportMetric(ms(withPut.pct(0.5))/ms(design.pct(0.5)), "design-ratio-p50")
	b.ReportMetric(ms(noPut.pct(0.5))/ms(design.pct(0.5)), "no-outbox-put-design-ratio-p50")
}

// BenchmarkReplay: a repeat of a completed payment against its claim bare
// (the same conditional put the handler sends, same item and condition,
// failing and returning the holder), against the key record store's claim
// (that put under a deadline, the holder decoded) and against one bare
// GetItem.
func BenchmarkReplay(b *testing.B) {
	w := newWorld(b)
	w.timing = config.Default()
	w.clock = nil
	w.rebuildRealClock()
	ctx := context.Background()
	if r := w.payAt("bench", "replayed", body3000, time.Now()); r.Status != http.StatusCreated {
		b.Fatalf("first call %d", r.Status)
	}
	req, err := payment.Parse([]byte(body3000))
	if err != nil {
		b.Fatal(err)
	}
	scope := ids.Scope("bench", "replayed")
	fp, pid := req.Fingerprint(), ids.PaymentID(scope)
	sv := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	nv := func(v int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	}
	var get, failedPut, api, store samples
	steps := []func(){
		func() {
			// The key record store's claim, as the handler makes it: the
			// same put under a deadline context, and the holder decoded.
			// Between it and the replay is the handler's own work.
			now := time.Now()
			tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			start := time.Now()
			err := w.claims.Claim(tctx, idem.Claim{Scope: scope, Fingerprint: fp, Owner: "0123456789abcdef0123456789abcdef", PaymentID: pid,
				Now: now, InProgressUntil: now.Add(5 * time.Second), ExpiresAt: now.Add(time.Hour)})
			store = append(store, time.Since(start))
			var exists *idem.ExistsError
			if !errors.As(err, &exists) || exists.Record.Answer == nil {
				b.Fatalf("the store's claim of a completed scope: %v", err)
			}
		},
		func() {
			// The claim of a repeat is a conditional put that fails and
			// returns the holder: timed bare, it says what the engine itself
			// charges for the one round trip a replay needs.
			now := time.Now()
			start := time.Now()
			_, err := w.db.PutItem(ctx, &dynamodb.PutItemInput{
				TableName: aws.String(w.table),
				Item: map[string]types.AttributeValue{
					"pk": sv(scope), "state": sv("IN_PROGRESS"), "fp": sv(fp), "owner": sv("0123456789abcdef0123456789abcdef"),
					"payment_id": sv(pid), "in_progress_until": nv(now.Add(5 * time.Second).UnixMilli()), "expires_at": nv(now.Add(time.Hour).Unix()),
				},
				ConditionExpression:                 aws.String("attribute_not_exists(pk) OR expires_at < :now"),
				ExpressionAttributeValues:           map[string]types.AttributeValue{":now": nv(now.Unix())},
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			})
			failedPut = append(failedPut, time.Since(start))
			if err == nil {
				b.Fatal("the bare claim of a held scope succeeded")
			}
		},
		func() {
			start := time.Now()
			if _, err := w.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(w.table), Key: map[string]types.AttributeValue{"pk": sv(scope)}}); err != nil {
				b.Fatal(err)
			}
			get = append(get, time.Since(start))
		},
		func() {
			start := time.Now()
			r := w.payAt("bench", "replayed", body3000, time.Now())
			api = append(api, time.Since(start))
			if r.Status != http.StatusCreated || r.Headers.Get("Idempotent-Replayed") != "true" {
				b.Fatalf("replay %d", r.Status)
			}
		},
	}
	for i := 0; b.Loop(); i++ {
		// Each takes each place in turn, so none is always the one after
		// the other two.
		for k := range steps {
			steps[(i+k)%len(steps)]()
		}
	}
	report(b, "getitem", get)
	report(b, "failedput", failedPut)
	report(b, "replay", api)
	report(b, "store", store)
	b.ReportMetric(ms(store.pct(0.5))/ms(failedPut.pct(0.5)), "store-ratio-p50")
	b.ReportMetric(ms(api.pct(0.5))/ms(get.pct(0.5)), "ratio-p50")
	b.ReportMetric(ms(api.pct(0.99))/ms(get.pct(0.99)), "ratio-p99")
	// The target's ratio: a replay over what its claim is, bare.
	b.ReportMetric(ms(api.pct(0.5))/ms(failedPut.pct(0.5)), "put-ratio-p50")
	b.ReportMetric(ms(api.pct(0.99))/ms(failedPut.pct(0.99)), "put-ratio-p99")
}

// interleave runs every step once per iteration, each iteration starting
// one step later, so no step always runs first (warm caches, GC debt) and
// the steps' figures are comparable within the run.
func interleave(b *testing.B, steps []func(i int)) {
	for i := 0; b.Loop(); i++ {
		for k := range steps {
			steps[(i+k)%len(steps)](i)
		}
	}
}
