package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncepay/oncepay/internal/notify"
)

// PushQueueAPI is the SQS calls a PushQueue makes.
type PushQueueAPI interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
}

// PushQueue reads the pushes a topic delivers to a subscribed SQS queue:
// each message is the notify.Data document of the message's "sqs" key, raw
// or inside SNS's notification envelope.
//
// A push is one SQS message, returned once: a message received again (its
// visibility ran out before the delete landed, or a receive's reply was
// lost and the queue handed it out anew) is deleted and not counted twice,
// so a reader over a queue with a short visibility timeout loses no push to
// a lost reply and invents none.
type PushQueue struct {
	api PushQueueAPI
	url string

	mu   sync.Mutex
	seen map[string]bool // SQS message ids returned so far
}

// NewPushQueue returns a reader of the queue at url.
func NewPushQueue(api PushQueueAPI, url string) *PushQueue {
	return &PushQueue{api: api, url: url, seen: map[string]bool{}}
}

// Collect receives and deletes every push now in the queue and returns them
// in the order received. It blocks until a receive comes back empty.
func (q *PushQueue) Collect(ctx context.Context) ([]notify.Data, error) {
	var pushes []notify.Data
	for {
		got, raw, err := q.receive(ctx, 0)
		pushes = append(pushes, got...)
		// Stop at an empty receive, not at one that held only messages
		// seen before: pushes may still be queued behind them.
		if err != nil || raw == 0 {
			return pushes, err
		}
	}
}

// Await makes one long-poll receive of up to wait (whole seconds, 1 to 20),
// deletes what it got and returns it (nothing when wait ran out). SQS ends
// a long poll as soon as a push lands, so the return marks the push's
// arrival the way a phone would see it, with no polling interval added.
func (q *PushQueue) Await(ctx context.Context, wait time.Duration) ([]notify.Data, error) {
	got, _, err := q.receive(ctx, min(max(int32(wait/time.Second), 1), 20))
	return got, err
}

// receive makes one receive (a long poll of waitSeconds when > 0), deletes
// what it got and returns the pushes new to this reader, with the number of
// messages received.
func (q *PushQueue) receive(ctx context.Context, waitSeconds int32) ([]notify.Data, int, error) {
	out, err := q.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.url), MaxNumberOfMessages: 10, WaitTimeSeconds: waitSeconds})
	if err != nil {
		return nil, 0, fmt.Errorf("harness: receive pushes: %w", err)
	}
	if len(out.Messages) == 0 {
		return nil, 0, nil
	}
	// Every message is deleted and every push in the batch returned, even
	// when one message is no push: stopping at it would leave the rest to
	// come back after the visibility timeout, late or after a case looked.
	var pushes []notify.Data
	var bad []error
	var del []sqstypes.DeleteMessageBatchRequestEntry
	q.mu.Lock()
	for i, m := range out.Messages {
		del = append(del, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: m.ReceiptHandle})
		if id := aws.ToString(m.MessageId); id != "" {
			if q.seen[id] {
				continue
			}
			q.seen[id] = true
		}
		d, err := decodePush(aws.ToString(m.Body))
		if err != nil {
			bad = append(bad, err)
			continue
		}
		pushes = append(pushes, d)
	}
	q.mu.Unlock()
	if _, err := q.api.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(q.url), Entries: del}); err != nil {
		bad = append(bad, fmt.Errorf("harness: delete pushes: %w", err))
	}
	return pushes, len(out.Messages), errors.Join(bad...)
}

func decodePush(body string) (notify.Data, error) {
	var envelope struct {
		Type    string
		Message string
	}
	if err := json.Unmarshal([]byte(body), &envelope); err == nil && envelope.Type == "Notification" {
		body = envelope.Message
	}
	var d notify.Data
	if err := json.Unmarshal([]byte(body), &d); err != nil || d.ReplaceID == "" {
		return notify.Data{}, fmt.Errorf("harness: push %.80q is not a notify.Data document", body)
	}
	return d, nil
}

// Phone shows pushes the way a device does: a push whose replace id is
// already on screen replaces that notification instead of adding one. It is
// safe for concurrent use.
type Phone struct {
	mu     sync.Mutex
	shown  map[string]notify.Data
	order  []string
	alerts int
}

// NewPhone returns a phone with nothing on screen.
func NewPhone() *Phone { return &Phone{shown: map[string]notify.Data{}} }

// Receive takes pushes in arrival order.
func (p *Phone) Receive(pushes ...notify.Data) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range pushes {
		p.alerts++
		if _, on := p.shown[d.ReplaceID]; !on {
			p.order = append(p.order, d.ReplaceID)
		}
		p.shown[d.ReplaceID] = d
	}
}

// Shown returns the notifications on screen, oldest first.
func (p *Phone) Shown() []notify.Data {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]notify.Data, 0, len(p.order))
	for _, id := range p.order {
		out = append(out, p.shown[id])
	}
	return out
}

// Alerts returns how many pushes arrived (each one buzzes, replaced or not).
func (p *Phone) Alerts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.alerts
}

// EndpointMessages returns the messages moto has recorded as published to a
// platform endpoint (in no particular order), read from moto's /moto-api/data.json at baseURL (the
// AWS_ENDPOINT_URL of moto_server). moto stores each one as published: for a
// "json" structure, the whole per-platform document. Only moto has this.
func EndpointMessages(ctx context.Context, baseURL, endpointArn string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(baseURL, "/")+"/moto-api/data.json", nil)
	if err != nil {
		return nil, fmt.Errorf("harness: moto data request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("harness: read moto data: %w", err)
	}
	defer resp.Body.Close()
	var data struct {
		SNS struct {
			PlatformEndpoint []struct {
				Arn      string            `json:"arn"`
				Messages map[string]string `json:"messages"`
			} `json:"PlatformEndpoint"`
		} `json:"sns"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&data); err != nil {
		return nil, fmt.Errorf("harness: decode moto data: %w", err)
	}
	for _, e := range data.SNS.PlatformEndpoint {
		if e.Arn == endpointArn {
			out := make([]string, 0, len(e.Messages))
			for _, m := range e.Messages {
				out = append(out, m)
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("harness: moto knows no platform endpoint %s", endpointArn)
}
