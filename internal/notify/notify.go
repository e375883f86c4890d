// Package notify sends the push that tells a buyer how their payment ended
// (docs/mechanism.md#seed-part-7).
//
// A push can't be taken back and providers take no idempotency key, so the
// worker sends it once per intent (its notif row) and every copy carries the
// replace id, the payment id: a second copy lands on top of the first
// instead of stacking. Per platform, in one SNS message of structure "json":
//   - APNS and APNS_SANDBOX: an aps alert; the collapse id travels as the SNS
//     message attribute AWS.SNS.MOBILE.APNS.COLLAPSE_ID, which SNS turns into
//     the apns-collapse-id header.
//   - GCM: an FCM HTTP v1 message (the "fcmV1Message" shape SNS documents) whose
//     android.notification.tag is the replace id (a notification with the same
//     tag replaces the one on screen; collapse_key would not) and whose
//     apns.headers carry apns-collapse-id for iOS devices reached through FCM.
//   - sqs: the Data document, so an SQS queue subscribed to the topic sees
//     every push with its replace id (a sandbox's way to watch pushes).
//   - default: a one-line text for any other protocol.
//
// The payload holds the amount, the currency, the merchant id, the state and
// the payment id (= replace id) and event id; nothing about the buyer.
//
// Targets. A caller's devices are rows of the ledger database's devices table
// (migrations 00002, 00011): caller id, device id, SNS platform endpoint ARN
// and platform; the device token itself stays inside SNS. The devices
// function writes them (PUT and DELETE /devices/{device_id}, package
// devices: ordered by the device's own counter, a removal a tombstone);
// DeviceStore.Register makes one by hand. The ledger was chosen over a DynamoDB table because the
// worker already holds a connection to it and reads the caller's endpoints
// with one indexed query, and a registration is a rare write. If the caller
// has enabled endpoints, the push is published to each; if not (or if SNS
// reports every one of them disabled or gone), to the push topic when the
// sandbox's topic fallback is on (Config.TopicArn), and otherwise nowhere:
// Send says ErrNoDevice and the worker keeps the notification waiting for
// a device (package inbox): the app's first registration, or its rotated
// token's, often commits seconds after the push. A registration makes the
// caller's waiting pushes due at once (WakeWaiting). The fallback is a
// sandbox-only choice: every subscriber of the topic sees every
// device-less caller's payments.
package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/metrics"
)

// SNS message attributes that shape an APNs push (SNS's reserved names).
const (
	AttrAPNSCollapseID = "AWS.SNS.MOBILE.APNS.COLLAPSE_ID"
	AttrAPNSPushType   = "AWS.SNS.MOBILE.APNS.PUSH_TYPE"
)

// Platform is an SNS platform application's platform.
type Platform string

// The platforms a device can be registered on.
const (
	APNS        Platform = "APNS"
	APNSSandbox Platform = "APNS_SANDBOX"
	GCM         Platform = "GCM"
)

// Push is what one notification says.
type Push struct {
	EventID    string
	PaymentID  string
	ReplaceID  string // the thing announced: the payment
	CallerID   string // whose devices; used to find them, never sent
	MerchantID string
	State      string // event.Succeeded, Failed, Refunded, RefundFailed or Reversed
	Amount     int64  // minor units
	Currency   string
}

// FromEvent returns the push announcing e.
func FromEvent(e event.Event) Push {
	return Push{
		EventID: e.EventID, PaymentID: e.PaymentID, ReplaceID: ids.ReplaceID(e.PaymentID),
		CallerID: e.CallerID, MerchantID: e.MerchantID, State: e.State,
		Amount: e.Amount, Currency: e.Currency,
	}
}

// Data is the push's content as an app (or a subscribed queue) receives it.
type Data struct {
	ReplaceID  string `json:"replace_id"`
	PaymentID  string `json:"payment_id"`
	EventID    string `json:"event_id"`
	State      string `json:"state"`
	MerchantID string `json:"merchant_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
	Title      string `json:"title"`
	Body       string `json:"body"`
}

// Content returns the push's title, text and data.
func (p Push) Content() Data {
	amount := FormatAmount(p.Amount, p.Currency)
	var title, body string
	switch p.State {
	case event.Succeeded:
		title, body = "Payment confirmed", fmt.Sprintf("%s to %s", amount, p.MerchantID)
	case event.Refunded:
		// Same replace id as the payment's push: this one takes its place.
		title, body = "Payment refunded", fmt.Sprintf("%s to %s was refunded", amount, p.MerchantID)
	case event.RefundFailed:
		// Replaces the "refunded" push: the refund did not go through.
		title, body = "Refund failed", fmt.Sprintf("%s to %s was not refunded; the payment stands", amount, p.MerchantID)
	case event.Reversed:
		// A reconciliation refunded a charge the buyer was told did not
		// happen, or a second charge: same replace id, it takes the place
		// of the payment's last push.
		title, body = "Charge returned", fmt.Sprintf("%s to %s was charged in error and is being returned", amount, p.MerchantID)
	default:
		title, body = "Payment failed", fmt.Sprintf("%s to %s was not charged", amount, p.MerchantID)
	}
	return Data{
		ReplaceID: p.ReplaceID, PaymentID: p.PaymentID, EventID: p.EventID, State: p.State,
		MerchantID: p.MerchantID, Amount: p.Amount, Currency: p.Currency, Title: title, Body: body,
	}
}

// Message builds the SNS message (structure "json") and its attributes.
func Message(p Push) (string, map[string]snstypes.MessageAttributeValue, error) {
	if p.ReplaceID == "" || p.EventID == "" {
		return "", nil, fmt.Errorf("notify: push for %q lacks a replace id or event id", p.EventID)
	}
	d := p.Content()
	str := func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	}
	apns, err := str(map[string]any{
		"aps": map[string]any{
			"alert":     map[string]string{"title": d.Title, "body": d.Body},
			"thread-id": "payments",
		},
		"replace_id": d.ReplaceID,
		"payment_id": d.PaymentID,
		"event_id":   d.EventID,
	})
	if err != nil {
		return "", nil, fmt.Errorf("notify: APNs payload for %s: %w", p.EventID, err)
	}
	gcm, err := str(map[string]any{
		"fcmV1Message": map[string]any{
			"validate_only": false,
			"message": map[string]any{
				"notification": map[string]string{"title": d.Title, "body": d.Body},
				"data":         map[string]string{"replace_id": d.ReplaceID, "payment_id": d.PaymentID, "event_id": d.EventID},
				"android": map[string]any{
					"priority":     "high",
					"notification": map[string]string{"tag": d.ReplaceID},
				},
				"apns": map[string]any{
					"headers": map[string]string{"apns-collapse-id": d.ReplaceID},
				},
			},
		},
	})
	if err != nil {
		return "", nil, fmt.Errorf("notify: FCM payload for %s: %w", p.EventID, err)
	}
	data, err := str(d)
	if err != nil {
		return "", nil, fmt.Errorf("notify: data for %s: %w", p.EventID, err)
	}
	msg, err := str(map[string]string{
		"default":           d.Title + ": " + d.Body + " (" + d.PaymentID + ")",
		"sqs":               data,
		string(APNS):        apns,
		string(APNSSandbox): apns,
		string(GCM):         gcm,
	})
	if err != nil {
		return "", nil, fmt.Errorf("notify: message for %s: %w", p.EventID, err)
	}
	attrs := map[string]snstypes.MessageAttributeValue{
		AttrAPNSCollapseID: {DataType: aws.String("String"), StringValue: aws.String(d.ReplaceID)},
		AttrAPNSPushType:   {DataType: aws.String("String"), StringValue: aws.String("alert")},
	}
	return msg, attrs, nil
}

// FormatAmount renders minor units in the currency's usual decimals.
func FormatAmount(minor int64, currency string) string {
	decimals := 2
	switch currency {
	case "BIF", "CLP", "DJF", "GNF", "JPY", "KMF", "KRW", "MGA", "PYG", "RWF", "UGX", "VND", "VUV", "XAF", "XOF", "XPF":
		decimals = 0
	case "BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND":
		decimals = 3
	}
	sign := ""
	if minor < 0 {
		sign, minor = "-", -minor
	}
	if decimals == 0 {
		return fmt.Sprintf("%s%d %s", sign, minor, currency)
	}
	unit := int64(1)
	for range decimals {
		unit *= 10
	}
	return fmt.Sprintf("%s%d.%0*d %s", sign, minor/unit, decimals, minor%unit, currency)
}

// PublishAPI is the SNS call the Notifier makes.
type PublishAPI interface {
	Publish(ctx context.Context, in *sns.PublishInput, opts ...func(*sns.Options)) (*sns.PublishOutput, error)
}

// Devices finds a caller's push endpoints and retires dead ones.
type Devices interface {
	// Endpoints returns the caller's enabled devices.
	Endpoints(ctx context.Context, callerID string) ([]Device, error)
	// Disable marks a device SNS reported disabled or gone.
	Disable(ctx context.Context, d Device) error
}

// EnvTopicFallback names the variable that chooses the topic fallback for a
// deployed function: "true" in a sandbox, "false" (or unset) in production.
const EnvTopicFallback = stackenv.PushTopicFallback

// ErrNoTarget means no channel can take the message and no retry changes
// that (an email whose payment has no receipt address): the caller records
// the notification as undeliverable rather than retrying.
var ErrNoTarget = errors.New("notify: no target can take the message")

// ErrNoDevice means the caller has no enabled push endpoint now and the
// Notifier has no topic fallback. Unlike ErrNoTarget it is not final: the
// app may register (again) any moment, so the caller keeps the push
// waiting for a device rather than giving it up or retrying it as a
// failure.
var ErrNoDevice = errors.New("notify: the caller has no enabled push endpoint and there is no topic fallback")

// Config configures a Notifier. Zero fields take the defaults.
type Config struct {
	// TopicArn, when set, is where a push goes when the caller has no usable
	// endpoint: the sandbox's fallback, which lets a deploy with no mobile
	// platform application see every push. Every subscriber of the topic
	// then sees every device-less caller's payments, so it is never set in
	// production (cdk: Profile.PushTopicFallback). Empty: no fallback, and
	// Send returns ErrNoDevice for a caller no endpoint can reach.
	TopicArn string
	// Logger receives a line per publish (default slog.Default()).
	Logger *slog.Logger
	// Metrics receives PushPublished and PushEndpointDisabled counts.
	Metrics *metrics.Emitter
}

// Notifier publishes pushes. It is safe for concurrent use.
type Notifier struct {
	sns     PublishAPI
	devices Devices
	cfg     Config
}

// New returns a Notifier. devices may be nil: every push then goes to the
// topic, which must be set.
func New(client PublishAPI, devices Devices, cfg Config) (*Notifier, error) {
	if client == nil {
		return nil, errors.New("notify: nil SNS client")
	}
	if devices == nil && cfg.TopicArn == "" {
		return nil, errors.New("notify: New needs devices or a Config.TopicArn: there is nowhere to push")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Notifier{sns: client, devices: devices, cfg: cfg}, nil
}

// Send publishes p to each of the caller's enabled endpoints, or to the
// topic fallback if none took it, and blocks until SNS has accepted every
// publish. An endpoint SNS reports disabled or gone is marked disabled and
// skipped. With no endpoint delivered to and no fallback it returns
// ErrNoDevice (counted as PushNoTarget). It returns another error if any
// publish failed otherwise: the caller retries the whole push, and the
// replace id makes the copies that did go out harmless.
func (n *Notifier) Send(ctx context.Context, p Push) error {
	msg, attrs, err := Message(p)
	if err != nil {
		return err
	}
	var targets []Device
	if n.devices != nil && p.CallerID != "" {
		if targets, err = n.devices.Endpoints(ctx, p.CallerID); err != nil {
			return fmt.Errorf("notify: endpoints for %s: %w", p.EventID, err)
		}
	}
	delivered := 0
	for _, d := range targets {
		err := n.publish(ctx, p, d.EndpointArn, msg, attrs)
		var disabled *snstypes.EndpointDisabledException
		var gone *snstypes.NotFoundException
		switch {
		case errors.As(err, &disabled) || errors.As(err, &gone):
			n.cfg.Metrics.Count("PushEndpointDisabled", 1)
			n.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "push endpoint disabled",
				slog.String("event_id", p.EventID), slog.String("platform", string(d.Platform)))
			if derr := n.devices.Disable(ctx, d); derr != nil {
				return fmt.Errorf("notify: disable endpoint after %s: %w", p.EventID, derr)
			}
		case err != nil:
			return err
		default:
			delivered++
		}
	}
	if delivered > 0 {
		return nil
	}
	if n.cfg.TopicArn == "" {
		n.cfg.Metrics.Count("PushNoTarget", 1)
		n.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "push has no target: no enabled endpoint and no topic fallback",
			slog.String("event_id", p.EventID), slog.String("payment_id", p.PaymentID), slog.Int("endpoints", len(targets)))
		return fmt.Errorf("notify: push %s: %w", p.EventID, ErrNoDevice)
	}
	return n.publish(ctx, p, "", msg, attrs)
}

// publish sends msg to one endpoint, or to the topic when target is "".
func (n *Notifier) publish(ctx context.Context, p Push, target, msg string, attrs map[string]snstypes.MessageAttributeValue) error {
	in := &sns.PublishInput{Message: aws.String(msg), MessageStructure: aws.String("json"), MessageAttributes: attrs}
	kind := "topic"
	if target == "" {
		in.TopicArn = aws.String(n.cfg.TopicArn)
	} else {
		in.TargetArn = aws.String(target)
		kind = "endpoint"
	}
	out, err := n.sns.Publish(ctx, in)
	if err != nil {
		return fmt.Errorf("notify: publish %s to %s: %w", p.EventID, kind, err)
	}
	n.cfg.Metrics.Count("PushPublished", 1)
	n.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "push published",
		slog.String("event_id", p.EventID), slog.String("payment_id", p.PaymentID),
		slog.String("replace_id", p.ReplaceID), slog.String("target", kind),
		slog.String("message_id", aws.ToString(out.MessageId)))
	return nil
}
