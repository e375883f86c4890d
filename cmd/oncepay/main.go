// Command oncepay is a buyer's client for the payment API: it behaves the way
// a correct app must (internal/client): the key is made and journaled before
// the first send, reused on every retry, and resolved when the outcome is
// unknown or an answer is not the API's own. `oncepay help` prints the rules,
// the journal's location and the exit codes.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/client"
	"github.com/oncepay/oncepay/internal/localcloud/frontdoor"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/phone"
)

const usage = `oncepay: a buyer's client for the oncepay payment API.

  oncepay pay --order 42 --amount 3000 [--currency USD] [--method pm_card_visa] [--merchant m1] [--receipt-email a@b.example] [--again] [--wait]
  oncepay status [--order 42]     what the journal holds (every caller and API; nothing is sent)
  oncepay resolve                 resume every open intent of this caller and API, same keys
  oncepay device register --platform GCM --push-token T
                                  register (or update) this install's device for push
  oncepay device remove           remove it (the server keeps a tombstone)
  oncepay phone                   what the local cloud's phone shows: one entry per replace id, then the emails (local cloud only)
  oncepay token --caller u1       print a bearer token for the local front door (local cloud only)
  oncepay help

Common flags: --url (default $ONCEPAY_FRONTDOOR_URL or http://127.0.0.1:8080),
--token (default $ONCEPAY_TOKEN), --journal, --journal-wait, --retention,
--timeout, --json. Run 'oncepay <command> --help' for a command's flags.

The phone (local cloud only): pay --wait waits up to --wait-timeout (default
30 s) for the payment's push to reach the local cloud's phone
(.local/phone/pushes.jsonl, or --phone, or $ONCEPAY_PHONE_FILE) and prints
it; 'oncepay phone' lists what the phone shows: the latest push per replace
id (the payment id: a later push about a payment replaces the earlier one
on screen) with the number of alerts it took.

Rules:
  - The key is made at the tap (a random UUID) and written to the journal
    before the first send; every retry, and every later run, reuses it.
  - 409 (in progress), 429, 5xx and no answer at all are retried with the
    same key (10 s timeout, exponential backoff with full jitter; a
    Retry-After is honoured up to 20 s, plus up to 50 % jitter).
  - Any other answer that is not the API's final one (201 SUCCEEDED, 402
    FAILED) is a question, not an answer: a 4xx, a redirect, an unexpected
    2xx. The key is resolved (POST /payments/{key}/resolve) before anything
    is decided; an earlier send may have paid.
  - A new key for an order is made only after the server said "not found,
    and it never will be" (voided or refused), or after a definite decline
    when the buyer pays anew: another card or amount, or --again. A paid
    order is never paid twice.
  - Intents are the caller's own: scoped by API URL, caller (the token's
    subject) and merchant. 'resolve' never sends one caller's key under
    another caller's token.

Devices: the journal holds this install's device id (made once) and a
counter that only grows. Every register or remove journals the next
counter first and sends it in Device-Counter; a retry resends the same
counter. The server applies a request only above the counter its row
holds, so a late or resent older request never undoes a newer one, and a
removed device comes back only with a higher counter. The answer shows
the row: applied false with a higher counter means a later request of
this device already won.

Journal: $ONCEPAY_JOURNAL or --journal, else one per user:
$XDG_STATE_HOME/oncepay/journal, or ~/.local/state/oncepay/journal
(macOS, Windows: the user config directory + oncepay/journal). Final
intents are pruned after --retention (default 90 days, $ONCEPAY_JOURNAL_RETENTION);
open ones are kept until they are resolved. One oncepay process holds the
journal at a time; another waits --journal-wait (default 5 s), then exits 6.

Exit codes: 0 paid; 1 error; 2 usage; 3 declined or refused (nothing
charged); 4 voided (not charged, and never will be: a new tap may pay);
5 still unknown (run 'oncepay resolve' later: the same key is used);
6 the journal is in use by another oncepay process; 7 (pay --wait) the
payment's answer is printed, but its push did not reach the phone within
--wait-timeout.
`

// Exit codes.
const (
	exitPaid    = 0
	exitError   = 1
	exitUsage   = 2
	exitRefused = 3
	exitVoided  = 4
	exitUnknown = 5
	exitBusy    = 6
	exitNoPush  = 7
)

// commands are the commands, each with its line of help and the flags it reads.
var commands = map[string]struct {
	summary string
	flags   []string
}{
	"pay": {"pay for an order (the key is made and journaled first); --wait: and wait for its push on the phone",
		[]string{"order", "amount", "currency", "method", "merchant", "receipt-email", "again", "wait", "wait-timeout", "phone", "url", "token", "caller", "timeout", "journal", "journal-wait", "retention", "json"}},
	"status":  {"what the journal holds for an order, or every open intent (sends nothing)", []string{"order", "journal", "journal-wait", "json"}},
	"resolve": {"resume every open intent of this caller and API, with the same keys", []string{"url", "token", "caller", "timeout", "journal", "journal-wait", "retention", "json"}},
	"phone":   {"what the local cloud's phone shows: the latest push per replace id, with its number of alerts", []string{"phone", "json"}},
	"device": {"device register --platform P --push-token T | device remove: this install's push device, ordered by its journaled counter",
		[]string{"platform", "push-token", "url", "token", "caller", "timeout", "journal", "journal-wait", "json"}},
	"token": {"print a bearer token for the local front door (local cloud only)", []string{"caller"}},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, os.Args[1:], os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "oncepay:", err)
	}
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout io.Writer) (int, error) {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return exitUsage, nil
	}
	cmd := args[0]
	switch cmd {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0, nil
	}
	_, known := commands[cmd]
	if !known {
		fmt.Fprint(os.Stderr, usage)
		return exitUsage, fmt.Errorf("unknown command %q", cmd)
	}
	var sub string
	if cmd == "device" {
		if len(args) < 2 || (args[1] != "register" && args[1] != "remove") {
			fmt.Fprint(os.Stderr, usage)
			return exitUsage, errors.New("device needs register or remove")
		}
		sub, args = args[1], args[1:]
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	// The flag package's own output is silenced: help goes to stdout, a
	// usage error to stderr, each printed below.
	fs.SetOutput(io.Discard)
	baseURL := fs.String("url", envOr(stackenv.FrontDoorURL, "http://127.0.0.1:8080"), "the API's base URL")
	token := fs.String("token", os.Getenv("ONCEPAY_TOKEN"), "bearer token (default $ONCEPAY_TOKEN)")
	journalPath := fs.String("journal", os.Getenv("ONCEPAY_JOURNAL"), "the journal file (default $ONCEPAY_JOURNAL, else one per user: see 'oncepay help')")
	journalWait := fs.Duration("journal-wait", 5*time.Second, "how long to wait for another oncepay process to let go of the journal")
	retention := fs.Duration("retention", envDuration("ONCEPAY_JOURNAL_RETENTION", 90*24*time.Hour), "how long final intents stay in the journal (open ones stay until resolved)")
	asJSON := fs.Bool("json", false, "print JSON")
	order := fs.String("order", "", "order id")
	amount := fs.Int64("amount", 0, "amount in minor units")
	currency := fs.String("currency", "USD", "ISO 4217 currency")
	method := fs.String("method", "pm_card_visa", "payment method")
	receiptEmail := fs.String("receipt-email", "", "where the payment's emails go (optional; part of the payment: another address is another payment)")
	merchant := fs.String("merchant", "m1", "merchant id")
	again := fs.Bool("again", false, "pay: after a decline, pay anew (new key) even with the same card")
	caller := fs.String("caller", "", "token: the caller to mint a token for; others: the journal's caller, for a token that is not a JWT")
	timeout := fs.Duration("timeout", 10*time.Second, "per-request timeout")
	wait := fs.Bool("wait", false, "pay: after the answer, wait for the payment's push on the local cloud's phone and print it")
	waitTimeout := fs.Duration("wait-timeout", 30*time.Second, "pay --wait: how long to wait for the push")
	phonePath := fs.String("phone", "", "the local cloud's phone (default $ONCEPAY_PHONE_FILE, else .local/phone/pushes.jsonl in the repository)")
	platform := fs.String("platform", "GCM", "device register: APNS, APNS_SANDBOX or GCM")
	pushToken := fs.String("push-token", "", "device register: the push token the platform gave this install; - reads it from stdin (kept out of ps and the shell's history)")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			commandUsage(stdout, fs, cmd)
			return 0, nil
		}
		commandUsage(os.Stderr, fs, cmd)
		return exitUsage, err
	}
	switch cmd {
	case "token":
		return mintToken(*caller, stdout)
	case "phone":
		return showPhone(*phonePath, *asJSON, stdout)
	}
	path := *journalPath
	if path == "" {
		var err error
		if path, err = client.DefaultJournalPath(); err != nil {
			return exitError, err
		}
	}
	if *journalPath == "" {
		warnLegacyJournal()
	}
	lockWait := *journalWait
	if lockWait == 0 {
		lockWait = -1 // 0 on the command line: do not wait
	}
	j, err := client.OpenJournal(path, client.JournalOptions{LockWait: lockWait})
	if errors.Is(err, client.ErrJournalBusy) {
		return exitBusy, fmt.Errorf("%w; try again when it has finished", err)
	}
	if err != nil {
		return exitError, err
	}
	defer j.Close()
	if cmd == "status" {
		return status(j, *order, *asJSON, stdout)
	}
	if *retention > 0 {
		if _, err := j.Prune(time.Now().Add(-*retention)); err != nil {
			return exitError, err
		}
	}
	cfg := client.Config{BaseURL: *baseURL, Token: *token, Caller: *caller, Timeout: *timeout}
	// Across Regions (docs/regions.md): the Regions' API base URLs a 421
	// may send the client to, the same JSON object the api is given.
	if raw := os.Getenv(stackenv.RegionURLs); raw != "" {
		var urls map[string]string
		if err := json.Unmarshal([]byte(raw), &urls); err != nil {
			return exitUsage, fmt.Errorf("%s: %w", stackenv.RegionURLs, err)
		}
		for _, u := range urls {
			cfg.HomeURLs = append(cfg.HomeURLs, u)
		}
	}
	if !*asJSON {
		cfg.Progress = func(attempt int, wait time.Duration, why string) {
			fmt.Fprintf(os.Stderr, "  retry %d in %s (%s), same key\n", attempt, wait.Round(time.Millisecond), why)
		}
	}
	crashPoints(&cfg)
	c := client.New(cfg, j)
	switch cmd {
	case "device":
		return device(ctx, c, sub, *platform, *pushToken, *asJSON, stdout)
	case "pay":
		if *order == "" || *amount <= 0 {
			return exitUsage, errors.New("pay needs --order and --amount")
		}
		p := client.Payment{MerchantID: *merchant, OrderID: *order, Amount: *amount, Currency: *currency, PaymentMethod: *method, ReceiptEmail: *receiptEmail}
		pay := c.Pay
		if *again {
			pay = c.PayAgain
		}
		r, err := pay(ctx, p)
		if err != nil {
			return exitError, err
		}
		code := print(stdout, r, *asJSON)
		if *wait {
			// The journal is not needed to watch the phone: let another
			// oncepay have it while this one waits.
			j.Close()
			return waitForPush(ctx, r, *phonePath, *waitTimeout, *asJSON, stdout, code)
		}
		return code, nil
	default: // resolve
		rs, err := c.Resume(ctx)
		if err != nil {
			return exitError, err
		}
		code := 0
		for _, r := range rs {
			code = max(code, print(stdout, r, *asJSON))
		}
		if _, others, err := j.OpenIntents(c.Scope()); err == nil && others > 0 && !*asJSON {
			fmt.Fprintf(os.Stderr, "%d open intent(s) belong to another caller or API: run resolve with their token and --url\n", others)
		}
		if len(rs) == 0 && !*asJSON {
			fmt.Fprintln(stdout, "nothing open in the journal for this caller and API")
		}
		return code, nil
	}
}

// commandUsage prints one command's line of help and the flags it reads.
func commandUsage(w io.Writer, fs *flag.FlagSet, cmd string) {
	spec := commands[cmd]
	fmt.Fprintf(w, "usage: oncepay %s [flags]\n\n  %s\n\nFlags (see 'oncepay help' for the rules and the exit codes):\n", cmd, spec.summary)
	sub := flag.NewFlagSet(cmd, flag.ContinueOnError)
	sub.SetOutput(w)
	for _, name := range spec.flags {
		if f := fs.Lookup(name); f != nil {
			sub.Var(f.Value, f.Name, f.Usage)
		}
	}
	sub.PrintDefaults()
}

// phoneFile returns the phone's pushes file: the flag's, else the default.
func phoneFile(flagPath string) (string, error) {
	if flagPath != "" {
		return flagPath, nil
	}
	if p := os.Getenv(phone.EnvFile); p != "" {
		return p, nil
	}
	root, err := localenv.Root()
	if err != nil {
		return "", fmt.Errorf("the phone belongs to a local cloud: run oncepay in the repository, or give --phone: %w", err)
	}
	return phone.DefaultPath(filepath.Join(root, ".local")), nil
}

// showPhone lists what the phone shows, oldest first.
func showPhone(flagPath string, asJSON bool, stdout io.Writer) (int, error) {
	path, err := phoneFile(flagPath)
	if err != nil {
		return exitError, err
	}
	pushes, err := phone.Read(path)
	if err != nil {
		return exitError, err
	}
	shown := phone.Show(pushes)
	if len(shown) == 0 && !asJSON {
		fmt.Fprintf(stdout, "the phone shows nothing yet (%s holds no push; is the local cloud up?)\n", path)
	}
	defer showEmails(shown, asJSON, stdout)
	for _, e := range shown {
		if asJSON {
			b, _ := json.Marshal(e)
			fmt.Fprintln(stdout, string(b))
			continue
		}
		fmt.Fprintf(stdout, "%s  %s\n", e.ReplaceID, describePush(e.Latest, e.Alerts))
	}
	return 0, nil
}

// showEmails lists the emails the local cloud's SES took about the
// payments the phone shows (the local cloud delivers none: moto keeps
// them), after the pushes. Without a local cloud it shows nothing.
func showEmails(shown []phone.Entry, asJSON bool, stdout io.Writer) {
	env, err := localenv.Load()
	if err != nil || env.Get("AWS_ENDPOINT_URL") == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	emails, err := phone.Emails(ctx, env.Get("AWS_ENDPOINT_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "oncepay: emails:", err)
		return
	}
	for _, e := range emails {
		if !slices.ContainsFunc(shown, func(p phone.Entry) bool { return strings.Contains(e.Body, "Payment: "+p.ReplaceID+"\n") }) {
			continue
		}
		if asJSON {
			b, _ := json.Marshal(map[string]any{"email": e})
			fmt.Fprintln(stdout, string(b))
			continue
		}
		fmt.Fprintf(stdout, "email to %s  %s\n", strings.Join(e.To, ","), e.Subject)
	}
}

// waitForPush waits for the push about r's payment on the phone and prints
// it; the exit code is the payment's, or exitNoPush if none came in time.
func waitForPush(ctx context.Context, r client.Result, flagPath string, timeout time.Duration, asJSON bool, stdout io.Writer, code int) (int, error) {
	switch {
	case r.PaymentID == "":
		return code, errors.New("--wait: the answer names no payment: there is no push to wait for")
	case r.State == client.Void || r.State == client.Refused:
		fmt.Fprintln(os.Stderr, "oncepay: --wait: nothing was charged and nothing will be: no push comes for this payment")
		return code, nil
	}
	path, err := phoneFile(flagPath)
	if err != nil {
		return exitError, err
	}
	if !asJSON {
		fmt.Fprintf(os.Stderr, "  waiting up to %s for the push on the phone (%s)\n", timeout, path)
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	started := time.Now()
	p, err := phone.Wait(wctx, path, r.PaymentID, 0)
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return exitNoPush, fmt.Errorf("no push for payment %s reached the phone within %s (is the local cloud's phone running? `make status`)", r.PaymentID, timeout)
		}
		return exitError, err
	}
	alerts := 0
	if all, err := phone.Read(path); err == nil {
		for _, e := range phone.Show(phone.ForPayment(all, r.PaymentID)) {
			alerts += e.Alerts
		}
	}
	if asJSON {
		b, _ := json.Marshal(phone.Entry{ReplaceID: p.ReplaceID, Alerts: alerts, Latest: p})
		fmt.Fprintln(stdout, string(b))
	} else {
		fmt.Fprintf(stdout, "push on the phone after %s: %s\n", time.Since(started).Round(time.Millisecond), describePush(p, alerts))
	}
	return code, nil
}

// describePush renders a push the way the phone shows it, on one line.
func describePush(p phone.Push, alerts int) string {
	s := "alert"
	if alerts != 1 {
		s = "alerts"
	}
	text := p.Title
	if p.Body != "" {
		text += ": " + p.Body
	}
	return fmt.Sprintf("%s (%d %s; replace id %s, %s %s, received %s)", text, alerts, s, p.ReplaceID, p.Channel, orDash(p.EventID), p.ReceivedAt.Local().Format("15:04:05.000"))
}

func mintToken(caller string, stdout io.Writer) (int, error) {
	root, err := localenv.Root()
	if err != nil {
		return exitError, err
	}
	secret, err := frontdoor.LoadOrCreateSecret(filepath.Join(root, ".local", "frontdoor.key"))
	if err != nil {
		return exitError, err
	}
	tok, err := frontdoor.Mint(secret, caller, 24*time.Hour, time.Now())
	if err != nil {
		return exitError, err
	}
	fmt.Fprintln(stdout, tok)
	return 0, nil
}

// status lists the journal's intents for an order (every merchant, caller
// and API), or every open intent, newest first. It sends nothing.
func status(j *client.Journal, order string, asJSON bool, stdout io.Writer) (int, error) {
	all, err := j.All()
	if err != nil {
		return exitError, err
	}
	var out []client.Intent
	for _, in := range all {
		if order == "" && in.State == client.Open || order != "" && in.Payment.OrderID == order {
			out = append(out, in)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].CreatedAt.After(out[b].CreatedAt) })
	if len(out) == 0 {
		if order != "" {
			return exitError, fmt.Errorf("no intent for order %s in %s", order, j.Path())
		}
		fmt.Fprintf(stdout, "nothing open in %s\n", j.Path())
		return 0, nil
	}
	for _, in := range out {
		if asJSON {
			b, _ := json.Marshal(in)
			fmt.Fprintln(stdout, string(b))
			continue
		}
		fmt.Fprintf(stdout, "order %s (merchant %s, caller %s at %s): key %s, %s %s, %d attempt(s)\n",
			in.Payment.OrderID, in.Payment.MerchantID, orDash(in.Scope.Caller), orDash(in.Scope.API), in.Key, in.State, in.Outcome, in.Attempts)
	}
	return 0, nil
}

// print writes the result and returns the exit code.
func print(stdout io.Writer, r client.Result, asJSON bool) int {
	if asJSON {
		b, _ := json.Marshal(r)
		fmt.Fprintln(stdout, string(b))
	} else {
		msg := map[string]string{
			client.Succeeded: "paid", client.FailedPay: "declined (nothing charged; pay with another card, or --again)",
			client.Void:    "not charged, and it never will be",
			client.Unknown: "not confirmed yet: run `oncepay resolve` later (the same key will be used)",
			client.Refused: "refused (nothing charged)",
		}[r.State]
		fmt.Fprintf(stdout, "%s: %s (key %s, payment %s, %d attempt(s)) %s\n", r.State, msg, r.Key, r.PaymentID, r.Attempts, r.Detail)
	}
	switch r.State {
	case client.Succeeded:
		return exitPaid
	case client.Void:
		return exitVoided
	case client.Unknown:
		return exitUnknown
	}
	return exitRefused
}

// crashPoints lets tests kill the process at the client's crash points
// (ONCEPAY_CLIENT_CRASH=after-journal|after-send|after-final): SIGKILL, as
// kill -9, so nothing is flushed or closed on the way out.
func crashPoints(cfg *client.Config) {
	die := func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL); select {} }
	switch os.Getenv("ONCEPAY_CLIENT_CRASH") {
	case "after-journal":
		cfg.AfterJournal = die
	case "after-send":
		cfg.AfterSend = die
	case "after-final":
		cfg.AfterFinal = die
	}
}

// warnLegacyJournal points at a journal an older oncepay wrote where its
// default used to be (found from the working directory, or in the home
// directory): its open intents may have been sent, and only the server's
// resolver settles them now.
func warnLegacyJournal() {
	var old []string
	if root, err := localenv.Root(); err == nil {
		old = append(old, filepath.Join(root, ".local", "client.journal"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		old = append(old, filepath.Join(home, ".oncepay.journal"))
	}
	for _, p := range old {
		if _, err := os.Stat(p); err == nil {
			fmt.Fprintf(os.Stderr, "oncepay: note: %s is a journal from an older oncepay; list its intents with 'oncepay status --journal %s'\n", p, p)
		}
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envDuration(k string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(strings.TrimSpace(os.Getenv(k))); err == nil {
		return d
	}
	return def
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// device registers or removes this install's device.
func device(ctx context.Context, c *client.Client, sub, platform, pushToken string, asJSON bool, stdout io.Writer) (int, error) {
	var r client.DeviceResult
	var err error
	switch sub {
	case "register":
		if pushToken == "-" {
			line, err := bufio.NewReader(os.Stdin).ReadString('\n')
			if err != nil && !errors.Is(err, io.EOF) {
				return exitError, fmt.Errorf("read the push token from stdin: %w", err)
			}
			pushToken = strings.TrimSpace(line)
		}
		if pushToken == "" {
			return exitUsage, errors.New("device register needs --push-token")
		}
		r, err = c.RegisterDevice(ctx, platform, pushToken)
	default:
		r, err = c.RemoveDevice(ctx)
	}
	switch {
	case errors.Is(err, client.ErrDeviceRefused):
		return exitRefused, err
	case err != nil:
		return exitError, err
	}
	if asJSON {
		b, _ := json.Marshal(r)
		fmt.Fprintln(stdout, string(b))
		return 0, nil
	}
	what := "applied"
	if !r.Applied {
		what = "not applied: the device's row already holds counter " + fmt.Sprint(r.Counter)
		if r.Counter == r.Sent {
			what = "applied (by an earlier send of the same counter)"
		}
	}
	fmt.Fprintf(stdout, "device %s: %s, counter %d, %s\n", r.DeviceID, r.State, r.Sent, what)
	return 0, nil
}
