package client_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/internal/client"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
)

// cliEnv is the environment for a CLI run with home as the user's home and
// none of the variables that would pick a journal or a token for it.
func cliEnv(home string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "HOME", "XDG_STATE_HOME", "ONCEPAY_JOURNAL", "ONCEPAY_TOKEN", "ONCEPAY_CLIENT_CRASH", "ONCEPAY_JOURNAL_RETENTION":
		default:
			env = append(env, kv)
		}
	}
	return append(append(env, "HOME="+home), extra...)
}

// moduleDir makes a directory that looks like a checkout (go.mod, .local/):
// where a journal that followed the working directory would land.
func moduleDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	if err := os.WriteFile(filepath.Join(d, "go.mod"), []byte("module example.com/shop\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(d, ".local"), 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

// The journal is the user's, not the working directory's: a tap killed in
// one directory and tapped again from another resumes the same key (a
// journal found by walking up from the cwd made a new key there, and the
// first directory's open intent paid again on its next resolve).
func TestTheDefaultJournalIsTheUsersWhateverTheWorkingDirectory(t *testing.T) {
	cli := buildCLI(t)
	w := apitest.New(t, config.Timing{})
	door := w.Door(t, nil)
	home := t.TempDir()
	args := []string{"pay", "--order", "42", "--amount", "3000", "--url", door.URL, "--token", w.Token(t, "u1"), "--json"}
	dirA, dirB := moduleDir(t), moduleDir(t)

	first := exec.Command(cli, args...)
	first.Dir, first.Env = dirA, cliEnv(home, "ONCEPAY_CLIENT_CRASH=after-journal")
	if err := first.Run(); err == nil {
		t.Fatal("the first run was not killed")
	}
	path := filepath.Join(home, ".local", "state", "oncepay", "journal")
	j := openJournalAt(t, path)
	in, err := intentFor(j, door.URL, "u1", "42")
	j.Close()
	if err != nil {
		t.Fatalf("the tap is not in %s: %v", path, err)
	}

	second := exec.Command(cli, args...)
	second.Dir, second.Env = dirB, cliEnv(home)
	out, err := second.CombinedOutput()
	if err != nil || !strings.Contains(string(out), in.Key) || !strings.Contains(string(out), `"state":"SUCCEEDED"`) {
		t.Fatalf("from another directory: %v\n%s\nwant SUCCEEDED under the first tap's key %s", err, out, in.Key)
	}
	resume := exec.Command(cli, "resolve", "--url", door.URL, "--token", w.Token(t, "u1"), "--json")
	resume.Dir, resume.Env = dirA, cliEnv(home)
	if out, err := resume.CombinedOutput(); err != nil {
		t.Fatalf("resolve from the first directory: %v\n%s", err, out)
	}
	if got := len(w.Charges()); got != 1 {
		t.Fatalf("charges = %d, want 1", got)
	}
	if n := w.Scalar(t, `SELECT count(*) FROM payments`); n != 1 {
		t.Fatalf("payments = %d: a second key was used", n)
	}
}

func TestDefaultJournalPathFollowsXDGStateHomeThenHome(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/var/state/me")
	if p, err := client.DefaultJournalPath(); err != nil || p != "/var/state/me/oncepay/journal" {
		t.Fatalf("with XDG_STATE_HOME: %q %v", p, err)
	}
	t.Setenv("XDG_STATE_HOME", "relative/state") // the spec says: ignore a relative one
	t.Setenv("HOME", "/home/me")
	if p, err := client.DefaultJournalPath(); err != nil || p != "/home/me/.local/state/oncepay/journal" {
		t.Fatalf("without XDG_STATE_HOME: %q %v", p, err)
	}
}

// gate holds the first POST /payments at the front door until release is
// closed, and says when it arrived: a pay that is in flight.
func gate(arrived chan<- struct{}, release <-chan struct{}) func(http.Handler) http.Handler {
	var once sync.Once
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/payments" {
				held := false
				once.Do(func() { held = true })
				if held {
					close(arrived)
					<-release
				}
			}
			next.ServeHTTP(rw, r)
		})
	}
}

// Two CLI runs on one journal: bbolt's file lock lets one process hold it.
// A second run while the first pays waits --journal-wait (5 s by default), then fails
// clearly (exit 6, "in use by another"), without reading or writing the
// file: no second key, no corruption. After the first finishes, a run
// answers from the journal under the first run's key.
func TestASecondCLIOnABusyJournalFailsClearlyAndMakesNoKey(t *testing.T) {
	cli := buildCLI(t)
	w := apitest.New(t, config.Timing{})
	arrived, release := make(chan struct{}), make(chan struct{})
	door := w.Door(t, gate(arrived, release))
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(letGo) // before the door closes (cleanups run last first): a held request must not hang it
	home := t.TempDir()
	journal := filepath.Join(t.TempDir(), "journal")
	args := []string{"pay", "--order", "42", "--amount", "3000", "--url", door.URL, "--token", w.Token(t, "u1"), "--journal", journal, "--json"}

	first := exec.Command(cli, args...)
	first.Env = cliEnv(home)
	var firstOut bytes.Buffer
	first.Stdout, first.Stderr = &firstOut, &firstOut
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer first.Process.Kill()
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the first run never sent")
	}
	for _, second := range [][]string{
		args, // the default wait, 5 s
		{"status", "--order", "42", "--journal", journal, "--journal-wait", "300ms"},
	} {
		cmd := exec.Command(cli, second...)
		cmd.Env = cliEnv(home)
		started := time.Now()
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 6 || !strings.Contains(string(out), "in use by another") {
			t.Fatalf("oncepay %s on the busy journal: %v\n%s\nwant exit 6, in use by another process", second[0], err, out)
		}
		if waited := time.Since(started); waited > 10*time.Second {
			t.Fatalf("it waited %s, more than the wait asked", waited)
		}
	}
	letGo()
	if err := first.Wait(); err != nil || !strings.Contains(firstOut.String(), `"state":"SUCCEEDED"`) {
		t.Fatalf("the first run: %v\n%s", err, firstOut.String())
	}
	j := openJournalAt(t, journal)
	all, err := j.All()
	j.Close()
	if err != nil || len(all) != 1 {
		t.Fatalf("journal holds %d intents (%v), want 1", len(all), err)
	}
	third := exec.Command(cli, args...)
	third.Env = cliEnv(home)
	if out, err := third.CombinedOutput(); err != nil || !strings.Contains(string(out), all[0].Key) || !strings.Contains(string(out), `"from_journal":true`) {
		t.Fatalf("a run after the first: %v\n%s\nwant the first run's key, from the journal", err, out)
	}
	if got := len(w.Charges()); got != 1 {
		t.Fatalf("charges = %d, want 1", got)
	}
}

// The journal prunes what is final once it is older than the retention —
// paid, declined, voided and refused intents, and the order entries that
// point at them — and keeps every open intent however old: an open intent
// is a key whose outcome is not known yet, and forgetting it would let the
// next tap make a new key.
func TestPruneDropsFinalIntentsPastTheRetentionAndKeepsOpenOnes(t *testing.T) {
	w := apitest.New(t, config.Timing{})
	var lose sync.Map
	door := callerDoor(t, w, &lose)
	tok := w.Token(t, "u1")
	j := openJournal(t)
	c := fastClient(door.URL, tok, j)
	ctx := context.Background()
	pay := func(order, method string) client.Result {
		p := order42
		p.OrderID, p.PaymentMethod = order, method
		r, err := c.Pay(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	paid := pay("paid", "pm_card_visa")
	declined := pay("declined", "pm_card_chargeDeclined")
	recent := pay("recent", "pm_card_visa")
	lose.Store("Bearer "+tok, true)
	open := pay("open", "pm_card_visa")
	lose.Delete("Bearer " + tok)
	if paid.State != client.Succeeded || declined.State != client.FailedPay || open.State != client.Unknown {
		t.Fatalf("setup: %+v %+v %+v", paid, declined, open)
	}
	// Age all but "recent" by a year.
	year := time.Now().Add(-365 * 24 * time.Hour)
	for _, k := range []string{paid.Key, declined.Key, open.Key} {
		in, err := j.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		in.UpdatedAt = year
		if err := j.Put(in); err != nil {
			t.Fatal(err)
		}
	}

	n, err := j.Prune(time.Now().Add(-90 * 24 * time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("pruned %d (%v), want 2: the old paid and declined intents", n, err)
	}
	for order, want := range map[string]string{"paid": "", "declined": "", "recent": recent.Key, "open": open.Key} {
		in, err := intentFor(j, door.URL, "u1", order)
		switch {
		case want == "" && !errors.Is(err, client.ErrNoIntent):
			t.Errorf("order %s: %+v %v, want pruned", order, in, err)
		case want != "" && (err != nil || in.Key != want):
			t.Errorf("order %s: %+v %v, want kept", order, in, err)
		}
	}
	// The old open intent is still resumed with its key: one charge.
	rs, err := c.Resume(ctx)
	if err != nil || len(rs) != 1 || rs[0].Key != open.Key || rs[0].State != client.Succeeded {
		t.Fatalf("resume after the prune: %+v %v", rs, err)
	}
	if got := chargesFor(w, "u1", open.Key); got != 1 {
		t.Fatalf("charges for the open intent = %d, want 1", got)
	}
}

// The CLI prunes with --retention on every run that writes.
func TestTheCLIPrunesWithItsRetention(t *testing.T) {
	cli := buildCLI(t)
	w := apitest.New(t, config.Timing{})
	door := w.Door(t, nil)
	journal := filepath.Join(t.TempDir(), "journal")
	tok := w.Token(t, "u1")
	run := func(order string, extra ...string) {
		t.Helper()
		cmd := exec.Command(cli, append([]string{"pay", "--order", order, "--amount", "3000", "--url", door.URL, "--token", tok, "--journal", journal, "--json"}, extra...)...)
		cmd.Env = cliEnv(t.TempDir())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("pay %s: %v\n%s", order, err, out)
		}
	}
	run("1")
	time.Sleep(50 * time.Millisecond)
	run("2", "--retention", "10ms")
	j := openJournalAt(t, journal)
	defer j.Close()
	if _, err := intentFor(j, door.URL, "u1", "1"); !errors.Is(err, client.ErrNoIntent) {
		t.Fatalf("order 1 after a run with --retention 10ms: %v, want pruned", err)
	}
	if _, err := intentFor(j, door.URL, "u1", "2"); err != nil {
		t.Fatalf("order 2: %v", err)
	}
}

// journalWriter is the child of the kill test: it writes intents to the
// journal as fast as it can and prints each key once Put has returned
// (that is, once bbolt's commit, fsync included, is done).
func TestMain(m *testing.M) {
	if path := os.Getenv("ONCEPAY_TEST_JOURNAL_WRITER"); path != "" {
		os.Exit(journalWriter(path))
	}
	os.Exit(m.Run())
}

func journalWriter(path string) int {
	j, err := client.OpenJournal(path, client.JournalOptions{LockWait: 10 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	out := bufio.NewWriter(os.Stdout)
	for i := 0; ; i++ {
		now := time.Now().UTC()
		p := order42
		p.OrderID = fmt.Sprintf("w%d", i)
		in := client.Intent{Key: client.NewKey(), Scope: client.Scope{API: "http://x", Caller: "u1"}, Payment: p,
			State: client.Open, CreatedAt: now, UpdatedAt: now}
		if err := j.Put(in); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintln(out, in.Key)
		out.Flush()
	}
}

// kill -9 in the middle of the journal's commits, again and again on one
// file: every key the writer was told is written is there afterwards, the
// file opens, and every intent in it decodes. (A kill tests the process
// dying, not the machine: that part rests on bbolt's fsync, which the
// journal never turns off.)
func TestTheJournalSurvivesKillNineInTheMiddleOfItsCommits(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "journal")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	var acknowledged []string
	for round := range 12 {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), "ONCEPAY_TEST_JOURNAL_WRITER="+path)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if l := sc.Text(); len(l) == 36 { // a whole key: the line was written in one piece
					lines <- l
				}
			}
			close(lines)
		}()
		// Let it commit for a while, then kill it mid-stride.
		first, ok := <-lines
		if !ok {
			t.Fatalf("round %d: the writer wrote nothing", round)
		}
		acknowledged = append(acknowledged, first)
		time.Sleep(time.Duration(5+rng.IntN(60)) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		for l := range lines {
			acknowledged = append(acknowledged, l)
		}
		_ = cmd.Wait()

		j, err := client.OpenJournal(path, client.JournalOptions{})
		if err != nil {
			t.Fatalf("round %d: the journal does not open after kill -9: %v", round, err)
		}
		all, err := j.All()
		if err != nil {
			j.Close()
			t.Fatalf("round %d: the journal does not read after kill -9: %v", round, err)
		}
		for _, k := range acknowledged {
			if in, err := j.Get(k); err != nil || in.Key != k || in.State != client.Open {
				j.Close()
				t.Fatalf("round %d: acknowledged key %s lost after kill -9: %+v %v", round, k, in, err)
			}
		}
		j.Close()
		if len(all) < len(acknowledged) {
			t.Fatalf("round %d: %d intents, %d acknowledged", round, len(all), len(acknowledged))
		}
	}
	t.Logf("%d acknowledged writes across 12 kills, none lost", len(acknowledged))
}
