package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/localcloud/inspect"
	"github.com/oncepay/oncepay/internal/localcloud/phone"
)

// The live beat's merchant and amount. The merchant is the demo's own, so
// the balance delta it checks is its own payment's: a client paying m1 at
// the same moment (a user's curl, the black-box suite) would make a correct
// system fail the check.
const (
	liveMerchant = "m_demo"
	liveAmount   = 1250
	// pushLimit is the tap -> push budget the live beat holds the stack to.
	pushLimit = 10 * time.Second
)

// exchange is one request the CLI sent through the demo's tap on the wire.
type exchange struct {
	at       time.Time // the request's arrival at the wire
	took     time.Duration
	method   string
	path     string
	status   int
	replayed string
	body     string
}

// wire is a reverse proxy in front of the front door that records what the
// CLI sent and what it was answered: the CLI prints its outcome, not the
// HTTP status, and the demo shows the 201 itself.
type wire struct {
	mu   sync.Mutex
	log  []exchange
	srv  *http.Server
	addr string
}

func startWire(door string) (*wire, error) {
	target, err := url.Parse(door)
	if err != nil {
		return nil, fmt.Errorf("front door url %q: %w", door, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("wire: listen: %w", err)
	}
	w := &wire{addr: "http://" + ln.Addr().String()}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(resp *http.Response) error {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		at, _ := resp.Request.Context().Value(arrivalKey{}).(time.Time)
		w.mu.Lock()
		w.log = append(w.log, exchange{at: at, took: time.Since(at), method: resp.Request.Method, path: resp.Request.URL.Path,
			status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed"), body: string(bytes.TrimSpace(b))})
		w.mu.Unlock()
		return nil
	}
	w.srv = &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		proxy.ServeHTTP(rw, r.WithContext(context.WithValue(r.Context(), arrivalKey{}, time.Now())))
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = w.srv.Serve(ln) }()
	return w, nil
}

type arrivalKey struct{}

func (w *wire) exchanges() []exchange {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]exchange(nil), w.log...)
}

func (w *wire) close() { _ = w.srv.Close() }

// liveOutcome is what the live beat observed; check judges it.
type liveOutcome struct {
	CLIExit       int
	Answers       []exchange // what the CLI was answered, in order
	Payment       inspect.Payment
	Credits       []inspect.Entry
	BalanceBefore int64
	BalanceAfter  int64
	Pushes        []phone.Push // the phone's pushes for the payment
	TapToPush     time.Duration
}

// check returns why the live beat failed, or nil: the payment must be
// SUCCEEDED (answered 201 by the stack), credited exactly once to the
// merchant (one credit row of the amount, and the balance moved by exactly
// the amount) and its push on the phone within pushLimit of the tap, once.
func (o liveOutcome) check(amount int64) error {
	var errs []error
	if o.CLIExit != 0 {
		errs = append(errs, fmt.Errorf("oncepay pay --wait exited %d, want 0 (paid, push shown)", o.CLIExit))
	}
	if n := len(o.Answers); n == 0 || o.Answers[n-1].status != http.StatusCreated {
		errs = append(errs, fmt.Errorf("the tap's final answer was not a 201 (answers: %s)", statuses(o.Answers)))
	}
	if o.Payment.State != "SUCCEEDED" {
		errs = append(errs, fmt.Errorf("the ledger holds the payment %s, want SUCCEEDED", o.Payment.State))
	}
	var credited int64
	for _, c := range o.Credits {
		credited += c.Amount
	}
	if len(o.Credits) != 1 || credited != amount {
		errs = append(errs, fmt.Errorf("%d credit(s) totalling %d, want exactly one of %d", len(o.Credits), credited, amount))
	}
	if d := o.BalanceAfter - o.BalanceBefore; d != amount {
		errs = append(errs, fmt.Errorf("the merchant's balance moved by %d (%d -> %d), want exactly the amount %d", d, o.BalanceBefore, o.BalanceAfter, amount))
	}
	switch {
	case len(o.Pushes) == 0:
		errs = append(errs, fmt.Errorf("no push reached the phone within %s of the tap", pushLimit))
	case o.TapToPush > pushLimit:
		errs = append(errs, fmt.Errorf("the push reached the phone %s after the tap, want within %s", o.TapToPush.Round(time.Millisecond), pushLimit))
	}
	for _, e := range phone.Show(o.Pushes) {
		if e.Alerts != 1 {
			errs = append(errs, fmt.Errorf("the phone shows %d alerts under replace id %s, want 1", e.Alerts, e.ReplaceID))
		}
	}
	return errors.Join(errs...)
}

func statuses(xs []exchange) string {
	if len(xs) == 0 {
		return "none"
	}
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprint(x.status))
	}
	return strings.Join(s, ", ")
}

// liveBeat pays through the front door with the CLI, as a user types it,
// and follows the payment from the tap to the push on the phone.
func liveBeat(ctx context.Context, root, door, dsn, token string) error {
	fmt.Printf("\n== live: a payment through the front door with the CLI, from the tap to the push on the phone\n")
	tmp, err := os.MkdirTemp("", "oncepay-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// Built first, so the tap is timed from the send, not from a compile.
	cli := filepath.Join(tmp, "oncepay")
	build := exec.CommandContext(ctx, "go", "build", "-o", cli, "./cmd/oncepay")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build the CLI: %w", err)
	}

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to the ledger: %w", err)
	}
	defer conn.Close(context.Background())
	var o liveOutcome
	if o.BalanceBefore, err = balance(ctx, conn, liveMerchant); err != nil {
		return err
	}

	w, err := startWire(door)
	if err != nil {
		return err
	}
	defer w.close()
	order := fmt.Sprintf("live-%d", time.Now().Unix())
	args := []string{"pay", "--merchant", liveMerchant, "--order", order, "--amount", fmt.Sprint(liveAmount), "--wait", "--wait-timeout", pushLimit.String()}
	fmt.Printf("   merchant %s balance before: %s\n", liveMerchant, money(o.BalanceBefore))
	fmt.Printf("   $ oncepay %s\n", strings.Join(args, " "))
	args = append(args, "--url", w.addr, "--journal", filepath.Join(tmp, "journal"))
	pay := exec.CommandContext(ctx, cli, args...)
	var out bytes.Buffer
	pay.Dir, pay.Stdout, pay.Stderr = root, &out, &out
	pay.Env = append(os.Environ(), "ONCEPAY_TOKEN="+token)
	err = pay.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		o.CLIExit = exit.ExitCode()
	case err != nil:
		return fmt.Errorf("run the CLI: %w", err)
	}
	for _, line := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
		fmt.Printf("   | %s\n", line)
	}

	o.Answers = w.exchanges()
	if len(o.Answers) == 0 {
		return fmt.Errorf("the CLI sent nothing through the front door (exit %d)", o.CLIExit)
	}
	tap := o.Answers[0].at
	for _, x := range o.Answers {
		fmt.Printf("   wire: %s %s at +%.2fs -> %d in %.2fs, Idempotent-Replayed: %q  %s\n", x.method, x.path, x.at.Sub(tap).Seconds(), x.status, x.took.Seconds(), x.replayed, x.body)
	}
	if last := o.Answers[len(o.Answers)-1]; len(o.Answers) == 1 && last.replayed == "true" {
		// The simulator sends its webhook as it charges: the webhook
		// function can settle the row a moment before the api's own write,
		// and the api then answers from the row it finds.
		fmt.Println("   (replayed on the first send: the PSP's webhook settled the payment a moment before the api's own write; the api answered from the ledger's row)")
	}
	var answer struct {
		PaymentID string `json:"payment_id"`
	}
	if err := json.Unmarshal([]byte(o.Answers[len(o.Answers)-1].body), &answer); err != nil || answer.PaymentID == "" {
		return fmt.Errorf("the tap's answer names no payment (%q): %v", o.Answers[len(o.Answers)-1].body, err)
	}
	rep, err := inspect.Read(ctx, conn, phone.DefaultPath(filepath.Join(root, ".local")), answer.PaymentID)
	if err != nil {
		return fmt.Errorf("inspect %s: %w", answer.PaymentID, err)
	}
	o.Payment, o.Credits, o.Pushes = rep.Payment, rep.Credits, rep.Pushes
	if o.BalanceAfter, err = balance(ctx, conn, liveMerchant); err != nil {
		return err
	}
	fmt.Printf("   ledger (make -s inspect PAYMENT=%s): %s, psp_charge %s, %d credit(s)\n", answer.PaymentID, o.Payment.State, deref(o.Payment.PSPCharge), len(o.Credits))
	for _, p := range o.Pushes {
		o.TapToPush = p.ReceivedAt.Sub(tap)
		fmt.Printf("   the phone got: %q %q  replace id %s (%s, event %s), %.2fs after the tap\n   payload: %s\n",
			p.Title, p.Body, p.ReplaceID, p.Channel, p.EventID, o.TapToPush.Seconds(), p.Payload)
	}
	fmt.Printf("   merchant %s balance after:  %s (delta %s)\n", liveMerchant, money(o.BalanceAfter), money(o.BalanceAfter-o.BalanceBefore))
	if err := o.check(liveAmount); err != nil {
		return fmt.Errorf("live beat: %w", err)
	}
	fmt.Printf("\n== tapped once: answered 201 SUCCEEDED, charged once, credited once (%s), one push on the phone %.2fs after the tap\n", money(liveAmount), o.TapToPush.Seconds())
	return nil
}

// balance reads the merchant's USD balance in the ledger (0 before its
// first credit).
func balance(ctx context.Context, conn *pgx.Conn, merchant string) (int64, error) {
	var b int64
	err := conn.QueryRow(ctx, `SELECT COALESCE((SELECT balance FROM merchant_balances WHERE merchant_id = $1 AND currency = 'USD'), 0)`, merchant).Scan(&b)
	if err != nil {
		return 0, fmt.Errorf("merchant %s balance: %w", merchant, err)
	}
	return b, nil
}

func money(minor int64) string {
	sign := ""
	if minor < 0 {
		sign, minor = "-", -minor
	}
	return fmt.Sprintf("%s$%d.%02d", sign, minor/100, minor%100)
}

func deref(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}
