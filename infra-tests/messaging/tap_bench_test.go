package messaging_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/clock"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

// BenchmarkTapToPush times the whole walk of a payment, one tap at a time:
// from the buyer's POST /payments handed to the real API handler (the
// DynamoDB key store, the PostgreSQL ledger, the PSP simulator over HTTP,
// the outbox put) to the push for that payment reaching the phone, through
// the outbox table's stream (polled as Lambda's mapping does: every 250 ms
// when idle), the relay, the SQS FIFO queue (long-polled as Lambda's mapping
// does), the worker's transaction and the SNS publish.
//
// The end point is the later of two moments: the push received from the
// queue subscribed to the topic (what the phone sees; the long poll ends as
// soon as it lands) and the worker's invocation returning with the
// notification row SENT. moto fans a publish out inside the Publish call,
// so the SENT mark is normally the later one; taking the later keeps the
// figure honest whichever it is.
//
// Before each tap the buyer waits a random fraction of the stream's idle
// poll interval: taps back to back would each land just after the poll that
// took the previous event and wait the full interval, where real taps land
// at any point of it. The first tap warms the connections and the stream's
// shard discovery and is not counted (cold starts are LambdaBootstrap's).
// The API answer time of the same taps is reported beside it. Run with a
// fixed count, e.g. -benchtime=300x; p999 is reported from 1000 taps on.
func BenchmarkTapToPush(b *testing.B) {
	wt := worldtest.New(b, worldtest.Options{})
	sent := make(chan sentAt, 64)
	w := newWorld(b, options{api: wt, handler: stampSent(sent)})
	// The real clock and the production timing: the benchmark is about wall
	// time, which worldtest's fake clock does not pass.
	h := api.New(api.Deps{
		Claims: wt.Claims, Ledger: wt.Ledger, PSP: wt.PSP, Publisher: wt.Outbox,
		Clock: clock.System{}, Timing: config.Default(), Log: quiet,
	})
	ctx, cancel := context.WithCancel(w.ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.stream.Run(ctx) })
	wg.Go(func() { _ = w.poller.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	const idlePoll = 250 * time.Millisecond // harness.StreamConfig's default PollInterval
	phase := rand.New(rand.NewPCG(9, 3))    // fixed: runs pause alike
	w.tap(h, sent, "tap-warm")
	var answer, push []time.Duration
	for i := 0; b.Loop(); i++ {
		time.Sleep(time.Duration(phase.Int64N(int64(idlePoll))))
		a, p := w.tap(h, sent, fmt.Sprintf("tap-%d", i))
		answer, push = append(answer, a), append(push, p)
	}
	reportDistribution(b, "tap-push", push)
	reportDistribution(b, "tap-answer", answer)
}

// sentAt says when the worker's invocation carrying a payment's event
// returned without reporting it failed.
type sentAt struct {
	paymentID string
	at        time.Time
}

// stampSent wraps the worker's handler to stamp each event it finished.
func stampSent(out chan<- sentAt) func(harness.QueueHandler) harness.QueueHandler {
	return func(next harness.QueueHandler) harness.QueueHandler {
		return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			resp, err := next(ctx, ev)
			now := time.Now()
			if err != nil {
				return resp, err
			}
			failed := map[string]bool{}
			for _, f := range resp.BatchItemFailures {
				failed[f.ItemIdentifier] = true
			}
			for _, m := range ev.Records {
				if e, derr := event.Unmarshal([]byte(m.Body)); derr == nil && !failed[m.MessageId] {
					select {
					case out <- sentAt{e.PaymentID, now}:
					default: // nobody waits for it (a duplicate); never block the worker
					}
				}
			}
			return resp, nil
		}
	}
}

// tap pays once through h and waits for that payment's push. It returns the
// API's answer time and the tap -> push time.
func (w *world) tap(h *api.Handler, sent <-chan sentAt, key string) (answer, push time.Duration) {
	w.t.Helper()
	hdr := http.Header{}
	hdr.Set("Idempotency-Key", key)
	hdr.Set("Content-Type", "application/json")
	start := time.Now()
	r := h.Serve(w.ctx, api.Request{
		Method: http.MethodPost, Path: "/payments", Headers: hdr, Body: []byte(worldtest.Body3000), Caller: "u1", Arrival: start,
	})
	answer = time.Since(start)
	var a struct {
		PaymentID string `json:"payment_id"`
	}
	if err := json.Unmarshal(r.Body, &a); err != nil || r.Status != http.StatusCreated || a.PaymentID == "" {
		w.t.Fatalf("tap %s: answer %d %s (%v)", key, r.Status, r.Body, err)
	}
	deadline := start.Add(30 * time.Second)
	var onPhone time.Time
	for onPhone.IsZero() {
		if time.Now().After(deadline) {
			w.t.Fatalf("tap %s: no push for %s within 30 s", key, a.PaymentID)
		}
		got, err := w.pushes.Await(w.ctx, time.Second)
		if err != nil {
			w.t.Fatal(err)
		}
		now := time.Now()
		for _, d := range got {
			if d.PaymentID == a.PaymentID {
				onPhone = now
			}
		}
	}
	for {
		select {
		case s := <-sent:
			if s.paymentID != a.PaymentID {
				continue // an earlier tap's redelivery
			}
			end := s.at
			if onPhone.After(end) {
				end = onPhone
			}
			return answer, end.Sub(start)
		case <-time.After(time.Until(deadline)):
			w.t.Fatalf("tap %s: the worker did not finish %s within 30 s", key, a.PaymentID)
		}
	}
}

// reportDistribution reports the minimum, the quantiles a CDF is drawn
// through (p999 only when there are 1000 samples to rank it) and the
// maximum, each as "<name>-<point>-ms".
func reportDistribution(b *testing.B, name string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	d = slices.Clone(d)
	slices.Sort(d)
	ms := func(v time.Duration) float64 { return float64(v.Microseconds()) / 1000 }
	at := func(p float64) float64 { return ms(d[min(len(d)-1, int(float64(len(d))*p))]) }
	b.ReportMetric(ms(d[0]), name+"-min-ms")
	for _, q := range []struct {
		label string
		p     float64
	}{{"p10", 0.10}, {"p25", 0.25}, {"p50", 0.50}, {"p75", 0.75}, {"p90", 0.90}, {"p99", 0.99}, {"p999", 0.999}} {
		if q.label == "p999" && len(d) < 1000 {
			continue
		}
		b.ReportMetric(at(q.p), name+"-"+q.label+"-ms")
	}
	b.ReportMetric(ms(d[len(d)-1]), name+"-max-ms")
}
