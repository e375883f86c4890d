package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
)

// SweepLimit is how many PENDING notifications one scheduled run of the
// worker function finishes at most (its timeout bounds the sends).
const SweepLimit = 100

// Function is the worker Lambda's entry point. Two triggers reach it: the
// events queue's SQS batches (the inbox transaction and the push), and an
// EventBridge schedule whose event finishes the PENDING notifications a
// failed push left behind — their own durable trigger, so a committed
// credit never waits on a push and no push is forgotten.
type Function struct {
	Worker  *Worker
	Sweeper *NotifSweeper
	// Extra are the sweepers of the worker's extra channels (the email),
	// run after Sweeper on each tick.
	Extra []*NotifSweeper
	Limit int // per scheduled run and channel; 0: SweepLimit
}

// SweepReport is what a scheduled run answers.
type SweepReport struct {
	Finished int `json:"notifications_finished"`
}

// Invoke tells the two event shapes apart by their own fields (an SQS
// batch's Records, a scheduled event's source) and handles each; any other
// payload is refused, so a miswired trigger shows up as an error.
func (f Function) Invoke(ctx context.Context, raw json.RawMessage) (any, error) {
	var probe struct {
		Records []struct {
			EventSource string `json:"eventSource"`
		} `json:"Records"`
		Source     string `json:"source"`
		DetailType string `json:"detail-type"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("inbox: decode event: %w", err)
	}
	switch {
	case len(probe.Records) > 0 && probe.Records[0].EventSource == "aws:sqs":
		var e events.SQSEvent
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, fmt.Errorf("inbox: decode SQS event: %w", err)
		}
		return f.Worker.Handle(ctx, e)
	case probe.Source == "aws.events" && probe.DetailType == "Scheduled Event":
		if f.Sweeper == nil {
			return nil, errors.New("inbox: a scheduled event reached a worker without a notification sweeper")
		}
		limit := f.Limit
		if limit <= 0 {
			limit = SweepLimit
		}
		n, err := f.Sweeper.FinishPending(ctx, limit)
		var errs []error
		errs = append(errs, err)
		for _, sw := range f.Extra {
			m, err := sw.FinishPending(ctx, limit)
			n += m
			errs = append(errs, err)
		}
		return SweepReport{Finished: n}, errors.Join(errs...)
	}
	return nil, fmt.Errorf("inbox: an event that is neither an SQS batch nor a scheduled event (source %q)", probe.Source)
}
