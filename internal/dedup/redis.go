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
		MaxIdle:     2,
		IdleTimeout: 4 * time.Minute,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialURLContext(ctx, url, redis.DialConnectTimeout(time.Second))
		},
	}}, nil
}

// Close closes the pool's connections.
func (r *Redis) Close() error { return r.pool.Close() }

// SetNX implements Cache: SET key 1 NX EX ttl.
func (r *Redis) SetNX(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	c, err := r.pool.GetContext(ctx)
	if err != nil {
		return false, fmt.Errorf("dedup: cache: %w", err)
	}
	defer c.Close()
	_, err = redis.String(redis.DoContext(c, ctx, "SET", key, 1, "NX", "EX", seconds(ttl)))
	if errors.Is(err, redis.ErrNil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("dedup: SET NX: %w", err)
	}
	return true, nil
}

// incr counts one and starts the key's ttl when it is new, in one step.
var incr = redis.NewScript(1, `local n = redis.call('INCR', KEYS[1]) if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end return n`)

// Incr implements Cache.
func (r *Redis) Incr(ctx context.Context, key string, ttl time.Duration) (int, error) {
	c, err := r.pool.GetContext(ctx)
	if err != nil {
		return 0, fmt.Errorf("dedup: cache: %w", err)
	}
	defer c.Close()
	n, err := redis.Int(incr.DoContext(ctx, c, key, seconds(ttl)))
	if err != nil {
		return 0, fmt.Errorf("dedup: count: %w", err)
	}
	return n, nil
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
