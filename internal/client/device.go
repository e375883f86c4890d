package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// The device's identity and counter, in the journal's device bucket: one
// id per app install, made once, and one counter that only grows, written
// before the request that carries it is sent (docs/mechanism.md#seed-part-5,
// Branch V). The server orders a device's registrations, updates and
// removals by it, never by the phone's clock.
const (
	deviceIDKey      = "device_id"
	deviceCounterKey = "device_counter"
)

// NextDeviceCounter returns this install's device id (made on first use)
// and the next counter, both durable before it returns: a request that
// carries them may then be sent, and resent with the same counter.
func (j *Journal) NextDeviceCounter() (deviceID string, counter int64, err error) {
	err = j.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketDevice)
		id := b.Get([]byte(deviceIDKey))
		if id == nil {
			raw := make([]byte, 16)
			if _, err := rand.Read(raw); err != nil {
				return err
			}
			id = []byte("dev-" + hex.EncodeToString(raw))
			if err := b.Put([]byte(deviceIDKey), id); err != nil {
				return err
			}
		}
		deviceID = string(id)
		if v := b.Get([]byte(deviceCounterKey)); len(v) == 8 {
			counter = int64(binary.BigEndian.Uint64(v))
		}
		counter++
		return b.Put([]byte(deviceCounterKey), binary.BigEndian.AppendUint64(nil, uint64(counter)))
	})
	if err != nil {
		return "", 0, fmt.Errorf("client: journal the device counter: %w", err)
	}
	return deviceID, counter, nil
}

// DeviceResult is what the server's device row holds after a request.
type DeviceResult struct {
	DeviceID string `json:"device_id"`
	Counter  int64  `json:"counter"` // the row's: above the request's, a later request of this device won
	State    string `json:"state"`   // ACTIVE or REMOVED
	Platform string `json:"platform,omitempty"`
	Applied  bool   `json:"applied"`
	Sent     int64  `json:"sent_counter"` // the counter this request carried
	Attempts int    `json:"attempts"`
}

// ErrDeviceRefused is a registration the server refused for good (bad
// input, a platform it has no application for, a token the platform
// refused, a token live on another account's device until that account
// removes it): resending it changes nothing.
var ErrDeviceRefused = errors.New("client: the device request was refused")

// RegisterDevice registers (or updates) this install's device for the
// caller with a push token; RemoveDevice removes it. Each journals the next
// counter first, then sends with it, resending the same counter on a 429,
// a 5xx or no answer: a resend the server had applied is answered with
// what its row holds.
func (c *Client) RegisterDevice(ctx context.Context, platform, token string) (DeviceResult, error) {
	body, err := json.Marshal(map[string]string{"platform": platform, "token": token})
	if err != nil {
		return DeviceResult{}, err
	}
	return c.device(ctx, http.MethodPut, body)
}

// RemoveDevice: see RegisterDevice.
func (c *Client) RemoveDevice(ctx context.Context) (DeviceResult, error) {
	return c.device(ctx, http.MethodDelete, nil)
}

func (c *Client) device(ctx context.Context, method string, body []byte) (DeviceResult, error) {
	if c.err != nil {
		return DeviceResult{}, c.err
	}
	id, counter, err := c.journal.NextDeviceCounter()
	if err != nil {
		return DeviceResult{}, err
	}
	var last string
	for attempt := range c.cfg.Attempts {
		if attempt > 0 {
			if err := c.wait(ctx, attempt-1, 0, last); err != nil {
				return DeviceResult{}, err
			}
		}
		status, b, err := c.sendDevice(ctx, method, id, counter, body)
		if err != nil {
			last = shortErr(err)
			continue
		}
		if status == http.StatusTooManyRequests || status >= 500 {
			last = strconv.Itoa(status)
			continue
		}
		if status != http.StatusOK && status != http.StatusCreated {
			return DeviceResult{Sent: counter, Attempts: attempt + 1}, fmt.Errorf("%w: %d %s", ErrDeviceRefused, status, strings.TrimSpace(string(b)))
		}
		var r DeviceResult
		if err := json.Unmarshal(b, &r); err != nil || r.DeviceID != id {
			return DeviceResult{}, fmt.Errorf("client: a device answer that is not the API's (%d): %q", status, b)
		}
		r.Sent, r.Attempts = counter, attempt+1
		return r, nil
	}
	return DeviceResult{Sent: counter, Attempts: c.cfg.Attempts}, fmt.Errorf("client: no answer for device %s counter %d after %d attempts (%s): send again later; a newer request supersedes it",
		id, counter, c.cfg.Attempts, last)
}

func (c *Client) sendDevice(ctx context.Context, method, id string, counter int64, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.cfg.BaseURL, "/")+"/devices/"+id, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	req.Header.Set("Device-Counter", strconv.FormatInt(counter, 10))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.cfg.HTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, b, err
}
