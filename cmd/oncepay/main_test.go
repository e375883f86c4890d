package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/internal/localcloud/phone"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
)

func TestHelpIsTheUsageOnStdoutWithExitZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		var out bytes.Buffer
		code, err := run(context.Background(), args, &out)
		if code != 0 || err != nil {
			t.Errorf("oncepay %v = %d, %v; want 0", args, code, err)
		}
		for _, want := range []string{"oncepay pay", "oncepay phone", "--wait", "Exit codes"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("oncepay %v: usage lacks %q", args, want)
			}
		}
	}
}

func TestEveryCommandsHelpIsItsUsageOnStdoutWithExitZero(t *testing.T) {
	for cmd, want := range map[string][]string{
		"pay":     {"-order", "-amount", "-wait", "-wait-timeout", "-phone", "-url", "-token"},
		"status":  {"-order", "-journal"},
		"resolve": {"-url", "-token", "-journal"},
		"phone":   {"-phone", "-json"},
		"token":   {"-caller"},
	} {
		for _, flag := range []string{"--help", "-h"} {
			var out bytes.Buffer
			code, err := run(context.Background(), []string{cmd, flag}, &out)
			if code != 0 || err != nil {
				t.Errorf("oncepay %s %s = %d, %v; want 0", cmd, flag, code, err)
			}
			if !strings.HasPrefix(out.String(), "usage: oncepay "+cmd) {
				t.Errorf("oncepay %s %s: stdout %q, want its usage", cmd, flag, out.String())
			}
			for _, f := range want {
				if !strings.Contains(out.String(), "  "+f+" ") && !strings.Contains(out.String(), "  "+f+"\n") {
					t.Errorf("oncepay %s %s: usage lacks %s:\n%s", cmd, flag, f, out.String())
				}
			}
		}
	}
	// A command's help lists its own flags only.
	var out bytes.Buffer
	if _, err := run(context.Background(), []string{"phone", "--help"}, &out); err != nil || strings.Contains(out.String(), "-amount") {
		t.Errorf("oncepay phone --help lists pay's flags:\n%s", out.String())
	}
}

// pushLine is one line of the phone's file, as its reader writes it.
func pushLine(t *testing.T, p phone.Push) string {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func TestThePhoneShowsOneEntryPerReplaceIDWithItsAlertsWhenALineIsDuplicated(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ok := phone.Push{ReceivedAt: t0, Channel: phone.ChannelTopic, MessageID: "m1", ReplaceID: "pay_a", PaymentID: "pay_a", EventID: "pay_a:SUCCEEDED", State: "SUCCEEDED", Title: "Payment confirmed", Body: "30.00 USD to m1"}
	refund := ok
	refund.ReceivedAt, refund.MessageID, refund.EventID, refund.State, refund.Title, refund.Body = t0.Add(time.Minute), "m2", "pay_a:REFUNDED", "REFUNDED", "Payment refunded", "30.00 USD to m1 was refunded"
	other := phone.Push{ReceivedAt: t0.Add(time.Second), Channel: phone.ChannelTopic, MessageID: "m3", ReplaceID: "pay_b", PaymentID: "pay_b", EventID: "pay_b:SUCCEEDED", Title: "Payment confirmed", Body: "5.00 USD to m2"}
	// The reader crashed between its append and its delete: m1 came twice.
	path := filepath.Join(t.TempDir(), "pushes.jsonl")
	if err := os.WriteFile(path, []byte(pushLine(t, ok)+pushLine(t, ok)+pushLine(t, other)+pushLine(t, refund)), 0o644); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	if code, err := run(context.Background(), []string{"phone", "--phone", path}, &out); code != 0 || err != nil {
		t.Fatalf("oncepay phone = %d, %v", code, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "pay_b  Payment confirmed: 5.00 USD to m2 (1 alert;") ||
		!strings.HasPrefix(lines[1], "pay_a  Payment refunded: 30.00 USD to m1 was refunded (2 alerts;") {
		t.Fatalf("oncepay phone:\n%s\nwant pay_b with 1 alert, then pay_a showing the refund with 2 alerts (the duplicated line is one)", out.String())
	}

	out.Reset()
	if code, err := run(context.Background(), []string{"phone", "--phone", path, "--json"}, &out); code != 0 || err != nil {
		t.Fatalf("oncepay phone --json = %d, %v", code, err)
	}
	var got []phone.Entry
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var e phone.Entry
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		got = append(got, e)
	}
	if len(got) != 2 || got[1].ReplaceID != "pay_a" || got[1].Alerts != 2 || got[1].Latest.EventID != "pay_a:REFUNDED" || got[0].Alerts != 1 {
		t.Fatalf("oncepay phone --json = %+v", got)
	}
}

func TestAnEmptyPhoneSaysSo(t *testing.T) {
	var out bytes.Buffer
	if code, err := run(context.Background(), []string{"phone", "--phone", filepath.Join(t.TempDir(), "none.jsonl")}, &out); code != 0 || err != nil {
		t.Fatalf("oncepay phone = %d, %v", code, err)
	}
	if !strings.Contains(out.String(), "the phone shows nothing yet") {
		t.Errorf("oncepay phone on an empty phone: %q", out.String())
	}
}

// payArgs pays order 42 through the world's front door with a journal and
// a phone of the test's own.
func payArgs(t *testing.T, w *apitest.World, phonePath string, extra ...string) []string {
	door := w.Door(t, nil)
	return append([]string{"pay", "--order", "42", "--amount", "3000", "--url", door.URL, "--token", w.Token(t, "u1"),
		"--journal", filepath.Join(t.TempDir(), "journal"), "--phone", phonePath, "--json"}, extra...)
}

func TestPayWaitPrintsThePushWhenItReachesThePhone(t *testing.T) {
	w := apitest.New(t, config.Timing{})
	path := filepath.Join(t.TempDir(), "phone", "pushes.jsonl")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	// The phone: once the ledger holds the payment SUCCEEDED, its push lands
	// (as the reader appends it), a moment after the API's answer.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			var pid string
			if w.Pool.QueryRow(ctx, `SELECT payment_id FROM payments WHERE order_id = '42' AND state = 'SUCCEEDED'`).Scan(&pid) == nil {
				time.Sleep(300 * time.Millisecond)
				p := phone.Push{ReceivedAt: time.Now().UTC(), Channel: phone.ChannelTopic, MessageID: "m-" + pid, ReplaceID: pid, PaymentID: pid,
					EventID: pid + ":SUCCEEDED", State: "SUCCEEDED", Title: "Payment confirmed", Body: "30.00 USD to m1"}
				_ = os.WriteFile(path, []byte(pushLine(t, p)), 0o644)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var out bytes.Buffer
	code, err := run(ctx, payArgs(t, w, path, "--wait", "--wait-timeout", "20s"), &out)
	if code != exitPaid || err != nil {
		t.Fatalf("pay --wait = %d, %v\n%s", code, err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("pay --wait --json printed %d lines, want the answer and the push:\n%s", len(lines), out.String())
	}
	var answer struct {
		PaymentID string `json:"payment_id"`
		State     string `json:"state"`
	}
	var shown phone.Entry
	if err := json.Unmarshal([]byte(lines[0]), &answer); err != nil || answer.State != "SUCCEEDED" {
		t.Fatalf("answer line %q: %v", lines[0], err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &shown); err != nil {
		t.Fatalf("push line %q: %v", lines[1], err)
	}
	if shown.ReplaceID != answer.PaymentID || shown.Alerts != 1 || shown.Latest.PaymentID != answer.PaymentID || shown.Latest.Title != "Payment confirmed" {
		t.Fatalf("push = %+v, want the push for %s with 1 alert", shown, answer.PaymentID)
	}
}

func TestPayWaitWithoutAPushExitsSevenAfterTheTimeout(t *testing.T) {
	w := apitest.New(t, config.Timing{})
	path := filepath.Join(t.TempDir(), "pushes.jsonl")
	var out bytes.Buffer
	started := time.Now()
	code, err := run(context.Background(), payArgs(t, w, path, "--wait", "--wait-timeout", "700ms"), &out)
	if code != exitNoPush || err == nil || !strings.Contains(err.Error(), "within 700ms") {
		t.Fatalf("pay --wait with no phone = %d, %v; want exit %d naming the timeout", code, err, exitNoPush)
	}
	if d := time.Since(started); d > 30*time.Second {
		t.Errorf("pay --wait took %s with a 700ms wait", d)
	}
	if !strings.Contains(out.String(), `"state":"SUCCEEDED"`) {
		t.Errorf("the payment's answer is still printed: %q", out.String())
	}
}
