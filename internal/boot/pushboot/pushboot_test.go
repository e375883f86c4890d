package pushboot

import (
	"io"
	"log/slog"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/notify"
)

// The fallback is off unless a deployment says "true"; anything else but
// "false" is refused rather than guessed.
func TestTopicFallbackIsOffUnlessSetTrue(t *testing.T) {
	for v, want := range map[string]bool{"": false, "false": false, "true": true} {
		t.Setenv(notify.EnvTopicFallback, v)
		if got, err := TopicFallback(); err != nil || got != want {
			t.Errorf("%s=%q: %v, %v; want %v", notify.EnvTopicFallback, v, got, err, want)
		}
	}
	t.Setenv(notify.EnvTopicFallback, "yes")
	if _, err := TopicFallback(); err == nil {
		t.Error(`"yes" accepted`)
	}
}

// With the fallback on, the topic's ARN is required; off, it is not read.
func TestNotifierNeedsTheTopicOnlyForTheFallback(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Setenv(stackenv.PushTopicArn, "")
	t.Setenv(notify.EnvTopicFallback, "true")
	if _, err := Notifier(aws.Config{}, nil, log, nil); err == nil {
		t.Error("fallback on without a topic ARN accepted")
	}
	t.Setenv(notify.EnvTopicFallback, "false")
	if _, err := Notifier(aws.Config{}, nil, log, nil); err != nil {
		t.Errorf("fallback off: %v", err)
	}
}
