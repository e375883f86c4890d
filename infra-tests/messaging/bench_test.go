package messaging_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
)

// BenchmarkRelayToWorker measures events per second from the outbox table to
// credited and notified: the stream mapping and the relay, the FIFO queue,
// and four concurrent queue pollers running the worker. Chunks of 50 events
// alternate between one hot merchant (one message group: one batch in flight
// at a time) and 32 merchants, so load on the machine hits both alike. One
// op is one event of each kind; run with a fixed count, e.g. -benchtime=400x.
// The absolute rates are the emulators' (moto handles every send, receive,
// delete and publish on one Python process); read the ratio.
func BenchmarkRelayToWorker(b *testing.B) {
	const chunk = 50
	w := newWorld(b, options{queue: func(q *harness.QueueConfig) { q.Pollers, q.WaitTime = 4, 5*time.Millisecond }})
	ctx, cancel := context.WithCancel(w.ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = w.poller.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	var took [2]time.Duration // hot, many
	done := 0
	b.ResetTimer()
	for sent := 0; sent < b.N; sent += chunk {
		size := min(chunk, b.N-sent)
		for kind := range 2 {
			evs := make([]event.Event, size)
			for i := range evs {
				merchant := "hot"
				if kind == 1 {
					merchant = fmt.Sprintf("m%02d", i%32)
				}
				evs[i] = pay(fmt.Sprintf("pay_%d_%d_%d", kind, sent, i), merchant, inbox.Succeeded, 1)
			}
			b.StopTimer()
			w.publish(evs...)
			b.StartTimer()
			start := time.Now()
			w.relayAll()
			done += size
			for w.scalar(`SELECT count(*) FROM notif WHERE state = 'SENT'`) < done {
				time.Sleep(2 * time.Millisecond)
			}
			took[kind] += time.Since(start)
		}
	}
	b.ReportMetric(float64(b.N)/took[0].Seconds(), "hot-events/s")
	b.ReportMetric(float64(b.N)/took[1].Seconds(), "many-events/s")
	b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "many/hot")
}
