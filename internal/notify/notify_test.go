package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func push() notify.Push {
	return notify.FromEvent(event.Event{
		EventID: "pay_7:SUCCEEDED", PaymentID: "pay_7", State: "SUCCEEDED", MerchantID: "m1",
		CallerID: "u1", Amount: 3000, Currency: "USD", OccurredAt: time.Unix(0, 0),
	})
}

func TestMessageCarriesTheReplaceIDForEveryPlatform(t *testing.T) {
	msg, attrs, err := notify.Message(push())
	if err != nil {
		t.Fatal(err)
	}
	var parts map[string]string
	if err := json.Unmarshal([]byte(msg), &parts); err != nil {
		t.Fatalf("message is not a JSON object of strings: %v", err)
	}
	for _, k := range []string{"default", "sqs", "APNS", "APNS_SANDBOX", "GCM"} {
		if parts[k] == "" {
			t.Errorf("no %q message", k)
		}
	}
	if got := aws.ToString(attrs[notify.AttrAPNSCollapseID].StringValue); got != "pay_7" || notify.AttrAPNSCollapseID != "AWS.SNS.MOBILE.APNS.COLLAPSE_ID" {
		t.Errorf("APNs collapse id attribute %s = %q", notify.AttrAPNSCollapseID, got)
	}
	var gcm struct {
		FcmV1Message struct {
			Message struct {
				Notification struct{ Title, Body string }
				Android      struct {
					Notification struct{ Tag string }
				}
				Apns struct {
					Headers map[string]string
				}
			}
		} `json:"fcmV1Message"`
	}
	if err := json.Unmarshal([]byte(parts["GCM"]), &gcm); err != nil {
		t.Fatal(err)
	}
	m := gcm.FcmV1Message.Message
	if m.Android.Notification.Tag != "pay_7" || m.Apns.Headers["apns-collapse-id"] != "pay_7" || m.Notification.Body != "30.00 USD to m1" {
		t.Errorf("FCM v1 message = %+v", m)
	}
	var apns struct {
		Aps struct {
			Alert struct{ Title, Body string }
		}
		ReplaceID string `json:"replace_id"`
	}
	if err := json.Unmarshal([]byte(parts["APNS"]), &apns); err != nil || apns.ReplaceID != "pay_7" || apns.Aps.Alert.Title != "Payment confirmed" {
		t.Errorf("APNs payload = %+v, %v", apns, err)
	}
	// Nothing about the buyer: the caller id never leaves the ledger.
	if strings.Contains(msg, "u1") {
		t.Errorf("message mentions the caller: %s", msg)
	}
}

func TestFormatAmountUsesTheCurrencysDecimals(t *testing.T) {
	for _, c := range []struct {
		minor    int64
		currency string
		want     string
	}{{3000, "USD", "30.00 USD"}, {5, "EUR", "0.05 EUR"}, {3000, "JPY", "3000 JPY"}, {12345, "KWD", "12.345 KWD"}} {
		if got := notify.FormatAmount(c.minor, c.currency); got != c.want {
			t.Errorf("FormatAmount(%d, %s) = %q, want %q", c.minor, c.currency, got, c.want)
		}
	}
}

func TestWithoutDevicesThePushGoesToTheTopic(t *testing.T) {
	snsc, sqsc := testenv.SNS(t), testenv.SQS(t)
	topic := testenv.NewTopic(t, snsc)
	watch := testenv.NewStandardQueue(t, sqsc)
	testenv.SubscribeQueue(t, snsc, topic, watch.Arn, true)
	n, err := notify.New(snsc, nil, notify.Config{TopicArn: topic, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Send(context.Background(), push()); err != nil {
		t.Fatal(err)
	}
	got, err := harness.NewPushQueue(sqsc, watch.URL).Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ReplaceID != "pay_7" || got[0].Amount != 3000 || got[0].MerchantID != "m1" {
		t.Fatalf("pushes on the subscribed queue = %+v", got)
	}
}

func TestRegisteredEndpointsGetThePushAndADisabledOneIsRetired(t *testing.T) {
	snsc, sqsc := testenv.SNS(t), testenv.SQS(t)
	pool, _ := testenv.Ledger(t)
	ctx := context.Background()
	topic := testenv.NewTopic(t, snsc)
	watch := testenv.NewStandardQueue(t, sqsc)
	testenv.SubscribeQueue(t, snsc, topic, watch.Arn, false)
	app, err := snsc.CreatePlatformApplication(ctx, &sns.CreatePlatformApplicationInput{
		Name: aws.String("t-app-" + testenv.RandomID(4)), Platform: aws.String("GCM"),
		Attributes: map[string]string{"PlatformCredential": "test"},
	})
	if err != nil {
		t.Fatal(err)
	}
	endpoint := func(token string) string {
		out, err := snsc.CreatePlatformEndpoint(ctx, &sns.CreatePlatformEndpointInput{PlatformApplicationArn: app.PlatformApplicationArn, Token: aws.String(token)})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.EndpointArn)
	}
	live, dead := endpoint("tok-"+testenv.RandomID(4)), endpoint("tok-"+testenv.RandomID(4))
	if _, err := snsc.SetEndpointAttributes(ctx, &sns.SetEndpointAttributesInput{EndpointArn: &dead, Attributes: map[string]string{"Enabled": "false"}}); err != nil {
		t.Fatal(err)
	}
	store := notify.NewDeviceStore(pool)
	for _, arn := range []string{live, dead} {
		if err := store.Register(ctx, notify.Device{CallerID: "u1", Platform: notify.GCM, EndpointArn: arn}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := notify.New(snsc, store, notify.Config{TopicArn: topic, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Send(ctx, push()); err != nil {
		t.Fatal(err)
	}
	msgs, err := harness.EndpointMessages(ctx, os.Getenv("AWS_ENDPOINT_URL"), live)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 {
		t.Fatalf("live endpoint got %d pushes, want 1", len(msgs))
	}
	var parts map[string]string
	if err := json.Unmarshal([]byte(msgs[0]), &parts); err != nil || !strings.Contains(parts["GCM"], `"tag":"pay_7"`) {
		t.Fatalf("endpoint message GCM part = %q, %v", parts["GCM"], err)
	}
	devs, err := store.Endpoints(ctx, "u1")
	if err != nil || len(devs) != 1 || devs[0].EndpointArn != live {
		t.Fatalf("enabled devices after the push = %+v, %v; want only the live one", devs, err)
	}
	if got, err := harness.NewPushQueue(sqsc, watch.URL).Collect(ctx); err != nil || len(got) != 0 {
		t.Fatalf("topic got %d pushes (%v), want none: the caller has a device", len(got), err)
	}
}

// Defect 12: the topic fallback shows every device-less caller's payments to
// any subscriber of the topic. Without it (production) a caller no endpoint
// can reach is pushed to nowhere: Send says ErrNoDevice (not ErrNoTarget:
// the app may register yet, so the worker keeps the push waiting) and the
// topic's subscriber sees nothing, whether the caller has no device or only
// one SNS reports disabled.
func TestWithoutTheTopicFallbackADevicelessCallerIsNeverPushedToTheTopic(t *testing.T) {
	snsc, sqsc := testenv.SNS(t), testenv.SQS(t)
	pool, _ := testenv.Ledger(t)
	ctx := context.Background()
	topic := testenv.NewTopic(t, snsc)
	watch := testenv.NewStandardQueue(t, sqsc)
	testenv.SubscribeQueue(t, snsc, topic, watch.Arn, true)
	app, err := snsc.CreatePlatformApplication(ctx, &sns.CreatePlatformApplicationInput{
		Name: aws.String("t-app-" + testenv.RandomID(4)), Platform: aws.String("GCM"),
		Attributes: map[string]string{"PlatformCredential": "test"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := snsc.CreatePlatformEndpoint(ctx, &sns.CreatePlatformEndpointInput{PlatformApplicationArn: app.PlatformApplicationArn, Token: aws.String("tok-" + testenv.RandomID(4))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := snsc.SetEndpointAttributes(ctx, &sns.SetEndpointAttributesInput{EndpointArn: ep.EndpointArn, Attributes: map[string]string{"Enabled": "false"}}); err != nil {
		t.Fatal(err)
	}
	store := notify.NewDeviceStore(pool)
	if err := store.Register(ctx, notify.Device{CallerID: "u2", Platform: notify.GCM, EndpointArn: aws.ToString(ep.EndpointArn)}); err != nil {
		t.Fatal(err)
	}
	if _, err := notify.New(snsc, nil, notify.Config{Logger: quiet}); err == nil {
		t.Fatal("New accepted no devices and no topic")
	}
	n, err := notify.New(snsc, store, notify.Config{Logger: quiet}) // no TopicArn: no fallback
	if err != nil {
		t.Fatal(err)
	}
	for _, caller := range []string{"u1", "u2"} { // u1 has no device; u2's only one is disabled
		p := push()
		p.CallerID = caller
		if err := n.Send(ctx, p); !errors.Is(err, notify.ErrNoDevice) || errors.Is(err, notify.ErrNoTarget) {
			t.Fatalf("Send for %s = %v, want ErrNoDevice, which is not final", caller, err)
		}
	}
	if got, err := harness.NewPushQueue(sqsc, watch.URL).Collect(ctx); err != nil || len(got) != 0 {
		t.Fatalf("the topic's subscriber got %d pushes (%v), want none", len(got), err)
	}
	// The same callers with the sandbox's fallback on: the topic gets both.
	sandbox, err := notify.New(snsc, store, notify.Config{TopicArn: topic, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for _, caller := range []string{"u1", "u2"} {
		p := push()
		p.CallerID = caller
		if err := sandbox.Send(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	// At least one per send: a Publish whose reply is lost on the wire is
	// retried by the SDK and SNS delivers both (at-least-once; seen when moto
	// closes a connection under load), which the replace id makes harmless.
	if got, err := harness.NewPushQueue(sqsc, watch.URL).Collect(ctx); err != nil || len(got) < 2 {
		t.Fatalf("with the fallback the subscriber got %d pushes (%v), want one per send", len(got), err)
	}
}

func TestARefundPushSaysRefundedAndReplacesThePayments(t *testing.T) {
	p := notify.FromEvent(event.Event{
		EventID: "pay_7:REFUNDED", PaymentID: "pay_7", State: event.Refunded, MerchantID: "m1",
		CallerID: "u1", Amount: 3000, Currency: "USD",
	})
	d := p.Content()
	if d.ReplaceID != "pay_7" || d.Title != "Payment refunded" || d.Body != "30.00 USD to m1 was refunded" || d.State != "REFUNDED" {
		t.Fatalf("refund push content = %+v", d)
	}
}
