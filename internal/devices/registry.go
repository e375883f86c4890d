package devices

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/notify"
)

// SNSAPI is the SNS calls a Registry makes.
type SNSAPI interface {
	CreatePlatformEndpoint(ctx context.Context, in *sns.CreatePlatformEndpointInput, opts ...func(*sns.Options)) (*sns.CreatePlatformEndpointOutput, error)
	SetEndpointAttributes(ctx context.Context, in *sns.SetEndpointAttributesInput, opts ...func(*sns.Options)) (*sns.SetEndpointAttributesOutput, error)
	DeleteEndpoint(ctx context.Context, in *sns.DeleteEndpointInput, opts ...func(*sns.Options)) (*sns.DeleteEndpointOutput, error)
}

// The states of a device's row.
const (
	Active  = "ACTIVE"
	Removed = "REMOVED" // a tombstone: the counter stays, the endpoint is gone
)

// Record is what a device's row holds, as the API answers it.
type Record struct {
	DeviceID string          `json:"device_id"`
	Counter  int64           `json:"counter"`
	State    string          `json:"state"`
	Platform notify.Platform `json:"platform,omitempty"`
	endpoint string
}

// Outcome is a request's effect: Applied is false when the row's counter
// was already at or past the request's, and Record is then what the row
// holds; Created is true for a device the caller never had.
type Outcome struct {
	Record  Record
	Applied bool
	Created bool
}

// Errors a Registry answers besides the database's and SNS's.
var (
	// ErrNoPlatform: the stack names no SNS platform application for the
	// platform (a deploy's choice; see PlatformApps).
	ErrNoPlatform = errors.New("devices: no platform application for this platform")
	// ErrTokenRefused: SNS refused the token for the platform.
	ErrTokenRefused = errors.New("devices: the platform refused the push token")
	// ErrTokenInUse: the token's endpoint is live on a device of another
	// caller, which must remove it first (see Put).
	ErrTokenInUse = errors.New("devices: the push token is live on another caller's device")
	// ErrUnavailable wraps every failure to reach the ledger or SNS.
	ErrUnavailable = errors.New("devices: unavailable")
)

// PlatformApps reads the stack's platform applications (comma-separated
// ARNs, arn:…:app/<PLATFORM>/<name>) into one per platform.
func PlatformApps(list string) (map[notify.Platform]string, error) {
	byName, err := stackenv.PlatformApps(list)
	if err != nil {
		return nil, err
	}
	apps := make(map[notify.Platform]string, len(byName))
	for p, arn := range byName {
		apps[notify.Platform(p)] = arn
	}
	return apps, nil
}

// Registry writes a caller's devices: rows of the ledger's devices table
// and their SNS platform endpoints. It is safe for concurrent use.
type Registry struct {
	db   *pgxpool.Pool
	sns  SNSAPI
	apps map[notify.Platform]string
	log  *slog.Logger
}

// NewRegistry returns a Registry over db and sns, with one platform
// application per platform it may register.
func NewRegistry(db *pgxpool.Pool, sns SNSAPI, apps map[notify.Platform]string, log *slog.Logger) (*Registry, error) {
	if db == nil || sns == nil {
		return nil, errors.New("devices: NewRegistry needs a pool and an SNS client")
	}
	if log == nil {
		log = slog.Default()
	}
	return &Registry{db: db, sns: sns, apps: apps, log: log}, nil
}

const columns = `device_id, counter, removed_at IS NOT NULL, COALESCE(platform, ''), COALESCE(endpoint_arn, '')`

type row interface{ Scan(dst ...any) error }

func scan(r row) (Record, error) {
	var rec Record
	var removed bool
	var platform string
	err := r.Scan(&rec.DeviceID, &rec.Counter, &removed, &platform, &rec.endpoint)
	rec.State, rec.Platform = Active, notify.Platform(platform)
	if removed {
		rec.State = Removed
	}
	return rec, err
}

// Get reads a caller's device; found is false when the caller never had it.
func (r *Registry) Get(ctx context.Context, caller, deviceID string) (rec Record, found bool, err error) {
	rec, err = scan(r.db.QueryRow(ctx, `SELECT `+columns+` FROM devices WHERE caller_id = $1 AND device_id = $2`, caller, deviceID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("%w: read device: %w", ErrUnavailable, err)
	}
	return rec, true, nil
}

// Put registers or updates reg for caller, unless the device's row has
// applied reg.Counter or a later one.
//
// A push token, and so its endpoint (SNS makes one per token), belongs to
// one device of one caller at a time. A token live on another caller's
// device (a row not removed, not disabled) is refused with ErrTokenInUse
// and nothing is written: a token is no proof of holding the phone (it
// travels through the app's backend, its logs, the platform's tooling),
// and taking it over would silence its owner's payment pushes and put the
// taker's on that phone. The other caller frees it by removing its device
// (the app's sign-out does), or the platform does by reporting the token
// gone (the worker disables the row). The caller's own other rows that
// name the endpoint (an app reinstalled under a new device id), and other
// callers' disabled ones, are made tombstones in the same transaction
// (their counters kept), so a phone is pushed once. The endpoint is made
// before the transaction and made sure of inside it, under a lock on its
// ARN that release takes too: a removal cannot delete an endpoint a
// registration is about to name, and two registrations of one token are
// judged one after the other.
//
// A registration that applies makes the caller's pushes waiting for a
// device due at once, in the same transaction (notify.WakeWaiting): the
// worker's next sweep sends them to this device, instead of at the end of
// their back-off. The app's first registration often commits seconds after
// the first payment's push found no device.
func (r *Registry) Put(ctx context.Context, caller string, reg Registration) (Outcome, error) {
	if cur, found, err := r.Get(ctx, caller, reg.DeviceID); err != nil || (found && cur.Counter >= reg.Counter) {
		return Outcome{Record: cur}, err
	}
	app, ok := r.apps[reg.Platform]
	if !ok {
		return Outcome{}, fmt.Errorf("%w: %s", ErrNoPlatform, reg.Platform)
	}
	arn, err := r.endpoint(ctx, app, reg.Token)
	if err != nil {
		return Outcome{}, err
	}
	var woken int64
	out, old, err := r.move(ctx, caller, reg.DeviceID, reg.Counter, func(tx pgx.Tx, insert bool) (pgx.Row, error) {
		var err error
		if arn, err = r.hold(ctx, tx, caller, app, reg.Token, arn); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, `UPDATE devices SET platform = NULL, endpoint_arn = NULL, removed_at = now(), updated_at = now()
			WHERE endpoint_arn = $3 AND NOT (caller_id = $1 AND device_id = $2)`, caller, reg.DeviceID, arn); err != nil {
			return nil, err
		}
		// Before the row's write: its QueryRow holds the connection until scanned.
		if woken, err = notify.WakeWaiting(ctx, tx, caller); err != nil {
			return nil, err
		}
		if insert {
			return tx.QueryRow(ctx, `INSERT INTO devices (caller_id, device_id, counter, platform, endpoint_arn) VALUES ($1, $2, $3, $4, $5)
				ON CONFLICT (caller_id, device_id) DO NOTHING RETURNING `+columns, caller, reg.DeviceID, reg.Counter, string(reg.Platform), arn), nil
		}
		return tx.QueryRow(ctx, `UPDATE devices SET counter = $3, platform = $4, endpoint_arn = $5, removed_at = NULL, disabled_at = NULL, updated_at = now()
			WHERE caller_id = $1 AND device_id = $2 RETURNING `+columns, caller, reg.DeviceID, reg.Counter, string(reg.Platform), arn), nil
	})
	if err != nil {
		return Outcome{}, err
	}
	if !out.Applied {
		old = arn // lost to a newer request: the endpoint made here may be no one's
	}
	if out.Applied && woken > 0 {
		r.log.LogAttrs(ctx, slog.LevelInfo, "pushes waiting for a device made due", slog.String("scope", "devices"),
			slog.String("caller_id", caller), slog.String("device_id", reg.DeviceID), slog.Int64("pushes", woken))
	}
	r.release(ctx, old, out.Record.endpoint)
	return out, nil
}

// existing reads the ARN SNS names when it refuses to make an endpoint for
// a token it already has under other attributes (AWS's token-management
// advice: take the ARN from the message and set the attributes; moto says
// so for an endpoint it has disabled).
var existing = regexp.MustCompile(`(arn:aws[a-z-]*:sns:[^ ]+:endpoint/[^ ]+) already exists`)

// endpoint makes (or finds) the token's endpoint under app.
func (r *Registry) endpoint(ctx context.Context, app, token string) (string, error) {
	ep, err := r.sns.CreatePlatformEndpoint(ctx, &sns.CreatePlatformEndpointInput{PlatformApplicationArn: aws.String(app), Token: aws.String(token)})
	var invalid *snstypes.InvalidParameterException
	if errors.As(err, &invalid) {
		if m := existing.FindStringSubmatch(invalid.ErrorMessage()); m != nil {
			return m[1], nil
		}
		return "", fmt.Errorf("%w: %w", ErrTokenRefused, err)
	}
	if err != nil {
		return "", fmt.Errorf("%w: create the platform endpoint: %w", ErrUnavailable, err)
	}
	return aws.ToString(ep.EndpointArn), nil
}

// hold locks arn for the transaction, refuses it with ErrTokenInUse when
// a live device of another caller names it, and makes sure its endpoint
// exists, enabled, with token: a removal that deleted it between endpoint
// and here is repaired by making it again (and locking the new one). An
// endpoint SNS disabled (the platform refused a push to it) is enabled:
// registering the token again is the app's word that it is good.
func (r *Registry) hold(ctx context.Context, tx pgx.Tx, caller, app, token, arn string) (string, error) {
	for attempt := 0; ; attempt++ {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, arn); err != nil {
			return "", err
		}
		// Before SNS is touched: a refused registration changes nothing.
		var taken bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM devices WHERE endpoint_arn = $1 AND caller_id <> $2
			AND removed_at IS NULL AND disabled_at IS NULL)`, arn, caller).Scan(&taken); err != nil {
			return "", err
		}
		if taken {
			return "", ErrTokenInUse
		}
		_, err := r.sns.SetEndpointAttributes(ctx, &sns.SetEndpointAttributesInput{EndpointArn: aws.String(arn),
			Attributes: map[string]string{"Enabled": "true", "Token": token}})
		var gone *snstypes.NotFoundException
		if !errors.As(err, &gone) || attempt > 0 {
			if err != nil {
				return "", fmt.Errorf("%w: enable the platform endpoint: %w", ErrUnavailable, err)
			}
			return arn, nil
		}
		if arn, err = r.endpoint(ctx, app, token); err != nil {
			return "", err
		}
	}
}

// Remove removes caller's device with counter, unless its row has applied
// that counter or a later one. The row stays as a tombstone with the
// counter (one is made for a device never registered, so a registration
// sent before the removal and delivered after it finds it).
func (r *Registry) Remove(ctx context.Context, caller, deviceID string, counter int64) (Outcome, error) {
	out, old, err := r.move(ctx, caller, deviceID, counter, func(tx pgx.Tx, insert bool) (pgx.Row, error) {
		if insert {
			return tx.QueryRow(ctx, `INSERT INTO devices (caller_id, device_id, counter, removed_at) VALUES ($1, $2, $3, now())
				ON CONFLICT (caller_id, device_id) DO NOTHING RETURNING `+columns, caller, deviceID, counter), nil
		}
		return tx.QueryRow(ctx, `UPDATE devices SET counter = $3, platform = NULL, endpoint_arn = NULL, removed_at = now(), updated_at = now()
			WHERE caller_id = $1 AND device_id = $2 RETURNING `+columns, caller, deviceID, counter), nil
	})
	if err != nil {
		return Outcome{}, err
	}
	r.release(ctx, old, "")
	return out, nil
}

// move applies one write to a device's row in a transaction that holds the
// row: write(tx, true) inserts a row the caller never had, write(tx,
// false) updates one whose counter is below counter. It returns the
// outcome and the endpoint the row pointed at before.
func (r *Registry) move(ctx context.Context, caller, deviceID string, counter int64, write func(tx pgx.Tx, insert bool) (pgx.Row, error)) (Outcome, string, error) {
	fail := func(what string, err error) (Outcome, string, error) {
		return Outcome{}, "", fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
	}
	tx, err := r.db.Begin(ctx)
	if err != nil {
		return fail("begin", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for attempt := 0; attempt < 2; attempt++ {
		cur, err := scan(tx.QueryRow(ctx, `SELECT `+columns+` FROM devices WHERE caller_id = $1 AND device_id = $2 FOR UPDATE`, caller, deviceID))
		insert := errors.Is(err, pgx.ErrNoRows)
		if err != nil && !insert {
			return fail("read device", err)
		}
		if !insert && cur.Counter >= counter {
			return Outcome{Record: cur}, "", nil
		}
		q, err := write(tx, insert)
		if errors.Is(err, ErrTokenInUse) {
			return Outcome{}, "", err // a refusal, not a store out of reach
		}
		if err != nil {
			return fail("write device", err)
		}
		rec, err := scan(q)
		if insert && errors.Is(err, pgx.ErrNoRows) {
			continue // inserted meanwhile by a request racing this one: read it, held
		}
		if err != nil {
			return fail("write device", err)
		}
		if err := tx.Commit(ctx); err != nil {
			// The commit's reply was lost or refused: whether the row
			// moved is unknown, and the answer says so (a 503, the app
			// sends the same counter again).
			return fail("commit", err)
		}
		return Outcome{Record: rec, Applied: true, Created: insert}, cur.endpoint, nil
	}
	return fail("write device", errors.New("the row was neither there nor insertable"))
}

// release deletes an endpoint no row points at any more (keep is the
// caller's own new one), under the ARN's lock, so a registration about to
// name it either committed first (and the endpoint stays) or finds it gone
// and makes it again (hold). A failure is logged, not answered: an
// endpoint no row names is never pushed to. An endpoint a lost commit
// reply left behind is not released (the retry finds its row applied and
// stops there): it too is never pushed to, and its token stays in SNS
// until the token is registered again (not built: a sweep of endpoints no
// row names).
func (r *Registry) release(ctx context.Context, arn, keep string) {
	if arn == "" || arn == keep {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := pgx.BeginFunc(ctx, r.db, func(tx pgx.Tx) error {
		var used bool
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, arn); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM devices WHERE endpoint_arn = $1)`, arn).Scan(&used); err != nil || used {
			return err
		}
		_, err := r.sns.DeleteEndpoint(ctx, &sns.DeleteEndpointInput{EndpointArn: aws.String(arn)})
		return err
	})
	if err != nil {
		r.log.Warn("platform endpoint not deleted: no device names it, so it is never pushed to", "scope", "devices", "err", err)
	}
}
