// Package apitest assembles the payment API over real parts for integration
// tests of what sits around it (the client, the demo): a DynamoDB Local table
// of the test's own, a fresh PostgreSQL database, the PSP simulator over HTTP
// with the real Stripe client, and the local front door in front.
package apitest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/clock"
	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/frontdoor"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/psp"
	"github.com/oncepay/oncepay/internal/resolver"
	"github.com/oncepay/oncepay/internal/testkit/albsign"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// World is one payment API on real parts.
type World struct {
	Sim     *pspsim.Sim
	Pool    *pgxpool.Pool
	Claims  *idem.Store
	Ledger  *ledger.Store
	PSP     *psp.Client
	Outbox  *outbox.Publisher
	Timing  config.Timing
	Clock   clock.Clock
	Handler *api.Handler
	secret  []byte
}

var quiet = slog.New(slog.NewJSONHandler(io.Discard, nil))

// New builds a World; timing zero means config.Default().
func New(t testing.TB, timing config.Timing) *World {
	t.Helper()
	db := testenv.DynamoDB(t)
	pool, _ := testenv.Ledger(t)
	w := &World{Pool: pool, Timing: timing, Clock: clock.System{}, secret: []byte("apitest")}
	if w.Timing == (config.Timing{}) {
		w.Timing = config.Default()
	}
	w.Sim = pspsim.New(pspsim.Config{Logger: quiet})
	srv := httptest.NewServer(w.Sim)
	t.Cleanup(func() { srv.Close(); w.Sim.Close() })
	var err error
	if w.PSP, err = psp.New(psp.Config{APIKey: "sk_test_apitest", BaseURL: srv.URL, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	if w.Outbox, err = outbox.NewPublisher(db, outbox.Config{Table: testenv.NewTable(t, db, "event_id"), Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	w.Claims = idem.NewStore(db, testenv.NewTable(t, db, "pk"))
	w.Ledger = ledger.New(pool)
	w.Handler = api.New(api.Deps{
		Claims: w.Claims, Ledger: w.Ledger, PSP: w.PSP, Publisher: w.Outbox, Clock: w.Clock, Timing: w.Timing, Log: quiet,
		ALB: albsign.Default.Verifier(w.Clock.Now),
	})
	return w
}

// Door returns the local front door in front of the handler, wrapped by
// wrap (nil: none) — tests wrap it to drop replies.
func (w *World) Door(t testing.TB, wrap func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	door := &frontdoor.Server{Invoke: w.Handler.HandleAPIGatewayV2, Secret: w.secret}
	var srv *httptest.Server
	if wrap != nil {
		srv = httptest.NewServer(wrap(door))
	} else {
		srv = httptest.NewServer(door)
	}
	t.Cleanup(srv.Close)
	return srv
}

// Resolver returns a resolver over the world's parts, as the schedule runs
// it in AWS: it settles what a lost reply or a crash left open.
func (w *World) Resolver(t testing.TB) *resolver.Resolver {
	t.Helper()
	cfg := resolver.DefaultConfig()
	cfg.Margin = w.Timing.Margin
	cfg.PSPRate = 500
	r, err := resolver.New(cfg, resolver.Deps{Ledger: w.Ledger, PSP: w.PSP, Claims: w.Claims, Publisher: w.Outbox, Clock: w.Clock, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Token mints a front-door token for caller.
func (w *World) Token(t testing.TB, caller string) string {
	t.Helper()
	tok, err := frontdoor.Mint(w.secret, caller, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Charges returns the simulator's charges.
func (w *World) Charges() []pspsim.Charge { return w.Sim.Charges() }

// Scalar runs a one-value query.
func (w *World) Scalar(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := w.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
