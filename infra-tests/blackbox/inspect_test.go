package blackbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/localenv"
)

// report is the part of inspect's JSON the suite reads (docs/localcloud.md,
// "make -s inspect": every key always present, fields only ever added).
type report struct {
	Payment struct {
		PaymentID       string  `json:"payment_id"`
		State           string  `json:"state"`
		Amount          *int64  `json:"amount"`
		MerchantID      *string `json:"merchant_id"`
		PSPCharge       *string `json:"psp_charge"`
		DeclineCode     *string `json:"decline_code"`
		ResolveAttempts int     `json:"resolve_attempts"`
	} `json:"payment"`
	Events []struct {
		EventID     string     `json:"event_id"`
		State       string     `json:"state"`
		ProcessedAt *time.Time `json:"processed_at"`
	} `json:"events"`
	Credits       []entry `json:"credits"`
	Debits        []entry `json:"debits"`
	Notifications []struct {
		EventID   string `json:"event_id"`
		Channel   string `json:"channel"`
		State     string `json:"state"`
		ReplaceID string `json:"replace_id"`
	} `json:"notifications"`
}

// entry is a credit or a debit.
type entry struct {
	EventID    string `json:"event_id"`
	MerchantID string `json:"merchant_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
}

// pushIntents returns the states of the payment's push notification
// intents, one per event.
func (r report) pushIntents() []string {
	var out []string
	for _, n := range r.Notifications {
		if n.Channel == "push" {
			out = append(out, n.State)
		}
	}
	return out
}

// open lists what has not settled: events the inbox has not taken and
// notification intents still PENDING.
func (r report) open() []string {
	var out []string
	for _, e := range r.Events {
		if e.ProcessedAt == nil {
			out = append(out, "event "+e.EventID+" not processed")
		}
	}
	for _, n := range r.Notifications {
		if n.State == "PENDING" {
			out = append(out, "notification "+n.EventID+"/"+n.Channel+" PENDING")
		}
	}
	return out
}

// credited sums the credits minus the debits: what the payment moved to its
// merchant's balance.
func (r report) credited() int64 {
	var n int64
	for _, c := range r.Credits {
		n += c.Amount
	}
	for _, d := range r.Debits {
		n -= d.Amount
	}
	return n
}

// errNoPayment is inspect's exit 1 for a payment the ledger does not hold.
var errNoPayment = errors.New("the ledger has no such payment")

// inspector runs the documented read interface, `inspect --payment <id>`
// (what `make -s inspect PAYMENT=<id>` runs), and decodes its JSON.
type inspector struct {
	command func(ctx context.Context, paymentID string) *exec.Cmd
}

// newInspector uses ONCEPAY_INSPECT (a command line; a deployed stack's
// ledger is only reachable from inside its VPC, so a deployed run names a
// command that gets there), else builds ./cmd/inspect once, so 200 payments
// do not pay `go run`'s link 200 times.
func newInspector(ctx context.Context) (*inspector, error) {
	if cmd := os.Getenv(envInspect); cmd != "" {
		return &inspector{command: func(ctx context.Context, pid string) *exec.Cmd {
			return exec.CommandContext(ctx, "sh", "-c", cmd+` --payment "$1"`, "sh", pid)
		}}, nil
	}
	root, err := localenv.Root()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "oncepay-blackbox-")
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() { _ = os.RemoveAll(dir) })
	bin := filepath.Join(dir, "inspect")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/inspect")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the inspect command (./cmd/inspect, `make inspect`'s): %w: %s", err, out)
	}
	return &inspector{command: func(ctx context.Context, pid string) *exec.Cmd {
		return exec.CommandContext(ctx, bin, "--payment", pid)
	}}, nil
}

// read returns the payment's report.
func (in *inspector) read(ctx context.Context, paymentID string) (report, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := in.command(ctx, paymentID)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if strings.Contains(stderr.String(), "has no payment") {
			return report{}, fmt.Errorf("%w: %s", errNoPayment, paymentID)
		}
		return report{}, fmt.Errorf("inspect %s: %w: %s", paymentID, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var r report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return report{}, fmt.Errorf("inspect %s: decode %.200q: %w", paymentID, stdout.Bytes(), err)
	}
	return r, nil
}
