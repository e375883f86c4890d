package pgrepl

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// proxy forwards TCP connections to the primary and holds every chunk of
// bytes coming back from it for lag before passing it on, in order: the WAL
// stream reaches the standby lag late. The other direction (the standby's
// requests and its flush feedback) passes at once, as on a network whose
// latency is all on one way.
type proxy struct {
	ln     net.Listener
	target string
	log    *slog.Logger

	mu    sync.Mutex
	lag   time.Duration
	cut   bool
	pairs map[*pair]struct{}

	// dropped counts the bytes read from the primary that a cut lost
	// before they were delivered (for tests and the log).
	dropped atomic.Int64
	wg      sync.WaitGroup
}

// chunk is bytes read from the primary, due for delivery at due.
type chunk struct {
	b   []byte
	due time.Time
}

// pair is one proxied connection: the standby's and the primary's ends.
type pair struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{} // closed when the pair is closed
	delivered      chan struct{} // closed when deliver has returned
}

func (p *pair) close() {
	p.once.Do(func() {
		close(p.done)
		p.client.Close()
		p.server.Close()
	})
}

func newProxy(target string, lag time.Duration, log *slog.Logger) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, lag: lag, log: log, pairs: map[*pair]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// port is the port the standby connects to.
func (p *proxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *proxy) setLag(d time.Duration) {
	p.mu.Lock()
	p.lag = d
	p.mu.Unlock()
}

// cutOff drops every connection at once, with what was still held back,
// and refuses new ones; it returns once the held-back bytes are counted in
// dropped. The listener stays open until close, so its port is not handed
// to another listener the standby would then reach.
func (p *proxy) cutOff() {
	p.mu.Lock()
	p.cut = true
	pairs := p.pairs
	p.pairs = map[*pair]struct{}{}
	p.mu.Unlock()
	for pr := range pairs {
		pr.close()
	}
	for pr := range pairs {
		<-pr.delivered
	}
}

func (p *proxy) close() {
	p.cutOff()
	p.ln.Close()
	p.wg.Wait()
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			p.log.Warn("pgrepl: proxy: dial the primary", slog.String("target", p.target), slog.String("error", err.Error()))
			c.Close()
			continue
		}
		pr := &pair{client: c, server: s, done: make(chan struct{}), delivered: make(chan struct{})}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			pr.close()
			continue
		}
		p.pairs[pr] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(3)
		go p.upstream(pr)
		queue := make(chan chunk, 4096)
		go p.readPrimary(pr, queue)
		go p.deliver(pr, queue)
	}
}

func (p *proxy) forget(pr *pair) {
	pr.close()
	p.mu.Lock()
	delete(p.pairs, pr)
	p.mu.Unlock()
}

// upstream copies the standby's bytes to the primary undelayed.
func (p *proxy) upstream(pr *pair) {
	defer p.wg.Done()
	_, _ = io.Copy(pr.server, pr.client)
	p.forget(pr)
}

// readPrimary stamps each chunk from the primary with its due time. A full
// queue blocks the read: back-pressure, as a slow link would apply.
func (p *proxy) readPrimary(pr *pair, queue chan<- chunk) {
	defer p.wg.Done()
	defer close(queue)
	buf := make([]byte, 32<<10)
	for {
		n, err := pr.server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			due := time.Now().Add(p.lag)
			p.mu.Unlock()
			select {
			case queue <- chunk{b: append([]byte(nil), buf[:n]...), due: due}:
			case <-pr.done:
				p.dropped.Add(int64(n))
				return
			}
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
				p.log.Debug("pgrepl: proxy: read from the primary", slog.String("error", err.Error()))
			}
			return
		}
	}
}

// deliver writes each chunk to the standby once it is due. On a cut the
// chunks still queued are lost: counted, never written.
func (p *proxy) deliver(pr *pair, queue <-chan chunk) {
	defer p.wg.Done()
	defer close(pr.delivered)
	defer p.forget(pr)
	for c := range queue {
		if !p.await(pr, c.due) {
			p.lose(pr, c, queue)
			return
		}
		if _, err := pr.client.Write(c.b); err != nil {
			p.lose(pr, c, queue)
			return
		}
	}
}

// await waits until due; false when the pair was closed first.
func (p *proxy) await(pr *pair, due time.Time) bool {
	if wait := time.Until(due); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-pr.done:
			return false
		}
	}
	select {
	case <-pr.done:
		return false
	default:
		return true
	}
}

// lose closes the pair and counts c and every chunk still queued as lost.
func (p *proxy) lose(pr *pair, c chunk, queue <-chan chunk) {
	pr.close() // ends readPrimary, which closes the queue
	n := len(c.b)
	for rest := range queue {
		n += len(rest.b)
	}
	p.dropped.Add(int64(n))
}
