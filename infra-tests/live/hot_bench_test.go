package live

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// hotBacklog is how many payments each phase pays before it measures: under
// the stage's burst (100), so none is throttled, and enough that the
// worker has a backlog to drain.
const hotBacklog = 90

// BenchmarkLiveHotMerchant measures events per second through relay -> SQS
// FIFO -> worker on the live stack for one merchant (one message group: its
// events are serialised by the group, and by its balance row) and for 32
// merchants beside it. Each phase pays hotBacklog payments as fast as the
// stage takes them, then reads the rate at which the worker's credits
// committed, from the credits' own stamps (created_at is the worker
// transaction's now()): (n-1) over the span from the first to the last. The
// ingest rate is reported beside it: a drain rate close to it means the
// worker kept up and the figure is the ingest's, not the worker's.
// benchreport sets the hot figure against 1/(the worker's transaction
// time) from WorkerTransaction in the same run. It runs once whatever b.N
// is: run with -benchtime 1x.
func BenchmarkLiveHotMerchant(b *testing.B) {
	env, api, token := frontDoor(b, "bench-hot-"+testenv.RandomID(4), time.Hour)
	dsn := env.Get(stackenv.LedgerDSN)
	if dsn == "" {
		b.Fatalf("%s is not set: the live stack's environment lacks its ledger", stackenv.LedgerDSN)
	}
	ctx := context.Background()
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatalf("the live stack's ledger: %v", err)
	}
	defer db.Close(ctx)
	client := &http.Client{Timeout: patience, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	run := testenv.RandomID(6)

	type phase struct {
		name      string
		merchants int
	}
	for _, p := range []phase{{"hot", 1}, {"many", merchants}} {
		prefix := fmt.Sprintf("%s-%s-", p.name, run)
		start := time.Now()
		if err := payBacklog(ctx, client, api, token, prefix, p.merchants, hotBacklog); err != nil {
			b.Fatalf("%s: %v", p.name, err)
		}
		ingest := float64(hotBacklog) / time.Since(start).Seconds()
		first, last, err := creditsSpan(ctx, db, prefix, hotBacklog, 3*time.Minute)
		if err != nil {
			b.Fatalf("%s: %v", p.name, err)
		}
		span := last.Sub(first)
		if span <= 0 {
			b.Fatalf("%s: %d credits within one clock reading: no rate to read", p.name, hotBacklog)
		}
		b.ReportMetric(float64(hotBacklog-1)/span.Seconds(), p.name+"-events/s")
		b.ReportMetric(ingest, p.name+"-ingest/s")
		b.Logf("%s: %d merchants, %d payments paid at %.1f/s, credited from %s to %s", p.name, p.merchants, hotBacklog, ingest,
			first.Format(time.StampMilli), last.Format(time.StampMilli))
	}
}

// payBacklog pays n payments spread over the merchants prefix0..prefix(k-1),
// four at a time (the local cap of environments per function), each until
// it is answered 201 or 202: a 429 (the stage's throttle) or a 5xx (the
// front door's answer for a throttled function, or the gateway's for a
// failed invocation) is retried with the same key, as the contract says.
func payBacklog(ctx context.Context, client *http.Client, api, token, prefix string, k, n int) error {
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range work {
				errs <- payOne(ctx, client, api, token, fmt.Sprintf("%s%d", prefix, i%k), fmt.Sprintf("%s%d", prefix, i))
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func payOne(ctx context.Context, client *http.Client, api, token, merchant, key string) error {
	body := fmt.Sprintf(`{"merchant_id":%q,"order_id":%q,"amount":3000,"currency":"USD","payment_method":"pm_card_visa"}`, merchant, key)
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/payments", strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("pay %s: %w", key, err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusAccepted:
			return nil
		case (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500) && attempt < 20:
			time.Sleep(100 * time.Millisecond)
		default:
			return fmt.Errorf("pay %s: %d %s", key, resp.StatusCode, raw)
		}
	}
}

// creditsSpan waits until the n credits of the merchants named prefix* have
// committed and returns the first and last commit stamps.
func creditsSpan(ctx context.Context, db *pgx.Conn, prefix string, n int, patience time.Duration) (first, last time.Time, err error) {
	deadline := time.Now().Add(patience)
	for {
		var count int
		err = db.QueryRow(ctx, `SELECT count(*), coalesce(min(created_at), now()), coalesce(max(created_at), now())
			FROM credits WHERE merchant_id LIKE $1 || '%'`, prefix).Scan(&count, &first, &last)
		if err != nil {
			return first, last, fmt.Errorf("read the credits: %w", err)
		}
		if count >= n {
			return first, last, nil
		}
		if time.Now().After(deadline) {
			return first, last, fmt.Errorf("%d of %d credits after %v", count, n, patience)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
