package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/relay"
	"github.com/oncepay/oncepay/internal/testkit/story"
)

// errOutage is every injected downstream failure.
var errOutage = errors.New("chaos: injected outage")

// outage is a downstream that is down for its next n calls, then recovers.
// It counts the calls it failed: what fired, not what was armed.
type outage struct {
	name  string
	mu    sync.Mutex
	left  int
	fired int
}

func (o *outage) arm(n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.left = n
}

// hit reports whether this call fails.
func (o *outage) hit() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.left <= 0 {
		return false
	}
	o.left--
	o.fired++
	return true
}

// recover ends the outage and returns the calls it failed since the last
// recover.
func (o *outage) recover() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.fired
	o.left, o.fired = 0, 0
	return n
}

func (o *outage) err() error { return fmt.Errorf("%s: %w", o.name, errOutage) }

// outages are a world's downstreams the runner can break: the relay's SQS
// sends, the worker's SNS publishes and the key-record store's DynamoDB
// calls.
type outages struct {
	sqs, sns, claims outage
}

func newOutages() *outages {
	return &outages{sqs: outage{name: "SQS SendMessageBatch"}, sns: outage{name: "SNS Publish"}, claims: outage{name: "DynamoDB (key store)"}}
}

// install wires the outages into a world's options.
func (o *outages) install(opts *story.Options) {
	opts.WrapRelaySQS = func(next relay.SendMessageBatchAPI) relay.SendMessageBatchAPI { return relaySQS{next, &o.sqs} }
	opts.WrapPush = func(next notify.PublishAPI) notify.PublishAPI { return pushSNS{next, &o.sns} }
	opts.ClaimsClient = append(opts.ClaimsClient, func(do *dynamodb.Options) {
		do.HTTPClient = failingHTTP{next: do.HTTPClient, o: &o.claims}
		// The SDK would retry a failed connection with backoff in real
		// time; an injected outage fails at once, every other error is
		// retried as the SDK does.
		do.Retryer = noRetryOnOutage{do.Retryer}
	})
}

func (o *outages) recoverAll() (sqsFired, snsFired, claimsFired int) {
	return o.sqs.recover(), o.sns.recover(), o.claims.recover()
}

type relaySQS struct {
	next relay.SendMessageBatchAPI
	o    *outage
}

func (r relaySQS) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	if r.o.hit() {
		return nil, r.o.err()
	}
	return r.next.SendMessageBatch(ctx, in, opts...)
}

type pushSNS struct {
	next notify.PublishAPI
	o    *outage
}

func (p pushSNS) Publish(ctx context.Context, in *sns.PublishInput, opts ...func(*sns.Options)) (*sns.PublishOutput, error) {
	if p.o.hit() {
		return nil, p.o.err()
	}
	return p.next.Publish(ctx, in, opts...)
}

// failingHTTP fails a call on the wire, before it reaches DynamoDB.
type failingHTTP struct {
	next interface {
		Do(*http.Request) (*http.Response, error)
	}
	o *outage
}

func (f failingHTTP) Do(r *http.Request) (*http.Response, error) {
	if f.o.hit() {
		return nil, f.o.err()
	}
	return f.next.Do(r)
}

type noRetryOnOutage struct{ aws.Retryer }

func (r noRetryOnOutage) IsErrorRetryable(err error) bool {
	return !errors.Is(err, errOutage) && r.Retryer.IsErrorRetryable(err)
}
