package phone_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/phone"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

var quiet = slog.New(slog.NewJSONHandler(io.Discard, nil))

// world is a phone of the test's own on a topic of the test's own.
type world struct {
	sqs   *sqs.Client
	sns   *sns.Client
	topic string
	res   phone.Resources
	path  string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{sqs: testenv.SQS(t), sns: testenv.SNS(t)}
	w.topic = testenv.NewTopic(t, w.sns)
	names := phone.Names{Queue: "t-phone-" + testenv.RandomID(6), PlatformApplication: "t-phone-" + testenv.RandomID(6)}
	var err error
	if w.res, err = phone.Provision(context.Background(), w.sqs, w.sns, w.topic, names); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = w.sqs.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: &w.res.QueueURL})
		_, _ = w.sns.DeletePlatformApplication(ctx, &sns.DeletePlatformApplicationInput{PlatformApplicationArn: &w.res.PlatformApplicationArn})
	})
	w.path = filepath.Join(t.TempDir(), "phone", "pushes.jsonl")
	return w
}

func (w *world) config() phone.Config {
	return phone.Config{SQS: w.sqs, QueueURL: w.res.QueueURL, Path: w.path, Wait: time.Second, Logger: quiet}
}

// push publishes, through the real notifier and the topic, the push the
// worker sends when payment pid reaches state.
func (w *world) push(t *testing.T, pid, state string) {
	t.Helper()
	n, err := notify.New(w.sns, nil, notify.Config{TopicArn: w.topic, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	e := event.Event{EventID: pid + ":" + state, PaymentID: pid, CallerID: "u1", MerchantID: "m1", State: state, Amount: 3000, Currency: "USD"}
	if err := n.Send(context.Background(), notify.FromEvent(e)); err != nil {
		t.Fatal(err)
	}
}

// inQueue counts the messages the phone's queue still holds, visible or not.
func (w *world) inQueue(t *testing.T) int {
	t.Helper()
	a, err := w.sqs.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: &w.res.QueueURL,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"} {
		v, err := strconv.Atoi(a.Attributes[k])
		if err != nil {
			t.Fatalf("%s = %q: %v", k, a.Attributes[k], err)
		}
		n += v
	}
	return n
}

// runUntil runs the reader until the file holds lines lines, then stops it.
func runUntil(t *testing.T, cfg phone.Config, lines int) { runWithin(t, cfg, lines, time.Minute) }

// runWithin is runUntil with a patience of its own.
func runWithin(t *testing.T, cfg phone.Config, lines int, patience time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- phone.Run(ctx, cfg) }()
	deadline := time.Now().Add(patience)
	for {
		got, err := phone.Read(cfg.Path)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) >= lines {
			break
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("Run ended early with %d of %d lines: %v", len(got), lines, err)
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the phone holds %d lines after %s, want %d", len(got), patience, lines)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Let the delete that follows the append go out before stopping.
	time.Sleep(300 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestProvisionSubscribesThePhoneQueueWithSNSsEnvelopeAndTwiceChangesNothing(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	attrs, err := w.sns.GetSubscriptionAttributes(ctx, &sns.GetSubscriptionAttributesInput{SubscriptionArn: &w.res.SubscriptionArn})
	if err != nil {
		t.Fatal(err)
	}
	if got := attrs.Attributes["RawMessageDelivery"]; got != "false" {
		t.Errorf("RawMessageDelivery = %q, want false: the phone reads SNS's envelope", got)
	}
	if got := attrs.Attributes["Endpoint"]; got != w.res.QueueArn {
		t.Errorf("subscription endpoint = %q, want the phone queue %s", got, w.res.QueueArn)
	}
	// Someone turned raw delivery on: the next provision turns it off again.
	if _, err := w.sns.SetSubscriptionAttributes(ctx, &sns.SetSubscriptionAttributesInput{SubscriptionArn: &w.res.SubscriptionArn,
		AttributeName: aws.String("RawMessageDelivery"), AttributeValue: aws.String("true")}); err != nil {
		t.Fatal(err)
	}
	names := phone.Names{Queue: w.res.QueueURL[strings.LastIndex(w.res.QueueURL, "/")+1:],
		PlatformApplication: w.res.PlatformApplicationArn[strings.LastIndex(w.res.PlatformApplicationArn, "/")+1:]}
	again, err := phone.Provision(ctx, w.sqs, w.sns, w.topic, names)
	if err != nil {
		t.Fatal(err)
	}
	if again != w.res {
		t.Errorf("second provision = %+v, want the same resources %+v", again, w.res)
	}
	subs, err := w.sns.ListSubscriptionsByTopic(ctx, &sns.ListSubscriptionsByTopicInput{TopicArn: &w.topic})
	if err != nil {
		t.Fatal(err)
	}
	if len(subs.Subscriptions) != 1 {
		t.Errorf("the topic has %d subscriptions after two provisions, want 1", len(subs.Subscriptions))
	}
	attrs, err = w.sns.GetSubscriptionAttributes(ctx, &sns.GetSubscriptionAttributesInput{SubscriptionArn: &w.res.SubscriptionArn})
	if err != nil {
		t.Fatal(err)
	}
	if got := attrs.Attributes["RawMessageDelivery"]; got != "false" {
		t.Errorf("RawMessageDelivery after re-provision = %q, want false", got)
	}
	out := w.res.Outputs()
	if out[phone.OutputQueueURL] != w.res.QueueURL || out[phone.OutputPlatformApplicationArn] != w.res.PlatformApplicationArn {
		t.Errorf("outputs = %v", out)
	}
}

// deleteWatch sees every delete the reader makes and what the file held
// at that moment.
type deleteWatch struct {
	phone.QueueAPI
	path string

	mu      sync.Mutex
	deletes int
	before  []int // lines in the file at each delete
}

func (d *deleteWatch) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	got, err := phone.Read(d.path)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.deletes += len(in.Entries)
	d.before = append(d.before, len(got))
	d.mu.Unlock()
	return d.QueueAPI.DeleteMessageBatch(ctx, in, opts...)
}

func TestTheReaderAppendsAPublishedPushAndDeletesItOnlyAfterTheAppend(t *testing.T) {
	w := newWorld(t)
	w.push(t, "pay_phone1", event.Succeeded)
	cfg := w.config()
	watch := &deleteWatch{QueueAPI: w.sqs, path: w.path}
	cfg.SQS = watch
	runUntil(t, cfg, 1)

	got, err := phone.Read(w.path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("phone holds %d pushes, want 1", len(got))
	}
	p := got[0]
	if p.Channel != phone.ChannelTopic || p.Source != w.topic || p.MessageID == "" || p.SentAt.IsZero() || p.ReceivedAt.IsZero() {
		t.Errorf("push %+v: want the topic channel, the topic ARN, SNS's message id and both times (from the envelope)", p)
	}
	if p.ReplaceID != "pay_phone1" || p.PaymentID != "pay_phone1" || p.EventID != "pay_phone1:SUCCEEDED" || p.State != event.Succeeded {
		t.Errorf("push ids = %+v", p)
	}
	if p.Title != "Payment confirmed" || p.Body != "30.00 USD to m1" || !strings.Contains(string(p.Payload), `"replace_id":"pay_phone1"`) {
		t.Errorf("push content = %q / %q / %s", p.Title, p.Body, p.Payload)
	}
	watch.mu.Lock()
	defer watch.mu.Unlock()
	if watch.deletes != 1 || len(watch.before) != 1 || watch.before[0] != 1 {
		t.Errorf("deletes = %d with the file holding %v lines at each; want 1 delete, made after the line was in the file", watch.deletes, watch.before)
	}
	if n := w.inQueue(t); n != 0 {
		t.Errorf("the phone queue still holds %d messages, want 0", n)
	}
}

var errCrash = errors.New("crash between the append and the delete")

func TestACrashBetweenAppendAndDeleteAppendsThePushTwiceAndThePhoneShowsOneAlert(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	// A short visibility timeout: the undeleted message comes back quickly.
	if _, err := w.sqs.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: &w.res.QueueURL, Attributes: map[string]string{"VisibilityTimeout": "1"}}); err != nil {
		t.Fatal(err)
	}
	w.push(t, "pay_phone2", event.Succeeded)

	cfg := w.config()
	cfg.AfterAppend = func() error { return errCrash }
	if err := phone.Run(ctx, cfg); !errors.Is(err, errCrash) {
		t.Fatalf("Run = %v, want the crash", err)
	}
	if got, _ := phone.Read(w.path); len(got) != 1 {
		t.Fatalf("after the crash the phone holds %d lines, want 1 (appended, then the crash)", len(got))
	}
	if n := w.inQueue(t); n != 1 {
		t.Fatalf("after the crash the queue holds %d messages, want 1: nothing was deleted", n)
	}

	// The restarted reader gets the message again: at-least-once.
	runUntil(t, w.config(), 2)
	all, err := phone.Read(w.path)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].MessageID != all[1].MessageID {
		t.Fatalf("phone lines = %+v, want the same push twice", all)
	}
	if n := w.inQueue(t); n != 0 {
		t.Errorf("queue holds %d after the restart, want 0", n)
	}
	shown := phone.Show(all)
	if len(shown) != 1 || shown[0].ReplaceID != "pay_phone2" || shown[0].Alerts != 1 {
		t.Fatalf("shown = %+v, want one entry for pay_phone2 with 1 alert (a copy the phone appended twice is one push)", shown)
	}

	// A second, distinct push about the same payment replaces it: 2 alerts.
	w.push(t, "pay_phone2", event.Refunded)
	runUntil(t, w.config(), 3)
	all, _ = phone.Read(w.path)
	shown = phone.Show(all)
	if len(shown) != 1 || shown[0].Alerts != 2 || shown[0].Latest.Title != "Payment refunded" || shown[0].Latest.State != event.Refunded {
		t.Fatalf("shown = %+v, want one entry, 2 alerts, the refund on screen", shown)
	}
}

func TestATornLastLineIsCutAndThePushComesAgain(t *testing.T) {
	w := newWorld(t)
	w.push(t, "pay_phone3", event.Succeeded)
	if err := os.MkdirAll(filepath.Dir(w.path), 0o755); err != nil {
		t.Fatal(err)
	}
	// A crash mid-write: the line has no newline, and its message was never deleted.
	if err := os.WriteFile(w.path, []byte(`{"received_at":"2026-12-01T00:00:00Z","channel":"topic","message_id":"m-torn","replace_id":"pay_`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := phone.Read(w.path); err != nil || len(got) != 0 {
		t.Fatalf("Read of a torn file = %+v, %v; want nothing and no error", got, err)
	}
	runUntil(t, w.config(), 1)
	all, err := phone.Read(w.path)
	if err != nil {
		t.Fatalf("Read after the restart: %v (the torn bytes must be cut, not glued to the next line)", err)
	}
	if len(all) != 1 || all[0].PaymentID != "pay_phone3" {
		t.Fatalf("phone = %+v, want the one push", all)
	}
}

func TestADevicePushIsReadFromItsEndpointOnce(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	ep, err := w.sns.CreatePlatformEndpoint(ctx, &sns.CreatePlatformEndpointInput{PlatformApplicationArn: &w.res.PlatformApplicationArn, Token: aws.String("tok-" + testenv.RandomID(6))})
	if err != nil {
		t.Fatal(err)
	}
	pool, _ := testenv.Ledger(t)
	store := notify.NewDeviceStore(pool)
	if err := store.Register(ctx, notify.Device{CallerID: "u1", Platform: notify.GCM, EndpointArn: aws.ToString(ep.EndpointArn)}); err != nil {
		t.Fatal(err)
	}
	n, err := notify.New(w.sns, store, notify.Config{Logger: quiet}) // no topic: the device or nothing
	if err != nil {
		t.Fatal(err)
	}
	e := event.Event{EventID: "pay_phone4:SUCCEEDED", PaymentID: "pay_phone4", CallerID: "u1", MerchantID: "m1", State: event.Succeeded, Amount: 3000, Currency: "USD"}
	if err := n.Send(ctx, notify.FromEvent(e)); err != nil {
		t.Fatal(err)
	}
	cfg := w.config()
	cfg.SNS, cfg.PlatformApplicationArn, cfg.MotoURL = w.sns, w.res.PlatformApplicationArn, os.Getenv("AWS_ENDPOINT_URL")
	cfg.DevicePoll = 200 * time.Millisecond
	// moto renders its whole state for each read: on a loaded machine a read
	// takes tens of seconds.
	runWithin(t, cfg, 1, 4*time.Minute)
	all, err := phone.Read(w.path)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 {
		t.Fatalf("phone = %+v, want one push", all)
	}
	p := all[0]
	if p.Channel != phone.ChannelDevice || p.Source != aws.ToString(ep.EndpointArn) || p.MessageID == "" {
		t.Errorf("push %+v: want the device channel, its endpoint, SNS's message id", p)
	}
	if p.ReplaceID != "pay_phone4" || p.PaymentID != "pay_phone4" || p.EventID != "pay_phone4:SUCCEEDED" || p.Title != "Payment confirmed" || p.Body != "30.00 USD to m1" {
		t.Errorf("device push = %+v, want the GCM part's tag, ids and notification", p)
	}
	if !strings.Contains(string(p.Payload), `"fcmV1Message"`) {
		t.Errorf("payload = %s, want the GCM part as the device got it", p.Payload)
	}

	// moto keeps the endpoint's messages: a restarted reader must not
	// append them again (the file is the cursor). The second listing of the
	// devices comes after one whole read of moto's state.
	lists := &countLists{EndpointsAPI: w.sns}
	cfg.SNS = lists
	ctx2, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- phone.Run(ctx2, cfg) }()
	for deadline := time.Now().Add(4 * time.Minute); lists.n.Load() < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the restarted reader did not read the devices twice in 4 min")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if again, _ := phone.Read(w.path); len(again) != 1 {
		t.Fatalf("after a restart the phone holds %d pushes, want still 1", len(again))
	}
}

type countLists struct {
	phone.EndpointsAPI
	n atomic.Int32
}

func (c *countLists) ListEndpointsByPlatformApplication(ctx context.Context, in *sns.ListEndpointsByPlatformApplicationInput, opts ...func(*sns.Options)) (*sns.ListEndpointsByPlatformApplicationOutput, error) {
	c.n.Add(1)
	return c.EndpointsAPI.ListEndpointsByPlatformApplication(ctx, in, opts...)
}

func TestFromEnvWiresThePhonesQueueDevicesAndFile(t *testing.T) {
	env := testenv.AWS(t)
	if _, err := phone.FromEnv(context.Background(), localenv.Env{}, t.TempDir(), quiet); err == nil || !strings.Contains(err.Error(), phone.EnvQueueURL) {
		t.Errorf("FromEnv without the phone's queue = %v, want an error naming %s", err, phone.EnvQueueURL)
	}
	e := localenv.Env{phone.EnvQueueURL: "http://q", phone.EnvPlatformApplicationArn: "arn:app", "AWS_ENDPOINT_URL": env.Get("AWS_ENDPOINT_URL")}
	state := t.TempDir()
	t.Setenv(phone.EnvFile, "")
	cfg, err := phone.FromEnv(context.Background(), e, state, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QueueURL != "http://q" || cfg.PlatformApplicationArn != "arn:app" || cfg.MotoURL != env.Get("AWS_ENDPOINT_URL") ||
		cfg.Path != filepath.Join(state, "phone", "pushes.jsonl") || cfg.SQS == nil || cfg.SNS == nil {
		t.Errorf("config = %+v", cfg)
	}
}
