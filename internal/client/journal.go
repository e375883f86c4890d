package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// IntentState is where an intent stands in the app's journal.
type IntentState string

// The journal states of an intent.
const (
	// Open: the key exists and may have been sent; every retry reuses it.
	Open IntentState = "OPEN"
	// Final: the server gave a final answer (SUCCEEDED or FAILED).
	Final IntentState = "FINAL"
	// Voided: the server said "not found, and it never will be": only now
	// may the app make a new key for the same purchase.
	Voided IntentState = "VOIDED"
	// Rejected: the server refused the request, and the resolve call that
	// followed voided the key: nothing ran and nothing ever will under it.
	// The request must change (or the refusal pass), under a new key.
	Rejected IntentState = "REJECTED"
)

// Payment is what the buyer asked for: the request's meaning.
type Payment struct {
	MerchantID    string `json:"merchant_id"`
	OrderID       string `json:"order_id"`
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
	// ReceiptEmail is where the payment's emails go ("" none). Part of
	// the meaning, as at the server: a tap with another address while the
	// intent is open is another payment (ErrChanged).
	ReceiptEmail string `json:"receipt_email,omitempty"`
}

// Scope is whose intents an intent is among: one API and one caller. The same
// order id under another token or another API is another purchase (the server
// scopes its keys by caller, docs/mechanism.md#seed-part-2), and a key must
// only ever be sent under the scope it was made for: sent by another caller
// it names a new payment at the server, so resuming it would charge again.
type Scope struct {
	API    string `json:"api"`    // the API's base URL, normalised (NormalizeAPI)
	Caller string `json:"caller"` // the authenticated caller: the token's subject
}

// Intent is one tap, journaled before its first send.
type Intent struct {
	Key       string      `json:"key"` // the Idempotency-Key, made at the tap
	Scope     Scope       `json:"scope"`
	Payment   Payment     `json:"payment"`
	State     IntentState `json:"state"`
	Attempts  int         `json:"attempts"`
	PaymentID string      `json:"payment_id,omitempty"`
	Outcome   string      `json:"outcome,omitempty"`  // SUCCEEDED, FAILED, VOID, or the refusal's title
	Replaces  string      `json:"replaces,omitempty"` // the key of the order's previous intent (voided, refused or declined)
	CreatedAt time.Time   `json:"created_at"`
	UpdatedAt time.Time   `json:"updated_at"`
}

var (
	bucketIntents = []byte("intents")         // key -> Intent
	bucketOrders  = []byte("orders.by-scope") // (api, caller, merchant, order) -> key of its newest intent
	bucketLegacy  = []byte("orders")          // order id -> key: journals written before intents had a scope
	bucketDevice  = []byte("device")          // "last_accepted" + (api, caller) -> key
	lastAccepted  = "last_accepted"
)

// ErrNoIntent means the journal holds no intent for the order.
var ErrNoIntent = errors.New("client: no intent in the journal")

// ErrJournalBusy means another process holds the journal: bbolt locks the
// file for as long as a process has it open, and a second one waits for
// the lock (JournalOptions.LockWait), then gives up with this error. It
// never reads or writes the file meanwhile, so it cannot make a second key.
var ErrJournalBusy = errors.New("client: the journal is in use by another process")

// JournalOptions configures OpenJournal; zero fields take the defaults.
type JournalOptions struct {
	// LockWait is how long to wait for another process to let go of the
	// file (default 5 s). Negative: do not wait.
	LockWait time.Duration
}

// Journal is the app's local, durable record of its intents: a bbolt file,
// fsynced on every commit, so a key written before the send survives kill -9
// and power loss. One process at a time holds it (bbolt's file lock); within
// that process, one run per intent at a time (see fly).
type Journal struct {
	db   *bolt.DB
	path string

	mu      sync.Mutex
	flights map[string]*flight // intent key -> the run in progress
}

// OpenJournal opens (or creates) the journal at path. A missing parent
// directory is created (0700: the journal is the user's own).
func OpenJournal(path string, opts JournalOptions) (*Journal, error) {
	wait := opts.LockWait
	switch {
	case wait == 0:
		wait = 5 * time.Second
	case wait < 0:
		wait = time.Millisecond // bbolt's 0 would mean "forever"
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("client: journal directory for %s: %w", path, err)
	}
	// NoSync stays false, as does NoFreelistSync: every commit is on disk
	// before Update returns, which is what "journaled before the send" means.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: wait})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s (waited %s)", ErrJournalBusy, path, wait)
	}
	if err != nil {
		return nil, fmt.Errorf("client: open journal %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketIntents, bucketOrders, bucketDevice} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("client: init journal %s: %w", path, err)
	}
	return &Journal{db: db, path: path, flights: map[string]*flight{}}, nil
}

// DefaultJournalPath is the journal a user's apps share, whatever directory
// they run in (a journal that followed the working directory would make a
// new key for an order still open elsewhere): $XDG_STATE_HOME/oncepay/journal,
// else ~/.local/state/oncepay/journal on Unix, and the user's config
// directory (os.UserConfigDir) on macOS and Windows.
func DefaultJournalPath() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "oncepay", "journal"), nil
	}
	switch runtime.GOOS {
	case "darwin", "windows", "ios", "plan9":
		d, err := os.UserConfigDir()
		if err != nil {
			return "", fmt.Errorf("client: no default journal: %w", err)
		}
		return filepath.Join(d, "oncepay", "journal"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("client: no default journal: %w", err)
	}
	return filepath.Join(home, ".local", "state", "oncepay", "journal"), nil
}

// Path is the journal file's path.
func (j *Journal) Path() string { return j.path }

// Close closes the journal file and lets another process have it.
func (j *Journal) Close() error { return j.db.Close() }

// fields is a netstring-style join (length, ':', bytes, ','): no two
// different tuples give the same bytes, whatever the fields contain.
func fields(fs ...string) []byte {
	var b []byte
	for _, f := range fs {
		b = strconv.AppendInt(b, int64(len(f)), 10)
		b = append(b, ':')
		b = append(b, f...)
		b = append(b, ',')
	}
	return b
}

func orderKey(s Scope, merchantID, orderID string) []byte {
	return fields(s.API, s.Caller, merchantID, orderID)
}

// tap is one transaction: read the order's newest intent, let decide say
// what the tap does with it, and record a new intent (and point the order
// at it) if decide made one. Two taps at once are serialised by bbolt's
// single writer, so they cannot both make a key.
func (j *Journal) tap(s Scope, p Payment, decide func(prev *Intent) (next Intent, isNew bool, err error)) (Intent, bool, error) {
	var (
		out   Intent
		isNew bool
	)
	err := j.db.Update(func(tx *bolt.Tx) error {
		orders, intents := tx.Bucket(bucketOrders), tx.Bucket(bucketIntents)
		ok := orderKey(s, p.MerchantID, p.OrderID)
		var prev *Intent
		if k := orders.Get(ok); k != nil {
			v := intents.Get(k)
			if v == nil {
				return fmt.Errorf("client: the journal's order index names %s, which it does not hold", k)
			}
			prev = new(Intent)
			if err := json.Unmarshal(v, prev); err != nil {
				return fmt.Errorf("client: decode intent %s: %w", k, err)
			}
		}
		var err error
		out, isNew, err = decide(prev)
		if err != nil || !isNew {
			return err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return fmt.Errorf("client: encode intent: %w", err)
		}
		if intents.Get([]byte(out.Key)) != nil {
			return fmt.Errorf("client: key %s is already in the journal", out.Key)
		}
		if err := intents.Put([]byte(out.Key), b); err != nil {
			return err
		}
		return orders.Put(ok, []byte(out.Key))
	})
	if err != nil && !errors.Is(err, ErrChanged) {
		return out, false, fmt.Errorf("client: journal the tap for order %s: %w", p.OrderID, err)
	}
	return out, isNew, err
}

// Put writes the intent in one durable commit. The order's index is left
// alone: only a tap points an order at a new intent.
func (j *Journal) Put(in Intent) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("client: encode intent: %w", err)
	}
	err = j.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketIntents).Put([]byte(in.Key), b); err != nil {
			return err
		}
		if in.State == Final && in.Outcome == Succeeded {
			return tx.Bucket(bucketDevice).Put(append([]byte(lastAccepted), fields(in.Scope.API, in.Scope.Caller)...), []byte(in.Key))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("client: write intent %s: %w", in.Key, err)
	}
	return nil
}

// Get reads the intent with key.
func (j *Journal) Get(key string) (Intent, error) {
	var in Intent
	err := j.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketIntents).Get([]byte(key))
		if b == nil {
			return ErrNoIntent
		}
		return json.Unmarshal(b, &in)
	})
	return in, err
}

// ForOrder returns the newest intent for an order of merchantID in scope s.
func (j *Journal) ForOrder(s Scope, merchantID, orderID string) (Intent, error) {
	var key []byte
	_ = j.db.View(func(tx *bolt.Tx) error {
		if k := tx.Bucket(bucketOrders).Get(orderKey(s, merchantID, orderID)); k != nil {
			key = append([]byte(nil), k...)
		}
		return nil
	})
	if key == nil {
		return Intent{}, ErrNoIntent
	}
	return j.Get(string(key))
}

// All returns every intent the journal holds, in key order.
func (j *Journal) All() ([]Intent, error) {
	var out []Intent
	err := j.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketIntents).ForEach(func(k, v []byte) error {
			var in Intent
			if err := json.Unmarshal(v, &in); err != nil {
				return fmt.Errorf("client: decode intent %s: %w", k, err)
			}
			out = append(out, in)
			return nil
		})
	})
	return out, err
}

// OpenIntents returns every intent of scope s still OPEN (what a restarted
// app must resume), and how many open intents belong to other scopes: those
// are resumed only under their own caller and API, never under s.
func (j *Journal) OpenIntents(s Scope) (mine []Intent, others int, err error) {
	all, err := j.All()
	for _, in := range all {
		switch {
		case in.State != Open:
		case in.Scope == s:
			mine = append(mine, in)
		default:
			others++
		}
	}
	return mine, others, err
}

// Prune deletes the final intents (paid, declined, voided, refused) last
// written before cutoff, and the order entries that point at them; open
// intents are kept whatever their age, since each is a key whose outcome is
// not known yet. An order whose intent was pruned is a new purchase to this
// journal: the retention must outlast any chance of the app tapping Pay for
// that order again. It returns how many intents it deleted.
func (j *Journal) Prune(cutoff time.Time) (int, error) {
	n := 0
	err := j.db.Update(func(tx *bolt.Tx) error {
		intents := tx.Bucket(bucketIntents)
		gone := map[string]bool{}
		err := intents.ForEach(func(k, v []byte) error {
			var in Intent
			if err := json.Unmarshal(v, &in); err != nil {
				return fmt.Errorf("client: decode intent %s: %w", k, err)
			}
			if in.State != Open && in.UpdatedAt.Before(cutoff) {
				gone[string(k)] = true
			}
			return nil
		})
		if err != nil {
			return err
		}
		for k := range gone {
			if err := intents.Delete([]byte(k)); err != nil {
				return err
			}
		}
		for _, name := range [][]byte{bucketOrders, bucketLegacy} {
			b := tx.Bucket(name)
			if b == nil {
				continue
			}
			var stale [][]byte
			_ = b.ForEach(func(k, v []byte) error {
				if gone[string(v)] {
					stale = append(stale, append([]byte(nil), k...))
				}
				return nil
			})
			for _, k := range stale {
				if err := b.Delete(k); err != nil {
					return err
				}
			}
		}
		n = len(gone)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("client: prune the journal: %w", err)
	}
	return n, nil
}

// LastAccepted returns the key of the last payment the server accepted for
// scope s on this device: a reinstalled app that restored it asks about it
// first.
func (j *Journal) LastAccepted(s Scope) (string, bool) {
	var key string
	_ = j.db.View(func(tx *bolt.Tx) error {
		key = string(tx.Bucket(bucketDevice).Get(append([]byte(lastAccepted), fields(s.API, s.Caller)...)))
		return nil
	})
	return key, key != ""
}

// flight is one run of an intent in this process; a second tap or a Resume
// for the same intent waits for it rather than sending beside it.
type flight struct {
	done chan struct{}
	r    Result
	err  error
}

// fly runs run for the intent with key unless a run for it is already in
// progress in this process, in which case it waits for that run's result.
// shared says the result is the other run's.
func (j *Journal) fly(key string, wait <-chan struct{}, run func() (Result, error)) (r Result, shared bool, err error) {
	j.mu.Lock()
	if f, ok := j.flights[key]; ok {
		j.mu.Unlock()
		select {
		case <-f.done:
			return f.r, true, f.err
		case <-wait:
			return Result{Key: key, State: Unknown, Detail: "stopped while another tap was paying"}, true, nil
		}
	}
	f := &flight{done: make(chan struct{})}
	j.flights[key] = f
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		delete(j.flights, key)
		j.mu.Unlock()
		close(f.done)
	}()
	f.r, f.err = run()
	return f.r, false, f.err
}
