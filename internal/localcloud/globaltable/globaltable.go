// Package globaltable plays a DynamoDB global table in its default mode,
// multi-Region eventual consistency (MREC), between two tables each in its
// own DynamoDB Local, which has no global tables (docs/regions.md, seed
// Part 9). A Replicator reads each table's stream and writes every change
// into the other table, asynchronously and a configurable lag late, last
// writer wins per item, as MREC replicates:
//
//   - a conditional write checks its own Region's replica only: during the
//     lag both Regions can claim the same key, and both succeed;
//   - a conflict is settled per item by the later write, in both Regions;
//   - a Region that fails (Cut) loses what it had not replicated yet.
//
// What it approximates. MREC stamps each write when the Region makes it;
// the replicator stamps it when it reads it from the stream (every Poll,
// 20 ms by default), since DynamoDB Local's ApproximateCreationDateTime is
// rounded down to the minute. Two writes of one item in two Regions less
// than a poll apart may so be ordered the other way round than they
// happened; both Regions still end with the same one (a tie goes to side
// B). A replicated change is written when it is due, unconditionally,
// right after the replicator has read the destination's stream; a write
// the destination made in between, which that change then overwrote, is
// recognised when it is read back before the change's own stream record,
// and written again (Stats.Restored): it is the later write. Transactions
// replicate item by item, as on AWS, where another Region may see part of
// one for a while.
package globaltable

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// ErrCut means a side of the replicator has been cut off: it replicates no
// more between the two.
var ErrCut = errors.New("globaltable: a Region is cut off")

// Side is one Region's replica.
type Side struct {
	// Name is the Region (the name Cut takes).
	Name string
	// DB and Streams reach the Region's DynamoDB (Local) and its streams.
	DB      *dynamodb.Client
	Streams *dynamodbstreams.Client
	// Table is the replica, with a stream of NEW_IMAGE or
	// NEW_AND_OLD_IMAGES.
	Table string
}

// Config configures a Replicator. Zero fields take the defaults.
type Config struct {
	A, B Side
	// Lag is how long after the replicator reads a change from one side it
	// writes it into the other.
	Lag time.Duration
	// Poll is how often each side's stream is read (default 20 ms).
	Poll time.Duration
	// Logger receives a line per dropped or lost change and per error
	// (default slog.Default()).
	Logger *slog.Logger
	// ProbeKey returns the key attributes of a probe item with this id, one
	// no real item can have (say a partition key "#probe#<id>"); Measure
	// needs it.
	ProbeKey func(id string) map[string]types.AttributeValue
	// FromNow copies only the changes made after Start; by default each
	// side's stream is copied from its trim horizon (a new replica gets
	// the items already written). A link started again between replicas
	// that were linked before sets it: their streams' history would be
	// copied over again, an older change read later winning over a newer
	// one read first.
	FromNow bool
}

// Stats counts what the replicator did, over both directions.
type Stats struct {
	// Applied is changes written into the other side.
	Applied int
	// DroppedByLWW is changes not written because the destination's
	// version of the item was newer (last writer wins).
	DroppedByLWW int
	// EchoSkipped is the replicator's own writes read back from the
	// destination's stream, and not copied back.
	EchoSkipped int
	// LostAtCut is changes read but not yet applied when a side was cut
	// off, or read from a side after its cut.
	LostAtCut int
	// Restored is a side's own writes that a replicated, older change
	// overwrote before the replicator had read them, written again.
	Restored int
}

// Replicator copies changes between the two sides of Config. Its methods
// are safe for concurrent use.
type Replicator struct {
	cfg   Config
	log   *slog.Logger
	sides [2]*side

	mu      sync.Mutex
	stats   Stats
	started bool
	stopped bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// side is a Side and what the replicator knows of it. Everything but
// reader is guarded by Replicator.mu; reader belongs to the side's pump.
type side struct {
	Side
	idx    int
	reader *streamReader

	// inbox is the other side's changes due here, in the order read.
	inbox []change
	// busy is the changes taken from inbox and not yet settled.
	busy int
	// newest is, by item key, the version of the item this side holds.
	newest map[string]version
	// pending is, by item key, the digests of the replicator's writes
	// here that changed the item and are not yet read back: their stream
	// records are echoes, not to be copied back.
	pending map[string][]string
	cut     bool
	// polled is when the last read of the stream that completed began.
	polled time.Time
	// failing is set from a failed step until one succeeds: a deleted
	// table is logged once, not every poll.
	failing bool
}

// version orders two writes of an item: by the time they were read, then
// by side (a tie goes to B).
type version struct {
	at   time.Time
	side int
}

func (v version) after(w version) bool {
	if !v.at.Equal(w.at) {
		return v.at.After(w.at)
	}
	return v.side > w.side
}

// change is one item's change on its way to the other side.
type change struct {
	key   string                          // canonical key
	keys  map[string]types.AttributeValue // the item's key attributes
	image map[string]types.AttributeValue // nil: removed
	v     version
	due   time.Time
}

// New checks cfg; Start starts replicating.
func New(cfg Config) (*Replicator, error) {
	if cfg.Poll <= 0 {
		cfg.Poll = 20 * time.Millisecond
	}
	if cfg.Lag < 0 {
		return nil, fmt.Errorf("globaltable: negative lag %v", cfg.Lag)
	}
	r := &Replicator{cfg: cfg, log: cfg.Logger}
	if r.log == nil {
		r.log = slog.Default()
	}
	for i, s := range []Side{cfg.A, cfg.B} {
		if s.Name == "" || s.DB == nil || s.Streams == nil || s.Table == "" {
			return nil, fmt.Errorf("globaltable: side %d needs a name, clients and a table", i)
		}
		r.sides[i] = &side{Side: s, idx: i, newest: map[string]version{}, pending: map[string][]string{}}
	}
	if cfg.A.Name == cfg.B.Name {
		return nil, fmt.Errorf("globaltable: both sides are named %q", cfg.A.Name)
	}
	return r, nil
}

// Start finds both tables' streams and starts replicating everything in
// them from their trim horizon (a new replica gets the items already
// written), or with Config.FromNow what comes after it. ctx bounds the
// start only: the replicator runs until Stop.
func (r *Replicator) Start(ctx context.Context) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return errors.New("globaltable: started twice")
	}
	r.started = true
	r.mu.Unlock()
	for _, s := range r.sides {
		out, err := s.DB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.Table)})
		if err != nil {
			return fmt.Errorf("globaltable: describe %s in %s: %w", s.Table, s.Name, err)
		}
		spec := out.Table.StreamSpecification
		if spec == nil || !aws.ToBool(spec.StreamEnabled) || out.Table.LatestStreamArn == nil ||
			(spec.StreamViewType != types.StreamViewTypeNewImage && spec.StreamViewType != types.StreamViewTypeNewAndOldImages) {
			return fmt.Errorf("globaltable: %s in %s needs a stream with new images", s.Table, s.Name)
		}
		s.reader = newStreamReader(s.Streams, aws.ToString(out.Table.LatestStreamArn))
		if err := s.reader.discover(ctx); err != nil {
			return err
		}
		if r.cfg.FromNow {
			// Read to the end and drop, until a read finds nothing (a
			// shard that ended in one read has its children read in the
			// next): the pump goes on after it.
			for {
				recs, err := s.reader.read(ctx)
				if err != nil {
					return err
				}
				if len(recs) == 0 && !s.reader.discovered.IsZero() {
					break
				}
			}
		}
	}
	run, cancel := context.WithCancel(context.Background())
	r.mu.Lock()
	r.cancel = cancel
	r.mu.Unlock()
	for _, s := range r.sides {
		r.wg.Add(1)
		go r.pump(run, s)
	}
	return nil
}

// Stop stops replicating; changes not yet applied stay unapplied. It waits
// for a write under way and is idempotent.
func (r *Replicator) Stop() {
	r.mu.Lock()
	cancel := r.cancel
	r.stopped = true
	r.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	r.wg.Wait()
}

// Cut is the Region of that side failing: changes read from it and not yet
// applied on the other side are lost, with those on their way to it, and
// nothing more is copied from or to it.
func (r *Replicator) Cut(region string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.sides {
		if s.Name != region || s.cut {
			continue
		}
		o := r.other(s)
		s.cut = true
		lost := len(o.inbox) + len(s.inbox)
		o.inbox, s.inbox = nil, nil
		r.stats.LostAtCut += lost
		r.log.Info("globaltable: Region cut off", slog.String("region", region), slog.Int("lost_in_flight", lost))
	}
}

// Stats returns the counts so far.
func (r *Replicator) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// CaughtUp waits until every change written before the call has been read
// (a read of each stream begun two polls after the call) and applied on
// the other side (or dropped by last writer wins). A side that is cut off
// is not waited for.
func (r *Replicator) CaughtUp(ctx context.Context) error {
	from := time.Now().Add(2 * r.cfg.Poll)
	for {
		r.mu.Lock()
		running, done := r.started && !r.stopped, true
		for _, s := range r.sides {
			if !s.cut && (!s.polled.After(from) || len(s.inbox) > 0 || s.busy > 0) {
				done = false
			}
		}
		r.mu.Unlock()
		if done {
			return nil
		}
		if !running {
			return errors.New("globaltable: not running")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("globaltable: catching up: %w", ctx.Err())
		case <-time.After(r.cfg.Poll / 2):
		}
	}
}

// Measure is the replication lag now: the time from a probe item's put on
// side A to its arrival on side B (polled every 2 ms). The probe is deleted
// afterwards (the deletion replicates too).
func (r *Replicator) Measure(ctx context.Context) (time.Duration, error) {
	if r.cfg.ProbeKey == nil {
		return 0, errors.New("globaltable: Measure needs Config.ProbeKey")
	}
	r.mu.Lock()
	cut := r.sides[0].cut || r.sides[1].cut
	r.mu.Unlock()
	if cut {
		return 0, ErrCut
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	key := r.cfg.ProbeKey(id)
	item := maps.Clone(key)
	item["globaltable_probe"] = &types.AttributeValueMemberS{Value: id}
	a, dst := r.sides[0], r.sides[1]
	began := time.Now()
	if _, err := a.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(a.Table), Item: item}); err != nil {
		return 0, fmt.Errorf("globaltable: probe in %s: %w", a.Name, err)
	}
	defer func() {
		_, _ = a.DB.DeleteItem(context.WithoutCancel(ctx), &dynamodb.DeleteItemInput{TableName: aws.String(a.Table), Key: key})
	}()
	for {
		out, err := dst.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(dst.Table), Key: key, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return 0, fmt.Errorf("globaltable: probe in %s: %w", dst.Name, err)
		}
		if len(out.Item) > 0 {
			return time.Since(began), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("globaltable: waiting for the probe in %s: %w", dst.Name, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (r *Replicator) other(s *side) *side { return r.sides[1-s.idx] }

// pump is one side's loop: read its stream, then write what is due into
// it. One goroutine per side reads its stream and writes its table, so
// the stream is always read just before a replicated change is written.
func (r *Replicator) pump(ctx context.Context, s *side) {
	defer r.wg.Done()
	for {
		r.step(ctx, s)
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.cfg.Poll):
		}
	}
}

func (r *Replicator) step(ctx context.Context, s *side) {
	r.mu.Lock()
	cut := s.cut
	r.mu.Unlock()
	if cut {
		return
	}
	began := time.Now()
	recs, err := s.reader.read(ctx)
	readAt := time.Now()
	var restores []change
	r.mu.Lock()
	for _, rec := range recs {
		if c, restore := r.observe(s, rec, readAt); restore {
			restores = append(restores, c)
		}
	}
	if err == nil {
		s.polled = began
		s.failing = false
	}
	r.mu.Unlock()
	if err != nil {
		r.failed(ctx, s, err)
	}
	for _, c := range restores {
		if err := r.write(ctx, s, c); err != nil {
			r.failed(ctx, s, err)
		}
	}
	r.applyDue(ctx, s)
}

// observe takes one record of s's stream (under r.mu). An echo of the
// replicator's own write is skipped; any other change is s's own write, the
// newest version of its item there, and goes to the other side. restore
// reports an own write that a replicated change already overwrote (its echo
// is still to come): it must be written again.
func (r *Replicator) observe(s *side, rec streamtypes.Record, readAt time.Time) (c change, restore bool) {
	if rec.Dynamodb == nil {
		return change{}, false
	}
	keys := fromStream(rec.Dynamodb.Keys)
	c = change{key: canonical(keys), keys: keys, v: version{at: readAt, side: s.idx}, due: readAt.Add(r.cfg.Lag)}
	if rec.EventName != streamtypes.OperationTypeRemove {
		c.image = fromStream(rec.Dynamodb.NewImage)
	}
	d := digest(c.image)
	if list := s.pending[c.key]; len(list) > 0 {
		for i, p := range list {
			if p == d {
				// Earlier entries made no record after all.
				if rest := list[i+1:]; len(rest) > 0 {
					s.pending[c.key] = rest
				} else {
					delete(s.pending, c.key)
				}
				r.stats.EchoSkipped++
				return change{}, false
			}
		}
		restore = true
		r.stats.Restored++
		r.log.Debug("globaltable: an own write was overwritten unseen; writing it again", slog.String("region", s.Name), slog.String("key", c.key))
	}
	s.newest[c.key] = c.v
	if s.cut {
		r.stats.LostAtCut++
		return c, restore
	}
	if o := r.other(s); !o.cut {
		o.inbox = append(o.inbox, c)
	}
	return c, restore
}

// applyDue writes into s every change of its inbox that is due, unless s
// already holds a newer version of the item.
func (r *Replicator) applyDue(ctx context.Context, s *side) {
	r.mu.Lock()
	now := time.Now()
	n := 0
	for n < len(s.inbox) && !s.inbox[n].due.After(now) {
		n++
	}
	batch := append([]change(nil), s.inbox[:n]...)
	s.inbox = s.inbox[n:]
	s.busy = n
	r.mu.Unlock()
	for i, c := range batch {
		r.mu.Lock()
		if s.cut || r.other(s).cut {
			r.stats.LostAtCut += len(batch) - i
			s.busy = 0
			r.mu.Unlock()
			return
		}
		if cur, ok := s.newest[c.key]; ok && cur.after(c.v) {
			r.stats.DroppedByLWW++
			s.busy--
			r.mu.Unlock()
			r.log.Debug("globaltable: older than the destination's version: dropped", slog.String("region", s.Name), slog.String("key", c.key))
			continue
		}
		r.mu.Unlock()
		if err := r.write(ctx, s, c); err != nil {
			r.failed(ctx, s, err)
			r.mu.Lock()
			if s.cut || r.other(s).cut {
				r.stats.LostAtCut += len(batch) - i
			} else {
				s.inbox = append(batch[i:], s.inbox...) // tried again at the next step
			}
			s.busy = 0
			r.mu.Unlock()
			return
		}
		r.mu.Lock()
		s.newest[c.key] = c.v
		r.stats.Applied++
		s.busy--
		r.mu.Unlock()
	}
}

// write puts c's image into s's table (or deletes the item) and, when that
// changed the item (DynamoDB writes no stream record otherwise), remembers
// it as pending: its record is an echo.
func (r *Replicator) write(ctx context.Context, s *side, c change) error {
	var old map[string]types.AttributeValue
	if c.image == nil {
		out, err := s.DB.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.Table), Key: c.keys, ReturnValues: types.ReturnValueAllOld})
		if err != nil {
			return fmt.Errorf("globaltable: delete in %s: %w", s.Name, err)
		}
		old = out.Attributes
	} else {
		out, err := s.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.Table), Item: c.image, ReturnValues: types.ReturnValueAllOld})
		if err != nil {
			return fmt.Errorf("globaltable: put in %s: %w", s.Name, err)
		}
		old = out.Attributes
	}
	if len(old) == 0 {
		old = nil
	}
	if d := digest(c.image); d != digest(old) {
		r.mu.Lock()
		s.pending[c.key] = append(s.pending[c.key], d)
		r.mu.Unlock()
	}
	return nil
}

// failed logs the first error of a run of failed steps of s.
func (r *Replicator) failed(ctx context.Context, s *side, err error) {
	if ctx.Err() != nil {
		return
	}
	// DynamoDB Local now and then refuses a fresh iterator's read with
	// TrimmedDataAccessException while tables come and go; the next poll
	// reads on.
	var trimmed *streamtypes.TrimmedDataAccessException
	if errors.As(err, &trimmed) {
		r.log.Debug("globaltable: stream read refused; retrying", slog.String("region", s.Name), slog.String("error", err.Error()))
		return
	}
	r.mu.Lock()
	repeat := s.failing
	s.failing = true
	r.mu.Unlock()
	if !repeat {
		r.log.Warn("globaltable: replication step failed", slog.String("region", s.Name), slog.String("error", err.Error()))
	}
}
