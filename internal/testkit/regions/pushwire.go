package regions

import (
	"context"
	"net"
	"net/http"
	"sync"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/oncepay/oncepay/internal/notify"
)

// pushAnswers watches both Regions' push publishes on the wire. A publish
// attempt whose answer never came back (the connection dropped, as the
// local cloud's emulator sometimes does under load, or a 5xx) may have gone
// out all the same, and the SDK's retry sends it again: one more copy of
// the push, with the same replace id. That is the push's accepted repeat
// (docs/guarantees.md, "What is at least once": the provider takes no
// key), not a second notification of the payment, so the chaos check
// allows one more push per lost answer, and counts them.
//
// LosePushAnswers arms the same fault on purpose, for a test.
type pushAnswers struct {
	mu   sync.Mutex
	lost map[string]int // answers lost, by replace id (the payment id)
	lose map[string]int // answers still to lose on purpose, by replace id
}

func newPushAnswers() *pushAnswers {
	return &pushAnswers{lost: map[string]int{}, lose: map[string]int{}}
}

// LosePushAnswers makes the next n publish attempts of replaceID's pushes,
// in either Region, go out and lose their answer, as a dropped connection
// does: the SDK sends each again.
func (s *System) LosePushAnswers(replaceID string, n int) {
	s.pushes.mu.Lock()
	defer s.pushes.mu.Unlock()
	s.pushes.lose[replaceID] += n
}

// LostPushAnswers is how many publish attempts of replaceID's pushes lost
// their answer so far (armed or not).
func (s *System) LostPushAnswers(replaceID string) int {
	s.pushes.mu.Lock()
	defer s.pushes.mu.Unlock()
	return s.pushes.lost[replaceID]
}

func (a *pushAnswers) total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, v := range a.lost {
		n += v
	}
	return n
}

// wrap is a world's story.Options.WrapPush.
func (a *pushAnswers) wrap(next notify.PublishAPI) notify.PublishAPI {
	return pushWire{next: next, a: a}
}

type pushWire struct {
	next notify.PublishAPI
	a    *pushAnswers
}

func (p pushWire) Publish(ctx context.Context, in *sns.PublishInput, opts ...func(*sns.Options)) (*sns.PublishOutput, error) {
	// The replace id travels as the APNs collapse id (notify.Message).
	id := aws.ToString(in.MessageAttributes[notify.AttrAPNSCollapseID].StringValue)
	opts = append(opts, func(o *sns.Options) { o.HTTPClient = attempts{next: o.HTTPClient, a: p.a, id: id} })
	return p.next.Publish(ctx, in, opts...)
}

// attempts sees every HTTP attempt of one publish.
type attempts struct {
	next sns.HTTPClient
	a    *pushAnswers
	id   string
}

func (t attempts) Do(r *http.Request) (*http.Response, error) {
	t.a.mu.Lock()
	lose := t.a.lose[t.id] > 0
	if lose {
		t.a.lose[t.id]--
	}
	t.a.mu.Unlock()
	resp, err := t.next.Do(r)
	if lose && err == nil {
		// Published; the answer is lost on the way back.
		resp.Body.Close()
		resp, err = nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	if err != nil || resp.StatusCode >= http.StatusInternalServerError {
		t.a.mu.Lock()
		t.a.lost[t.id]++
		t.a.mu.Unlock()
	}
	return resp, err
}
