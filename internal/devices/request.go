// Package devices keeps a caller's push devices, ordered by one counter
// (docs/mechanism.md#seed-part-5, Branch V): PUT /devices/{device_id}
// registers or updates a device, DELETE /devices/{device_id} removes it.
//
// A device's app keeps a counter in its journal and sends it, one higher,
// with every registration, update or removal (the Device-Counter header).
// The device's row keeps the highest counter it has applied, on a record
// that never expires: a request at or below it changes nothing and is
// answered with what the row holds, so a resent LIKE arriving after its
// UNLIKE, or here a resent registration arriving after an update, cannot
// undo the newer one. A removal leaves the row as a tombstone: the condition
// sits on the record that never moves, so a late registration cannot bring
// a removed device back. Nothing is ordered by a time the phone sent: phone
// clocks are set by users, carriers and time daemons, and they jump.
//
// The push token goes to SNS (CreatePlatformEndpoint, which is idempotent
// for a token) and never into the ledger or a log: the row holds the
// endpoint's ARN. A token belongs to one device of one caller at a time.
// Within a caller the newest registration takes it (an app reinstalled
// under a new device id; the earlier row becomes a tombstone), so a phone
// is pushed once. Across callers it is never taken: a registration of a
// token live on another caller's device is refused (409 token-in-use,
// nothing written), because a token proves nothing about who holds the
// phone, and taking it would silence its owner's payment pushes and send
// the taker's to that phone. The token is free again once its caller
// removes the device (the app's sign-out sends that DELETE before the next
// caller signs in) or the platform reports it gone (the worker disables the
// row). The worker pushes to a caller's live endpoints (package notify).
package devices

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/oncepay/oncepay/internal/notify"
)

// CounterHeader carries the device's counter on every request.
const CounterHeader = "Device-Counter"

// Limits of the input.
const (
	MaxDeviceID = 128
	MaxToken    = 4096 // SNS's limit on a platform endpoint's token
	MaxBody     = 8 << 10
)

// Registration is a PUT's meaning.
type Registration struct {
	DeviceID string
	Counter  int64
	Platform notify.Platform
	Token    string // secret-ish: to SNS only, never stored or logged
}

// InputError is a request the API refuses with 400: Field names the input.
type InputError struct {
	Field, Reason string
}

func (e *InputError) Error() string { return fmt.Sprintf("devices: %s: %s", e.Field, e.Reason) }

func bad(field, reason string) error { return &InputError{Field: field, Reason: reason} }

// ParseDeviceID checks a device id: 1 to MaxDeviceID of [A-Za-z0-9._-], an
// opaque id the app made (a UUID, say), never a phone number or a name.
func ParseDeviceID(s string) (string, error) {
	if s == "" || len(s) > MaxDeviceID {
		return "", bad("device_id", fmt.Sprintf("1 to %d characters", MaxDeviceID))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return "", bad("device_id", "letters, digits, '.', '_' and '-' only")
		}
	}
	return s, nil
}

// ParseCounter reads the Device-Counter header: a decimal integer of 1 to
// 18 digits, no sign, no leading zero (a device sends far fewer requests
// than 10^18, and the bound keeps it under int64's).
func ParseCounter(h http.Header) (int64, error) {
	vs := h.Values(CounterHeader)
	if len(vs) != 1 {
		return 0, bad(CounterHeader, "exactly one header with the device's counter")
	}
	v := vs[0]
	if v == "" || len(v) > 18 || v[0] == '0' {
		return 0, bad(CounterHeader, "a positive integer of at most 18 digits, no leading zero")
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, bad(CounterHeader, "a positive integer, no leading zero")
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, bad(CounterHeader, "a positive integer of at most 18 digits")
	}
	return n, nil
}

// ParseRegistration reads a PUT: the device id from the path, the counter
// from its header, the platform and the push token from the JSON body
// ({"platform": "APNS" | "APNS_SANDBOX" | "GCM", "token": "…"}; other
// members are ignored).
func ParseRegistration(deviceID string, h http.Header, body []byte) (Registration, error) {
	id, err := ParseDeviceID(deviceID)
	if err != nil {
		return Registration{}, err
	}
	n, err := ParseCounter(h)
	if err != nil {
		return Registration{}, err
	}
	if len(body) > MaxBody {
		return Registration{}, bad("body", fmt.Sprintf("at most %d bytes", MaxBody))
	}
	var b struct {
		Platform *string `json:"platform"`
		Token    *string `json:"token"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	if err := dec.Decode(&b); err != nil {
		return Registration{}, bad("body", "a JSON object with platform and token")
	}
	if dec.More() {
		return Registration{}, bad("body", "one JSON object")
	}
	if b.Platform == nil {
		return Registration{}, bad("platform", "required")
	}
	p := notify.Platform(*b.Platform)
	switch p {
	case notify.APNS, notify.APNSSandbox, notify.GCM:
	default:
		return Registration{}, bad("platform", "APNS, APNS_SANDBOX or GCM")
	}
	if b.Token == nil || *b.Token == "" || len(*b.Token) > MaxToken {
		return Registration{}, bad("token", fmt.Sprintf("required, at most %d characters", MaxToken))
	}
	for _, c := range *b.Token {
		if c <= ' ' || c > '~' {
			return Registration{}, bad("token", "printable ASCII without spaces")
		}
	}
	return Registration{DeviceID: id, Counter: n, Platform: p, Token: *b.Token}, nil
}

// errNotDevicePath is a path that names no device.
var errNotDevicePath = errors.New("devices: not /devices/{device_id}")

// DeviceIDOfPath reads {device_id} from a request path, already decoded
// once by the front door.
func DeviceIDOfPath(path string) (string, error) {
	id, ok := strings.CutPrefix(path, "/devices/")
	if !ok || strings.Contains(id, "/") {
		return "", errNotDevicePath
	}
	return id, nil
}
