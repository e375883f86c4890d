package totals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// SendMessageAPI is the SQS call the recount queue takes.
type SendMessageAPI interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// RecountQueue returns a Recount that sends each late copy, as JSON, to a
// standard queue. A copy sent twice (its invocation retried) asks for the
// same recount twice: the recount reads the ledger, so that is harmless.
func RecountQueue(client SendMessageAPI, queueURL string) (Recount, error) {
	if client == nil || queueURL == "" {
		return nil, errors.New("totals: RecountQueue needs a client and a queue URL")
	}
	return func(ctx context.Context, l Late) error {
		b, err := json.Marshal(l)
		if err != nil {
			return fmt.Errorf("totals: encode late copy %s: %w", l.EventID, err)
		}
		if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String(string(b))}); err != nil {
			return fmt.Errorf("totals: send late copy %s: %w", l.EventID, err)
		}
		return nil
	}, nil
}
