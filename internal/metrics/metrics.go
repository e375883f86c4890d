// Package metrics emits CloudWatch metrics as Embedded Metric Format (EMF)
// log lines: in Lambda, CloudWatch turns each line into metric points with no
// API call on the hot path; locally, tests read the same lines back.
package metrics

import (
	"bytes"
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
)

// Namespace is the CloudWatch namespace of every oncepay metric.
const Namespace = stackenv.MetricsNamespace

// Emitter writes EMF lines to W. It is safe for concurrent use; a nil
// *Emitter discards everything, so handlers need no nil checks.
type Emitter struct {
	mu       sync.Mutex
	w        io.Writer
	function string
	now      func() time.Time
}

// New returns an Emitter that tags every metric with the function's name.
func New(w io.Writer, function string) *Emitter {
	return &Emitter{w: w, function: function, now: time.Now}
}

// Count emits one metric point with unit Count.
func (e *Emitter) Count(name string, n int) { e.emit(name, float64(n), "Count") }

// Bytes emits one metric point with unit Bytes.
func (e *Emitter) Bytes(name string, n int) { e.emit(name, float64(n), "Bytes") }

// Milliseconds emits one metric point with unit Milliseconds.
func (e *Emitter) Milliseconds(name string, d time.Duration) {
	e.emit(name, float64(d.Microseconds())/1000, "Milliseconds")
}

func (e *Emitter) emit(name string, v float64, unit string) {
	if e == nil || e.w == nil {
		return
	}
	line := map[string]any{
		"_aws": map[string]any{
			"Timestamp": e.now().UnixMilli(),
			"CloudWatchMetrics": []any{map[string]any{
				"Namespace":  Namespace,
				"Dimensions": [][]string{{"Function"}},
				"Metrics":    []any{map[string]string{"Name": name, "Unit": unit}},
			}},
		},
		"Function": e.function,
		name:       v,
	}
	b, err := json.Marshal(line)
	if err != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = e.w.Write(append(b, '\n'))
}

// Sum reads EMF lines from r and returns the sum of metric name's values:
// tests and tools use it to observe what a handler reported.
func Sum(lines []byte, name string) float64 {
	var total float64
	dec := json.NewDecoder(bytes.NewReader(lines))
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			break
		}
		if _, ok := m["_aws"]; !ok {
			continue
		}
		if v, ok := m[name].(float64); ok {
			total += v
		}
	}
	return total
}
