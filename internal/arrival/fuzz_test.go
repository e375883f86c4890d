package arrival

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// FuzzFromALBTraceHeader: never panics; an error wraps ErrNoStamp and comes
// with the zero time; a success is a whole-second UTC time after the epoch
// that fits 8 hex digits and is written in the header itself.
func FuzzFromALBTraceHeader(f *testing.F) {
	for _, s := range []string{
		"Root=1-67891233-" + id1,
		"Self=1-67891240-" + id2 + ";Root=1-5f000000-" + id1 + ";CalledFrom=app",
		"Root=1-5f000000-" + id1 + ";Self=1-67891240-" + id2 + ";Parent=53995c3f42cd8ad8;Sampled=1",
		"Self=1-67891240-" + id2 + ";Root=1-5f000000-" + id1 + ";Self=1-7fffffff-" + id3,
		"self=1-67891240-" + id2 + ";ROOT=1-5f000000-" + id1,
		" Root = 1-FFFFFFFF-" + id1 + " ;",
		"Root=1-00000000-" + id1,
		"Root=1-+6789123-" + id1,
		"garbage", "", ";", "=", "Self=", "Root=1--",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		got, err := FromALBTraceHeader(header)
		if err != nil {
			if !errors.Is(err, ErrNoStamp) || !got.IsZero() {
				t.Fatalf("FromALBTraceHeader(%q) = %v, %v", header, got, err)
			}
			return
		}
		secs := got.Unix()
		if secs < 1 || secs > 0xffffffff || got.Nanosecond() != 0 || got.Location() != time.UTC {
			t.Fatalf("FromALBTraceHeader(%q) = %v: not a sane stamp", header, got)
		}
		if !strings.Contains(strings.ToLower(header), fmt.Sprintf("1-%08x-", secs)) {
			t.Fatalf("FromALBTraceHeader(%q) = %v (%08x), which the header does not carry", header, got, secs)
		}
	})
}

// FuzzFromAPIGatewayV2: any int64 either errors or round-trips exactly.
func FuzzFromAPIGatewayV2(f *testing.F) {
	for _, ms := range []int64{1736503200123, 0, -1, maxEpochMillis, maxEpochMillis + 1} {
		f.Add(ms)
	}
	f.Fuzz(func(t *testing.T, ms int64) {
		got, err := FromAPIGatewayV2(ms)
		if err != nil {
			if !errors.Is(err, ErrNoStamp) || ms > 0 && ms <= maxEpochMillis {
				t.Fatalf("FromAPIGatewayV2(%d): %v", ms, err)
			}
			return
		}
		if got.UnixMilli() != ms || got.Location() != time.UTC {
			t.Fatalf("FromAPIGatewayV2(%d) = %v", ms, got)
		}
		if _, err := got.MarshalText(); err != nil {
			t.Fatalf("FromAPIGatewayV2(%d) = %v cannot be formatted: %v", ms, got, err)
		}
	})
}
