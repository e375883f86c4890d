package pspsim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// The state file keeps what a real PSP keeps across its own restarts: the
// idempotency keys with their saved results (for the key window), the
// PaymentIntents, charges and refunds, the payment methods' use, the
// deliveries of events not yet acknowledged, the id counter and the clock
// offset. Without it a restarted simulator forgot every key, and a
// resolver's replay after `make down && make up` charged again.
//
// The file is a journal of JSON lines. The first line is a header; every
// other line is one change: the objects it touched, each written whole
// (the last copy of an object wins). Every API request and admin action
// appends its line and fsyncs it before its reply is written, so whatever a
// client was told survives a crash (concurrent requests share one fsync).
// Changes no request waits for (a webhook delivered, a refund settled by
// the clock) are written after their delivery round or tick: a crash loses
// at most that round, and a lost "delivered" only means the event is
// delivered again, which webhooks allow.
//
// At every start the journal is read back, keys past their window are
// pruned, and the state is compacted into a fresh file (written to a temp
// file, fsynced, renamed over the old one, the directory fsynced); a
// running simulator compacts the same way every compactEvery lines. A line
// that does not parse is an error at start, except a torn last line with
// no newline: the append a crash interrupted, which no reply acknowledged.
// Fault rules and the search lag are run-time controls, not state: a
// restart clears them. A lock file next to the journal keeps two
// simulators off one state.
const stateVersion = 1

// stateLine is one line of the journal.
type stateLine struct {
	Version    int           `json:"pspsim_state,omitempty"` // header only
	Seq        uint64        `json:"seq"`
	OffsetNS   *int64        `json:"offset_ns,omitempty"`
	GaveUp     *int          `json:"gave_up,omitempty"`
	Keys       []keyRec      `json:"keys,omitempty"`
	Intents    []intentRec   `json:"intents,omitempty"`
	Charges    []Charge      `json:"charges,omitempty"`
	Refunds    []refundRec   `json:"refunds,omitempty"`
	PMs        []pmRec       `json:"payment_methods,omitempty"`
	Deliveries []deliveryRec `json:"deliveries,omitempty"`
	Delivered  []uint64      `json:"delivered,omitempty"` // deliveries done (acknowledged or given up)
}

type keyRec struct {
	Key         string        `json:"key"`
	Fingerprint string        `json:"fingerprint"`
	Created     time.Time     `json:"created"`
	PrunedAfter time.Duration `json:"pruned_after_ns"`
	Status      int           `json:"status"`
	Body        []byte        `json:"body"`
	RequestID   string        `json:"request_id"`
}

type intentRec struct {
	PI        *paymentIntent `json:"pi"`
	CreatedAt time.Time      `json:"created_at"`
	Key       string         `json:"key"`
}

type refundRec struct {
	Refund   Refund     `json:"refund"`
	View     refundView `json:"view"`
	Charge   string     `json:"charge"`
	Key      string     `json:"key"`
	Settling bool       `json:"settling"`
	SettleAt time.Time  `json:"settle_at"`
	Fails    bool       `json:"fails"`
}

type pmRec struct {
	PM       string `json:"pm"`
	UsedBy   string `json:"used_by,omitempty"`
	Attached bool   `json:"attached,omitempty"`
	Created  bool   `json:"created,omitempty"`
}

type deliveryRec struct {
	N         uint64    `json:"n"`
	EventID   string    `json:"event_id"`
	EventType string    `json:"event_type"`
	PaymentID string    `json:"payment_id"`
	Payload   []byte    `json:"payload"`
	Attempts  int       `json:"attempts"`
	First     time.Time `json:"first"`
	Due       time.Time `json:"due"`
}

// dirty is what changed since the last journal line.
type dirty struct {
	any        bool
	clock      bool
	keys       map[string]bool
	intents    map[string]bool
	charges    map[string]bool
	refunds    map[string]bool
	pms        map[string]bool
	deliveries map[*delivery]bool
	delivered  []uint64
}

func (d *dirty) mark() *dirty {
	if !d.any {
		*d = dirty{any: true, keys: map[string]bool{}, intents: map[string]bool{}, charges: map[string]bool{},
			refunds: map[string]bool{}, pms: map[string]bool{}, deliveries: map[*delivery]bool{}}
	}
	return d
}

// The touch methods record, with s.mu held, what a change touched; they do
// nothing for a simulator without a state file.
func (s *Sim) touchKey(k string) {
	if s.journal != nil {
		s.dirty.mark().keys[k] = true
	}
}

func (s *Sim) touchIntent(id string) {
	if s.journal != nil {
		s.dirty.mark().intents[id] = true
	}
}

func (s *Sim) touchCharge(id string) {
	if s.journal != nil {
		s.dirty.mark().charges[id] = true
	}
}

func (s *Sim) touchRefund(id string) {
	if s.journal != nil {
		s.dirty.mark().refunds[id] = true
	}
}

func (s *Sim) touchPM(pm string) {
	if s.journal != nil {
		s.dirty.mark().pms[pm] = true
	}
}

func (s *Sim) touchClock() {
	if s.journal != nil {
		s.dirty.mark().clock = true
	}
}

func (s *Sim) touchDelivery(d *delivery) {
	if s.journal != nil {
		s.dirty.mark().deliveries[d] = true
	}
}

func (s *Sim) dropDelivery(d *delivery) {
	if s.journal != nil {
		dd := s.dirty.mark()
		delete(dd.deliveries, d)
		dd.delivered = append(dd.delivered, d.n)
	}
}

// journal is the open state file.
type journal struct {
	path string
	f    *os.File
	lock *os.File
	// buf holds the lines not yet written; lines counts every line made,
	// synced the ones written and fsynced (both guarded by Sim.mu and
	// journal.wmu as noted).
	buf    [][]byte // Sim.mu
	lines  uint64   // Sim.mu
	synced uint64   // wmu
	// compacted is lines at the last compaction (wmu).
	compacted uint64
	// wmu serialises writes. Lock order: wmu before Sim.mu, never taken
	// while Sim.mu is held.
	wmu sync.Mutex
	err error // wmu: the first write error, reported by every sync after
}

// commitLocked turns what changed into one journal line (s.mu held).
func (s *Sim) commitLocked() {
	if s.journal == nil || !s.dirty.any {
		return
	}
	d := s.dirty
	s.dirty = dirty{}
	line := stateLine{Seq: s.seq}
	if d.clock {
		off := int64(s.offset)
		line.OffsetNS = &off
	}
	for k := range d.keys {
		if e := s.keys[k]; e != nil && e.done {
			line.Keys = append(line.Keys, keyRecOf(k, e))
		}
	}
	for id := range d.intents {
		if pi := s.intents[id]; pi != nil {
			line.Intents = append(line.Intents, intentRec{PI: pi, CreatedAt: pi.createdAt, Key: pi.key})
		}
	}
	for _, c := range s.charges {
		if d.charges[c.ID] {
			line.Charges = append(line.Charges, *c)
		}
	}
	for _, r := range s.refunds {
		if d.refunds[r.ID] {
			line.Refunds = append(line.Refunds, s.refundRecLocked(r))
		}
	}
	for pm := range d.pms {
		line.PMs = append(line.PMs, s.pmRecLocked(pm))
	}
	for dl := range d.deliveries {
		line.Deliveries = append(line.Deliveries, deliveryRecOf(dl))
	}
	line.Delivered = d.delivered
	if len(d.delivered) > 0 {
		g := s.gaveUp
		line.GaveUp = &g
	}
	b, err := json.Marshal(line)
	if err != nil { // only our own types are marshalled; this is a bug
		panic("pspsim: marshal state line: " + err.Error())
	}
	s.journal.buf = append(s.journal.buf, append(b, '\n'))
	s.journal.lines++
}

func keyRecOf(k string, e *keyEntry) keyRec {
	return keyRec{Key: k, Fingerprint: e.fingerprint, Created: e.created, PrunedAfter: e.prunedAfter,
		Status: e.saved.status, Body: e.saved.body, RequestID: e.saved.requestID}
}

func (s *Sim) refundRecLocked(r *Refund) refundRec {
	rec := refundRec{Refund: *r}
	if st := s.refundsByID[r.ID]; st != nil {
		rec.View, rec.Key, rec.Settling, rec.SettleAt, rec.Fails = st.view, st.key, st.settling, st.settleAt, st.fails
		if st.charge != nil {
			rec.Charge = st.charge.ID
		}
	}
	return rec
}

func (s *Sim) pmRecLocked(pm string) pmRec {
	return pmRec{PM: pm, UsedBy: s.pmUsed[pm], Attached: s.pmAttached[pm], Created: s.pmCreated[pm]}
}

func deliveryRecOf(d *delivery) deliveryRec {
	return deliveryRec{N: d.n, EventID: d.eventID, EventType: d.eventType, PaymentID: d.paymentID,
		Payload: d.payload, Attempts: d.attempts, First: d.first, Due: d.due}
}

// sync makes every change so far durable: it commits the pending line and
// waits until the journal holds it, fsynced. Concurrent callers share one
// write. A simulator without a state file returns at once.
func (s *Sim) sync() error {
	s.mu.Lock()
	j := s.journal
	if j == nil {
		s.mu.Unlock()
		return nil
	}
	s.commitLocked()
	target := j.lines
	s.mu.Unlock()

	j.wmu.Lock()
	defer j.wmu.Unlock()
	if j.err != nil {
		return j.err
	}
	if j.synced >= target {
		return nil // another caller's write carried this line
	}
	s.mu.Lock()
	buf, upto := j.buf, j.lines
	j.buf = nil
	s.mu.Unlock()
	if err := writeAll(j.f, buf); err != nil {
		j.err = fmt.Errorf("pspsim: write state %s: %w", j.path, err)
		s.log.Error("state not saved: the simulator keeps running on memory alone", "error", j.err.Error())
		return j.err
	}
	j.synced = upto
	if upto-j.compacted >= compactEvery {
		// The journal only grows while the simulator runs: rewrite it from
		// memory now and then, so a long run's file stays near its state's
		// size (one O(state) write every compactEvery changes).
		if err := s.compact(j); err != nil {
			s.log.Error("state not compacted; the journal keeps growing", "error", err.Error())
		}
	}
	return nil
}

// compactEvery is how many journal lines a running simulator appends
// before it rewrites the file from memory.
var compactEvery uint64 = 100_000

func writeAll(f *os.File, lines [][]byte) error {
	w := bufio.NewWriter(f)
	for _, l := range lines {
		if _, err := w.Write(l); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Sync()
}

// syncOrLog is sync for the paths that have nobody to answer.
func (s *Sim) syncOrLog() {
	if err := s.sync(); err != nil {
		s.log.Error("state sync failed", "error", err.Error())
	}
}

// openState loads the state at path (if the file exists), compacts it and
// opens the journal for appending. It runs before the Sim serves anything.
func (s *Sim) openState(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("pspsim: state dir: %w", err)
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("pspsim: state lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return fmt.Errorf("pspsim: state %s is held by another simulator: %w", path, err)
	}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		lock.Close()
		return fmt.Errorf("pspsim: read state: %w", err)
	default:
		if err := s.load(path, b); err != nil {
			lock.Close()
			return err
		}
	}
	s.mu.Lock()
	now := s.nowLocked()
	for k, e := range s.keys {
		if s.expired(e, now) {
			delete(s.keys, k) // past the window, as a running simulator would have pruned it
		}
	}
	s.mu.Unlock()
	j := &journal{path: path, lock: lock}
	if err := s.compact(j); err != nil {
		lock.Close()
		return err
	}
	s.journal = j
	return nil
}

// load replays the journal into s.
func (s *Sim) load(path string, b []byte) error {
	n := 0
	for len(b) > 0 {
		n++
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			// The append a crash cut short: no reply acknowledged it.
			s.log.Warn("state: dropped a torn last line", "path", path, "line", n, "bytes", len(b))
			break
		}
		raw := b[:i]
		b = b[i+1:]
		var line stateLine
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&line); err != nil {
			return fmt.Errorf("pspsim: state %s line %d is corrupt (move it away to start afresh): %w", path, n, err)
		}
		if n == 1 {
			if line.Version != stateVersion {
				return fmt.Errorf("pspsim: state %s: not a pspsim state file of version %d", path, stateVersion)
			}
			continue
		}
		if err := s.applyLine(line); err != nil {
			return fmt.Errorf("pspsim: state %s line %d: %w", path, n, err)
		}
	}
	if n == 0 {
		return fmt.Errorf("pspsim: state %s is empty: not a pspsim state file", path)
	}
	return nil
}

// applyLine applies one journal line (the last copy of an object wins).
func (s *Sim) applyLine(l stateLine) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq = max(s.seq, l.Seq)
	if l.OffsetNS != nil {
		s.offset = time.Duration(*l.OffsetNS)
	}
	if l.GaveUp != nil {
		s.gaveUp = *l.GaveUp
	}
	for _, k := range l.Keys {
		s.keys[k.Key] = &keyEntry{fingerprint: k.Fingerprint, created: k.Created, prunedAfter: k.PrunedAfter, done: true,
			saved: reply{status: k.Status, body: k.Body, requestID: k.RequestID}}
	}
	for _, r := range l.Intents {
		if r.PI == nil || r.PI.ID == "" {
			return errors.New("a PaymentIntent without an id")
		}
		r.PI.createdAt, r.PI.key = r.CreatedAt, r.Key
		if pi := s.intents[r.PI.ID]; pi != nil {
			*pi = *r.PI // keep the pointer s.order holds
		} else {
			s.intents[r.PI.ID] = r.PI
			s.order = append(s.order, r.PI)
		}
	}
	for _, c := range l.Charges {
		if old := s.chargeByIDLocked(c.ID); old != nil {
			*old = c // keep the pointer refunds hold
		} else {
			cp := c
			s.charges = append(s.charges, &cp)
		}
	}
	for _, r := range l.Refunds {
		ch := s.chargeByIDLocked(r.Charge)
		if ch == nil {
			return fmt.Errorf("refund %s of an unknown charge %s", r.Refund.ID, r.Charge)
		}
		st := &refundState{view: r.View, charge: ch, key: r.Key, settling: r.Settling, settleAt: r.SettleAt, fails: r.Fails}
		if _, ok := s.refundsByID[r.Refund.ID]; !ok {
			cp := r.Refund
			s.refunds = append(s.refunds, &cp)
		} else {
			for _, old := range s.refunds {
				if old.ID == r.Refund.ID {
					*old = r.Refund
				}
			}
		}
		s.refundsByID[r.Refund.ID] = st
	}
	for _, p := range l.PMs {
		setOrDelete(s.pmUsed, p.PM, p.UsedBy, p.UsedBy != "")
		setOrDelete(s.pmAttached, p.PM, true, p.Attached)
		setOrDelete(s.pmCreated, p.PM, true, p.Created)
	}
	for _, d := range l.Deliveries {
		s.upsertDeliveryLocked(&delivery{n: d.N, eventID: d.EventID, eventType: d.EventType, paymentID: d.PaymentID,
			payload: d.Payload, attempts: d.Attempts, first: d.First, due: d.Due, gen: s.gen})
	}
	for _, n := range l.Delivered {
		s.pending = deleteDelivery(s.pending, n)
	}
	for _, d := range s.pending {
		s.deliverySeq = max(s.deliverySeq, d.n)
	}
	return nil
}

func setOrDelete[V any](m map[string]V, k string, v V, set bool) {
	if set {
		m[k] = v
	} else {
		delete(m, k)
	}
}

func (s *Sim) upsertDeliveryLocked(d *delivery) {
	for i, old := range s.pending {
		if old.n == d.n {
			s.pending[i] = d
			return
		}
	}
	s.pending = append(s.pending, d)
}

func deleteDelivery(ds []*delivery, n uint64) []*delivery {
	out := ds[:0]
	for _, d := range ds {
		if d.n != n {
			out = append(out, d)
		}
	}
	return out
}

func (s *Sim) chargeByIDLocked(id string) *Charge {
	for _, c := range s.charges {
		if c.ID == id {
			return c
		}
	}
	return nil
}

// compact writes the whole state as a fresh journal (temp file, fsync,
// rename, directory fsync) and opens it for appending. Nothing else
// touches the journal meanwhile (it runs at start and under wmu).
func (s *Sim) compact(j *journal) error {
	s.mu.Lock()
	header, _ := json.Marshal(stateLine{Version: stateVersion})
	line := stateLine{Seq: s.seq}
	off, gave := int64(s.offset), s.gaveUp
	line.OffsetNS, line.GaveUp = &off, &gave
	for k, e := range s.keys {
		if e.done {
			line.Keys = append(line.Keys, keyRecOf(k, e))
		}
	}
	for _, pi := range s.order {
		line.Intents = append(line.Intents, intentRec{PI: pi, CreatedAt: pi.createdAt, Key: pi.key})
	}
	for _, c := range s.charges {
		line.Charges = append(line.Charges, *c)
	}
	for _, r := range s.refunds {
		line.Refunds = append(line.Refunds, s.refundRecLocked(r))
	}
	pms := map[string]bool{}
	for _, m := range []map[string]bool{s.pmAttached, s.pmCreated} {
		for pm := range m {
			pms[pm] = true
		}
	}
	for pm := range s.pmUsed {
		pms[pm] = true
	}
	for pm := range pms {
		line.PMs = append(line.PMs, s.pmRecLocked(pm))
	}
	for _, d := range s.pending {
		line.Deliveries = append(line.Deliveries, deliveryRecOf(d))
	}
	body, err := json.Marshal(line)
	s.dirty = dirty{} // the snapshot holds every change so far
	j.buf = nil
	j.synced = j.lines
	j.compacted = j.lines
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("pspsim: marshal state: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(j.path), filepath.Base(j.path)+".tmp*")
	if err != nil {
		return fmt.Errorf("pspsim: state temp file: %w", err)
	}
	if err := writeAll(tmp, [][]byte{append(header, '\n'), append(body, '\n')}); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("pspsim: write state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("pspsim: write state: %w", err)
	}
	if err := os.Rename(tmp.Name(), j.path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("pspsim: replace state: %w", err)
	}
	if dir, err := os.Open(filepath.Dir(j.path)); err == nil {
		_ = dir.Sync() // the rename itself must survive a crash
		dir.Close()
	}
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pspsim: open state: %w", err)
	}
	if j.f != nil {
		j.f.Close()
	}
	j.f = f
	return nil
}

// compactNow rewrites the journal from the state in memory (after Reset).
func (s *Sim) compactNow() error {
	s.mu.Lock()
	j := s.journal
	s.mu.Unlock()
	if j == nil {
		return nil
	}
	j.wmu.Lock()
	defer j.wmu.Unlock()
	return s.compact(j)
}

// closeState writes what is left and releases the file and its lock.
func (s *Sim) closeState() {
	s.syncOrLog()
	s.mu.Lock()
	j := s.journal
	s.journal = nil
	s.mu.Unlock()
	if j == nil {
		return
	}
	j.wmu.Lock()
	defer j.wmu.Unlock()
	if j.f != nil {
		j.f.Close()
	}
	j.lock.Close()
}
