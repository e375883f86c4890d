// Package live benchmarks the live local stack (`localcloud serve`: every
// function under aws-lambda-rie, the stream and queue mappings, the front
// door playing the template's HTTP API) through its public surface only:
// POST /payments at the HttpApiUrl with a local caller token, and the push
// topic through a queue of the benchmark's own.
package live

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/localcloud/frontdoor"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/testkit/openloop"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// The phases: a bounded run at 1/s and at 50/s (the stage's throttle rate:
// the template sets 50/s, burst 100, and the front door plays it), then a
// ramp of short steps to find where the p99 passes a second.
var (
	steady = []phase{{1, 20 * time.Second}, {50, 10 * time.Second}}
	ramp   = []phase{{5, 20 * time.Second}, {10, 10 * time.Second}, {20, 5 * time.Second}, {40, 4 * time.Second}, {80, 4 * time.Second}}
)

// Each ramp step has at least 100 taps (the lower rates run longer), so its
// p99 is read from 100 samples or more.

// patience is how long a tap waits for its push before it counts as lost.
const patience = 30 * time.Second

// merchants spread the taps over this many merchants (one FIFO message
// group each), as a marketplace's traffic is spread; one hot merchant
// serialises in its group and is RelayToWorker's single-group figure.
const merchants = 16

type phase struct {
	rate float64
	dur  time.Duration
}

// BenchmarkLiveTapToPush times tap -> push on the live stack, open loop:
// taps arrive on a fixed schedule at the phase's rate whatever the stack's
// answers do. A tap's time starts just before its POST is sent and ends
// when the long poll of the benchmark's own queue subscribed to the push
// topic returns its push (harness.PushQueue.Await: SQS ends the poll as
// soon as a push lands), so the phone's own reader is not competed with.
// A refused (429), failed or unanswered tap, or one whose push does not
// come within 30 s, counts against the percentiles as slower than every
// delivered one. It runs once whatever b.N is: run with -benchtime 1x.
func BenchmarkLiveTapToPush(b *testing.B) {
	env, api, token := frontDoor(b, "bench-"+testenv.RandomID(4), 2*time.Hour)
	topic := env.Get(stackenv.PushTopicArn)
	if topic == "" {
		b.Fatalf("%s is not set: the live stack's environment lacks the push topic", stackenv.PushTopicArn)
	}
	sq, sn := testenv.SQS(b), testenv.SNS(b)
	if n, err := testenv.DropDeadSubscriptions(context.Background(), sn, sq, topic); err != nil {
		b.Fatal(err)
	} else if n > 0 {
		b.Logf("dropped %d subscriptions of the push topic to deleted queues (a killed run's)", n)
	}
	q := testenv.NewStandardQueue(b, sq)
	testenv.SubscribeQueue(b, sn, topic, q.Arn, true)

	ctx, cancel := context.WithCancel(context.Background())
	pushes := newArrivals()
	var readers sync.WaitGroup
	defer func() { cancel(); readers.Wait() }()
	pq := harness.NewPushQueue(sq, q.URL)
	// Several long polls at once, so at 80/s a receive's 10 messages do not
	// queue the rest behind it.
	for range 4 {
		readers.Go(func() { pushes.read(ctx, pq) })
	}

	d := &driver{api: api, token: token, pushes: pushes, run: testenv.RandomID(6),
		client: &http.Client{Timeout: patience, Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 0}}}
	// Warm-up, not counted: one tap, then four at once (the local cap of
	// environments per function), so cold starts are not in the figures
	// (they are LambdaBootstrap's).
	openloop.Run(ctx, []time.Duration{0}, d.tap)
	openloop.Run(ctx, make([]time.Duration, 4), d.tap)

	var lines []string
	report := func(prefix string, s openloop.Summary, out []openloop.Outcome) {
		var refused, server, lost, failed int
		var late time.Duration
		statuses := map[int]int{}
		for _, o := range out {
			switch {
			case o.OK:
			case o.Status == http.StatusTooManyRequests:
				refused++ // the stage's throttle
			case o.Status >= 500:
				server++ // the front door's 500 for a throttled function, or a function error
			case o.Status == http.StatusCreated || o.Status == http.StatusAccepted:
				lost++ // answered, but no push within patience
			default:
				failed++ // no answer, or another status
			}
			statuses[o.Status]++
			late = max(late, o.Late)
		}
		// The answers of the taps the API answered 201/202, as the
		// in-process benchmark's tap-answer: where the door's queue for
		// the api's environments shows.
		var answered []openloop.Outcome
		for _, o := range out {
			if o.Answer > 0 {
				answered = append(answered, openloop.Outcome{Latency: o.Answer, OK: true})
			}
		}
		ans := openloop.Summarize(s.Rate, answered)
		for _, q := range []struct {
			label string
			p     float64
		}{{"p50", 0.50}, {"p99", 0.99}} {
			b.ReportMetric(msOf(s.Delivered(q.p)), prefix+"tap-push-"+q.label+"-ms")
			b.ReportMetric(msOf(ans.Delivered(q.p)), prefix+"tap-answer-"+q.label+"-ms")
		}
		// The p99 over all taps, refused and lost ones counting as slower
		// than any (capped at the patience for the report).
		b.ReportMetric(msOf(min(s.Quantile(0.99), patience)), prefix+"all-p99-ms")
		b.ReportMetric(float64(s.N), prefix+"taps")
		b.ReportMetric(float64(refused), prefix+"429s")
		b.ReportMetric(float64(server), prefix+"5xx")
		b.ReportMetric(float64(lost), prefix+"lost")
		b.ReportMetric(float64(failed), prefix+"errors")
		b.ReportMetric(msOf(late), prefix+"late-max-ms")
		lines = append(lines, fmt.Sprintf("%s %.0f/s: %d taps, p50 %v p99 %v (all taps: %v), %d refused, %d 5xx, %d lost, %d other errors, fired up to %v late; statuses %v (0: no answer)",
			prefix, s.Rate, s.N, s.Delivered(0.5), s.Delivered(0.99), pretty(s.Quantile(0.99)), refused, server, lost, failed, late, statuses))
	}
	for _, p := range steady {
		out := openloop.Run(ctx, openloop.Schedule(p.rate, p.dur), d.tap)
		s := openloop.Summarize(p.rate, out)
		report(fmt.Sprintf("r%.0f-", p.rate), s, out)
		d.drain(b)
		if s.Failed == s.N {
			// Not a figure: the stack is not serving (a benchmark of nothing
			// must not pass as one).
			b.Fatalf("no tap at %.0f/s got its push: %s", p.rate, lines[len(lines)-1])
		}
	}
	var steps []openloop.Summary
	for _, p := range ramp {
		out := openloop.Run(ctx, openloop.Schedule(p.rate, p.dur), d.tap)
		s := openloop.Summarize(p.rate, out)
		steps = append(steps, s)
		report(fmt.Sprintf("ramp%.0f-", p.rate), s, out)
		d.drain(b)
	}
	over, ok := openloop.FirstOver(steps, 0.99, time.Second)
	if !ok {
		over = 0 // not reached up to the ramp's top rate
	}
	b.ReportMetric(over, "p99-over-1s-rate")
	b.ReportMetric(ramp[len(ramp)-1].rate, "ramp-top-rate")
	for _, l := range lines {
		b.Log(l)
	}
}

// frontDoor finds the live stack (its environment, its HTTP API's URL,
// reachable) and mints a token naming caller, valid for ttl, with the key
// the front door verifies with.
func frontDoor(b *testing.B, caller string, ttl time.Duration) (env localenv.Env, api, token string) {
	b.Helper()
	env = testenv.AWS(b)
	root, err := localenv.Root()
	if err != nil {
		b.Fatal(err)
	}
	api = httpAPIURL(b, filepath.Join(root, ".local", "outputs.json"), env.Get(stackenv.FrontDoorURL))
	testenv.Reachable(b, "the live stack's HTTP API", api)
	secret, err := os.ReadFile(filepath.Join(root, ".local", "frontdoor.key"))
	if err != nil {
		b.Fatalf("the front door's key (the live stack writes it): %v", err)
	}
	secret = []byte(strings.TrimSpace(string(secret))) // as the front door reads it
	if token, err = frontdoor.Mint(secret, caller, ttl, time.Now()); err != nil {
		b.Fatal(err)
	}
	return env, api, token
}

// driver taps the live stack.
type driver struct {
	api, token, run string
	client          *http.Client
	pushes          *arrivals
}

// drain waits for the pushes of an overloaded phase's backlog (taps that
// outlived their patience are still being worked), so the next phase starts
// on a quiet stack: until no push has come for quietFor, at most drainMax.
func (d *driver) drain(b *testing.B) {
	start := time.Now()
	for time.Since(start) < drainMax && time.Since(d.pushes.last()) < quietFor {
		time.Sleep(200 * time.Millisecond)
	}
	b.Logf("drained %v", time.Since(start).Round(time.Millisecond))
}

const (
	quietFor = 3 * time.Second
	drainMax = 90 * time.Second
)

// tap pays once and waits for the payment's push. Its latency runs from just
// before the POST is sent to the long poll's return with the push.
func (d *driver) tap(ctx context.Context, i int) openloop.Outcome {
	body := fmt.Sprintf(`{"merchant_id":"m%d","order_id":"%d","amount":3000,"currency":"USD","payment_method":"pm_card_visa"}`, i%merchants, i)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.api+"/payments", strings.NewReader(body))
	if err != nil {
		return openloop.Outcome{}
	}
	req.Header.Set("Authorization", "Bearer "+d.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", fmt.Sprintf("live-%s-%d-%d", d.run, i, time.Now().UnixNano()))
	start := time.Now()
	resp, err := d.client.Do(req)
	if err != nil {
		return openloop.Outcome{}
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	answer := time.Since(start)
	// 201 charged; 202 still charging (its push comes when it settles).
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusAccepted {
		return openloop.Outcome{Status: resp.StatusCode}
	}
	var a struct {
		PaymentID string `json:"payment_id"`
	}
	if json.Unmarshal(raw, &a) != nil || a.PaymentID == "" {
		return openloop.Outcome{Status: resp.StatusCode}
	}
	at, ok := d.pushes.wait(ctx, a.PaymentID, start.Add(patience))
	if !ok {
		return openloop.Outcome{Status: resp.StatusCode, Answer: answer} // answered, but no push within patience
	}
	return openloop.Outcome{Latency: at.Sub(start), OK: true, Status: resp.StatusCode, Answer: answer}
}

// arrivals records when each payment's first push came off the queue.
type arrivals struct {
	mu     sync.Mutex
	by     map[string]*arrival
	latest time.Time // the last push received
}

func (a *arrivals) last() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.latest
}

type arrival struct {
	at   time.Time
	done chan struct{}
}

func newArrivals() *arrivals { return &arrivals{by: map[string]*arrival{}} }

func (a *arrivals) get(id string) *arrival {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.by[id]
	if e == nil {
		e = &arrival{done: make(chan struct{})}
		a.by[id] = e
	}
	return e
}

// read long-polls the queue until ctx ends, stamping each push with the
// moment its receive returned (a redelivered push keeps its first stamp).
func (a *arrivals) read(ctx context.Context, q *harness.PushQueue) {
	for ctx.Err() == nil {
		got, err := q.Await(ctx, time.Second)
		now := time.Now()
		if err != nil && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond) // moto hiccup: poll again
		}
		for _, p := range got {
			e := a.get(p.PaymentID)
			a.mu.Lock()
			a.latest = now
			if e.at.IsZero() {
				e.at = now
				close(e.done)
			}
			a.mu.Unlock()
		}
	}
}

// wait returns when payment id's push arrived, if it did before deadline.
func (a *arrivals) wait(ctx context.Context, id string, deadline time.Time) (time.Time, bool) {
	e := a.get(id)
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-e.done:
		return e.at, true
	case <-t.C:
	case <-ctx.Done():
	}
	return time.Time{}, false
}

// httpAPIURL reads the stack's HttpApiUrl output, the front door's URL when
// the outputs lack it.
func httpAPIURL(b *testing.B, outputs, fallback string) string {
	raw, err := os.ReadFile(outputs)
	if err == nil {
		var stacks map[string]map[string]string
		if err := json.Unmarshal(raw, &stacks); err != nil {
			b.Fatalf("outputs %s: %v", outputs, err)
		}
		for _, o := range stacks {
			if u := o["HttpApiUrl"]; u != "" {
				return strings.TrimSuffix(u, "/")
			}
		}
	}
	if fallback == "" {
		b.Fatalf("no HttpApiUrl in %s and no %s", outputs, stackenv.FrontDoorURL)
	}
	return strings.TrimSuffix(fallback, "/")
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func pretty(d time.Duration) string {
	if d == openloop.Infinite {
		return "past patience"
	}
	return d.String()
}
