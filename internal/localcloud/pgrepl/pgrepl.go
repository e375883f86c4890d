// Package pgrepl replicates one PostgreSQL database to another with
// PostgreSQL's own logical replication, the local stand-in for an Aurora
// Global Database's secondary Region (docs/regions.md, docs/mechanism.md#seed-part-9). The lag
// is real: the subscription reaches the primary through a TCP proxy of this
// package that holds every byte coming back from the primary for the
// configured lag, so the WAL stream arrives that late and a Region failure
// (Cut) loses what was on its way.
//
// Where it differs from Aurora, and what New and Promote do about it:
//
//   - Aurora's secondary is a physical copy. A subscription copies rows, so
//     the standby database must already hold the schema (the tests' are
//     clones of the migrated template; the live standby is made by
//     `localcloud standby`), and New empties the standby's tables before
//     the initial copy: the primary's rows replace them.
//   - Logical replication does not carry sequences (PostgreSQL 15): the
//     standby's BIGSERIAL sequences stay where the clone left them. Promote
//     moves every sequence past the largest value of its column, or the
//     promoted ledger's first insert would hit a duplicate key.
//   - A publication FOR ALL TABLES makes the primary refuse UPDATE and
//     DELETE on a table without a replica identity; New gives such a table
//     REPLICA IDENTITY FULL (the ledger's tables all have primary keys).
//
// Both databases are reached as a superuser (the local clusters' postgres
// user): publications FOR ALL TABLES, subscriptions and slots need one.
package pgrepl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrCut means the link no longer replicates: the primary's Region was cut
// off (Cut), the standby was promoted, or the link was closed.
var ErrCut = errors.New("pgrepl: the link is cut")

// ProbeTable is the package's own table, created in both databases: Measure
// and CaughtUp write a marker row into it on the primary and watch for it on
// the standby.
const ProbeTable = "pgrepl_probe"

// Config describes one link.
type Config struct {
	// Name names the publication, the subscription and its slot: lower-case
	// letters, digits and underscores, at most 40 (the table-sync slots add
	// to it within PostgreSQL's 63).
	Name string
	// Primary and Standby are DSNs of the two databases, as a superuser.
	Primary, Standby string
	// Lag is how long the WAL stream is held back on its way to the standby.
	Lag time.Duration
	// Logger receives a line per step (default slog.Default()).
	Logger *slog.Logger
	// Fence, if set, is the application's role: while the link follows,
	// the standby refuses that role's writes, as an Aurora secondary
	// refuses every write (its sessions are read-only, which
	// ledger.ReadOnly sees); Promote lifts it, and so does Close of a link
	// never promoted (a secondary detached from its global cluster is a
	// writable cluster of its own). Each ends the role's sessions on the
	// standby database, as a promotion restarts the secondary's instances:
	// a pooled connection made before keeps the setting it started with.
	// The subscription's own writes run as the subscription's owner and
	// are not fenced. It is a session default, which a session may change
	// (SET default_transaction_read_only = off): it stops the
	// application's code, which never does, not a hostile client.
	Fence string
}

// Link is a running replication from the primary database to the standby.
// Its methods are safe for concurrent use.
type Link struct {
	cfg              Config
	log              *slog.Logger
	proxy            *proxy
	primary, standby *pgxpool.Pool
	subOID           uint32 // the subscription's oid: its table-sync slots carry it

	mu       sync.Mutex
	cut      chan struct{} // closed by Cut, Promote and Close
	promoted bool
	closed   bool
}

var validName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// New links the standby database to the primary: it creates ProbeTable in
// both, a publication FOR ALL TABLES on the primary and a subscription on
// the standby (copy_data on) through the lagging proxy, and returns once
// the initial copy is done and every table is replicating. The initial copy
// runs with no lag (a secondary starts from a snapshot); the lag applies
// from then on. ctx bounds New only: the link runs until Close.
func New(ctx context.Context, cfg Config) (_ *Link, err error) {
	if !validName.MatchString(cfg.Name) {
		return nil, fmt.Errorf("pgrepl: name %q: want [a-z_][a-z0-9_]{0,39}", cfg.Name)
	}
	if cfg.Lag < 0 {
		return nil, fmt.Errorf("pgrepl: negative lag %v", cfg.Lag)
	}
	pc, err := pgx.ParseConfig(cfg.Primary)
	if err != nil {
		return nil, fmt.Errorf("pgrepl: primary DSN: %w", err)
	}
	l := &Link{cfg: cfg, log: cfg.Logger, cut: make(chan struct{})}
	if l.log == nil {
		l.log = slog.Default()
	}
	l.log = l.log.With(slog.String("link", cfg.Name))
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = l.Close(cctx)
		}
	}()
	if l.primary, err = pool(ctx, cfg.Primary); err != nil {
		return l, fmt.Errorf("pgrepl: primary: %w", err)
	}
	if l.standby, err = pool(ctx, cfg.Standby); err != nil {
		return l, fmt.Errorf("pgrepl: standby: %w", err)
	}
	// The initial copy runs at full speed; the lag is set once it is done.
	if l.proxy, err = newProxy(net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))), 0, l.log); err != nil {
		return l, fmt.Errorf("pgrepl: proxy: %w", err)
	}
	began := time.Now()
	for _, db := range []*pgxpool.Pool{l.primary, l.standby} {
		if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+ProbeTable+` (id text PRIMARY KEY, written_at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
			return l, fmt.Errorf("pgrepl: create %s: %w", ProbeTable, err)
		}
		// Owned by the database's owner, as the ledger's own tables are: a
		// migration that grants on every table of the schema may then
		// grant on it too.
		if _, err := db.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER TABLE `+ProbeTable+` OWNER TO %I',
			(SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database())); END $$`); err != nil {
			return l, fmt.Errorf("pgrepl: hand %s to the database's owner: %w", ProbeTable, err)
		}
	}
	if err := replicaIdentities(ctx, l.primary); err != nil {
		return l, err
	}
	// Fenced before its tables are emptied and copied: an application
	// write in between would fail the copy of its table.
	if err := l.fence(ctx, true); err != nil {
		return l, err
	}
	if err := emptyTables(ctx, l.standby); err != nil {
		return l, err
	}
	name := pgx.Identifier{cfg.Name}.Sanitize()
	if _, err := l.primary.Exec(ctx, "CREATE PUBLICATION "+name+" FOR ALL TABLES"); err != nil {
		return l, fmt.Errorf("pgrepl: create publication: %w", err)
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d dbname=%s user=%s sslmode=disable",
		l.proxy.port(), quoteConninfo(pc.Database), quoteConninfo(pc.User))
	if pc.Password != "" {
		conninfo += " password=" + quoteConninfo(pc.Password)
	}
	if _, err := l.standby.Exec(ctx, "CREATE SUBSCRIPTION "+name+" CONNECTION "+literal(conninfo)+
		" PUBLICATION "+name+" WITH (copy_data = true)"); err != nil {
		return l, fmt.Errorf("pgrepl: create subscription: %w", err)
	}
	if err := l.standby.QueryRow(ctx, `SELECT oid FROM pg_subscription WHERE subname = $1`, cfg.Name).Scan(&l.subOID); err != nil {
		return l, fmt.Errorf("pgrepl: look up the subscription: %w", err)
	}
	if err := l.synced(ctx); err != nil {
		return l, err
	}
	l.proxy.setLag(cfg.Lag)
	l.log.Info("pgrepl: standby linked", slog.Duration("initial_sync", time.Since(began)), slog.Duration("lag", cfg.Lag))
	return l, nil
}

func pool(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = 4
	p, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// replicaIdentities gives every table of the primary without a primary key
// (or another replica identity) REPLICA IDENTITY FULL: once a publication
// FOR ALL TABLES exists, PostgreSQL refuses UPDATE and DELETE on such a
// table, which Aurora's physical replication never does.
func replicaIdentities(ctx context.Context, db *pgxpool.Pool) error {
	_, err := db.Exec(ctx, `DO $$ DECLARE r record; BEGIN
  FOR r IN SELECT c.oid::regclass AS t FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r','p') AND c.relreplident = 'd'
      AND n.nspname NOT IN ('pg_catalog','information_schema') AND n.nspname NOT LIKE 'pg_toast%'
      AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)
  LOOP EXECUTE format('ALTER TABLE %s REPLICA IDENTITY FULL', r.t); END LOOP;
END $$`)
	if err != nil {
		return fmt.Errorf("pgrepl: replica identities: %w", err)
	}
	return nil
}

// emptyTables empties every table of the standby: the initial copy brings
// the primary's rows, and a row the clone already had (the schema
// version's, a seed) would collide with its copy.
func emptyTables(ctx context.Context, db *pgxpool.Pool) error {
	var tables []string
	rows, err := db.Query(ctx, `SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r','p') AND n.nspname NOT IN ('pg_catalog','information_schema') AND n.nspname NOT LIKE 'pg_toast%'`)
	if err != nil {
		return fmt.Errorf("pgrepl: list the standby's tables: %w", err)
	}
	if tables, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return fmt.Errorf("pgrepl: list the standby's tables: %w", err)
	}
	if len(tables) == 0 {
		return nil
	}
	if _, err := db.Exec(ctx, "TRUNCATE "+strings.Join(tables, ", ")+" CASCADE"); err != nil {
		return fmt.Errorf("pgrepl: empty the standby's tables: %w", err)
	}
	return nil
}

// synced waits until every table of the subscription is ready ('r'): the
// initial copy is done and the apply worker has caught up with it.
func (l *Link) synced(ctx context.Context) error {
	for {
		var total, ready int
		err := l.standby.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE srsubstate = 'r') FROM pg_subscription_rel WHERE srsubid = $1`, l.subOID).Scan(&total, &ready)
		if err != nil {
			return fmt.Errorf("pgrepl: initial sync: %w", err)
		}
		if total > 0 && ready == total {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgrepl: initial sync: %d of %d tables ready: %w", ready, total, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// CaughtUp waits until everything committed on the primary before the call
// is applied on the standby: it commits a marker row on the primary and
// waits for it on the standby (a subscription applies transactions in
// commit order, so the marker comes after everything before it). ErrCut
// once the link is cut.
func (l *Link) CaughtUp(ctx context.Context) error {
	_, err := l.probe(ctx)
	return err
}

// Measure is the replication lag now: the time from a marker row's insert
// on the primary to its arrival on the standby (polled every 2 ms). With
// Lag set it is at least Lag.
func (l *Link) Measure(ctx context.Context) (time.Duration, error) {
	return l.probe(ctx)
}

func (l *Link) probe(ctx context.Context) (time.Duration, error) {
	if l.isCut() {
		return 0, ErrCut
	}
	id := fmt.Sprintf("%s-%d", l.cfg.Name, time.Now().UnixNano())
	began := time.Now()
	if _, err := l.primary.Exec(ctx, `INSERT INTO `+ProbeTable+` (id) VALUES ($1)`, id); err != nil {
		return 0, fmt.Errorf("pgrepl: probe on the primary: %w", err)
	}
	defer func() {
		// The delete replicates too; nobody waits for it.
		_, _ = l.primary.Exec(context.WithoutCancel(ctx), `DELETE FROM `+ProbeTable+` WHERE id = $1`, id)
	}()
	for {
		var there bool
		if err := l.standby.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+ProbeTable+` WHERE id = $1)`, id).Scan(&there); err != nil {
			return 0, fmt.Errorf("pgrepl: probe on the standby: %w", err)
		}
		if there {
			return time.Since(began), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("pgrepl: waiting for the standby: %w", ctx.Err())
		case <-l.cut:
			return 0, ErrCut
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (l *Link) isCut() bool {
	select {
	case <-l.cut:
		return true
	default:
		return false
	}
}

// cutOff closes the proxy's connections (once) and reports whether this
// call did it.
func (l *Link) cutOff() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isCut() {
		return false
	}
	close(l.cut)
	if l.proxy != nil {
		l.proxy.cutOff()
	}
	return true
}

// Cut is the primary's Region failing: every connection to the primary
// drops at once and new ones are refused. What was on its way (held back
// by the lag) is lost: a transaction committed on the primary in the last
// Lag never reaches the standby. The primary database itself stays.
func (l *Link) Cut() {
	if l.cutOff() && l.proxy != nil {
		l.log.Info("pgrepl: primary cut off", slog.Int64("bytes_lost_in_flight", l.proxy.dropped.Load()))
	}
}

// Promote makes the standby a database of its own, writable, as a
// promoted Aurora secondary: it stops following the primary (Cut, if the
// link was not cut yet), drops the subscription without touching the
// primary's slot (the primary is unreachable; Close drops the slot), and
// moves every sequence of the standby past the largest value its column
// holds, since logical replication does not carry sequences.
func (l *Link) Promote(ctx context.Context) error {
	l.Cut()
	l.mu.Lock()
	done := l.promoted
	l.mu.Unlock()
	if done {
		return nil
	}
	if err := l.dropSubscription(ctx); err != nil {
		return err
	}
	moved, err := advanceSequences(ctx, l.standby)
	if err != nil {
		return err
	}
	if err := l.fence(ctx, false); err != nil {
		return err
	}
	l.mu.Lock()
	l.promoted = true
	l.mu.Unlock()
	l.log.Info("pgrepl: standby promoted", slog.Any("sequences", moved))
	return nil
}

// fence makes the standby database read-only for Config.Fence (on) or
// lifts that (off), then ends the role's sessions there so no connection
// keeps the old setting.
func (l *Link) fence(ctx context.Context, on bool) error {
	if l.cfg.Fence == "" {
		return nil
	}
	role := pgx.Identifier{l.cfg.Fence}.Sanitize()
	var db string
	if err := l.standby.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		return fmt.Errorf("pgrepl: fence: %w", err)
	}
	stmt := "ALTER ROLE " + role + " IN DATABASE " + pgx.Identifier{db}.Sanitize()
	if on {
		stmt += " SET default_transaction_read_only = on"
	} else {
		stmt += " RESET default_transaction_read_only"
	}
	if _, err := l.standby.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("pgrepl: fence %s: %w", l.cfg.Fence, err)
	}
	var ended int
	if err := l.standby.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE usename = $1 AND datname = current_database() AND pid <> pg_backend_pid()`, l.cfg.Fence).Scan(&ended); err != nil {
		return fmt.Errorf("pgrepl: end %s's sessions: %w", l.cfg.Fence, err)
	}
	l.log.Info("pgrepl: standby fence", slog.String("role", l.cfg.Fence), slog.Bool("read_only", on), slog.Int("sessions_ended", ended))
	return nil
}

// dropSubscription drops the standby's subscription, if it is still there,
// leaving the slot on the primary.
func (l *Link) dropSubscription(ctx context.Context) error {
	var exists bool
	if err := l.standby.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_subscription WHERE subname = $1)`, l.cfg.Name).Scan(&exists); err != nil {
		return fmt.Errorf("pgrepl: look up the subscription: %w", err)
	}
	if !exists {
		return nil
	}
	return DetachSubscription(ctx, l.standby, l.cfg.Name)
}

// Execer is what DetachSubscription needs of a connection or a pool.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// DetachSubscription drops the subscription name of db's database without
// touching its slot on the primary (which may be unreachable: the slot is
// the primary's to drop).
func DetachSubscription(ctx context.Context, db Execer, name string) error {
	id := pgx.Identifier{name}.Sanitize()
	for _, stmt := range []string{
		"ALTER SUBSCRIPTION " + id + " DISABLE",
		"ALTER SUBSCRIPTION " + id + " SET (slot_name = NONE)",
		"DROP SUBSCRIPTION " + id,
	} {
		if _, err := db.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("pgrepl: %s: %w", stmt, err)
		}
	}
	return nil
}

// DropStale drops what links named prefix… left behind when their Close
// never ran (a test process killed mid-run): the standby database's
// subscriptions, and on the primary their publications, their slots and
// their initial copy's slots.
func DropStale(ctx context.Context, primary, standby *pgxpool.Pool, prefix string) error {
	rows, err := standby.Query(ctx, `SELECT oid, subname::text FROM pg_subscription
		WHERE starts_with(subname::text, $1) AND subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())`, prefix)
	if err != nil {
		return fmt.Errorf("pgrepl: stale subscriptions: %w", err)
	}
	type sub struct {
		OID  uint32
		Name string
	}
	subs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[sub])
	if err != nil {
		return fmt.Errorf("pgrepl: stale subscriptions: %w", err)
	}
	log := slog.Default()
	for _, sb := range subs {
		if err := DetachSubscription(ctx, standby, sb.Name); err != nil {
			return err
		}
		if err := dropSlots(ctx, primary, log, sb.Name, sb.OID); err != nil {
			return err
		}
	}
	pubs, err := primary.Query(ctx, `SELECT pubname::text FROM pg_publication WHERE starts_with(pubname::text, $1)`, prefix)
	if err != nil {
		return fmt.Errorf("pgrepl: stale publications: %w", err)
	}
	names, err := pgx.CollectRows(pubs, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("pgrepl: stale publications: %w", err)
	}
	for _, n := range names {
		if _, err := primary.Exec(ctx, "DROP PUBLICATION "+pgx.Identifier{n}.Sanitize()); err != nil {
			return fmt.Errorf("pgrepl: drop publication %s: %w", n, err)
		}
	}
	return nil
}

// sequenceColumns finds every sequence that feeds a column: owned by it
// (serial, BIGSERIAL, identity) or named by its default (nextval).
const sequenceColumns = `
SELECT d.objid::regclass::text, d.refobjid::regclass::text, quote_ident(a.attname)
  FROM pg_depend d
  JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
  JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
 WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
   AND a.atttypid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype, 'numeric'::regtype)
UNION
SELECT d.refobjid::regclass::text, ad.adrelid::regclass::text, quote_ident(a.attname)
  FROM pg_depend d
  JOIN pg_attrdef ad ON ad.oid = d.objid
  JOIN pg_class s ON s.oid = d.refobjid AND s.relkind = 'S'
  JOIN pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum
 WHERE d.classid = 'pg_attrdef'::regclass AND d.refclassid = 'pg_class'::regclass
   AND a.atttypid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype, 'numeric'::regtype)`

// advanceSequences sets each sequence that feeds a column past the
// column's largest value (never back), and returns the moved ones with
// their new last value.
func advanceSequences(ctx context.Context, db *pgxpool.Pool) (map[string]int64, error) {
	rows, err := db.Query(ctx, sequenceColumns)
	if err != nil {
		return nil, fmt.Errorf("pgrepl: find the sequences: %w", err)
	}
	type feed struct{ seq, table, column string }
	feeds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (feed, error) {
		var f feed
		return f, r.Scan(&f.seq, &f.table, &f.column)
	})
	if err != nil {
		return nil, fmt.Errorf("pgrepl: find the sequences: %w", err)
	}
	moved := map[string]int64{}
	for _, f := range feeds {
		var last *int64
		// The table and column come from the catalog, already quoted.
		q := fmt.Sprintf(`SELECT setval($1::regclass, m)
  FROM (SELECT max(%s)::bigint AS m FROM %s) x, LATERAL (SELECT last_value, is_called FROM %s) s
 WHERE m IS NOT NULL AND (m > s.last_value OR (m = s.last_value AND NOT s.is_called))`, f.column, f.table, f.seq)
		if err := db.QueryRow(ctx, q, f.seq).Scan(&last); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("pgrepl: advance %s past %s.%s: %w", f.seq, f.table, f.column, err)
		}
		if last != nil {
			moved[f.seq] = *last
		}
	}
	return moved, nil
}

// Close ends the link and removes what New made of it: the subscription
// (if Promote has not dropped it), the publication, the subscription's slot
// and any table-sync slot left on the primary, and the proxy. It is
// idempotent; the probe tables stay (they belong to the databases).
func (l *Link) Close(ctx context.Context) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	promoted := l.promoted
	l.mu.Unlock()
	l.cutOff()
	var errs []error
	if l.standby != nil {
		if err := l.dropSubscription(ctx); err != nil {
			errs = append(errs, err)
		}
		if !promoted {
			if err := l.fence(ctx, false); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if l.proxy != nil {
		l.proxy.close()
	}
	if l.primary != nil {
		if _, err := l.primary.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{l.cfg.Name}.Sanitize()); err != nil {
			errs = append(errs, fmt.Errorf("pgrepl: drop publication: %w", err))
		}
		if err := l.dropSlots(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range []*pgxpool.Pool{l.primary, l.standby} {
		if p != nil {
			p.Close()
		}
	}
	return errors.Join(errs...)
}

// dropSlots drops the subscription's slot and its table-sync slots on the
// primary. A walsender may still hold one for a moment after the proxy
// dropped its connection: it is ended, and the drop retried.
func (l *Link) dropSlots(ctx context.Context) error {
	return dropSlots(ctx, l.primary, l.log, l.cfg.Name, l.subOID)
}

// dropSlots drops, on the primary, the slot name and the table-sync slots
// of the subscription with oid subOID (0: none known), ending a walsender
// that still holds one.
func dropSlots(ctx context.Context, primary *pgxpool.Pool, log *slog.Logger, name string, subOID uint32) error {
	syncPrefix := fmt.Sprintf("pg_%d_sync_", subOID)
	for {
		rows, err := primary.Query(ctx, `SELECT slot_name::text, coalesce(active_pid, 0) FROM pg_replication_slots
  WHERE slot_name = $1 OR ($2 <> 'pg_0_sync_' AND starts_with(slot_name::text, $2))`, name, syncPrefix)
		if err != nil {
			return fmt.Errorf("pgrepl: list slots: %w", err)
		}
		type slot struct {
			name string
			pid  int32
		}
		slots, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (slot, error) {
			var s slot
			return s, r.Scan(&s.name, &s.pid)
		})
		if err != nil {
			return fmt.Errorf("pgrepl: list slots: %w", err)
		}
		if len(slots) == 0 {
			return nil
		}
		for _, s := range slots {
			if s.pid != 0 {
				_, _ = primary.Exec(ctx, `SELECT pg_terminate_backend($1)`, s.pid)
				continue
			}
			if _, err := primary.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, s.name); err != nil {
				log.Debug("pgrepl: drop slot", slog.String("slot", s.name), slog.String("error", err.Error()))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgrepl: drop slots %v: %w", slots, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// quoteConninfo quotes a libpq connection-string value.
func quoteConninfo(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// literal quotes an SQL string literal.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
