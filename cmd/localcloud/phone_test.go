package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/phone"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

var quiet = slog.New(slog.NewJSONHandler(io.Discard, nil))

func TestServeRunsThePhoneUntilItsContextEnds(t *testing.T) {
	aws := testenv.AWS(t)
	sqsc, snsc := testenv.SQS(t), testenv.SNS(t)
	ctx := context.Background()
	topic := testenv.NewTopic(t, snsc)
	res, err := phone.Provision(ctx, sqsc, snsc, topic, phone.Names{Queue: "t-phone-" + testenv.RandomID(6), PlatformApplication: "t-phone-" + testenv.RandomID(6)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = sqsc.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: &res.QueueURL}) })
	env := localenv.Env{"AWS_ENDPOINT_URL": aws.Get("AWS_ENDPOINT_URL")}
	for k, v := range res.Env() {
		env[k] = v
	}
	state := t.TempDir()
	t.Setenv(phone.EnvFile, "")

	if wait := startPhone(ctx, localenv.Env{}, state, quiet); wait == nil {
		t.Fatal("startPhone without a phone in the environment returned no wait")
	} else {
		wait() // nothing runs: returns at once
	}

	runCtx, stop := context.WithCancel(ctx)
	wait := startPhone(runCtx, env, state, quiet)
	n, err := notify.New(snsc, nil, notify.Config{TopicArn: topic, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	e := event.Event{EventID: "pay_serve1:SUCCEEDED", PaymentID: "pay_serve1", CallerID: "u1", MerchantID: "m1", State: event.Succeeded, Amount: 3000, Currency: "USD"}
	if err := n.Send(ctx, notify.FromEvent(e)); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	p, err := phone.Wait(wctx, filepath.Join(state, "phone", "pushes.jsonl"), "pay_serve1", 0)
	if err != nil || p.ReplaceID != "pay_serve1" {
		t.Fatalf("the served phone got %+v, %v; want the push in .local/phone/pushes.jsonl", p, err)
	}
	stop()
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the phone did not stop within 30 s of its context ending")
	}
}
