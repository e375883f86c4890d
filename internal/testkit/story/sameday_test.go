package story

import (
	"testing"
	"time"
)

// TestSameDayStaysInTheDay: the stream beat's earlier events fall in ev_7's
// UTC day whenever the story runs (it failed in the first hour after
// midnight, when an hour before ev_7 was yesterday).
func TestSameDayStaysInTheDay(t *testing.T) {
	day := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		t    time.Time
		d    time.Duration
		want time.Time
	}{
		{day.Add(12 * time.Hour), time.Hour, day.Add(11 * time.Hour)},
		{day.Add(10 * time.Minute), time.Hour, day.Add(5 * time.Minute)},
		{day.Add(time.Hour), time.Hour, day},
		{day.Add(400 * time.Millisecond), time.Second, day.Add(200 * time.Millisecond)},
	} {
		if got := sameDay(c.t, c.d); !got.Equal(c.want) {
			t.Errorf("sameDay(%s, %s) = %s, want %s", c.t.Format(time.TimeOnly), c.d, got.Format(time.TimeOnly), c.want.Format(time.TimeOnly))
		}
	}
}
