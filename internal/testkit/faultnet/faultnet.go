// Package faultnet is a TCP proxy between a PostgreSQL client (pgx) and the
// server that makes commits ambiguous: when a rule is armed, it forwards the
// client's bytes untouched, lets the server run the round trip to its end,
// and then drops both connections before the server's reply (its
// ReadyForQuery) reaches the client. The statement committed; the client
// only saw the connection die. That is the failure a network partition or a
// proxy (RDS Proxy, a NAT timeout) causes between a Lambda function and
// Aurora, and the one a retry that assumes "error means nothing happened"
// gets wrong.
//
// The proxy reads the frontend protocol only as far as it must: it counts
// round trips (a simple Query, or an extended-protocol batch ending in
// Sync) and notes the SQL each one executes (the Query's text, or the text
// of the statement an Execute's portal was bound from). It never changes a
// byte in either direction. TLS is not proxied: a client that negotiates
// SSL is passed through and never faulted (the local cluster runs with
// sslmode=disable).
//
// Down starts an outage instead: the ledger unreachable for the next n
// calls, each failing before it reaches the server (see Down), until Up.
package faultnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"
)

// Rule arms one dropped reply.
type Rule struct {
	// Name labels the rule in Fired (default: Statement, or "any").
	Name string
	// Statement selects the round trips the rule counts: those that execute
	// a statement whose text, with whitespace collapsed, starts with it
	// (case-insensitive), e.g. "COMMIT" or "INSERT INTO payments". Empty:
	// any round trip that executes a statement. A connection check
	// ("-- ping") and a statement that is only prepared never count.
	Statement string
	// Skip is how many counted round trips pass before the one whose reply
	// is dropped ("after N round trips"); 0: the next one.
	Skip int
}

func (r Rule) name() string {
	switch {
	case r.Name != "":
		return r.Name
	case r.Statement != "":
		return r.Statement
	}
	return "any"
}

func (r Rule) matches(sqls []string) bool {
	for _, s := range sqls {
		if r.Statement == "" || strings.HasPrefix(strings.ToUpper(s), strings.ToUpper(normalize(r.Statement))) {
			return true
		}
	}
	return false
}

// normalize collapses whitespace runs to one space and trims the ends.
func normalize(sql string) string { return strings.Join(strings.Fields(sql), " ") }

// Proxy listens on a local port and forwards every connection to the
// target. Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	log    *slog.Logger

	mu     sync.Mutex
	rules  []*Rule
	fired  map[string]int
	conns  map[*session]struct{}
	closed bool
	wg     sync.WaitGroup

	// The outage (Down): calls still to fail, and calls failed since the
	// last Up.
	downLeft, downFired int
}

// Listen starts a proxy on 127.0.0.1 (a free port) in front of target
// (host:port). log may be nil.
func Listen(target string, log *slog.Logger) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultnet: listen: %w", err)
	}
	if log == nil {
		log = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	p := &Proxy{target: target, ln: ln, log: log, fired: map[string]int{}, conns: map[*session]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port: give it to the client instead of the
// server's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Arm adds a rule; rules are tried in the order they were armed and each
// drops one reply. It fails on a negative Skip.
func (p *Proxy) Arm(r Rule) error {
	if r.Skip < 0 {
		return fmt.Errorf("faultnet: rule %q: negative Skip %d", r.name(), r.Skip)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("faultnet: proxy closed")
	}
	p.rules = append(p.rules, &r)
	return nil
}

// Disarm removes every rule still armed and returns how many there were.
func (p *Proxy) Disarm() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.rules)
	p.rules = nil
	return n
}

// Fired returns how many replies each rule name dropped so far.
func (p *Proxy) Fired() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.fired))
	for k, v := range p.fired {
		out[k] = v
	}
	return out
}

// Down starts an outage: the next n calls on the ledger fail before they
// reach the server. A call is a new connection (closed once its first
// message is read, before anything reaches the server: the client's
// connect fails) or
// a round trip on an open connection (the session is closed at the round
// trip's first message, which is never forwarded: the server sees the
// connection end, and rolls back any transaction it had open). A
// CancelRequest (pgx's cleanup after a session died) is dropped and not
// counted: it is no call on the ledger. Round trips
// already forwarded finish normally. Each call that fails counts. pgx's
// connection check ("-- ping") passes, uncounted, as it does for a Rule.
// A later Down replaces the count left. It fails on n < 1.
func (p *Proxy) Down(n int) error {
	if n < 1 {
		return fmt.Errorf("faultnet: an outage of %d calls", n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("faultnet: proxy closed")
	}
	p.downLeft = n
	return nil
}

// Up ends the outage (whatever of it is left) and returns how many calls
// it failed since the last Up: what fired, not what was armed.
func (p *Proxy) Up() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.downFired
	p.downLeft, p.downFired = 0, 0
	return n
}

// DownFired is how many calls the outage failed since the last Up.
func (p *Proxy) DownFired() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.downFired
}

// down reports whether the next call fails in the outage, and uses it up.
func (p *Proxy) down() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.downLeft <= 0 {
		return false
	}
	p.downLeft--
	p.downFired++
	return true
}

// Close stops listening and closes every connection; it blocks until the
// proxy's goroutines are gone.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.rules = nil
	conns := make([]*session, 0, len(p.conns))
	for s := range p.conns {
		conns = append(conns, s)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, s := range conns {
		s.close()
	}
	p.wg.Wait()
	return err
}

// take decides, with the round trip's executed statements in hand, whether
// a rule drops its reply; it uses the rule up.
func (p *Proxy) take(sqls []string) (string, bool) {
	if len(sqls) == 0 {
		return "", false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range p.rules {
		if !r.matches(sqls) {
			continue
		}
		if r.Skip > 0 {
			r.Skip--
			return "", false
		}
		p.rules = append(p.rules[:i:i], p.rules[i+1:]...)
		return r.name(), true
	}
	return "", false
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve runs one accepted connection: refused in an outage, else proxied.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	var first []byte
	if p.isDown() {
		// Read the connection's first message: a CancelRequest is pgx's
		// cleanup after a session that died (sent on a connection of its
		// own), not a call on the ledger, and is dropped uncounted.
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		msg, err := readUntyped(c)
		if err != nil {
			_ = c.Close()
			return
		}
		_ = c.SetReadDeadline(time.Time{})
		if binary.BigEndian.Uint32(msg[4:8]) == cancelRequest {
			_ = c.Close()
			return
		}
		if p.down() {
			p.log.Info("faultnet: connection refused in an outage")
			_ = c.Close()
			return
		}
		first = msg // the outage ended meanwhile
	}
	s, err := p.open(c)
	if err != nil {
		p.log.Warn("faultnet: dial the server", "err", err)
		_ = c.Close()
		return
	}
	s.clientToServer(first)
}

// isDown reports whether an outage is on, without using a call of it.
func (p *Proxy) isDown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.downLeft > 0
}

func (p *Proxy) open(c net.Conn) (*session, error) {
	srv, err := net.Dial("tcp", p.target)
	if err != nil {
		return nil, err
	}
	s := &session{p: p, client: c, server: srv, stmts: map[string]string{}, portals: map[string]string{}, drops: map[int]string{}}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		_ = srv.Close()
		return nil, errors.New("faultnet: proxy closed")
	}
	p.conns[s] = struct{}{}
	return s, nil
}

// session is one proxied connection.
type session struct {
	p              *Proxy
	client, server net.Conn
	closeOnce      sync.Once

	// client -> server state (one goroutine)
	stmts   map[string]string // prepared statement name -> SQL
	portals map[string]string // portal name -> SQL
	exec    []string          // SQL executed in the current round trip
	sent    int               // round trips forwarded (the startup is the first)

	mu    sync.Mutex
	drops map[int]string // round trip number -> rule name whose reply is dropped
}

func (s *session) close() {
	s.closeOnce.Do(func() {
		_ = s.client.Close()
		_ = s.server.Close()
		s.p.mu.Lock()
		delete(s.p.conns, s)
		s.p.mu.Unlock()
	})
}

const (
	sslRequest    = 80877103
	gssencRequest = 80877104
	cancelRequest = 80877102
)

// clientToServer forwards the client's messages, noting what each round
// trip executes and arming a drop before forwarding the message that ends a
// round trip a rule picked. first, if not nil, is the client's first
// startup-phase message, already read.
func (s *session) clientToServer(first []byte) {
	defer s.close()
	// Startup: untyped messages until the StartupMessage itself. An SSL or
	// GSS request gets a one-byte answer before anything else is sent; the
	// server's side is read here until the startup message is through.
	for {
		msg, err := first, error(nil)
		if first == nil {
			msg, err = readUntyped(s.client)
		}
		first = nil
		if err != nil {
			return
		}
		if _, err := s.server.Write(msg); err != nil {
			return
		}
		code := binary.BigEndian.Uint32(msg[4:8])
		if code == cancelRequest {
			return
		}
		if code != sslRequest && code != gssencRequest {
			break
		}
		b := make([]byte, 1)
		if _, err := io.ReadFull(s.server, b); err != nil {
			return
		}
		if _, err := s.client.Write(b); err != nil {
			return
		}
		if b[0] != 'N' { // encryption negotiated: pass through, never fault
			s.p.wg.Add(1)
			go func() { defer s.p.wg.Done(); defer s.close(); _, _ = io.Copy(s.client, s.server) }()
			_, _ = io.Copy(s.server, s.client)
			return
		}
	}
	s.sent = 1 // the startup's ReadyForQuery ends round trip 1
	s.p.wg.Add(1)
	go s.serverToClient()
	between := true // the next message starts a round trip
	for {
		typ, msg, err := readTyped(s.client)
		if err != nil {
			return
		}
		if between && typ != 'X' && !isPing(typ, msg[5:]) && s.p.down() {
			// Nothing of the round trip reaches the server; the deferred
			// close ends the session on both sides.
			s.p.log.Info("faultnet: session closed in an outage before its round trip reached the server")
			return
		}
		between = typ == 'Q' || typ == 'S'
		s.note(typ, msg[5:])
		if typ == 'Q' || typ == 'S' {
			s.sent++
			if name, drop := s.p.take(s.exec); drop {
				s.mu.Lock()
				s.drops[s.sent] = name
				s.mu.Unlock()
			}
			s.exec = s.exec[:0]
		}
		if _, err := s.server.Write(msg); err != nil {
			return
		}
		if typ == 'X' {
			return
		}
	}
}

// note records the SQL a message prepares, binds or executes.
func (s *session) note(typ byte, body []byte) {
	switch typ {
	case 'Q':
		if q, _ := cstring(body); countable(q) {
			s.exec = append(s.exec, normalize(q))
		}
	case 'P': // Parse: name, query, ...
		name, rest := cstring(body)
		q, _ := cstring(rest)
		s.stmts[name] = q
	case 'B': // Bind: portal, statement, ...
		portal, rest := cstring(body)
		stmt, _ := cstring(rest)
		s.portals[portal] = s.stmts[stmt]
	case 'E': // Execute: portal, max rows
		portal, _ := cstring(body)
		if q := s.portals[portal]; countable(q) {
			s.exec = append(s.exec, normalize(q))
		}
	case 'C': // Close: 'S' statement or 'P' portal, name
		if len(body) > 0 {
			name, _ := cstring(body[1:])
			if body[0] == 'S' {
				delete(s.stmts, name)
			} else {
				delete(s.portals, name)
			}
		}
	}
}

// isPing reports whether a message is pgx's connection check, which the
// pool sends only before handing out a connection idle for a second of
// real time: an outage lets it through uncounted, so what an outage of n
// calls fails is a function of the calls made, not of the wall clock.
func isPing(typ byte, body []byte) bool {
	if typ != 'Q' {
		return false
	}
	q, _ := cstring(body)
	return !countable(q)
}

// countable leaves out empty statements and pgx's connection check.
func countable(q string) bool {
	q = strings.TrimSpace(q)
	return q != "" && !strings.HasPrefix(q, "--")
}

// serverToClient forwards the server's messages; at the ReadyForQuery that
// ends a round trip armed for a drop, it closes both connections instead.
func (s *session) serverToClient() {
	defer s.p.wg.Done()
	defer s.close()
	done := 0 // ReadyForQuery messages seen
	for {
		typ, msg, err := readTyped(s.server)
		if err != nil {
			return
		}
		if typ == 'Z' {
			done++
			s.mu.Lock()
			name, drop := s.drops[done]
			delete(s.drops, done)
			s.mu.Unlock()
			if drop {
				s.p.mu.Lock()
				s.p.fired[name]++
				s.p.mu.Unlock()
				s.p.log.Info("faultnet: reply dropped after the server finished the round trip", "rule", name)
				return // the deferred close drops both sides
			}
		}
		if _, err := s.client.Write(msg); err != nil {
			return
		}
	}
}

// maxMessage bounds a message the proxy will buffer (PostgreSQL's own
// limit for most messages is 1 GB; oncepay's are small).
const maxMessage = 64 << 20

// readTyped reads one typed message: its type byte, int32 length
// (counting itself) and body. msg is the whole message as sent.
func readTyped(r io.Reader) (byte, []byte, error) {
	head := make([]byte, 5)
	if _, err := io.ReadFull(r, head); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(head[1:5]))
	if n < 4 || n > maxMessage {
		return 0, nil, fmt.Errorf("faultnet: message %q of length %d", head[0], n)
	}
	msg := make([]byte, 1+n)
	copy(msg, head)
	if _, err := io.ReadFull(r, msg[5:]); err != nil {
		return 0, nil, err
	}
	return head[0], msg, nil
}

// readUntyped reads one startup-phase message: int32 length, then the rest.
func readUntyped(r io.Reader) ([]byte, error) {
	head := make([]byte, 4)
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(head))
	if n < 8 || n > maxMessage {
		return nil, fmt.Errorf("faultnet: startup message of length %d", n)
	}
	msg := make([]byte, n)
	copy(msg, head)
	if _, err := io.ReadFull(r, msg[4:]); err != nil {
		return nil, err
	}
	return msg, nil
}

// cstring splits a NUL-terminated string off b.
func cstring(b []byte) (string, []byte) {
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), b[i+1:]
		}
	}
	return string(b), nil
}
