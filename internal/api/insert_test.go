package api_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

// lostCommit is a TCP proxy between pgx and the test's PostgreSQL database.
// Armed, it lets the next statement whose text holds trigger reach the
// server and commit, then cuts the client's connection before any byte of
// the server's reply reaches it: a commit whose reply is lost. refuse makes
// it close every connection opened after that drop at once (the ledger
// stays unreachable).
type lostCommit struct {
	t       testing.TB
	ln      net.Listener
	target  string
	trigger []byte
	// committed reports whether the statement's effect is visible (read on
	// a connection of the test's own, not through the proxy).
	committed func() bool
	armed     atomic.Bool
	refuse    atomic.Bool
	dropped   chan struct{}
	wg        sync.WaitGroup
}

func newLostCommit(t testing.TB, target, trigger string, committed func() bool) *lostCommit {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lostCommit{t: t, ln: ln, target: target, trigger: []byte(trigger), committed: committed, dropped: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	return p
}

func (p *lostCommit) hasDropped() bool {
	select {
	case <-p.dropped:
		return true
	default:
		return false
	}
}

func (p *lostCommit) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refuse.Load() && p.hasDropped() {
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.serve(c, s) }()
	}
}

// serve forwards one connection. Client messages are read whole (the
// protocol's length prefixes), so the trigger is seen before it is sent on.
func (p *lostCommit) serve(client, server net.Conn) {
	defer client.Close()
	defer server.Close()
	var swallow atomic.Bool
	go func() {
		// Server -> client, until swallowing starts. A server that hangs up
		// (after a cancel request, say) hangs up on the client too.
		defer client.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 && !swallow.Load() {
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	// The untyped startup messages (an SSL or GSS request, then the startup).
	for {
		msg, err := readUntyped(client)
		if err != nil {
			return
		}
		if _, err := server.Write(msg); err != nil {
			return
		}
		if len(msg) < 8 {
			return
		}
		if code := binary.BigEndian.Uint32(msg[4:8]); code != 80877103 && code != 80877104 {
			break
		}
	}
	var triggered bool
	for {
		msg, err := readTyped(client)
		if err != nil {
			return
		}
		if !triggered && bytes.Contains(msg, p.trigger) && p.armed.CompareAndSwap(true, false) {
			triggered = true
		}
		if triggered && (msg[0] == 'B' || msg[0] == 'Q') {
			// The statement runs from here on: nothing the server says
			// about it may reach the client.
			swallow.Store(true)
		}
		if _, err := server.Write(msg); err != nil {
			return
		}
		if swallow.Load() && (msg[0] == 'S' || msg[0] == 'Q') {
			// Sync (or a simple query) ends the implicit transaction:
			// wait until it committed, then cut the client off.
			deadline := time.Now().Add(5 * time.Second)
			for !p.committed() && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			close(p.dropped)
			return
		}
	}
}

func readUntyped(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n < 4 || n > 1<<20 {
		return nil, errors.New("bad startup length")
	}
	msg := make([]byte, n)
	copy(msg, hdr[:])
	_, err := io.ReadFull(r, msg[4:])
	return msg, err
}

func readTyped(r io.Reader) ([]byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[1:]))
	if n < 4 || n > 64<<20 {
		return nil, errors.New("bad message length")
	}
	msg := make([]byte, 1+n)
	copy(msg, hdr[:])
	_, err := io.ReadFull(r, msg[5:])
	return msg, err
}

// ledgerThroughLostCommit rebuilds the handler on a ledger that reaches the
// world's database through a lostCommit proxy armed for the PENDING insert.
func ledgerThroughLostCommit(t *testing.T, w *world, pid string) *lostCommit {
	t.Helper()
	cfg := w.pool.Config()
	target := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	committed := func() bool {
		var n int
		_ = w.pool.QueryRow(context.Background(), `SELECT count(*) FROM payments WHERE payment_id = $1`, pid).Scan(&n)
		return n == 1
	}
	proxy := newLostCommit(t, target, "INSERT INTO payments", committed)
	host, port, _ := net.SplitHostPort(proxy.ln.Addr().String())
	pcfg := cfg.Copy()
	pcfg.ConnConfig.Host = host
	p, _ := strconv.Atoi(port)
	pcfg.ConnConfig.Port = uint16(p)
	pcfg.ConnConfig.Fallbacks = nil
	pcfg.ConnConfig.ConnectTimeout = 500 * time.Millisecond
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	proxy.armed.Store(true)
	w.ledger = ledger.New(pool)
	w.rebuild()
	return proxy
}

// Issue 13 defect 5: the PENDING insert commits and its reply is lost (a
// reset connection). The old walk released the claim and answered 503
// "nothing was run", and the resolver made the first charge a minute later
// behind the client's back (which had been told to feel free to use a new
// key). An insert whose outcome is unknown is unknown: ask the ledger again.
func TestAmbiguousPendingInsertIsNotNothingRan(t *testing.T) {
	t.Run("the ledger answers again: the payment goes on", func(t *testing.T) {
		w := newWorld(t)
		pid := ids.PaymentID(ids.Scope("u1", "K1"))
		proxy := ledgerThroughLostCommit(t, w, pid)
		r := w.pay("u1", "K1", body3000)
		select {
		case <-proxy.dropped:
		default:
			t.Fatal("the proxy never dropped the insert's reply")
		}
		a := expectStatus(t, r, http.StatusCreated)
		ch := w.charges()
		if a.State != "SUCCEEDED" || len(ch) != 1 || a.PSPCharge != ch[0].ID {
			t.Fatalf("answer %+v, charges %+v", a, ch)
		}
		if p := w.row("u1", "K1"); p.State != ledger.Succeeded {
			t.Fatalf("row = %s", p.State)
		}
		if rec, _ := w.record("u1", "K1"); rec.State != idem.Completed || rec.Answer == nil || rec.Answer.Status != http.StatusCreated {
			t.Fatalf("key record = %+v", rec)
		}
		if got := w.intents(pid); len(got) != 1 || got[0] != ids.EventID(pid, "SUCCEEDED") {
			t.Fatalf("outbox intents = %v", got)
		}
		if got := w.wt.Metric("LedgerInsertUnknown"); got != 1 {
			t.Fatalf("LedgerInsertUnknown = %v", got)
		}
	})

	t.Run("the ledger stays silent: the claim is kept and nobody charges early", func(t *testing.T) {
		w := newWorld(t)
		pid := ids.PaymentID(ids.Scope("u1", "K1"))
		realLedger := w.ledger
		proxy := ledgerThroughLostCommit(t, w, pid)
		proxy.refuse.Store(true) // after the drop, the ledger can't be reached

		r := w.pay("u1", "K1", body3000)
		a := expectStatus(t, r, http.StatusServiceUnavailable)
		if !strings.HasSuffix(a.Type, "/ledger-unconfirmed") || strings.Contains(strings.ToLower(string(r.Body)), "nothing was run") {
			t.Fatalf("answer %s: it must not say that nothing ran", r.Body)
		}
		if ra, _ := strconv.Atoi(r.Headers.Get("Retry-After")); ra < 1 {
			t.Fatalf("Retry-After = %q", r.Headers.Get("Retry-After"))
		}
		rec, found := w.record("u1", "K1")
		if !found || rec.State != idem.InProgress {
			t.Fatalf("key record = %+v found=%v: the claim was released", rec, found)
		}
		if p := w.row("u1", "K1"); p.State != ledger.Pending {
			t.Fatalf("row = %s: the insert did commit", p.State)
		}
		if n := len(w.charges()); n != 0 {
			t.Fatalf("charges = %d", n)
		}
		// The resolver leaves the row alone while its owner may still run.
		res := w.wt.Resolver(w.wt.ResolverConfig(), worldtest.ResolverOptions{})
		if rep, err := res.Run(context.Background()); err != nil || rep.Claimed != 0 || len(w.charges()) != 0 {
			t.Fatalf("resolver inside the deadline = %+v, %v, charges %d", rep, err, len(w.charges()))
		}
		// A retry inside the lease: 409, not a second payment.
		w.ledger = realLedger
		w.rebuild()
		if early := w.pay("u1", "K1", body3000); early.Status != http.StatusConflict {
			t.Fatalf("retry inside the lease = %d %s", early.Status, early.Body)
		}
		// After the lease + margin the retry takes over and finishes it.
		w.clock.Advance(w.timing.Deadline + w.timing.Margin + time.Millisecond)
		late := w.pay("u1", "K1", body3000)
		ch := w.charges()
		if a := expectStatus(t, late, http.StatusCreated); a.State != "SUCCEEDED" || len(ch) != 1 || a.PSPCharge != ch[0].ID {
			t.Fatalf("takeover = %+v, charges %+v", a, ch)
		}
		if rep, err := res.Run(context.Background()); err != nil || rep.Claimed != 0 || len(w.charges()) != 1 {
			t.Fatalf("resolver after = %+v, %v, charges %d", rep, err, len(w.charges()))
		}
		if got := w.intents(pid); len(got) != 1 || got[0] != ids.EventID(pid, "SUCCEEDED") {
			t.Fatalf("outbox intents = %v", got)
		}
	})
}
