// Command worker is the inbox worker Lambda: the events FIFO queue in, the
// ledger's consumer tables and the push out (packages inbox and notify);
// its schedule finishes the PENDING notifications a failed push left
// (inbox.Function). Clients and the ledger pool are built once per
// execution environment.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/boot/pushboot"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/notify"
)

func main() {
	ctx := context.Background()
	log := boot.Logger("worker")
	boot.FitProcs(log)
	fail := func(err error) { log.Error("init", "err", err); os.Exit(1) }
	cfg, err := boot.AWS(ctx)
	if err != nil {
		fail(err)
	}
	pool, err := boot.Ledger(ctx)
	if err != nil {
		fail(err)
	}
	m := metrics.New(os.Stdout, "worker")
	n, err := pushboot.Notifier(cfg, pool, log, m)
	if err != nil {
		fail(err)
	}
	// Across Regions a standby's sweeps wait while its ledger is read-only
	// or, outside the home Region, does not answer.
	standby := os.Getenv(stackenv.StandbyCheck) == "true"
	isHome, err := boot.IsHome(cfg)
	if err != nil {
		fail(err)
	}
	var extra []inbox.Channel
	var sweepers []*inbox.NotifSweeper
	if email, ok := pushboot.Email(cfg, pool, log); ok {
		extra = append(extra, inbox.Channel{Name: notify.ChannelEmail, Sender: email, OnlyWithReceipt: true})
		sw, err := inbox.NewNotifSweeper(pool, email, inbox.SweepConfig{Channel: notify.ChannelEmail, Repeats: true, Logger: log, Metrics: m, CheckStandby: standby, IsHome: isHome})
		if err != nil {
			fail(err)
		}
		sweepers = append(sweepers, sw)
		// The card-declined reminder, by email, once per card and window.
		gate, ok, err := pushboot.Reminders(log, m)
		if err != nil {
			fail(err)
		}
		if ok {
			reminder := email
			reminder.Type = notify.CardDeclinedReminder
			raise := &inbox.Raise{Gate: gate, Template: string(notify.CardDeclinedReminder), States: []string{event.Failed}}
			extra = append(extra, inbox.Channel{Name: notify.ChannelReminder, Sender: reminder, Message: notify.CardDeclinedReminder, Raise: raise})
			sw, err := inbox.NewNotifSweeper(pool, reminder, inbox.SweepConfig{Channel: notify.ChannelReminder, Message: notify.CardDeclinedReminder,
				Repeats: true, Raise: raise, Logger: log, Metrics: m, CheckStandby: standby, IsHome: isHome})
			if err != nil {
				fail(err)
			}
			sweepers = append(sweepers, sw)
		}
	}
	w, err := inbox.New(pool, n, inbox.Config{
		MaxReceiveCount:  eventsource.Default().Worker.MaxReceiveCount,
		GroupConcurrency: int(pool.Config().MaxConns), // one connection per group in flight
		Extra:            extra,
		Logger:           log,
		Metrics:          m,
		Adopt:            os.Getenv(stackenv.AdoptLost) == "true",
	})
	if err != nil {
		fail(err)
	}
	sw, err := inbox.NewNotifSweeper(pool, n, inbox.SweepConfig{Logger: log, Metrics: m, CheckStandby: standby, IsHome: isHome})
	if err != nil {
		fail(err)
	}
	lambda.Start(inbox.Function{Worker: w, Sweeper: sw, Extra: sweepers}.Invoke)
}
