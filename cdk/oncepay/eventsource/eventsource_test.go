package eventsource_test

import (
	"testing"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
)

func TestDefaultsAreLambdasDocumentedOnes(t *testing.T) {
	s := eventsource.DefaultStream()
	if s.BatchSize != 100 || s.MaxBatchingWindow != 0 || s.BisectOnError || s.MaxRetryAttempts != -1 ||
		s.MaxRecordAgeSeconds != -1 || s.ParallelizationFactor != 1 || s.ReportBatchItemFailures {
		t.Fatalf("DefaultStream = %+v", s)
	}
	q := eventsource.DefaultQueue()
	if q.BatchSize != 10 || q.VisibilityTimeout != 30*time.Second || q.MaxReceiveCount != 0 || q.ReportBatchItemFailures {
		t.Fatalf("DefaultQueue = %+v", q)
	}
}

func TestOncepaysSettingsAreValidAndSayWhatTheDocSays(t *testing.T) {
	d := eventsource.Default()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if !d.Relay.BisectOnError || !d.Relay.ReportBatchItemFailures || d.Relay.MaxRetryAttempts != 10 {
		t.Errorf("relay = %+v", d.Relay)
	}
	if d.Worker.MaxReceiveCount != 5 || d.Worker.VisibilityTimeout != 6*eventsource.WorkerTimeout || !d.Worker.ReportBatchItemFailures {
		t.Errorf("worker = %+v", d.Worker)
	}
	// The totals job's final invoke must not be discarded short of the
	// stream's retention (docs/stream-job.md#lost-state): retried without
	// a count, discarded an hour before the records leave the stream.
	tot := d.Totals
	if tot.MaxRetryAttempts != eventsource.Forever || tot.MaxRecordAgeSeconds != 23*3600 || tot.BisectOnError ||
		tot.ReportBatchItemFailures || tot.ParallelizationFactor != 1 || tot.TumblingWindow != time.Minute {
		t.Errorf("totals = %+v", tot)
	}
	if time.Duration(tot.MaxRecordAgeSeconds)*time.Second >= eventsource.StreamRetention {
		t.Errorf("totals discard records at %ds, not before the stream's %s retention", tot.MaxRecordAgeSeconds, eventsource.StreamRetention)
	}
}

func TestValidateRefusesWhatLambdaRefuses(t *testing.T) {
	for name, mod := range map[string]func(*eventsource.Settings){
		"stream batch 0":           func(s *eventsource.Settings) { s.Relay.BatchSize = 0 },
		"stream batch 10001":       func(s *eventsource.Settings) { s.Relay.BatchSize = 10001 },
		"starting position":        func(s *eventsource.Settings) { s.Relay.StartingPosition = "AT_TIMESTAMP" },
		"retries -2":               func(s *eventsource.Settings) { s.Relay.MaxRetryAttempts = -2 },
		"record age 30 s":          func(s *eventsource.Settings) { s.Relay.MaxRecordAgeSeconds = 30 },
		"parallelization 11":       func(s *eventsource.Settings) { s.Relay.ParallelizationFactor = 11 },
		"totals window 16 min":     func(s *eventsource.Settings) { s.Totals.TumblingWindow = 16 * time.Minute },
		"FIFO batch 11":            func(s *eventsource.Settings) { s.Worker.BatchSize = 11 },
		"FIFO batching window":     func(s *eventsource.Settings) { s.Worker.MaxBatchingWindow = time.Second },
		"max concurrency 1":        func(s *eventsource.Settings) { s.Worker.MaxConcurrency = 1 },
		"visibility over 12 hours": func(s *eventsource.Settings) { s.Worker.VisibilityTimeout = 13 * time.Hour },
	} {
		s := eventsource.Default()
		mod(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
