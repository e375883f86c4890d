package arrival

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestFromAPIGatewayV2(t *testing.T) {
	got, err := FromAPIGatewayV2(1736503200123)
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2025, 1, 10, 10, 0, 0, 123e6, time.UTC)
	if !got.Equal(want) || got.Location() != time.UTC {
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, ms := range []int64{0, -1, -1736503200123, maxEpochMillis + 1, 1 << 62} {
		if _, err := FromAPIGatewayV2(ms); !errors.Is(err, ErrNoStamp) {
			t.Errorf("FromAPIGatewayV2(%d) = %v, want ErrNoStamp", ms, err)
		}
	}
}

const (
	id1 = "abcdef012345678912345678"
	id2 = "0123456789abcdef01234567"
	id3 = "fedcba987654321012345678"
)

// sec is the time of a trace field written with 8 hex digits.
func sec(hex string) time.Time {
	var n int64
	for _, c := range hex {
		n = n*16 + int64(strings.IndexRune("0123456789abcdef", c))
	}
	return time.Unix(n, 0).UTC()
}

func TestFromALBTraceHeader(t *testing.T) {
	cases := []struct {
		name, header string
		want         time.Time
	}{
		// The load balancer generated the header: Root is its own.
		{"no client header", "Root=1-67891233-" + id1, sec("67891233")},
		// The client sent a Root; the load balancer kept it and inserted Self
		// (first, as in AWS's example). Self wins.
		{"client Root, ALB Self", "Self=1-67891240-" + id2 + ";Root=1-5f000000-" + id1, sec("67891240")},
		{"client Root and custom field", "Self=1-67891240-" + id2 + ";Root=1-5f000000-" + id1 + ";CalledFrom=app", sec("67891240")},
		// Position does not decide: one Self, wherever it is, is the ALB's.
		{"Self last", "Root=1-5f000000-" + id1 + ";Self=1-67891240-" + id2, sec("67891240")},
		// The client sent a Self; the load balancer updated its value in
		// place, so what arrives is one Self carrying the ALB's time.
		{"client Self updated by ALB", "Root=1-5f000000-" + id1 + ";Self=1-67891240-" + id2 + ";Parent=53995c3f42cd8ad8;Sampled=1", sec("67891240")},
		{"X-Ray fields ignored", "Root=1-67891233-" + id1 + ";Parent=53995c3f42cd8ad8;Sampled=1;Lineage=a87bd80c:1|68fd508a:5", sec("67891233")},
		{"spaces and trailing ;", " Root = 1-67891233-" + id1 + " ; Sampled=0;", sec("67891233")},
		{"upper-case hex", "Root=1-6789ABCD-" + strings.ToUpper(id1), sec("6789abcd")},
		{"case-variant name", "self=1-67891240-" + id2 + ";Root=1-5f000000-" + id1, sec("67891240")},
		{"largest time", "Root=1-ffffffff-" + id1, sec("ffffffff")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := FromALBTraceHeader(c.header)
			if err != nil {
				t.Fatalf("FromALBTraceHeader(%q): %v", c.header, err)
			}
			if !got.Equal(c.want) || got.Location() != time.UTC {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestFromALBTraceHeaderRefuses(t *testing.T) {
	for name, header := range map[string]string{
		"empty":      "",
		"spaces":     "  ;  ",
		"garbage":    "garbage",
		"no Root":    "Parent=53995c3f42cd8ad8;Sampled=1",
		"only a key": "Root",
		// A client-sent Self next to the ALB's: the ALB documents that it
		// updates an existing Self, so two Selfs is not a documented shape
		// and either could be the client's. Refuse, never pick.
		"two Selfs":             "Self=1-67891240-" + id2 + ";Root=1-5f000000-" + id1 + ";Self=1-7fffffff-" + id3,
		"two Selfs, case-fold":  "SELF=1-7fffffff-" + id3 + ";Self=1-67891240-" + id2 + ";Root=1-5f000000-" + id1,
		"two Roots, no Self":    "Root=1-67891233-" + id1 + ";Root=1-7fffffff-" + id3,
		"malformed Self":        "Self=garbage;Root=1-67891233-" + id1,
		"Self wrong version":    "Self=2-67891240-" + id2 + ";Root=1-67891233-" + id1,
		"Root short time":       "Root=1-6789123-" + id1,
		"Root long time":        "Root=1-678912330-" + id1,
		"Root non-hex time":     "Root=1-6789123g-" + id1,
		"Root signed time":      "Root=1-+6789123-" + id1,
		"Root zero time":        "Root=1-00000000-" + id1,
		"Root short id":         "Root=1-67891233-" + id1[1:],
		"Root non-hex id":       "Root=1-67891233-" + id1[1:] + "z",
		"Root extra part":       "Root=1-67891233-" + id1 + "-00",
		"Root missing id":       "Root=1-67891233",
		"field without =":       "Root=1-67891233-" + id1 + ";junk",
		"empty Self value":      "Self=;Root=1-67891233-" + id1,
		"AWS doc typo, 23 hex":  "Self=1-67891233-12456789abcdef012345678;Root=1-67891233-abcdef012345678912345678",
		"whitespace inside val": "Root=1-6789 1233-" + id1,
	} {
		t.Run(name, func(t *testing.T) {
			got, err := FromALBTraceHeader(header)
			if !errors.Is(err, ErrNoStamp) {
				t.Fatalf("FromALBTraceHeader(%q) = %v, %v; want ErrNoStamp", header, got, err)
			}
			if !got.IsZero() {
				t.Fatalf("error with a non-zero time %v", got)
			}
		})
	}
}
