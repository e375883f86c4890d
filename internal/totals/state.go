package totals

import (
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"
)

// Key names one total: a merchant's day (UTC, by the event's time) in one
// currency (minor units of two currencies never add up).
type Key struct {
	Merchant string
	Day      string // 2006-01-02
	Currency string // ISO 4217, upper case, as the API stores it
}

// dayLayout is a Key's Day. Day and currency are fixed width, so
// "day#currency#merchant" splits without escaping whatever punctuation a
// merchant id holds.
const dayLayout = "2006-01-02"

func (k Key) String() string { return k.Day + "#" + k.Currency + "#" + k.Merchant }

// ParseKey reads a Key from its String form.
func ParseKey(s string) (Key, error) {
	const cur = len(dayLayout) + 1
	if len(s) < cur+5 || s[len(dayLayout)] != '#' || s[cur+3] != '#' {
		return Key{}, fmt.Errorf("totals: key %q is not day#currency#merchant", s)
	}
	day := s[:len(dayLayout)]
	if _, err := time.Parse(dayLayout, day); err != nil {
		return Key{}, fmt.Errorf("totals: key %q: day: %w", s, err)
	}
	if !validCurrency(s[cur : cur+3]) {
		return Key{}, fmt.Errorf("totals: key %q: currency is not three letters A-Z", s)
	}
	return Key{Day: day, Currency: s[cur : cur+3], Merchant: s[cur+4:]}, nil
}

func validCurrency(c string) bool {
	if len(c) != 3 {
		return false
	}
	for i := range 3 {
		if c[i] < 'A' || c[i] > 'Z' {
			return false
		}
	}
	return true
}

// State is what the job checkpoints with Lambda: handed to each invocation
// by the previous one's answer, and handed again (older) when an invocation
// failed — a restore. Everything the job's correctness needs across a
// restore lives here, never in an outside store (docs/stream-job.md).
type State struct {
	// Checkpoint counts the invocations that built this state: the tag
	// this invocation's sink writes carry (the barrier the sink has
	// passed), and what tells a restore from a first try.
	Checkpoint int64
	// Floor is the newest event time the job had read when this state was
	// made: the watermark a restore starts from, never lower. Event times
	// are kept to the millisecond (Handle truncates them as it reads), so
	// what the state stores is exactly what was compared.
	Floor time.Time
	// Totals holds the shard's absolute total per key still open (its day
	// not yet past the horizon).
	Totals map[Key]int64
	// Seen holds the ids of the events counted (or skipped) with their
	// event time, until the watermark passes event time + horizon.
	Seen map[string]time.Time
	// Through is set on a state rebuilt from the sink after Lambda lost
	// one (docs/stream-job.md#lost-state): the last stream sequence number
	// the lost state's runs had read. A record up to it is a replay of
	// what the rebuilt totals hold (a mapping re-created at TRIM_HORIZON),
	// and is skipped, its seen id being lost with the state.
	Through string
}

// Prefixes of the state's entries: Lambda's state is a map of strings.
const (
	entryCheckpoint = "checkpoint"
	entryFloor      = "floor"
	entryThrough    = "through"
	prefixTotal     = "t:"
	prefixSeen      = "s:"
)

// Encode renders s as Lambda's state map.
func (s State) Encode() map[string]string {
	m := make(map[string]string, 3+len(s.Totals)+len(s.Seen))
	m[entryCheckpoint] = strconv.FormatInt(s.Checkpoint, 10)
	if !s.Floor.IsZero() {
		m[entryFloor] = strconv.FormatInt(s.Floor.UnixMilli(), 10)
	}
	if s.Through != "" {
		m[entryThrough] = s.Through
	}
	for k, v := range s.Totals {
		m[prefixTotal+k.String()] = strconv.FormatInt(v, 10)
	}
	for id, at := range s.Seen {
		m[prefixSeen+id] = strconv.FormatInt(at.UnixMilli(), 10)
	}
	return m
}

// Decode reads a state map. An empty map is Lambda's fresh state (a new
// window, or one terminated early): ok is false. A map that is not one of
// ours is an error: the job must not guess at what it counted.
func Decode(m map[string]string) (s State, ok bool, err error) {
	if len(m) == 0 {
		return State{}, false, nil
	}
	s = State{Totals: map[Key]int64{}, Seen: map[string]time.Time{}}
	cp, found := m[entryCheckpoint]
	if !found {
		return State{}, false, fmt.Errorf("totals: state has no %s", entryCheckpoint)
	}
	if s.Checkpoint, err = strconv.ParseInt(cp, 10, 64); err != nil || s.Checkpoint < 0 {
		return State{}, false, fmt.Errorf("totals: state's %s %q is not a count", entryCheckpoint, cp)
	}
	for k, v := range m {
		switch {
		case k == entryCheckpoint:
		case k == entryFloor:
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return State{}, false, fmt.Errorf("totals: state's %s %q: %w", entryFloor, v, err)
			}
			s.Floor = time.UnixMilli(ms).UTC()
		case k == entryThrough:
			if !sequenceNumber(v) {
				return State{}, false, fmt.Errorf("totals: state's %s %q is not a sequence number", entryThrough, v)
			}
			s.Through = v
		case strings.HasPrefix(k, prefixTotal):
			key, err := ParseKey(k[len(prefixTotal):])
			if err != nil {
				return State{}, false, err
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return State{}, false, fmt.Errorf("totals: state's total of %s %q: %w", key, v, err)
			}
			s.Totals[key] = n
		case strings.HasPrefix(k, prefixSeen) && len(k) > len(prefixSeen):
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return State{}, false, fmt.Errorf("totals: state's time of %s %q: %w", k[len(prefixSeen):], v, err)
			}
			s.Seen[k[len(prefixSeen):]] = time.UnixMilli(ms).UTC()
		default:
			return State{}, false, fmt.Errorf("totals: state entry %q is not the job's", k)
		}
	}
	return s, true, nil
}

// clone returns a deep copy, so a failed invocation leaves the state it was
// handed as it was.
func (s State) clone() State {
	c := s
	c.Totals = maps.Clone(s.Totals)
	c.Seen = maps.Clone(s.Seen)
	if c.Totals == nil {
		c.Totals = map[Key]int64{}
	}
	if c.Seen == nil {
		c.Seen = map[string]time.Time{}
	}
	return c
}

// Size is the state's size as Lambda counts it against its 1 MB per shard:
// the JSON of the answer's state map.
func (s State) Size() int {
	b, err := json.Marshal(s.Encode())
	if err != nil {
		return 0
	}
	return len(b)
}

// sequenceNumber reports whether s is a stream sequence number: decimal
// digits (DynamoDB Streams: 21 to 40 of them).
func sequenceNumber(s string) bool {
	if s == "" || len(s) > 40 {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// sequenceAfter reports whether sequence number a comes after b in their
// shard: they are numbers, compared as such whatever their widths.
func sequenceAfter(a, b string) bool {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		return len(a) > len(b)
	}
	return a > b
}
