package pspsim

import (
	"fmt"
	"hash/fnv"
	"net/http"
	"time"
)

// keyEntry is one idempotency key: in flight until its first request
// finishes, then holding that request's saved reply.
type keyEntry struct {
	fingerprint string // method, path and the canonical form body
	created     time.Time
	prunedAfter time.Duration // KeyWindow + this key's jitter
	done        bool
	saved       reply
}

// beginKey claims key for a request with fingerprint fp. It returns the new
// entry to finish, or the answer to give instead: a replay, a 400
// idempotency_error (other parameters) or a 409 (the first is in flight).
func (s *Sim) beginKey(key, fp string) (*keyEntry, *reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.nowLocked()
	s.sweepKeysLocked(now)
	e := s.keys[key]
	if e != nil && e.done && s.expired(e, now) {
		delete(s.keys, key) // after the window a repeat is a new request
		e = nil
	}
	switch {
	case e == nil:
		e = &keyEntry{fingerprint: fp, created: now, prunedAfter: s.cfg.KeyWindow + s.pruneJitter(key)}
		s.keys[key] = e
		return e, nil
	case !e.done:
		r := errorReply(http.StatusConflict, apiError{
			Type: typeIdempotency,
			Code: "idempotency_key_in_use",
			Message: fmt.Sprintf("There is currently another in-progress request using this Idempotent Key "+
				"(that probably means you submitted twice, and the other request is still going through): %s. "+
				"Please try again later.", key),
		})
		return nil, &r
	case e.fingerprint != fp:
		r := errorReply(http.StatusBadRequest, apiError{
			Type: typeIdempotency,
			Message: fmt.Sprintf("Keys for idempotent requests can only be used with the same parameters they "+
				"were first used with. Try using a key other than '%s' if you meant to execute a different request.", key),
		})
		return nil, &r
	default:
		r := e.saved
		r.replayed = true
		r.originalRequest = e.saved.requestID
		return nil, &r
	}
}

// finishKey saves r under key when save is true (the endpoint ran), and
// otherwise releases the key (validation failed or the request was dropped),
// as Stripe saves nothing for those.
func (s *Sim) finishKey(key string, e *keyEntry, r reply, save bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys[key] != e { // Reset ran meanwhile
		return
	}
	if !save {
		delete(s.keys, key)
		return
	}
	e.done = true
	e.saved = r
	s.touchKey(key)
}

func (s *Sim) expired(e *keyEntry, now time.Time) bool {
	return now.Sub(e.created) >= e.prunedAfter
}

// pruneJitter is how long past the window key is kept: a fraction of
// KeyPruneJitter fixed by a hash of the key, so a run repeats exactly while
// keys created together are still forgotten at different times (Stripe
// promises "at least 24 hours", never "exactly").
func (s *Sim) pruneJitter(key string) time.Duration {
	if s.cfg.KeyPruneJitter <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	return time.Duration(h.Sum64() % uint64(s.cfg.KeyPruneJitter))
}

// sweepKeysLocked drops expired keys, at most once a simulated minute, so
// memory stays bounded in a long-running simulator.
func (s *Sim) sweepKeysLocked(now time.Time) {
	if now.Sub(s.swept) < time.Minute {
		return
	}
	s.swept = now
	for k, e := range s.keys {
		if e.done && s.expired(e, now) {
			delete(s.keys, k)
		}
	}
}
