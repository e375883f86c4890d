package testenv

import (
	"context"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/awsclient/sesclient"
	"github.com/oncepay/oncepay/internal/dedup"
	"github.com/oncepay/oncepay/internal/localcloud/phone"
)

// SES returns a client for the local cloud's SES (moto).
//
// It keeps the SDK's retries (identities, reads): the worker sends with
// sesclient.NewSender's one attempt, which sesclient's own test holds.
func SES(t testing.TB) *sesv2.Client {
	t.Helper()
	return sesclient.New(awsConfig(t))
}

// NewEmailIdentity makes a verified sender address of the test's own (moto
// verifies at once), deleted when the test ends.
func NewEmailIdentity(t testing.TB, client *sesv2.Client) string {
	t.Helper()
	from := "t-" + RandomID(4) + "@oncepay.test"
	if _, err := client.CreateEmailIdentity(context.Background(), &sesv2.CreateEmailIdentityInput{EmailIdentity: aws.String(from)}); err != nil {
		t.Fatalf("create email identity: %v", err)
	}
	t.Cleanup(func() {
		_, _ = client.DeleteEmailIdentity(context.Background(), &sesv2.DeleteEmailIdentityInput{EmailIdentity: aws.String(from)})
	})
	return from
}

// SentEmails lists the messages moto's SES took for to, oldest first.
func SentEmails(t testing.TB, to string) []phone.Email {
	t.Helper()
	all, err := phone.Emails(context.Background(), AWS(t).Get("AWS_ENDPOINT_URL"))
	if err != nil {
		t.Fatal(err)
	}
	var out []phone.Email
	for _, e := range all {
		if slices.Contains(e.To, to) {
			out = append(out, e)
		}
	}
	return out
}

// Cache returns the local cloud's dedup cache (a Redis-protocol server).
// The cache is shared: a test keeps to keys of its own (a random
// recipient, say).
func Cache(t testing.TB) *dedup.Redis {
	t.Helper()
	env := Load(t)
	url := env.Get(stackenv.DedupCacheURL)
	if url == "" {
		unavailable(t, "%s not set", stackenv.DedupCacheURL)
	}
	Reachable(t, "the dedup cache", strings.Replace(url, "redis://", "http://", 1))
	c, err := dedup.NewRedis(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// RedisServer starts a redis-server of the test's own on a free port (the
// binary make setup installs), with eviction off as the stack runs its
// cache, and stops it when the test ends. It returns host:port and the
// process (a test may pause it: a node that died without closing its
// connections).
func RedisServer(t testing.TB) (string, *os.Process) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "redis-server not on PATH (make setup installs it)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--maxmemory-policy", "noeviction", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGCONT); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			return addr, cmd.Process
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("redis-server on %s did not start", addr)
		}
	}
}
