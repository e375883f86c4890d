package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

func TestInspectHelpIsUsageOnStdoutAndExitZero(t *testing.T) {
	for _, arg := range []string{"--help", "-h"} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{arg}, &out, &errOut); code != 0 {
			t.Errorf("inspect %s = exit %d, want 0", arg, code)
		}
		if !strings.Contains(out.String(), "usage: inspect --payment") || !strings.Contains(out.String(), "-payment") || errOut.Len() != 0 {
			t.Errorf("inspect %s: stdout %q, stderr %q; want the usage and flags on stdout only", arg, out.String(), errOut.String())
		}
	}
}

func TestInspectWithoutAPaymentIsAUsageError(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), nil, &out, &errOut); code != 2 {
		t.Errorf("inspect with no payment = exit %d, want 2", code)
	}
	if out.Len() != 0 || !strings.Contains(errOut.String(), "--payment is required") {
		t.Errorf("stdout %q, stderr %q", out.String(), errOut.String())
	}
}

func TestInspectOfAnUnknownPaymentExitsOneAndSaysSo(t *testing.T) {
	_, dsn := testenv.Ledger(t)
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--payment", "pay_nosuchpayment", "--dsn", dsn, "--phone", filepath.Join(t.TempDir(), "p.jsonl")}, &out, &errOut)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if out.Len() != 0 || !strings.Contains(errOut.String(), "has no payment pay_nosuchpayment") {
		t.Errorf("stdout %q, stderr %q; want nothing printed and a message naming the payment", out.String(), errOut.String())
	}
}
