package dedup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Redis is the Cache over a Redis-protocol server (Valkey, Redis), with a
// small pool of connections a Lambda environment keeps between invocations.
// redigo, not go-redis: the worker's bootstrap has about 450 KB left of its
// 10 MiB, and go-redis costs 1.7 MB of it where redigo costs a fraction.
type Redis struct {
	pool *redis.Pool
}

// NewRedis returns the cache at url: redis://host:port, or rediss:// for
// TLS (ElastiCache's in-transit encryption), with a password when the URL
// has one.
func NewRedis(url string) (*Redis, error) {
	if !strings.HasPrefix(url, "redis://") && !strings.HasPrefix(url, "rediss://") {
		return nil, fmt.Errorf("dedup: cache URL %q is not redis:// or rediss://", url)
	}
	return &Redis{pool: &redis.Pool{
		MaxIdle:         2,
		IdleTimeout:     4 * time.Minute,
		MaxConnLifetime: 5 * time.Minute,
		// Every read and write is bounded too: a primary that died holds
		// its connections open with no reply, and the gate must fail open,
		// not wait for TCP to give up.
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialURLContext(ctx, url, redis.DialConnectTimeout(time.Second),
				redis.DialReadTimeout(time.Second), redis.DialWriteTimeout(time.Second))
		},
		// After a failover the primary endpoint names the new primary, but
		// a pooled connection still reaches the old one, now a replica that
		// answers every write READONLY (a reply, so the pool keeps the
		// connection). A reused connection must be to a primary: ROLE
		// costs a round trip, on a path as rare as a decline.
		TestOnBorrowContext: func(ctx context.Context, c redis.Conn, _ time.Time) error {
			role, err := redis.Values(redis.DoContext(c, ctx, "ROLE"))
			if err != nil {
				return err
			}
			if len(role) == 0 {
				return errors.New("dedup: ROLE answered nothing")
			}
			if r, err := redis.String(role[0], nil); err != nil || r != "master" {
				return fmt.Errorf("dedup: the connection reaches a %q, not the primary", r)
			}
			return nil
		},
	}}, nil
}

// Close closes the pool's connections.
func (r *Redis) Close() error { return r.pool.Close() }

// admit is the gate's decision on the server, atomic:
// KEYS: the fingerprint's key, the cap's; ARGV: owner, window s, cap, period s.
// A fingerprint held by the owner itself was let through before (a capped
// owner releases it): the same answer, whatever the day, counting nothing
// again. The cap is a hash of owner -> its place in the period.
var admit = redis.NewScript(2, `
local prev = redis.call('GET', KEYS[1])
if prev then
  if prev == ARGV[1] then return 'send' end
  return 'duplicate'
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
if ARGV[3] == '0' then return 'send' end
local n = redis.call('HGET', KEYS[2], ARGV[1])
if not n then
  n = redis.call('HLEN', KEYS[2]) + 1
  redis.call('HSET', KEYS[2], ARGV[1], n)
  redis.call('EXPIRE', KEYS[2], ARGV[4])
end
if tonumber(n) > tonumber(ARGV[3]) then
  redis.call('DEL', KEYS[1])
  return 'capped'
end
return 'send'`)

// Admit implements Cache.
func (r *Redis) Admit(ctx context.Context, a Admission) (string, error) {
	c, err := r.pool.GetContext(ctx)
	if err != nil {
		return "", fmt.Errorf("dedup: cache: %w", err)
	}
	defer c.Close()
	v, err := redis.String(admit.DoContext(ctx, c, a.Key, a.CapKey, a.Owner, seconds(a.Window), a.Cap, seconds(a.Period)))
	if err != nil {
		return "", fmt.Errorf("dedup: admit: %w", err)
	}
	return v, nil
}

// release deletes the fingerprint only while it holds the owner: a later
// event's hold, taken since, is not its to give back.
// KEYS: the fingerprint's key; ARGV: owner.
var release = redis.NewScript(1, `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// Release implements Cache.
func (r *Redis) Release(ctx context.Context, key, owner string) (bool, error) {
	c, err := r.pool.GetContext(ctx)
	if err != nil {
		return false, fmt.Errorf("dedup: cache: %w", err)
	}
	defer c.Close()
	n, err := redis.Int(release.DoContext(ctx, c, key, owner))
	if err != nil {
		return false, fmt.Errorf("dedup: release: %w", err)
	}
	return n == 1, nil
}

// Do runs one command (tests and tools look at the cache with it).
func (r *Redis) Do(ctx context.Context, cmd string, args ...any) (any, error) {
	c, err := r.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return redis.DoContext(c, ctx, cmd, args...)
}

func seconds(d time.Duration) int { return max(1, int(d/time.Second)) }
