package phone

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// The phone's resources. LOCAL-ONLY: no template declares them and a
// deployed stack has none; `make up` adds them next to the template's.
const (
	// QueueName is the phone's queue, subscribed to the push topic.
	QueueName = "oncepay-local-phone"
	// PlatformApplicationName is the phone's SNS platform application:
	// device endpoints made under it are the phone's devices.
	PlatformApplicationName = "oncepay-local-phone"
)

// LOCAL-ONLY stack outputs, written to .local/outputs.json next to the
// template's own (a deployed stack's outputs file has none of them).
const (
	OutputQueueURL               = "PhoneQueueUrl"
	OutputQueueArn               = "PhoneQueueArn"
	OutputPlatformApplicationArn = "PhonePlatformApplicationArn"
)

// LOCAL-ONLY variables of .local/env, for the phone's reader.
const (
	EnvQueueURL               = "ONCEPAY_PHONE_QUEUE_URL"
	EnvPlatformApplicationArn = "ONCEPAY_PHONE_PLATFORM_APPLICATION_ARN"
	// EnvFile overrides where the phone's pushes are kept
	// (default <repo>/.local/phone/pushes.jsonl).
	EnvFile = "ONCEPAY_PHONE_FILE"
)

// Resources are what Provision made.
type Resources struct {
	QueueURL               string
	QueueArn               string
	SubscriptionArn        string
	PlatformApplicationArn string
}

// Outputs returns the local-only stack outputs of r.
func (r Resources) Outputs() map[string]string {
	return map[string]string{
		OutputQueueURL:               r.QueueURL,
		OutputQueueArn:               r.QueueArn,
		OutputPlatformApplicationArn: r.PlatformApplicationArn,
	}
}

// Env returns the local-only .local/env variables of r.
func (r Resources) Env() map[string]string {
	return map[string]string{EnvQueueURL: r.QueueURL, EnvPlatformApplicationArn: r.PlatformApplicationArn}
}

// ProvisionSQS is the SQS calls Provision makes.
type ProvisionSQS interface {
	CreateQueue(ctx context.Context, in *sqs.CreateQueueInput, opts ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	SetQueueAttributes(ctx context.Context, in *sqs.SetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.SetQueueAttributesOutput, error)
}

// ProvisionSNS is the SNS calls Provision makes.
type ProvisionSNS interface {
	sns.ListSubscriptionsByTopicAPIClient
	sns.ListPlatformApplicationsAPIClient
	Subscribe(ctx context.Context, in *sns.SubscribeInput, opts ...func(*sns.Options)) (*sns.SubscribeOutput, error)
	SetSubscriptionAttributes(ctx context.Context, in *sns.SetSubscriptionAttributesInput, opts ...func(*sns.Options)) (*sns.SetSubscriptionAttributesOutput, error)
	CreatePlatformApplication(ctx context.Context, in *sns.CreatePlatformApplicationInput, opts ...func(*sns.Options)) (*sns.CreatePlatformApplicationOutput, error)
}

// Names are the phone's resource names; zero fields take the defaults
// (QueueName, PlatformApplicationName). Tests give their own, so they never
// touch the local cloud's phone.
type Names struct {
	Queue               string
	PlatformApplication string
}

// Provision creates (or finds) the phone's queue, subscribes it to the push
// topic with raw message delivery off, and creates the phone's platform
// application. Running it twice changes nothing. It blocks for a few calls.
func Provision(ctx context.Context, q ProvisionSQS, n ProvisionSNS, topicArn string, names Names) (Resources, error) {
	if topicArn == "" {
		return Resources{}, errors.New("phone: provision: no push topic (the template declares none?)")
	}
	if names.Queue == "" {
		names.Queue = QueueName
	}
	if names.PlatformApplication == "" {
		names.PlatformApplication = PlatformApplicationName
	}
	var r Resources
	// CreateQueue with the same name and attributes returns the existing queue.
	out, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(names.Queue)})
	if err != nil {
		return r, fmt.Errorf("phone: create queue %s: %w", names.Queue, err)
	}
	r.QueueURL = aws.ToString(out.QueueUrl)
	qa, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: &r.QueueURL, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return r, fmt.Errorf("phone: arn of %s: %w", names.Queue, err)
	}
	r.QueueArn = qa.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	// The policy AWS needs before SNS may deliver to the queue (moto does
	// not check it; set anyway so the phone is shaped as it would be on AWS).
	policy, err := json.Marshal(map[string]any{
		"Version": "2012-10-17",
		"Statement": []map[string]any{{
			"Effect": "Allow", "Principal": map[string]string{"Service": "sns.amazonaws.com"},
			"Action": "sqs:SendMessage", "Resource": r.QueueArn,
			"Condition": map[string]any{"ArnEquals": map[string]string{"aws:SourceArn": topicArn}},
		}},
	})
	if err != nil {
		return r, err
	}
	if _, err := q.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: &r.QueueURL, Attributes: map[string]string{"Policy": string(policy)}}); err != nil {
		return r, fmt.Errorf("phone: policy of %s: %w", names.Queue, err)
	}
	if r.SubscriptionArn, err = subscribe(ctx, n, topicArn, r.QueueArn); err != nil {
		return r, err
	}
	if r.PlatformApplicationArn, err = platformApplication(ctx, n, names.PlatformApplication); err != nil {
		return r, err
	}
	return r, nil
}

// subscribe finds the queue's subscription to the topic or makes it, with
// raw message delivery off either way: the phone reads SNS's envelope.
func subscribe(ctx context.Context, n ProvisionSNS, topicArn, queueArn string) (string, error) {
	pages := sns.NewListSubscriptionsByTopicPaginator(n, &sns.ListSubscriptionsByTopicInput{TopicArn: &topicArn})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return "", fmt.Errorf("phone: subscriptions of %s: %w", topicArn, err)
		}
		for _, s := range page.Subscriptions {
			if aws.ToString(s.Protocol) != "sqs" || aws.ToString(s.Endpoint) != queueArn {
				continue
			}
			if _, err := n.SetSubscriptionAttributes(ctx, &sns.SetSubscriptionAttributesInput{
				SubscriptionArn: s.SubscriptionArn, AttributeName: aws.String("RawMessageDelivery"), AttributeValue: aws.String("false"),
			}); err != nil {
				return "", fmt.Errorf("phone: raw delivery off on %s: %w", aws.ToString(s.SubscriptionArn), err)
			}
			return aws.ToString(s.SubscriptionArn), nil
		}
	}
	out, err := n.Subscribe(ctx, &sns.SubscribeInput{
		TopicArn: &topicArn, Protocol: aws.String("sqs"), Endpoint: &queueArn,
		Attributes: map[string]string{"RawMessageDelivery": "false"}, ReturnSubscriptionArn: true,
	})
	if err != nil {
		return "", fmt.Errorf("phone: subscribe %s to %s: %w", queueArn, topicArn, err)
	}
	return aws.ToString(out.SubscriptionArn), nil
}

// platformApplication finds the phone's platform application or makes it.
// GCM, because one FCM application reaches Android and iOS devices alike.
func platformApplication(ctx context.Context, n ProvisionSNS, name string) (string, error) {
	suffix := "app/GCM/" + name
	pages := sns.NewListPlatformApplicationsPaginator(n, &sns.ListPlatformApplicationsInput{})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return "", fmt.Errorf("phone: list platform applications: %w", err)
		}
		for _, a := range page.PlatformApplications {
			if arn := aws.ToString(a.PlatformApplicationArn); strings.HasSuffix(arn, suffix) {
				return arn, nil
			}
		}
	}
	out, err := n.CreatePlatformApplication(ctx, &sns.CreatePlatformApplicationInput{
		Name: aws.String(name), Platform: aws.String("GCM"),
		// moto checks no credential; a real FCM application would need its key.
		Attributes: map[string]string{"PlatformCredential": "local-phone"},
	})
	if err != nil {
		return "", fmt.Errorf("phone: create platform application %s: %w", name, err)
	}
	return aws.ToString(out.PlatformApplicationArn), nil
}
