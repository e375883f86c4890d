package messaging_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
)

// BenchmarkOutboxToPush times one event at a time from the outbox put (the
// API's last write before it answers the tap) to the push handed to SNS (the
// notification row SENT): the stream mapping polling as Lambda's does
// (every 250 ms when idle), the relay, the FIFO queue, the worker's
// transaction and the publish. Run with a fixed count, e.g. -benchtime=40x.
func BenchmarkOutboxToPush(b *testing.B) {
	w := newWorld(b, options{queue: func(q *harness.QueueConfig) { q.Pollers, q.WaitTime = 1, 20*time.Millisecond }})
	ctx, cancel := context.WithCancel(w.ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.stream.Run(ctx) })
	wg.Go(func() { _ = w.poller.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	var lat []time.Duration
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		w.publish(pay(fmt.Sprintf("pay_lat_%d", i), fmt.Sprintf("m%02d", i%8), inbox.Succeeded, 1))
		deadline := start.Add(30 * time.Second)
		for w.scalar(`SELECT count(*) FROM notif WHERE state = 'SENT'`) < i+1 {
			if time.Now().After(deadline) {
				b.Fatalf("event %d not pushed within 30 s", i)
			}
			time.Sleep(time.Millisecond)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	at := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(float64(len(lat))*p))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.5), "push-p50-ms")
	b.ReportMetric(at(0.9), "push-p90-ms")
	b.ReportMetric(at(0.99), "push-p99-ms")
}
