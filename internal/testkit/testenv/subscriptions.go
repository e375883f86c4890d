package testenv

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// DropDeadSubscriptions unsubscribes every SQS subscription of topic whose
// queue no longer exists and returns how many it dropped. moto fails every
// Publish to a topic with such a subscription, so one left by a run killed
// before its cleanup would stop the live stack's pushes (and this run's):
// a test that subscribes a queue of its own to a live topic calls it first.
func DropDeadSubscriptions(ctx context.Context, n *sns.Client, q *sqs.Client, topic string) (int, error) {
	dropped := 0
	p := sns.NewListSubscriptionsByTopicPaginator(n, &sns.ListSubscriptionsByTopicInput{TopicArn: &topic})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return dropped, fmt.Errorf("testenv: list subscriptions of %s: %w", topic, err)
		}
		for _, s := range page.Subscriptions {
			if aws.ToString(s.Protocol) != "sqs" {
				continue
			}
			// arn:aws:sqs:<region>:<account>:<name>
			parts := strings.Split(aws.ToString(s.Endpoint), ":")
			if len(parts) != 6 {
				continue
			}
			_, err := q.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &parts[5], QueueOwnerAWSAccountId: &parts[4]})
			var gone *sqstypes.QueueDoesNotExist
			if err == nil || !errors.As(err, &gone) && !strings.Contains(err.Error(), "NonExistentQueue") {
				continue // alive, or not known to be gone
			}
			if _, err := n.Unsubscribe(ctx, &sns.UnsubscribeInput{SubscriptionArn: s.SubscriptionArn}); err != nil {
				return dropped, fmt.Errorf("testenv: unsubscribe %s: %w", aws.ToString(s.SubscriptionArn), err)
			}
			dropped++
		}
	}
	return dropped, nil
}
