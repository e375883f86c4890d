// Package regions is the payment system in two Regions on one machine
// (docs/regions.md, docs/mechanism.md#seed-part-9): each Region is a story world (the
// production handlers on a fake clock) over that Region's own stores — its
// own DynamoDB Local, its own PostgreSQL cluster, its own queues and topics
// (moto keeps Regions apart) — with one PSP and one timeline between them.
// The replication AWS would do is played for real, with real lag:
//
//   - the claim table and the home record table are global tables: a
//     replicator (internal/localcloud/globaltable) copies each Region's
//     changes to the other asynchronously, last writer wins;
//   - the ledger is replicated to its standby by PostgreSQL's own logical
//     replication (internal/localcloud/pgrepl), through a proxy that holds
//     the WAL stream back by the lag;
//   - the strongly consistent claim option (MRSC) is played by both
//     Regions claiming in one table: every conditional write sees the
//     latest version, as MRSC's do.
//
// A Region failure (Fail) cuts its replication mid-stream: what it wrote in
// the last lag never reaches the other Region.
package regions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/clock"
	"github.com/oncepay/oncepay/internal/home"
	"github.com/oncepay/oncepay/internal/localcloud/globaltable"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/pgrepl"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/testkit/story"
)

// The two Regions. R1 is every caller's home until a failover.
const (
	R1 = "us-east-1"
	R2 = "us-west-2"
)

// URLs are the Regions' API base URLs, as a 421 names them.
var URLs = map[string]string{R1: "https://api.us-east-1.oncepay.test", R2: "https://api.us-west-2.oncepay.test"}

// ClaimMode is how the claim table spans the Regions.
type ClaimMode int

const (
	// Eventual is a global table (MREC): each Region's conditional writes
	// see its own replica; changes reach the other Region after the lag,
	// last writer wins.
	Eventual ClaimMode = iota
	// Strong is the MRSC option: one table both Regions claim in.
	Strong
)

// Options shape a System.
type Options struct {
	// Lag is the replication lag of every replicated store; zero: the
	// seed's 1.0 s.
	Lag time.Duration
	// WithoutHomeRouting serves every caller wherever it lands (a test-only
	// setting: the F2 trace's system).
	WithoutHomeRouting bool
	// Claims is the claim table's mode.
	Claims ClaimMode
	// Standby makes R2's ledger R1's standby (branch F); false: R2 has a
	// ledger of its own, home of no caller (branch F2's second Region).
	Standby bool
	// Logger receives the handlers' logs; nil: discarded.
	Logger *slog.Logger
}

// System is two Regions and the replication between them.
type System struct {
	Clock *clock.Fake
	T0    time.Time
	Sim   *pspsim.Sim
	Lag   time.Duration
	// Worlds by Region.
	R1, R2 *story.World
	// Homes is each Region's replica of the home record table.
	Homes map[string]*home.Mover
	// ClaimsRepl and HomesRepl replicate the global tables (ClaimsRepl is
	// nil with Strong claims); Ledger replicates R1's ledger to R2 (nil
	// without Standby).
	ClaimsRepl *globaltable.Replicator
	HomesRepl  *globaltable.Replicator
	Ledger     *pgrepl.Link

	// pushes watches both Regions' push publishes (pushwire.go).
	pushes  *pushAnswers
	closers []func()
}

// ErrUnavailable means the second Region's stores are not running (run
// `make up`).
var ErrUnavailable = errors.New("regions: the second Region is not running")

// New builds the two Regions; Close removes everything.
func New(ctx context.Context, o Options) (s *System, err error) {
	env, err := localenv.Load()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", story.ErrUnavailable, err)
	}
	ddb2, pg2 := env.Get(localenv.R2DynamoURL), env.Get(localenv.R2LedgerAdminDSN)
	if ddb2 == "" || pg2 == "" {
		return nil, fmt.Errorf("%w: %s or %s not set", ErrUnavailable, localenv.R2DynamoURL, localenv.R2LedgerAdminDSN)
	}
	if o.Lag == 0 {
		o.Lag = time.Second
	}
	t0 := time.Now().UTC().Truncate(time.Second)
	s = &System{Clock: clock.NewFake(t0), T0: t0, Lag: o.Lag, Homes: map[string]*home.Mover{}, pushes: newPushAnswers()}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	quiet := slog.New(slog.NewJSONHandler(io.Discard, nil))
	// No webhooks: the Regions' scenarios are about what replication does;
	// the late webhook has its own tests.
	s.Sim = pspsim.New(pspsim.Config{Logger: quiet, ManualWebhooks: true})
	simSrv := httptest.NewServer(s.Sim)
	s.closers = append(s.closers, func() { simSrv.Close(); s.Sim.Close() })

	// The home routers read their Region's replica of the home record
	// table, which exists before the worlds (their APIs hold a router).
	homes1, homes2 := &routerSlot{}, &routerSlot{}
	base := story.Options{Clock: s.Clock, T0: t0, Sim: s.Sim, SimURL: simSrv.URL, ClaimStream: o.Claims == Eventual, Logger: o.Logger, Adopt: true,
		WrapPush: s.pushes.wrap}
	o1 := base
	o1.Region = R1
	if !o.WithoutHomeRouting {
		o1.Homes = homes1
	}
	if s.R1, err = story.New(ctx, o1); err != nil {
		return s, err
	}
	s.closers = append(s.closers, s.R1.Close)
	o2 := base
	o2.Region, o2.DynamoEndpoint, o2.LedgerDSN = R2, ddb2, pg2
	o2.Balances = map[string]int64{} // none of its own: a standby's come from R1, a second home's start empty
	if !o.WithoutHomeRouting {
		o2.Homes = homes2
	}
	if o.Claims == Strong {
		// MRSC: every conditional write sees the latest version, in
		// whichever Region it runs: one table for both.
		r1Claims := s.R1.Claims
		o2.WrapClaims = func(api.Claims) api.Claims { return r1Claims }
	}
	if s.R2, err = story.New(ctx, o2); err != nil {
		return s, err
	}
	s.closers = append(s.closers, s.R2.Close)

	// The home record table, a global table.
	for _, w := range []*story.World{s.R1, s.R2} {
		table, err := newTable(ctx, w.Dynamo, "caller")
		if err != nil {
			return s, err
		}
		db := w.Dynamo
		s.closers = append(s.closers, func() { dropTable(db, table) })
		s.Homes[w.Region] = home.NewMover(w.Dynamo, table)
	}
	for region, slot := range map[string]*routerSlot{R1: homes1, R2: homes2} {
		if slot.r, err = home.NewRouter(s.Homes[region].Store(), region, R1, URLs); err != nil {
			return s, err
		}
	}
	if s.HomesRepl, err = s.replicate(ctx, "caller", s.Homes[R1].Table(), s.Homes[R2].Table(), o.Logger); err != nil {
		return s, err
	}
	if o.Claims == Eventual {
		if s.ClaimsRepl, err = s.replicate(ctx, "pk", s.R1.ClaimTable, s.R2.ClaimTable, o.Logger); err != nil {
			return s, err
		}
	}
	if o.Standby {
		if s.Ledger, err = pgrepl.New(ctx, pgrepl.Config{
			Name: "oncepay_" + randomID(), Primary: s.R1.LedgerDSN, Standby: s.R2.LedgerDSN, Lag: o.Lag, Logger: quiet,
		}); err != nil {
			return s, fmt.Errorf("regions: ledger replication: %w", err)
		}
		l := s.Ledger
		s.closers = append(s.closers, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = l.Close(ctx)
		})
	}
	return s, nil
}

// replicate starts a global table's replicator between R1's table a and
// R2's table b.
func (s *System) replicate(ctx context.Context, pk, a, b string, log *slog.Logger) (*globaltable.Replicator, error) {
	if log == nil {
		log = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	r, err := globaltable.New(globaltable.Config{
		A:   globaltable.Side{Name: R1, DB: s.R1.Dynamo, Streams: s.R1.Streams, Table: a},
		B:   globaltable.Side{Name: R2, DB: s.R2.Dynamo, Streams: s.R2.Streams, Table: b},
		Lag: s.Lag, Logger: log,
		ProbeKey: func(id string) map[string]ddbtypes.AttributeValue {
			return map[string]ddbtypes.AttributeValue{pk: &ddbtypes.AttributeValueMemberS{Value: "#probe#" + id}}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("regions: replicator of %s: %w", a, err)
	}
	if err := r.Start(ctx); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, r.Stop)
	return r, nil
}

// Fail is R1's failure: its replication stops mid-stream (what it wrote in
// the last lag is lost to R2), and its functions are no longer run (a test
// stops calling them).
func (s *System) Fail() {
	if s.ClaimsRepl != nil {
		s.ClaimsRepl.Cut(R1)
	}
	s.HomesRepl.Cut(R1)
	if s.Ledger != nil {
		s.Ledger.Cut()
	}
}

// Failover is the runbook's second half in R2 (docs/regions.md): promote
// the ledger's standby, then move every caller homed in R1 to R2 (version +
// 1) in R2's replica of the home record table. It returns the records moved.
func (s *System) Failover(ctx context.Context) ([]home.Record, error) {
	if s.Ledger != nil {
		if err := s.Ledger.Promote(ctx); err != nil {
			return nil, fmt.Errorf("regions: promote: %w", err)
		}
	}
	return s.Homes[R2].Failover(ctx, R1, R2, R1)
}

// RestoreR1 brings R1's replica of the home record table up to date after
// its recovery, as a global table resynchronises a replica that comes back:
// every record of R2's replica is written into R1's. The runbook keeps R1's
// API fenced until then (docs/regions.md).
func (s *System) RestoreR1(ctx context.Context) error {
	if err := s.Homes[R1].RestoreFrom(ctx, s.Homes[R2]); err != nil {
		return fmt.Errorf("regions: restore R1's home records: %w", err)
	}
	return nil
}

// CaughtUp waits until every replicated store has applied what was written
// so far.
func (s *System) CaughtUp(ctx context.Context) error {
	for _, r := range []*globaltable.Replicator{s.ClaimsRepl, s.HomesRepl} {
		if r != nil {
			if err := r.CaughtUp(ctx); err != nil {
				return err
			}
		}
	}
	if s.Ledger != nil {
		return s.Ledger.CaughtUp(ctx)
	}
	return nil
}

// Close removes everything New made, newest first.
func (s *System) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// routerSlot lets a world's API hold a router made after the world.
type routerSlot struct{ r *home.Router }

func (rs *routerSlot) Decide(ctx context.Context, caller string) (home.Decision, error) {
	if rs.r == nil {
		return home.Decision{}, errors.New("regions: no router yet")
	}
	return rs.r.Decide(ctx, caller)
}

func newTable(ctx context.Context, db *dynamodb.Client, pk string) (string, error) {
	name := "t-home-" + randomID()
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            &name,
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String(pk), KeyType: ddbtypes.KeyTypeHash}},
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String(pk), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		BillingMode:          ddbtypes.BillingModePayPerRequest,
		StreamSpecification:  &ddbtypes.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: ddbtypes.StreamViewTypeNewImage},
	})
	if err != nil {
		return "", fmt.Errorf("%w: create table: %v", story.ErrUnavailable, err)
	}
	return name, nil
}

func dropTable(db *dynamodb.Client, name string) {
	_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name})
}

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
