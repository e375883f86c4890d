package notify

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Device is one registered push target of a caller.
type Device struct {
	CallerID    string
	Platform    Platform
	EndpointArn string // the SNS platform endpoint
	// Counter is the device row's counter when it was read: Disable acts
	// only on that registration, never on a newer one made meanwhile.
	Counter int64
}

// DB is the part of a pgx pool the DeviceStore uses.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// DeviceStore keeps devices in the ledger database's devices table.
type DeviceStore struct {
	db DB
}

// NewDeviceStore returns a DeviceStore over db.
func NewDeviceStore(db DB) *DeviceStore { return &DeviceStore{db: db} }

// Register records (or re-enables) d under the device id of its endpoint's
// ARN, with no counter: a test's or a local user's device made by hand.
// The API's registrations are package devices'. The caller's pushes
// waiting for a device become due (WakeWaiting). It blocks for two
// statements.
func (s *DeviceStore) Register(ctx context.Context, d Device) error {
	switch d.Platform {
	case APNS, APNSSandbox, GCM:
	default:
		return fmt.Errorf("notify: register device: unknown platform %q", d.Platform)
	}
	if d.CallerID == "" || d.EndpointArn == "" {
		return errors.New("notify: register device: caller id and endpoint ARN are required")
	}
	_, err := s.db.Exec(ctx, `
		INSERT INTO devices (caller_id, device_id, endpoint_arn, platform) VALUES ($1, $2, $2, $3)
		ON CONFLICT (caller_id, device_id)
		DO UPDATE SET platform = EXCLUDED.platform, endpoint_arn = EXCLUDED.endpoint_arn, disabled_at = NULL, removed_at = NULL, updated_at = now()`,
		d.CallerID, d.EndpointArn, string(d.Platform))
	if err != nil {
		return fmt.Errorf("notify: register device: %w", err)
	}
	if _, err := WakeWaiting(ctx, s.db, d.CallerID); err != nil {
		return fmt.Errorf("notify: register device: %w", err)
	}
	return nil
}

// Execer is a pool or a transaction, for WakeWaiting.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// WakeWaiting makes callerID's pushes that wait for a device (package
// inbox: notif rows PENDING with awaiting_device_since set, migration
// 00016) due now, and returns how many it woke. A registration calls it,
// in its own transaction when it has one, so the worker's next sweep sends
// them to the device just registered instead of at the end of their
// back-off. The rows stay marked waiting until a send finds the device.
// It blocks for one statement.
func WakeWaiting(ctx context.Context, db Execer, callerID string) (int64, error) {
	tag, err := db.Exec(ctx, `
		UPDATE notif SET next_attempt_at = NULL
		WHERE caller_id = $1 AND state = 'PENDING' AND awaiting_device_since IS NOT NULL AND next_attempt_at IS NOT NULL`, callerID)
	if err != nil {
		return 0, fmt.Errorf("notify: wake the pushes waiting for a device: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Endpoints returns the caller's enabled devices (not removed, not
// disabled by SNS). It blocks for one query.
func (s *DeviceStore) Endpoints(ctx context.Context, callerID string) ([]Device, error) {
	rows, err := s.db.Query(ctx, `
		SELECT caller_id, platform, endpoint_arn, counter FROM devices
		WHERE caller_id = $1 AND disabled_at IS NULL AND removed_at IS NULL
		ORDER BY created_at, endpoint_arn`, callerID)
	if err != nil {
		return nil, fmt.Errorf("notify: read devices: %w", err)
	}
	devs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Device, error) {
		var d Device
		var platform string
		err := r.Scan(&d.CallerID, &platform, &d.EndpointArn, &d.Counter)
		d.Platform = Platform(platform)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("notify: read devices: %w", err)
	}
	return devs, nil
}

// Disable marks d disabled, only while its row holds the registration d
// was read from: a registration made since (a higher counter, the same
// token re-enabled) is left alone. It blocks for one statement.
func (s *DeviceStore) Disable(ctx context.Context, d Device) error {
	_, err := s.db.Exec(ctx, `
		UPDATE devices SET disabled_at = now(), updated_at = now()
		WHERE caller_id = $1 AND endpoint_arn = $2 AND counter = $3 AND disabled_at IS NULL`, d.CallerID, d.EndpointArn, d.Counter)
	if err != nil {
		return fmt.Errorf("notify: disable device: %w", err)
	}
	return nil
}
