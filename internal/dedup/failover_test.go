package dedup_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/dedup"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// endpoint is a cache's primary endpoint: new connections go wherever it
// points now (ElastiCache flips its DNS name on failover), connections made
// before stay with the node they reached.
type endpoint struct {
	l      net.Listener
	target atomic.Value // host:port
}

func newEndpoint(t *testing.T, target string) *endpoint {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &endpoint{l: l}
	e.target.Store(target)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", e.target.Load().(string))
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c) }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return e
}

// behind returns a gate whose cache is reached through an endpoint that
// points at target now.
func behind(t *testing.T, target string) (*endpoint, *dedup.Gate, *bytes.Buffer) {
	t.Helper()
	ep := newEndpoint(t, target)
	c, err := dedup.NewRedis("redis://" + ep.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	g, emf := gate(t, c, dedup.Config{})
	return ep, g, emf
}

// A failover: the old primary becomes a replica and answers writes
// READONLY, the endpoint names the new primary. A connection the pool kept
// to the old one is not reused (ROLE on borrow), so the next reminder is
// decided by the new primary, not failed open.
func TestAfterAFailoverTheGateReachesTheNewPrimary(t *testing.T) {
	a, _ := testenv.RedisServer(t)
	b, _ := testenv.RedisServer(t)
	ep, g, emf := behind(t, a)
	msg := dedup.Message{Recipient: "u1", Template: "card-declined-reminder", Key: "pm_a"}
	if v := g.Accept(context.Background(), msg, "ev1", now); v != dedup.Send {
		t.Fatalf("before the failover: %s", v)
	}
	// b becomes the primary, a its replica; the endpoint flips to b.
	admin, err := dedup.NewRedis("redis://" + a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	host, port, _ := net.SplitHostPort(b)
	if _, err := admin.Do(context.Background(), "REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
	ep.target.Store(b)
	if v := g.Accept(context.Background(), dedup.Message{Recipient: "u1", Template: "card-declined-reminder", Key: "pm_b"}, "ev2", now); v != dedup.Send {
		t.Fatalf("after the failover: %s (%s)", v, emf.String())
	}
	if v := g.Accept(context.Background(), dedup.Message{Recipient: "u1", Template: "card-declined-reminder", Key: "pm_b"}, "ev3", now); v != dedup.Duplicate {
		t.Fatalf("the new primary holds the fingerprint: %s", v)
	}
}

// The primary dies without closing its connections (paused: no reply,
// no reset) and the endpoint flips to the new one: the gate neither hangs
// on the pooled connection nor waits for TCP to give up. It answers
// within its timeout (failing open, or from the new primary), and the
// next message is decided by the new primary.
func TestADeadPrimaryDoesNotHoldTheGate(t *testing.T) {
	a, proc := testenv.RedisServer(t)
	b, _ := testenv.RedisServer(t)
	ep, g, _ := behind(t, a)
	msg := func(card string) dedup.Message {
		return dedup.Message{Recipient: "u1", Template: "card-declined-reminder", Key: card}
	}
	if v := g.Accept(context.Background(), msg("pm_a"), "ev1", now); v != dedup.Send {
		t.Fatalf("before: %s", v)
	}
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ep.target.Store(b)
	start := time.Now()
	v := g.Accept(context.Background(), msg("pm_b"), "ev2", now)
	if took := time.Since(start); took > 2*time.Second || !dedup.Goes(v) {
		t.Fatalf("with the primary dead: %s after %s, want it let through within the gate's timeout", v, took)
	}
	if v := g.Accept(context.Background(), msg("pm_c"), "ev3", now); v != dedup.Send {
		t.Fatalf("the next message: %s, want the new primary's answer", v)
	}
}
