package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
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
	// Rejected: the server refused the request itself (400/422); the
	// request must change, and a changed request needs a new key.
	Rejected IntentState = "REJECTED"
)

// Payment is what the buyer asked for: the request's meaning.
type Payment struct {
	MerchantID    string `json:"merchant_id"`
	OrderID       string `json:"order_id"`
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
}

// Intent is one tap, journaled before its first send.
type Intent struct {
	Key       string      `json:"key"` // the Idempotency-Key, made at the tap
	Payment   Payment     `json:"payment"`
	State     IntentState `json:"state"`
	Attempts  int         `json:"attempts"`
	PaymentID string      `json:"payment_id,omitempty"`
	Outcome   string      `json:"outcome,omitempty"` // SUCCEEDED, FAILED, VOID, or the rejection's title
	CreatedAt time.Time   `json:"created_at"`
	UpdatedAt time.Time   `json:"updated_at"`
}

var (
	bucketIntents = []byte("intents") // key -> Intent
	bucketOrders  = []byte("orders")  // order id -> key of its newest intent
	bucketDevice  = []byte("device")  // "last_accepted" -> key
	lastAccepted  = []byte("last_accepted")
)

// ErrNoIntent means the journal holds no intent for the order.
var ErrNoIntent = errors.New("client: no intent in the journal")

// Journal is the app's local, durable record of its intents: a bbolt file,
// fsynced on every commit, so a key written before the send survives kill -9.
type Journal struct {
	db *bolt.DB
}

// OpenJournal opens (or creates) the journal at path.
func OpenJournal(path string) (*Journal, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
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
		return nil, fmt.Errorf("client: init journal: %w", err)
	}
	return &Journal{db: db}, nil
}

// Close closes the journal file.
func (j *Journal) Close() error { return j.db.Close() }

// Put writes the intent (and indexes it by order) in one durable commit.
func (j *Journal) Put(in Intent) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("client: encode intent: %w", err)
	}
	err = j.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketIntents).Put([]byte(in.Key), b); err != nil {
			return err
		}
		if in.State == Final && in.Outcome == "SUCCEEDED" {
			if err := tx.Bucket(bucketDevice).Put(lastAccepted, []byte(in.Key)); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketOrders).Put([]byte(in.Payment.OrderID), []byte(in.Key))
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

// ForOrder returns the newest intent for an order.
func (j *Journal) ForOrder(orderID string) (Intent, error) {
	var key []byte
	_ = j.db.View(func(tx *bolt.Tx) error {
		if k := tx.Bucket(bucketOrders).Get([]byte(orderID)); k != nil {
			key = append([]byte(nil), k...)
		}
		return nil
	})
	if key == nil {
		return Intent{}, ErrNoIntent
	}
	return j.Get(string(key))
}

// Open returns every intent still OPEN: what a restarted app must resume.
func (j *Journal) Open() ([]Intent, error) {
	var out []Intent
	err := j.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketIntents).ForEach(func(_, v []byte) error {
			var in Intent
			if err := json.Unmarshal(v, &in); err != nil {
				return err
			}
			if in.State == Open {
				out = append(out, in)
			}
			return nil
		})
	})
	return out, err
}

// LastAccepted returns the key of the last payment the server accepted on
// this device: a reinstalled app that restored it asks about it first.
func (j *Journal) LastAccepted() (string, bool) {
	var key string
	_ = j.db.View(func(tx *bolt.Tx) error {
		key = string(tx.Bucket(bucketDevice).Get(lastAccepted))
		return nil
	})
	return key, key != ""
}
