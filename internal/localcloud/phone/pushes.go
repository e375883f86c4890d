package phone

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// The channels a push reaches the phone through.
const (
	ChannelTopic  = "topic"  // the phone's queue on the push topic
	ChannelDevice = "device" // a platform endpoint of the phone's application
)

// Push is one push as the phone received it: one line of pushes.jsonl.
// The shape is stable (docs/localcloud.md): fields may be added, never
// renamed or removed.
type Push struct {
	// ReceivedAt is when the phone's reader took the push: the receive that
	// returned it (topic), the poll that first saw it (device).
	ReceivedAt time.Time `json:"received_at"`
	// SentAt is SNS's timestamp of the publish, when the channel carries it
	// (the topic's envelope does; a device endpoint's record does not).
	SentAt    time.Time `json:"sent_at,omitzero"`
	Channel   string    `json:"channel"`    // ChannelTopic or ChannelDevice
	Source    string    `json:"source"`     // the topic ARN, or the device's endpoint ARN
	MessageID string    `json:"message_id"` // SNS's message id: the same push appended twice has one
	// ReplaceID is what the device collapses on: a push with a replace id
	// already on screen replaces that notification instead of adding one.
	ReplaceID string `json:"replace_id"`
	PaymentID string `json:"payment_id"`
	EventID   string `json:"event_id"`
	State     string `json:"state,omitempty"` // the topic's document says it; a device's payload does not
	Title     string `json:"title"`
	Body      string `json:"body"`
	// Payload is the push as the channel delivered it: the topic's
	// notify.Data document, or the platform's part of a device's message.
	Payload json.RawMessage `json:"payload"`
}

// key identifies one publish: the same push appended twice has one key.
func (p Push) key() string { return p.Channel + "|" + p.Source + "|" + p.MessageID }

// DefaultPath is where the phone keeps its pushes: $ONCEPAY_PHONE_FILE, or
// pushes.jsonl in <stateDir>/phone (stateDir: the repository's .local).
func DefaultPath(stateDir string) string {
	if p := os.Getenv(EnvFile); p != "" {
		return p
	}
	return filepath.Join(stateDir, "phone", "pushes.jsonl")
}

// Read returns every push in the file at path, in the order received,
// duplicates included (see Distinct). A missing file is an empty phone. A
// last line without its newline is a write a crash cut short: its push was
// never deleted from the queue, so it comes again, and Read leaves it out.
func Read(path string) ([]Push, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("phone: read %s: %w", path, err)
	}
	var out []Push
	for n := 1; len(b) > 0; n++ {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break // torn last line
		}
		line := bytes.TrimSpace(b[:i])
		b = b[i+1:]
		if len(line) == 0 {
			continue
		}
		var p Push
		if err := json.Unmarshal(line, &p); err != nil {
			return nil, fmt.Errorf("phone: %s line %d: %w", path, n, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// Distinct drops the copies of a push the reader appended more than once
// (a crash between the append and the queue's delete), keeping the first.
func Distinct(pushes []Push) []Push {
	seen := map[string]bool{}
	var out []Push
	for _, p := range pushes {
		if p.MessageID != "" {
			if seen[p.key()] {
				continue
			}
			seen[p.key()] = true
		}
		out = append(out, p)
	}
	return out
}

// Entry is one notification on the phone's screen.
type Entry struct {
	ReplaceID string `json:"replace_id"`
	// Alerts is how many distinct pushes carried this replace id: each one
	// buzzed the phone, replaced or not.
	Alerts int `json:"alerts"`
	// Latest is the push on screen: the last one received.
	Latest Push `json:"latest"`
}

// Show returns what the phone shows: one entry per replace id, the latest
// push with the number of alerts, ordered by the latest push's arrival
// (oldest first). A push with no replace id stacks: it is its own entry.
func Show(pushes []Push) []Entry {
	var out []Entry
	at := map[string]int{}
	for i, p := range Distinct(pushes) {
		id := p.ReplaceID
		if id == "" {
			id = fmt.Sprintf("\x00%d", i)
		}
		if j, ok := at[id]; ok {
			out[j].Alerts++
			out[j].Latest = p
			continue
		}
		at[id] = len(out)
		out = append(out, Entry{ReplaceID: p.ReplaceID, Alerts: 1, Latest: p})
	}
	slices.SortStableFunc(out, func(a, b Entry) int { return a.Latest.ReceivedAt.Compare(b.Latest.ReceivedAt) })
	return out
}

// ForPayment returns the pushes about one payment, in the order received.
func ForPayment(pushes []Push, paymentID string) []Push {
	var out []Push
	for _, p := range pushes {
		if p.PaymentID == paymentID {
			out = append(out, p)
		}
	}
	return out
}

// Wait blocks until the file at path holds a push about paymentID and
// returns the latest such push (a push already there counts), or until ctx
// ends. It checks every poll (default 100 ms).
func Wait(ctx context.Context, path, paymentID string, poll time.Duration) (Push, error) {
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		all, err := Read(path)
		if err != nil {
			return Push{}, err
		}
		if got := ForPayment(all, paymentID); len(got) > 0 {
			return got[len(got)-1], nil
		}
		select {
		case <-ctx.Done():
			return Push{}, fmt.Errorf("phone: no push for %s in %s: %w", paymentID, path, ctx.Err())
		case <-t.C:
		}
	}
}
