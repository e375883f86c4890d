package peer

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
)

// The counters below sit on the wire between a function and the service it
// calls, so both sides are counted the same way whatever their language: a
// Node SDK and a Go SDK cannot be instrumented alike, a socket can.

// counts is what a counter saw: calls by name, and the durable writes among
// them.
type counts struct {
	calls  map[string]int
	writes int
}

func (c counts) sub(before counts) counts {
	d := counts{calls: map[string]int{}, writes: c.writes - before.writes}
	for k, v := range c.calls {
		if n := v - before.calls[k]; n != 0 {
			d.calls[k] = n
		}
	}
	return d
}

func (c counts) total() int {
	n := 0
	for _, v := range c.calls {
		n += v
	}
	return n
}

func (c counts) String() string {
	keys := make([]string, 0, len(c.calls))
	for k := range c.calls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s x%d", k, c.calls[k]))
	}
	return strings.Join(parts, ", ")
}

type counter struct {
	mu sync.Mutex
	c  counts
}

func newCounter() *counter { return &counter{c: counts{calls: map[string]int{}}} }

func (k *counter) add(call string, write bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.c.calls[call]++
	if write {
		k.c.writes++
	}
}

func (k *counter) snapshot() counts {
	k.mu.Lock()
	defer k.mu.Unlock()
	return counts{calls: maps.Clone(k.c.calls), writes: k.c.writes}
}

// ddbWrites are the DynamoDB operations that change an item when they
// succeed. A failed conditional put is billed as a write but changes
// nothing: a round trip, not a durable write.
var ddbWrites = map[string]bool{"PutItem": true, "UpdateItem": true, "DeleteItem": true, "TransactWriteItems": true, "BatchWriteItem": true}

// dynamoProxy is a reverse proxy in front of DynamoDB Local that counts each
// request by its X-Amz-Target operation and outcome ("PutItem",
// "PutItem!ConditionalCheckFailedException"); SDK retries are requests too.
// DynamoDB Local does not check signatures, so the Host the SDK signed may
// change on the way.
func dynamoProxy(b testing.TB, target string) (string, *counter) {
	b.Helper()
	u, err := url.Parse(target)
	if err != nil {
		b.Fatalf("DynamoDB endpoint %q: %v", target, err)
	}
	k := newCounter()
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) },
		ModifyResponse: func(resp *http.Response) error {
			op := resp.Request.Header.Get("X-Amz-Target")
			if _, after, ok := strings.Cut(op, "."); ok {
				op = after
			}
			if resp.StatusCode == http.StatusOK {
				k.add(op, ddbWrites[op])
				return nil
			}
			// A refusal names its type in the body (__type: "...#Name").
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return fmt.Errorf("read DynamoDB's answer to %s: %w", op, err)
			}
			resp.Body = io.NopCloser(bytes.NewReader(body))
			var doc struct {
				Type string `json:"__type"`
			}
			outcome := fmt.Sprint(resp.StatusCode)
			if json.Unmarshal(body, &doc) == nil && doc.Type != "" {
				outcome = doc.Type[strings.LastIndexByte(doc.Type, '#')+1:]
			}
			k.add(op+"!"+outcome, false)
			return nil
		},
	}
	srv := httptest.NewServer(rp)
	b.Cleanup(srv.Close)
	return srv.URL, k
}

// pspProxy counts the charge requests (POST /v1/payment_intents) a side
// sends to the shared simulator, so its calls are told apart from the other
// side's; its charges are told apart by their idempotency keys.
func pspProxy(b testing.TB, sim http.Handler) (string, *counter) {
	b.Helper()
	k := newCounter()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents" {
			k.add("charge", false)
		}
		sim.ServeHTTP(w, r)
	}))
	b.Cleanup(srv.Close)
	return srv.URL, k
}

// sqlProxy is a TCP proxy in front of PostgreSQL that reads the frontend
// protocol far enough to count each statement executed (a simple Query, or
// the Execute of a prepared statement) by its first word, and the commits
// by the rule internal/testkit/callcount applies to a pgx tracer: a COMMIT,
// or an INSERT/UPDATE/DELETE/WITH/MERGE outside a transaction block
// (autocommit). An encrypted session cannot be read: it is counted as
// "unreadable", and the benchmark refuses its figures.
type sqlProxy struct {
	ln     net.Listener
	target string
	k      *counter
	wg     sync.WaitGroup
}

func newSQLProxy(b testing.TB, target string) *sqlProxy {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatalf("sql proxy: %v", err)
	}
	p := &sqlProxy{ln: ln, target: target, k: newCounter()}
	p.wg.Add(1)
	go p.accept()
	b.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *sqlProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.serve(c) }()
	}
}

const (
	sslRequest    = 80877103
	gssencRequest = 80877104
)

func (p *sqlProxy) serve(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	go func() { _, _ = io.Copy(client, server); client.Close() }()
	// The startup message is untyped: length, then a code or the protocol
	// version. An SSL or GSS request means what follows is encrypted.
	var hdr [8]byte
	if _, err := io.ReadFull(client, hdr[:]); err != nil {
		return
	}
	if code := binary.BigEndian.Uint32(hdr[4:]); code == sslRequest || code == gssencRequest {
		p.k.add("unreadable", false)
		_, _ = server.Write(hdr[:])
		_, _ = io.Copy(server, client)
		return
	}
	rest := make([]byte, int(binary.BigEndian.Uint32(hdr[:4]))-8)
	if _, err := io.ReadFull(client, rest); err != nil {
		return
	}
	if _, err := server.Write(append(hdr[:], rest...)); err != nil {
		return
	}
	s := &sqlSession{k: p.k, stmts: map[string]string{}, portals: map[string]string{}}
	for {
		var th [5]byte
		if _, err := io.ReadFull(client, th[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(th[1:])) - 4
		if n < 0 {
			return
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(client, body); err != nil {
			return
		}
		s.note(th[0], body)
		if _, err := server.Write(append(th[:], body...)); err != nil {
			return
		}
	}
}

// sqlSession is one connection's prepared statements and portals, and
// whether it is inside a transaction block.
type sqlSession struct {
	k       *counter
	stmts   map[string]string // prepared statement name -> SQL
	portals map[string]string // portal name -> SQL
	inTx    bool
}

func cstring(b []byte) (string, []byte) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return string(b), nil
	}
	return string(b[:i]), b[i+1:]
}

func (s *sqlSession) note(typ byte, body []byte) {
	switch typ {
	case 'Q':
		q, _ := cstring(body)
		s.executed(q)
	case 'P': // Parse: statement name, SQL, ...
		name, rest := cstring(body)
		q, _ := cstring(rest)
		s.stmts[name] = q
	case 'B': // Bind: portal name, statement name, ...
		portal, rest := cstring(body)
		stmt, _ := cstring(rest)
		s.portals[portal] = s.stmts[stmt]
	case 'E': // Execute: portal name, max rows
		portal, _ := cstring(body)
		s.executed(s.portals[portal])
	}
}

func (s *sqlSession) executed(q string) {
	f := strings.Fields(q)
	// Empty statements and pgx's connection check ("-- ping") do nothing.
	if len(f) == 0 || strings.HasPrefix(f[0], "--") {
		return
	}
	verb := strings.ToUpper(strings.TrimRight(f[0], ";"))
	commit := false
	switch verb {
	case "BEGIN":
		s.inTx = true
	case "COMMIT":
		s.inTx, commit = false, true
	case "ROLLBACK":
		s.inTx = false
	case "INSERT", "UPDATE", "DELETE", "WITH", "MERGE":
		commit = !s.inTx
	}
	s.k.add(verb, commit)
}

// viaProxy returns dsn with its host and port replaced by addr.
func viaProxy(dsn, addr string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("ledger DSN: %w", err)
	}
	if u.Host == "" {
		return "", errors.New("ledger DSN has no host to put the proxy in front of")
	}
	u.Host = addr
	return u.String(), nil
}
