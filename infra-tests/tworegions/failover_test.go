// Package tworegions plays the seed's Region failure (branch F,
// docs/mechanism.md#seed-part-9) on the two-Region local cloud: two live
// stacks, us-east-1 and us-west-2, each synthesized by the two-Region app
// and run from its own template (scripts/localcloud.sh regions-up), each
// with its own DynamoDB Local, PostgreSQL cluster, queues, functions under
// the Lambda RIE and front door. The replication AWS would do is played for
// real by the test, with the seed's lag: every global table of the
// template by a stream copier (internal/localcloud/globaltable, last writer
// wins), the ledger by PostgreSQL's logical replication to the standby
// (internal/localcloud/pgrepl), whose application role is read-only until
// the promotion, as an Aurora secondary is.
package tworegions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/awsclient/dynamoclient"
	"github.com/oncepay/oncepay/internal/awsclient/streamsclient"
	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/home"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/localcloud/frontdoor"
	"github.com/oncepay/oncepay/internal/localcloud/globaltable"
	"github.com/oncepay/oncepay/internal/localcloud/inspect"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/pgrepl"
	"github.com/oncepay/oncepay/internal/localcloud/provision"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

const (
	r1, r2 = "us-east-1", "us-west-2"
	// lag is every replicated store's: twice the seed's 1.0 s. The failure
	// must come inside the lag after K2's commit, and the commit's way back
	// to the test (the claim's completion, the runtime, the front door) has
	// to fit in it on a loaded two-core machine too.
	lag = 2 * time.Second
	// linkPrefix names this test's replication links (a run killed before
	// its cleanup leaves one behind: the next run drops it).
	linkPrefix = "tworegions_"
)

// region is one live Region as the test reaches it.
type region struct {
	name    string
	state   string // .local/regions/<name>
	door    string // its front door's base URL
	psp     string // the PSP (simulator) its functions call
	ddb     *dynamodb.Client
	streams *dynamodbstreams.Client
	ledger  *pgxpool.Pool // its ledger database, as the cluster's superuser
	dsn     string
	globals []string // its global tables' names
	appRole string   // the ledger's application role (ONCEPAY_LEDGER_APP_USER)
}

func liveRegion(t *testing.T, root, name string) *region {
	t.Helper()
	env := testenv.LiveRegion(t, name)
	r := &region{name: name, state: filepath.Join(root, ".local", "regions", name),
		door: strings.TrimSuffix(env.Get(stackenv.FrontDoorURL), "/"), psp: env.Get(stackenv.PSPURL)}
	cfg := testenv.AWSConfig(t)
	url := env.Get("AWS_ENDPOINT_URL_DYNAMODB")
	testenv.Reachable(t, name+"'s DynamoDB Local", url)
	r.ddb = dynamoclient.New(cfg, func(o *dynamodb.Options) { o.BaseEndpoint, o.Region = aws.String(url), name })
	r.streams = streamsclient.New(cfg, func(o *dynamodbstreams.Options) { o.BaseEndpoint, o.Region = aws.String(url), name })
	r.dsn = env.Get(stackenv.LedgerDSN)
	db, err := pgxpool.New(context.Background(), r.dsn)
	if err != nil {
		t.Fatalf("%s's ledger: %v", name, err)
	}
	t.Cleanup(db.Close)
	r.ledger = db
	phys, err := provision.ReadResources(r.state)
	if err != nil {
		t.Fatalf("%s's resources: %v", name, err)
	}
	for _, ph := range phys {
		if ph.Type == "AWS::DynamoDB::GlobalTable" {
			r.globals = append(r.globals, ph.Name)
		}
	}
	envs, err := provision.ReadFunctionEnvs(r.state)
	if err != nil {
		t.Fatalf("%s's functions: %v", name, err)
	}
	for _, e := range envs {
		if u := e[boot.LedgerIAMUser]; u != "" {
			r.appRole = u
		}
	}
	if r.appRole == "" {
		t.Fatalf("no function of %s names the ledger's application role (%s)", name, boot.LedgerIAMUser)
	}
	return r
}

// TestARegionFailsMidReplicationAndTheOtherReplaysWithTheSameIDs is branch
// F on two live stacks. A caller homed in us-east-1 pays there; its resend
// to us-west-2 is answered 421 with us-east-1's front door. A second
// payment is charged in us-east-1, and us-east-1 fails at once: its stack
// is killed and its replication cut before its last second replicates.
// us-west-2 is promoted (the ledger's standby, the callers' home records,
// version + 1) and the caller's resend there is charged by the PSP's replay
// of us-east-1's charge: one charge, one credit, one push, the same payment
// id. The first payment, replicated before the failure, is answered from
// us-west-2's copy. The lags and the failover time are printed.
func TestARegionFailsMidReplicationAndTheOtherReplaysWithTheSameIDs(t *testing.T) {
	root, err := localenv.Root()
	if err != nil {
		t.Fatal(err)
	}
	east, west := liveRegion(t, root, r1), liveRegion(t, root, r2)
	psp := east.psp
	if psp == "" || psp != west.psp {
		t.Fatalf("the Regions call PSPs %q and %q, want one", east.psp, west.psp)
	}
	testenv.Reachable(t, "the Regions' PSP simulator", psp)
	if len(east.globals) != 2 {
		t.Fatalf("%s provisioned global tables %v, want the claim table and the home record table", r1, east.globals)
	}
	pid := stackPID(t, root, r1)
	if err := pgrepl.DropStale(context.Background(), east.ledger, west.ledger, linkPrefix); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Whatever happens, us-east-1 comes back for the next run (its stack
	// restarted, as `make up-regions` starts it), its replica of the home
	// records first made us-west-2's, as the runbook brings a recovered
	// Region's replica up to date before its API serves: it then sends
	// every caller to us-west-2 (421), not serving them beside it.
	t.Cleanup(func() {
		defer restart(t, root, east.door) // even if the restore fails
		restoreHomes(t, west, east)
	})

	quiet := slog.New(slog.NewJSONHandler(io.Discard, nil))
	repl := map[string]*globaltable.Replicator{}
	for _, table := range east.globals {
		dropProbes(ctx, t, table, east, west)
		repl[table] = replicate(ctx, t, east, west, table, quiet)
	}
	link, err := pgrepl.New(ctx, pgrepl.Config{Name: linkPrefix + testenv.RandomID(6), Primary: east.dsn, Standby: west.dsn,
		Lag: lag, Logger: quiet, Fence: west.appRole})
	if err != nil {
		t.Fatalf("the ledger's replication: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := link.Close(ctx); err != nil {
			t.Errorf("close the ledger's replication: %v", err)
		}
	})
	for table, r := range repl {
		d, err := r.Measure(ctx)
		if err != nil {
			t.Fatalf("measure %s: %v", table, err)
		}
		t.Logf("lag: global table %s %v (configured %v)", table, d, lag)
		// The probe's deletion too has arrived (the home record table
		// holds records only).
		if err := r.CaughtUp(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if d, err := link.Measure(ctx); err != nil {
		t.Fatalf("measure the ledger's lag: %v", err)
	} else {
		t.Logf("lag: ledger (logical replication) %v (configured %v)", d, lag)
	}

	// Every caller is homed in us-east-1: the default record, a version
	// past any an earlier run left in either replica.
	homes := homeTable(t, east)
	seedHome(ctx, t, east, west, homes, r1)

	secret, err := frontdoor.LoadOrCreateSecret(filepath.Join(root, ".local", "frontdoor.key"))
	if err != nil {
		t.Fatal(err)
	}
	id := testenv.RandomID(6)
	caller, merchant := "u-"+id, "m-"+id
	tok, err := frontdoor.Mint(secret, caller, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pay := func(door, key string, amount int64) answer {
		t.Helper()
		a, err := post(ctx, door, tok, key, fmt.Sprintf(`{"merchant_id":%q,"order_id":"o-%s","amount":%d,"currency":"USD","payment_method":"pm_card_visa"}`, merchant, key, amount))
		if err != nil {
			t.Fatalf("POST %s/payments (%s): %v", door, key, err)
		}
		return a
	}

	// K1 in its home; the same request in us-west-2 is sent home.
	k1 := pay(east.door, "K1", 15000)
	if k1.Status != http.StatusCreated || k1.Body.PaymentID == "" || k1.Body.PSPCharge == "" {
		t.Fatalf("K1 in %s: %d %s, want 201 with a charge", r1, k1.Status, k1.Raw)
	}
	mis := pay(west.door, "K1", 15000)
	if mis.Status != http.StatusMisdirectedRequest || mis.Body.HomeRegion != r1 || mis.Body.HomeURL != east.door {
		t.Fatalf("K1 in %s: %d %s, want 421 naming %s at %s", r2, mis.Status, mis.Raw, r1, east.door)
	}
	if err := caughtUp(ctx, repl, link); err != nil {
		t.Fatal(err)
	}
	// K1's row and credit reach the standby (the worker credits in
	// us-east-1; the subscription copies it).
	if err := eventually(ctx, 30*time.Second, func() error { return credited(ctx, west, k1.Body.PaymentID, 1) }); err != nil {
		t.Fatalf("K1 on the standby: %v", err)
	}
	// The standby refuses the application's writes, as a secondary does.
	if err := appWrite(ctx, west); !isReadOnly(err) {
		t.Fatalf("an application write on %s's standby ledger: %v, want SQLSTATE 25006 (read-only)", r2, err)
	}

	// K2 is charged in us-east-1, which fails before its last second
	// replicates: the replication is cut and the stack killed at once.
	k2 := pay(east.door, "K2", 3000)
	if k2.Status != http.StatusCreated || k2.Body.PSPCharge == "" {
		t.Fatalf("K2 in %s: %d %s, want 201 with a charge", r1, k2.Status, k2.Raw)
	}
	failedAt := time.Now()
	for _, r := range repl {
		r.Cut(r1)
	}
	link.Cut()
	killStack(t, pid)
	if err := eventually(ctx, 10*time.Second, func() error {
		if c, err := net.DialTimeout("tcp", strings.TrimPrefix(east.door, "http://"), 200*time.Millisecond); err == nil {
			c.Close()
			return errors.New("its front door still answers")
		}
		return nil
	}); err != nil {
		t.Fatalf("%s down: %v", r1, err)
	}
	// What of K2 reached us-west-2 before the cut. Its row SUCCEEDED
	// there would mean the failure came too late to lose anything.
	var k2State string
	switch err := west.ledger.QueryRow(ctx, `SELECT state FROM payments WHERE payment_id = $1`, k2.Body.PaymentID).Scan(&k2State); {
	case errors.Is(err, pgx.ErrNoRows):
		k2State = "none"
	case err != nil:
		t.Fatal(err)
	case k2State == "SUCCEEDED":
		t.Fatalf("K2's row reached the standby SUCCEEDED before the cut: the failure came too late to lose anything")
	}
	claims := claimTable(t, east) // one name in every replica; us-west-2's template declares none
	c, err := west.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: &claims, ConsistentRead: aws.Bool(true),
		Key: map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: ids.Scope(caller, "K2")}}})
	if err != nil {
		t.Fatal(err)
	}
	claimLost := len(c.Item) == 0
	t.Logf("lost at the failure: K2's claim %v, K2's ledger row in the standby: %s", claimLost, k2State)

	// The runbook in us-west-2: promote the ledger, move the homes.
	if err := link.Promote(ctx); err != nil {
		t.Fatalf("promote: %v", err)
	}
	moved, err := home.NewMover(west.ddb, homes).Failover(ctx, r1, r2, r1)
	if err != nil {
		t.Fatalf("move the homes: %v", err)
	}
	// The phone sends K2 again, now to us-west-2.
	var again answer
	if err := eventually(ctx, 30*time.Second, func() error {
		again = pay(west.door, "K2", 3000)
		if again.Status != http.StatusCreated {
			return fmt.Errorf("%d %s", again.Status, again.Raw)
		}
		return nil
	}); err != nil {
		t.Fatalf("K2 in %s after the failover: %v", r2, err)
	}
	took := time.Since(failedAt)
	t.Logf("failover: %v from %s down to %s's first 201 to its caller (promote, %d home record(s) moved)", took.Round(time.Millisecond), r1, r2, len(moved))
	if claimLost && again.Replayed {
		t.Errorf("K2 in %s answered as a replay of a claim that never reached it", r2)
	}
	if again.Body.PaymentID != k2.Body.PaymentID || again.Body.PSPCharge != k2.Body.PSPCharge {
		t.Errorf("K2 in %s: payment %s charge %s, want %s's %s %s (the same derived ids, the PSP's replay)",
			r2, again.Body.PaymentID, again.Body.PSPCharge, r1, k2.Body.PaymentID, k2.Body.PSPCharge)
	}
	// K1 is answered from us-west-2's copy; K3 is new there.
	if a := pay(west.door, "K1", 15000); a.Status != http.StatusCreated || a.Body.PaymentID != k1.Body.PaymentID || !a.Replayed {
		t.Errorf("K1 in %s after the failover: %d replayed=%v %s, want the replicated 201 of %s", r2, a.Status, a.Replayed, a.Raw, k1.Body.PaymentID)
	}
	k3 := pay(west.door, "K3", 700)
	if k3.Status != http.StatusCreated {
		t.Fatalf("K3 in %s: %d %s", r2, k3.Status, k3.Raw)
	}

	// The money and the notifications, in us-west-2 and at the PSP.
	charges, err := pspCharges(ctx, psp)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []answer{k1, k2, k3} {
		got := charges[p.Body.PaymentID]
		if len(got) != 1 || got[0].IdempotencyKey != ids.ChargeKey(p.Body.PaymentID) || got[0].ID != p.Body.PSPCharge {
			t.Errorf("payment %s: charges at the PSP %+v, want one, %s, under the derived key %s", p.Body.PaymentID, got, p.Body.PSPCharge, ids.ChargeKey(p.Body.PaymentID))
		}
	}
	// us-west-2's phone (its stack's reader of the push topic) keeps its
	// pushes in its own state directory.
	phonePath := filepath.Join(west.state, "phone", "pushes.jsonl")
	for _, p := range []answer{k2, k3} {
		if err := eventually(ctx, 60*time.Second, func() error { return settled(ctx, west, phonePath, p.Body.PaymentID) }); err != nil {
			t.Errorf("payment %s in %s: %v", p.Body.PaymentID, r2, err)
		}
	}
	// Once more after a quiet while: a second credit or push would come
	// later than the first.
	time.Sleep(3 * time.Second)
	for _, p := range []answer{k2, k3} {
		if err := settled(ctx, west, phonePath, p.Body.PaymentID); err != nil {
			t.Errorf("payment %s in %s, a while later: %v", p.Body.PaymentID, r2, err)
		}
	}
	var balance int64
	if err := west.ledger.QueryRow(ctx, `SELECT coalesce(sum(balance), 0) FROM merchant_balances WHERE merchant_id = $1`, merchant).Scan(&balance); err != nil {
		t.Fatal(err)
	}
	if want := int64(15000 + 3000 + 700); balance != want {
		t.Errorf("%s's balance in %s: %d, want %d (each payment credited once)", merchant, r2, balance, want)
	}
	// us-east-1's worker may have pushed K2 before it died: across a
	// failover a notification can go out once more (docs/regions.md), the
	// phone shows one (the same replace id).
	if rep, err := inspect.Read(ctx, east.ledger, filepath.Join(east.state, "phone", "pushes.jsonl"), k2.Body.PaymentID); err == nil {
		t.Logf("K2 in %s before it failed: state %s, %d credit(s), %d push(es) on its phone", r1, rep.Payment.State, len(rep.Credits), len(rep.Pushes))
	}
}

// appWrite is an insert as r's ledger application role.
func appWrite(ctx context.Context, r *region) error {
	cfg, err := pgx.ParseConfig(r.dsn)
	if err != nil {
		return err
	}
	cfg.User = r.appRole
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, `INSERT INTO credits (merchant_id, cents, currency, event_id) VALUES ('fence-probe', 1, 'USD', $1)`, "fence-"+testenv.RandomID(4))
	return err
}

func isReadOnly(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25006" // read_only_sql_transaction
}

// answer is what a front door answered.
type answer struct {
	Status   int
	Replayed bool
	Raw      string
	Body     struct {
		PaymentID  string `json:"payment_id"`
		PSPCharge  string `json:"psp_charge"`
		HomeRegion string `json:"home_region"`
		HomeURL    string `json:"home_url"`
	}
}

func post(ctx context.Context, door, token, key, body string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, door+"/payments", strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Timeout: 15 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{Status: resp.StatusCode, Replayed: resp.Header.Get("Idempotent-Replayed") == "true", Raw: string(bytes.TrimSpace(raw))}
	_ = json.Unmarshal(raw, &a.Body)
	return a, nil
}

// replicate starts a global table's replicator between the Regions.
func replicate(ctx context.Context, t *testing.T, a, b *region, table string, log *slog.Logger) *globaltable.Replicator {
	t.Helper()
	d, err := a.ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table})
	if err != nil {
		t.Fatalf("describe %s: %v", table, err)
	}
	if len(d.Table.KeySchema) != 1 {
		t.Fatalf("%s: a probe item needs a partition key alone, the table has %d key attributes", table, len(d.Table.KeySchema))
	}
	pk := aws.ToString(d.Table.KeySchema[0].AttributeName)
	r, err := globaltable.New(globaltable.Config{
		A:   globaltable.Side{Name: a.name, DB: a.ddb, Streams: a.streams, Table: table},
		B:   globaltable.Side{Name: b.name, DB: b.ddb, Streams: b.streams, Table: table},
		Lag: lag, Logger: log,
		// The replicas were linked before (an earlier run, then a
		// failover): their history is not copied again.
		FromNow: true,
		ProbeKey: func(id string) map[string]ddbtypes.AttributeValue {
			return map[string]ddbtypes.AttributeValue{pk: &ddbtypes.AttributeValueMemberS{Value: "#probe#" + id}}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatalf("replicate %s: %v", table, err)
	}
	t.Cleanup(r.Stop)
	return r
}

// dropProbes deletes the lag probes an interrupted run left in a global
// table's replicas (the home record table holds records only).
func dropProbes(ctx context.Context, t *testing.T, table string, rs ...*region) {
	t.Helper()
	for _, r := range rs {
		d, err := r.ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &table})
		if err != nil {
			t.Fatal(err)
		}
		pk := aws.ToString(d.Table.KeySchema[0].AttributeName)
		p := dynamodb.NewScanPaginator(r.ddb, &dynamodb.ScanInput{TableName: &table, ProjectionExpression: aws.String("#k"),
			FilterExpression: aws.String("begins_with(#k, :p)"), ExpressionAttributeNames: map[string]string{"#k": pk},
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":p": &ddbtypes.AttributeValueMemberS{Value: "#probe#"}}})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, item := range page.Items {
				if _, err := r.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &table, Key: item}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

func caughtUp(ctx context.Context, repl map[string]*globaltable.Replicator, link *pgrepl.Link) error {
	for table, r := range repl {
		if err := r.CaughtUp(ctx); err != nil {
			return fmt.Errorf("%s: %w", table, err)
		}
	}
	return link.CaughtUp(ctx)
}

// homeTable is the home record table among a Region's global tables.
func homeTable(t *testing.T, r *region) string {
	t.Helper()
	for _, name := range r.globals {
		d, err := r.ddb.DescribeTable(context.Background(), &dynamodb.DescribeTableInput{TableName: &name})
		if err != nil {
			t.Fatal(err)
		}
		if aws.ToString(d.Table.KeySchema[0].AttributeName) == "caller" {
			return name
		}
	}
	t.Fatalf("%s has no home record table among %v", r.name, r.globals)
	return ""
}

// claimTable is the claim table among a Region's global tables.
func claimTable(t *testing.T, r *region) string {
	t.Helper()
	for _, name := range r.globals {
		if name != homeTable(t, r) {
			return name
		}
	}
	t.Fatalf("%s has no claim table among %v", r.name, r.globals)
	return ""
}

// seedHome homes every caller in homeRegion: the default record, with a
// version past both replicas', written in a and replicated, until both
// replicas hold it (an earlier run's failover left both saying us-west-2).
func seedHome(ctx context.Context, t *testing.T, a, b *region, table, homeRegion string) {
	t.Helper()
	var top int64
	for _, r := range []*region{a, b} {
		recs, err := home.NewMover(r.ddb, table).All(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			if rec.Caller == home.Everyone {
				top = max(top, rec.Version)
			}
		}
	}
	want := top + 1
	if err := eventually(ctx, 30*time.Second, func() error {
		for _, r := range []*region{a, b} {
			_, all, _, found, err := home.NewStore(r.ddb, table).Read(ctx, "nobody")
			if err != nil {
				return err
			}
			if !found || all.Region != homeRegion || all.Version < want {
				if r == a {
					if err := home.NewMover(a.ddb, table).Put(ctx, home.Record{Caller: home.Everyone, Region: homeRegion, Version: want, MovedAt: time.Now()}); err != nil {
						return err
					}
				}
				return fmt.Errorf("%s's replica: default home %+v (found %v), want %s version %d", r.name, all, found, homeRegion, want)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("home every caller in %s: %v", homeRegion, err)
	}
}

// credited checks that the payment's row is in r's ledger with n credits.
func credited(ctx context.Context, r *region, paymentID string, n int) error {
	rep, err := inspect.Read(ctx, r.ledger, "", paymentID)
	if err != nil {
		return err
	}
	if len(rep.Credits) != n {
		return fmt.Errorf("%d credits, want %d", len(rep.Credits), n)
	}
	return nil
}

// settled checks a payment in r: SUCCEEDED, credited once, its push
// notification sent once and received once by the phone.
func settled(ctx context.Context, r *region, phonePath, paymentID string) error {
	rep, err := inspect.Read(ctx, r.ledger, phonePath, paymentID)
	if err != nil {
		return err
	}
	if rep.Payment.State != "SUCCEEDED" || len(rep.Credits) != 1 {
		return fmt.Errorf("state %s with %d credits, want SUCCEEDED with 1", rep.Payment.State, len(rep.Credits))
	}
	sent := 0
	for _, n := range rep.Notifications {
		if n.Channel == "push" && n.State == "SENT" {
			sent++
		}
	}
	if sent != 1 || len(rep.Pushes) != 1 {
		return fmt.Errorf("%d push intents SENT and %d pushes on the phone, want 1 and 1", sent, len(rep.Pushes))
	}
	return nil
}

// pspCharges is the PSP simulator's charges by payment id.
func pspCharges(ctx context.Context, psp string) (map[string][]pspsim.Charge, error) {
	all, err := pspsim.Charges(ctx, psp)
	if err != nil {
		return nil, err
	}
	out := map[string][]pspsim.Charge{}
	for _, c := range all {
		out[c.Metadata["payment_id"]] = append(out[c.Metadata["payment_id"]], c)
	}
	return out, nil
}

// stackPID is the pid of a Region's `localcloud serve`, as the script
// recorded it.
func stackPID(t *testing.T, root, name string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, ".local", "pids", "stack-"+name+".pid"))
	if err != nil {
		t.Fatalf("%s's stack pid (run `make up-regions`): %v", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || syscall.Kill(pid, 0) != nil {
		t.Fatalf("%s's stack pid %q does not run (run `make up-regions`)", name, b)
	}
	// Never another process that got the number since.
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if args := strings.Split(string(cmd), "\x00"); err != nil || !slices.Contains(args, "serve") || !slices.Contains(args, name) {
		t.Fatalf("pid %d is not %s's localcloud serve (%q): run `make up-regions`", pid, name, args)
	}
	return pid
}

// killStack is a Region's failure: its `localcloud serve` and every
// function environment it runs are SIGKILLed at once. Each environment is
// a session of its own (the runtime emulator, its child), and the emulator
// puts the bootstrap in a process group of its own within that session: so
// every process of those sessions is killed, not a group.
func killStack(t *testing.T, pid int) {
	t.Helper()
	type proc struct{ pid, ppid, sid int }
	var procs []proc
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp session ...: after the last ')',
		// state is field 0, ppid 1, pgrp 2, session 3.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 4 {
			continue
		}
		id, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		ppid, _ := strconv.Atoi(f[1])
		sid, _ := strconv.Atoi(f[3])
		procs = append(procs, proc{id, ppid, sid})
	}
	sessions := map[int]bool{}
	for _, p := range procs {
		if p.ppid == pid && p.sid != 0 && p.sid != pid {
			sessions[p.sid] = true // an environment's session
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the stack (pid %d): %v", pid, err)
	}
	killed := 0
	for _, p := range procs {
		if sessions[p.sid] && syscall.Kill(p.pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	t.Logf("killed the stack (pid %d) and %d process(es) of its %d function environment(s)", pid, killed, len(sessions))
}

// restoreHomes writes every home record of from's replica into to's (the
// Region whose template declares the global tables).
func restoreHomes(t *testing.T, from, to *region) {
	t.Helper()
	table := homeTable(t, to)
	if err := home.NewMover(to.ddb, table).RestoreFrom(context.Background(), home.NewMover(from.ddb, table)); err != nil {
		t.Errorf("restore %s's home records from %s's: %v", to.name, from.name, err)
	}
}

// restart starts whatever of the two-Region local cloud does not run.
func restart(t *testing.T, root, door string) {
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "localcloud.sh"), "regions-up")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("restart the two-Region local cloud: %v\n%s", err, out)
		return
	}
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(door, "http://"), 2*time.Second); err != nil {
		t.Errorf("the two-Region local cloud restarted, but %s's front door is closed: %v\n%s", r1, err, out)
	} else {
		c.Close()
	}
}

func eventually(ctx context.Context, within time.Duration, check func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
