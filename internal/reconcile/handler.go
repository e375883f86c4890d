package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Request is one invocation's payload. An EventBridge schedule's event
// names no span: the run then reconciles the previous UTC day and the day
// before it (a refund or a late settle the first run saw open). On demand,
// Day ("2026-12-06", a UTC day) or From and To (RFC 3339, whole seconds)
// name the span.
type Request struct {
	Day  string    `json:"day,omitempty"`
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
}

// Response is what an invocation answers: a report per span.
type Response struct {
	Reports []Report `json:"reports"`
}

// Spans returns the spans a request names, at now.
func (q Request) Spans(now time.Time) ([][2]time.Time, error) {
	switch {
	case q.Day != "" && (!q.From.IsZero() || !q.To.IsZero()):
		return nil, errors.New("reconcile: name a day or a span, not both")
	case q.Day != "":
		d, err := time.Parse(time.DateOnly, q.Day)
		if err != nil {
			return nil, fmt.Errorf("reconcile: day %q: %w", q.Day, err)
		}
		return [][2]time.Time{{d, d.AddDate(0, 0, 1)}}, nil
	case !q.From.IsZero() || !q.To.IsZero():
		if q.From.IsZero() || q.To.IsZero() {
			return nil, errors.New("reconcile: a span needs from and to")
		}
		return [][2]time.Time{{q.From, q.To}}, nil
	}
	today := now.UTC().Truncate(24 * time.Hour)
	return [][2]time.Time{
		{today.AddDate(0, 0, -1), today},
		{today.AddDate(0, 0, -2), today.AddDate(0, 0, -1)},
	}, nil
}

// Handle is the function's handler: every span the payload names, in
// order. It fails if any span's run failed (the run stays open and the
// next invocation resumes it). Findings do not fail it: they are report
// rows and metrics the stack alarms on.
func (r *Reconciler) Handle(ctx context.Context, raw json.RawMessage) (Response, error) {
	var q Request
	if len(raw) > 0 {
		// A scheduled event's fields (source, detail-type, time, ...) are
		// not ours and are ignored.
		if err := json.Unmarshal(raw, &q); err != nil {
			return Response{}, fmt.Errorf("reconcile: payload: %w", err)
		}
	}
	spans, err := q.Spans(r.cfg.Now())
	if err != nil {
		return Response{}, err
	}
	var out Response
	var errs []error
	for _, s := range spans {
		rep, err := r.Run(ctx, s[0], s[1])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out.Reports = append(out.Reports, rep)
	}
	return out, errors.Join(errs...)
}
