// Package story replays the story (docs/mechanism.md#seed-part-13) end to end
// on the real handlers over the local cloud: the API, the resolver, the PSP
// webhook, the outbox relay, the inbox worker and the push, with faults
// injected at the story's moments and time taken from a fake clock handed to
// every handler. Nothing sleeps except the simulator's lost reply, whose real
// hold is a fraction of a second: the fake clock jumps over the deadline
// instead.
//
// Run prints the event table and the final count and fails when a count
// differs from the story's: one charge, one credit to m1 (12,000 -> 15,000),
// one notification on the phone.
package story

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/oncepay/oncepay/internal/clock"
)

// Row is one line of the event table.
type Row struct {
	At      time.Duration // since the section's tap
	Section string
	Hop     string
	What    string
	IDs     string
}

// Table collects the story's events in the order they happened.
type Table struct {
	mu      sync.Mutex
	clock   *clock.Fake
	t0      time.Time
	section string
	rows    []Row
	aliases [][2]string
}

// Alias makes the printed table call id by the story's name for it (pay_7,
// ch_1, ev_7) and lists the pair under the table.
func (t *Table) Alias(id, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id != "" {
		t.aliases = append(t.aliases, [2]string{id, name})
	}
}

func (t *Table) short(s string) string {
	for _, a := range t.aliases {
		s = strings.ReplaceAll(s, a[0], a[1])
	}
	return s
}

// Section starts a new part of the table whose times count from t0.
func (t *Table) Section(name string, t0 time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.section, t.t0 = name, t0
}

// Add records an event at the fake clock's now.
func (t *Table) Add(hop, what, ids string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rows = append(t.rows, Row{At: t.clock.Now().Sub(t.t0), Section: t.section, Hop: hop, What: what, IDs: ids})
}

// Rows returns a copy of the rows so far.
func (t *Table) Rows() []Row {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Row(nil), t.rows...)
}

// Print writes the table: time in the story's seconds, hop, what happened,
// the IDs it carried.
func (t *Table) Print(out io.Writer) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	section := "\x00"
	for _, r := range t.Rows() {
		if r.Section != section {
			section = r.Section
			if section != "" {
				_ = tw.Flush()
				fmt.Fprintf(out, "\n-- %s\n", section)
			}
			fmt.Fprintln(tw, "time (s)\thop\twhat happened\tids")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", seconds(r.At), r.Hop, t.short(r.What), t.short(r.IDs))
	}
	_ = tw.Flush()
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.aliases) > 0 {
		fmt.Fprintln(out, "\nthe story's names for the real ids:")
		for _, a := range t.aliases {
			fmt.Fprintf(out, "  %-6s = %s\n", a[1], a[0])
		}
	}
}

// seconds renders a duration the way the story writes times: 10.00, 7,200.00.
func seconds(d time.Duration) string {
	s := fmt.Sprintf("%.2f", d.Seconds())
	whole, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String() + "." + frac
}
