// Package home keeps each caller's home Region (docs/regions.md,
// docs/mechanism.md#seed-part-9): a small record per caller, (caller, region, version), in a table that
// is a global table across the deployment's Regions. The api serves a caller
// only in its home Region and answers a misrouted request 421 with the
// home's URL; a failover moves callers by writing their records with
// version + 1 in the Region that takes over.
//
// The version only grows, and a Router remembers the highest version it has
// seen of each record: a read from a replica that has not caught up yet
// cannot move a caller back to a Region it has left. That cache can only make
// the answer stricter; the record is still read on every request, so two
// Regions never both serve one caller once the new version reached them.
//
// The record of the caller "*" is the deployment's default home, for the
// callers without a record of their own: a failover moves it too, so a
// caller nobody placed follows the default.
package home

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Everyone is the caller of the default record.
const Everyone = "*"

// The record's attributes.
const (
	attrCaller  = "caller"
	attrRegion  = "region"
	attrVersion = "version"
	attrMovedAt = "moved_at" // Unix seconds of the move that wrote the record
)

// Record is a caller's home.
type Record struct {
	Caller  string
	Region  string
	Version int64
	// MovedAt is when a move wrote this record (zero: never moved, the
	// configured default). What a Region wrote in its last lag before a
	// failover may be lost; a resolve asks the PSP before it voids a key of
	// a caller moved recently (api, docs/regions.md).
	MovedAt time.Time
}

// Getter is what reading the records needs of DynamoDB. GetItem, not
// BatchGetItem: the api links GetItem already (the key record store), and
// BatchGetItem's code alone would put its bootstrap over its budget.
type Getter interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// DB is what reading and moving records needs of DynamoDB
// (*dynamodb.Client).
type DB interface {
	Getter
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// Store reads home records (the api's router).
type Store struct {
	get   Getter
	table string
}

// NewStore returns a Store that reads table. It holds the client as a
// Getter alone, and moving records is another type's (Mover): a function
// that only routes then links none of DynamoDB's Scan or of the moves (the
// api's bootstrap is within bytes of its budget).
func NewStore(db Getter, table string) *Store { return &Store{get: db, table: table} }

// Mover moves callers between Regions (the failover's tools, tests).
type Mover struct {
	db    DB
	table string
}

// NewMover returns a Mover over table.
func NewMover(db DB, table string) *Mover { return &Mover{db: db, table: table} }

// Store returns a Store reading the Mover's table.
func (m *Mover) Store() *Store { return NewStore(m.db, m.table) }

// Table is the record table's name.
func (m *Mover) Table() string { return m.table }

// ErrUnavailable means the records could not be read or written.
var ErrUnavailable = errors.New("home: record table unavailable")

// ErrNoURL means a caller is homed in a Region the router has no URL for.
var ErrNoURL = errors.New("home: no URL for the home Region")

// ErrMoved means a move lost: the record's version is no longer the one the
// mover read (another move got there first).
var ErrMoved = errors.New("home: the record moved meanwhile")

// Read returns the caller's record and the default record, each found or
// not: two strongly consistent reads of this Region's replica, side by
// side (one round trip's wait).
func (s *Store) Read(ctx context.Context, caller string) (own, all Record, ownFound, allFound bool, err error) {
	type got struct {
		r     Record
		found bool
		err   error
	}
	read := func(c string) got {
		out, err := s.get.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.table, Key: key(c), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return got{err: fmt.Errorf("%w: %w", ErrUnavailable, err)}
		}
		if len(out.Item) == 0 {
			return got{}
		}
		r, err := decode(out.Item)
		return got{r: r, found: err == nil, err: err}
	}
	if caller == Everyone {
		g := read(Everyone)
		return Record{}, g.r, false, g.found, g.err
	}
	ch := make(chan got, 1)
	go func() { ch <- read(caller) }()
	a := read(Everyone)
	o := <-ch
	if err := errors.Join(o.err, a.err); err != nil {
		return Record{}, Record{}, false, false, err
	}
	return o.r, a.r, o.found, a.found, nil
}

// IsDefaultHome reports whether region is the deployment's default home:
// the "*" record's Region, or fallback while there is none. A resolver asks
// it when its ledger is read-only (the home's ledger must not be).
func (s *Store) IsDefaultHome(ctx context.Context, region, fallback string) (bool, error) {
	_, all, _, found, err := s.Read(ctx, Everyone)
	if err != nil {
		return false, err
	}
	return homeOf(Record{}, all, false, found, fallback).Region == region, nil
}

// homeOf is the record that places a caller: its own, else the default
// one, else the fallback at version 0.
func homeOf(own, all Record, ownFound, allFound bool, fallback string) Record {
	switch {
	case ownFound:
		return own
	case allFound:
		return all
	}
	return Record{Caller: Everyone, Region: fallback}
}

// Move writes caller's home as region with version from + 1, only if the
// record's version is still from (0: no record yet). It returns the record
// written, or ErrMoved.
func (s *Mover) Move(ctx context.Context, caller, region string, from int64) (Record, error) {
	if caller == "" || region == "" {
		return Record{}, errors.New("home: move needs a caller and a region")
	}
	r := Record{Caller: caller, Region: region, Version: from + 1, MovedAt: time.Now()}
	in := &dynamodb.PutItemInput{TableName: &s.table, Item: encode(r)}
	if from == 0 {
		in.ConditionExpression = aws.String("attribute_not_exists(#c)")
		in.ExpressionAttributeNames = map[string]string{"#c": attrCaller}
	} else {
		in.ConditionExpression = aws.String("#v = :from")
		in.ExpressionAttributeNames = map[string]string{"#v": attrVersion}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":from": num(from)}
	}
	_, err := s.db.PutItem(ctx, in)
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return Record{}, fmt.Errorf("%w: %s from version %d", ErrMoved, caller, from)
	case err != nil:
		return Record{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return r, nil
}

// Put writes r as it is, with no condition: what a global table's own
// replication writes into a replica, never a move (Move is).
func (s *Mover) Put(ctx context.Context, r Record) error {
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.table, Item: encode(r)}); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// RestoreFrom writes every record of src's replica into this one, as a
// global table resynchronises a replica that comes back after its Region
// failed (the runbook keeps that Region's API fenced until then,
// docs/regions.md).
func (s *Mover) RestoreFrom(ctx context.Context, src *Mover) error {
	recs, err := src.All(ctx)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if err := s.Put(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// All returns every record in this Region's replica.
func (s *Mover) All(ctx context.Context) ([]Record, error) {
	var out []Record
	var start map[string]types.AttributeValue
	for {
		page, err := s.db.Scan(ctx, &dynamodb.ScanInput{TableName: &s.table, ExclusiveStartKey: start, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		for _, item := range page.Items {
			r, err := decode(item)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		if len(page.LastEvaluatedKey) == 0 {
			return out, nil
		}
		start = page.LastEvaluatedKey
	}
}

// Failover moves every record homed in from (the default record among them,
// and the default itself if it has no record and fallback is from) to to,
// each with version + 1. It returns the records it wrote. A record another
// mover moved meanwhile is left as that mover wrote it.
func (s *Mover) Failover(ctx context.Context, from, to, fallback string) ([]Record, error) {
	recs, err := s.All(ctx)
	if err != nil {
		return nil, err
	}
	var moved []Record
	sawDefault := false
	for _, r := range recs {
		if r.Caller == Everyone {
			sawDefault = true
		}
		if r.Region != from {
			continue
		}
		m, err := s.Move(ctx, r.Caller, to, r.Version)
		if errors.Is(err, ErrMoved) {
			continue
		}
		if err != nil {
			return moved, err
		}
		moved = append(moved, m)
	}
	if !sawDefault && fallback == from {
		m, err := s.Move(ctx, Everyone, to, 0)
		if err != nil && !errors.Is(err, ErrMoved) {
			return moved, err
		}
		if err == nil {
			moved = append(moved, m)
		}
	}
	return moved, nil
}

// ParseURLs reads stackenv.RegionURLs' value: a JSON object from Region
// to its API's absolute https (or, locally, http) base URL.
func ParseURLs(s string) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("home: Region URLs: %w", err)
	}
	for region, raw := range m {
		u, err := url.Parse(raw)
		if err != nil || region == "" || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, fmt.Errorf("home: Region URLs: %q for %q is not an absolute URL", raw, region)
		}
	}
	return m, nil
}

func key(caller string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrCaller: &types.AttributeValueMemberS{Value: caller}}
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func encode(r Record) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		attrCaller:  &types.AttributeValueMemberS{Value: r.Caller},
		attrRegion:  &types.AttributeValueMemberS{Value: r.Region},
		attrVersion: num(r.Version),
		attrMovedAt: num(r.MovedAt.Unix()),
	}
}

func decode(item map[string]types.AttributeValue) (Record, error) {
	c, ok1 := item[attrCaller].(*types.AttributeValueMemberS)
	rg, ok2 := item[attrRegion].(*types.AttributeValueMemberS)
	v, ok3 := item[attrVersion].(*types.AttributeValueMemberN)
	if !ok1 || !ok2 || !ok3 || rg.Value == "" {
		return Record{}, errors.New("home: malformed record")
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil || n < 1 {
		return Record{}, fmt.Errorf("home: record %s: bad version %q", c.Value, v.Value)
	}
	r := Record{Caller: c.Value, Region: rg.Value, Version: n}
	if m, ok := item[attrMovedAt].(*types.AttributeValueMemberN); ok {
		if sec, err := strconv.ParseInt(m.Value, 10, 64); err == nil && sec > 0 {
			r.MovedAt = time.Unix(sec, 0)
		}
	}
	return r, nil
}

// Decision is a Router's answer for one request.
type Decision struct {
	// Home is the record that decided (the caller's, the default one, or,
	// with neither, the configured fallback at version 0).
	Home Record
	// Here is true when this Region serves the caller.
	Here bool
	// URL is the home Region's API base URL ("" when Here or unknown).
	URL string
}

// Router decides, per request, whether this Region serves the caller.
type Router struct {
	store    *Store
	region   string
	fallback string
	urls     map[string]string

	mu   sync.Mutex
	seen map[string]Record // the highest version read of each record
}

// maxSeen bounds the version cache; past it, the cache starts over (which
// only forgets strictness it had: the record is still read every time).
var maxSeen = 10000

// NewRouter returns a Router for this Region. fallback is the home of a
// caller without a record when there is no default record; urls maps each
// Region to its API's base URL.
func NewRouter(store *Store, region, fallback string, urls map[string]string) (*Router, error) {
	if store == nil || region == "" || fallback == "" {
		return nil, errors.New("home: a router needs a store, its Region and a fallback home")
	}
	if _, ok := urls[fallback]; !ok {
		return nil, fmt.Errorf("home: no URL for the fallback home %s", fallback)
	}
	return &Router{store: store, region: region, fallback: fallback, urls: urls, seen: map[string]Record{}}, nil
}

// Decide reads the caller's home. An error means the record could not be
// read: the api fails closed (serving a caller it cannot place could serve
// it in two Regions).
func (rt *Router) Decide(ctx context.Context, caller string) (Decision, error) {
	own, all, ownFound, allFound, err := rt.store.Read(ctx, caller)
	if err != nil {
		return Decision{}, err
	}
	rt.mu.Lock()
	own, ownFound = rt.strict(caller, own, ownFound)
	all, allFound = rt.strict(Everyone, all, allFound)
	rt.mu.Unlock()
	h := homeOf(own, all, ownFound, allFound, rt.fallback)
	d := Decision{Home: h, Here: h.Region == rt.region}
	if !d.Here {
		d.URL = rt.urls[h.Region]
		if d.URL == "" {
			// A 421 without a URL strands the caller: refuse instead (the
			// api's 503 and its alarm), and say why.
			return Decision{}, fmt.Errorf("%w: %s is homed in %s, which has no URL", ErrNoURL, caller, h.Region)
		}
	}
	return d, nil
}

// strict returns the newer of what was read and what was seen before, and
// remembers it. Records are never deleted, so "not found" after a find is a
// replica behind, not a removal.
func (rt *Router) strict(caller string, r Record, found bool) (Record, bool) {
	prev, had := rt.seen[caller]
	if had && (!found || prev.Version > r.Version) {
		return prev, true
	}
	if found {
		if len(rt.seen) >= maxSeen {
			// Start over, but keep the default record: forgetting it would
			// let a replica behind move every caller without a record back.
			all, ok := rt.seen[Everyone]
			rt.seen = map[string]Record{}
			if ok {
				rt.seen[Everyone] = all
			}
		}
		rt.seen[caller] = r
	}
	return r, found
}
