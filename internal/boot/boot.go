// Package boot builds, from the environment, the clients a Lambda function or
// a local tool needs: once per process, so Lambda reuses them across
// invocations. The same variables work in AWS (set by the stack) and locally
// (.local/env, written by the provisioner).
package boot

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/rds/auth"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/awsclient"
	"github.com/oncepay/oncepay/internal/awsclient/dynamoclient"
	"github.com/oncepay/oncepay/internal/home"
	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/psp"
	"github.com/oncepay/oncepay/internal/secrets"
)

// Logger returns the JSON logger every function writes to stdout with, tagged
// with the function's name.
func Logger(function string) *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stdout, nil)).With("function", function)
}

// vCPUMemoryMB is the memory size at which Lambda gives a function the
// equivalent of one vCPU; it allocates CPU in proportion to memory.
const vCPUMemoryMB = 1769

// FitProcs sets GOMAXPROCS to the CPU Lambda allocates the function: one
// per 1,769 MB of AWS_LAMBDA_FUNCTION_MEMORY_SIZE, at least one, at most
// what the machine shows. The sandbox shows every vCPU of its host slice
// whatever the share, and a Go runtime that schedules on two threads
// inside a fraction of one spends the share on cross-thread wake-ups and
// spinning: under aws-lambda-rie one thread cut the api's CPU per request
// by about a fifth (LambdaWarmInvoke's allprocs figures in BENCHMARKS.md,
// measured in every make bench). An explicit
// GOMAXPROCS, or no Lambda memory size (not in Lambda), is left alone. It
// returns the setting now in force.
func FitProcs(log *slog.Logger) int {
	if os.Getenv("GOMAXPROCS") != "" {
		return runtime.GOMAXPROCS(0)
	}
	mb, err := strconv.Atoi(os.Getenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE"))
	if err != nil || mb <= 0 {
		return runtime.GOMAXPROCS(0)
	}
	n := min(max(1, mb/vCPUMemoryMB), runtime.NumCPU())
	if prev := runtime.GOMAXPROCS(n); prev != n {
		log.Info("GOMAXPROCS fitted to the function's CPU share", "memory_mb", mb, "gomaxprocs", n, "was", prev)
	}
	return n
}

// Require returns the value of the environment variable name or an error
// that names it.
func Require(name string) (string, error) {
	v := os.Getenv(name)
	if v == "" {
		return "", fmt.Errorf("boot: %s is not set", name)
	}
	return v, nil
}

// AWS returns the SDK configuration from the environment the Lambda runtime
// (or .local/env) provides: region, the execution role's credentials and the
// endpoint variables. See awsclient.Config for what it leaves out, and why.
func AWS(ctx context.Context) (aws.Config, error) { return awsclient.Config(ctx) }

// Claims returns the key record store over ONCEPAY_IDEM_TABLE.
func Claims(cfg aws.Config) (*idem.Store, error) {
	table, err := Require(stackenv.IdemTable)
	if err != nil {
		return nil, err
	}
	return idem.NewStore(dynamoclient.New(cfg), table), nil
}

// HomeRouter returns the home-Region router (docs/regions.md) over
// ONCEPAY_HOMES_TABLE, or nil when it is unset: one Region, no routing.
func HomeRouter(cfg aws.Config) (*home.Router, error) {
	table, fallback, err := homeTable()
	if table == "" || err != nil {
		return nil, err
	}
	raw, err := Require(stackenv.RegionURLs)
	if err != nil {
		return nil, err
	}
	urls, err := home.ParseURLs(raw)
	if err != nil {
		return nil, err
	}
	return home.NewRouter(home.NewStore(dynamoclient.New(cfg), table), cfg.Region, fallback, urls)
}

// Ledger returns a pool to the ledger at ONCEPAY_LEDGER_DSN. The pool is
// small: a Lambda instance serves one request at a time.
func Ledger(ctx context.Context) (*pgxpool.Pool, error) {
	dsn, err := Require(stackenv.LedgerDSN)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("boot: ledger dsn: %w", err)
	}
	if os.Getenv("AWS_LAMBDA_FUNCTION_NAME") != "" {
		cfg.MaxConns = 2
	}
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	if os.Getenv(LedgerIAMUser) != "" {
		if err := iamAuth(ctx, cfg); err != nil {
			return nil, err
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("boot: ledger pool: %w", err)
	}
	return pool, nil
}

// LedgerIAMUser names the database user that logs in with IAM
// authentication (set by the stack): each new connection then signs a
// short-lived token instead of carrying a password.
const LedgerIAMUser = "ONCEPAY_LEDGER_APP_USER"

// iamAuth makes every new connection of the pool log in as the IAM user with
// a fresh RDS auth token (valid 15 minutes, so one per connection).
func iamAuth(ctx context.Context, pc *pgxpool.Config) error {
	awsCfg, err := AWS(ctx)
	if err != nil {
		return err
	}
	user := os.Getenv(LedgerIAMUser)
	pc.ConnConfig.User = user
	endpoint := fmt.Sprintf("%s:%d", pc.ConnConfig.Host, pc.ConnConfig.Port)
	pc.BeforeConnect = func(ctx context.Context, cc *pgx.ConnConfig) error {
		token, err := auth.BuildAuthToken(ctx, endpoint, awsCfg.Region, user, awsCfg.Credentials)
		if err != nil {
			return fmt.Errorf("boot: rds auth token: %w", err)
		}
		cc.Password = token
		return nil
	}
	return nil
}

// LocalPSPKey is the key a process without ONCEPAY_PSP_KEY_SECRET_ARN uses: the
// simulator and stripe-mock accept any key, Stripe does not.
const LocalPSPKey = "sk_test_oncepay_local"

// initRead bounds the secret reads made while a function initializes.
const initRead = 3 * time.Second

// SecretField reads one field of a JSON secret at run time.
type SecretField struct {
	// Read goes through the cache (five minutes; an hour's stale value
	// while Secrets Manager cannot answer).
	Read func(context.Context) (string, error)
	// Fresh goes past it, for a value just refused (a rolled key).
	Fresh func(context.Context) (string, error)
}

// Secret returns a reader of one field of the JSON secret named by the
// variable arnVar, through a Secrets Manager cache (internal/secrets): what
// the functions read the PSP's key and webhook secret with. It reads the
// field once now, in the init phase, so the first request does not wait for
// Secrets Manager; a failure then is logged, and the first request tries
// again. ok is false when arnVar is unset.
func Secret(ctx context.Context, cfg aws.Config, log *slog.Logger, arnVar, field string) (f SecretField, ok bool, err error) {
	arn := os.Getenv(arnVar)
	if arn == "" {
		return SecretField{}, false, nil
	}
	store, err := secrets.New(cfg, secrets.Options{Logger: log})
	if err != nil {
		return SecretField{}, false, fmt.Errorf("boot: %w", err)
	}
	f = SecretField{
		Read:  func(ctx context.Context) (string, error) { return store.Field(ctx, arn, field) },
		Fresh: func(ctx context.Context) (string, error) { return store.FreshField(ctx, arn, field) },
	}
	ictx, cancel := context.WithTimeout(ctx, initRead)
	defer cancel()
	if _, err := f.Read(ictx); err != nil {
		log.Warn("secret not read at init; the first request reads it", "var", arnVar, "field", field, "err", err)
	}
	return f, true, nil
}

// PSP returns the PSP client for ONCEPAY_PSP_URL (empty: Stripe itself). Its
// API key is the api_key field of the secret ONCEPAY_PSP_KEY_SECRET_ARN (the
// key's own secret, which the webhook cannot read), read at
// run time and cached for minutes (a rolled key is used without a deploy,
// and a 401 makes it read afresh). Without the variable a PSP at
// ONCEPAY_PSP_URL (the simulator, stripe-mock) gets LocalPSPKey; Stripe
// itself without a secret is an error at init, not a 401 on every payment.
func PSP(ctx context.Context, cfg aws.Config, log *slog.Logger) (*psp.Client, error) {
	pc := psp.Config{BaseURL: os.Getenv(stackenv.PSPURL), Logger: log}
	key, ok, err := Secret(ctx, cfg, log, stackenv.PSPKeySecretArn, stackenv.PSPSecretAPIKey)
	switch {
	case err != nil:
		return nil, err
	case ok:
		pc.Key, pc.KeyRefresh = key.Read, key.Fresh
	case pc.BaseURL == "":
		return nil, fmt.Errorf("boot: %s is not set: Stripe needs the key from the PSP key secret", stackenv.PSPKeySecretArn)
	default:
		pc.APIKey = LocalPSPKey
	}
	return psp.New(pc)
}

// Outbox returns the outbox publisher over ONCEPAY_OUTBOX_TABLE, or nil when
// the variable is unset: events are then left to the resolver's sweep, and
// the gap is logged.
func Outbox(cfg aws.Config, log *slog.Logger) (*outbox.Publisher, error) {
	table := os.Getenv(stackenv.OutboxTable)
	if table == "" {
		log.Warn("no outbox table configured: events are left to the resolver's sweep", "var", stackenv.OutboxTable)
		return nil, nil
	}
	pub, err := outbox.NewPublisher(dynamoclient.New(cfg), outbox.Config{Table: table, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("boot: outbox: %w", err)
	}
	return pub, nil
}

// Payments is what every function on the payment's side of the path needs:
// the SDK config, the key record store, the ledger pool and the PSP client.
type Payments struct {
	AWS    aws.Config
	Claims *idem.Store
	Pool   *pgxpool.Pool
	PSP    *psp.Client
}

// PaymentsFromEnv builds Payments from the environment (the api and
// resolver functions).
func PaymentsFromEnv(ctx context.Context, log *slog.Logger) (Payments, error) {
	var p Payments
	var err error
	if p.AWS, err = AWS(ctx); err != nil {
		return Payments{}, err
	}
	if p.Claims, err = Claims(p.AWS); err != nil {
		return Payments{}, err
	}
	if p.Pool, err = Ledger(ctx); err != nil {
		return Payments{}, err
	}
	if p.PSP, err = PSP(ctx, p.AWS, log); err != nil {
		return Payments{}, fmt.Errorf("boot: psp: %w", err)
	}
	return p, nil
}

// IsHome reports, across Regions, whether this Region homes the callers
// (the default home record names it): the resolver's and the worker's
// sweeps tell a standby's wait from the home's outage by it. nil, nil in
// one Region (the stack sets the home table only in Region stacks).
func IsHome(cfg aws.Config) (func(ctx context.Context) (bool, error), error) {
	table, fallback, err := homeTable()
	if table == "" || err != nil {
		return nil, err
	}
	homes, region := home.NewStore(dynamoclient.New(cfg), table), cfg.Region
	return func(ctx context.Context) (bool, error) { return homes.IsDefaultHome(ctx, region, fallback) }, nil
}

// homeTable is the home record table and the default home from the
// environment; "" in one Region.
func homeTable() (table, fallback string, err error) {
	table = os.Getenv(stackenv.HomesTable)
	if table == "" {
		return "", "", nil
	}
	fallback, err = Require(stackenv.HomeDefault)
	return table, fallback, err
}
