package phone

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncepay/oncepay/internal/notify"
)

// QueueAPI is the SQS calls the reader makes.
type QueueAPI interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
}

// EndpointsAPI is the SNS call the reader makes to find the phone's devices.
type EndpointsAPI interface {
	sns.ListEndpointsByPlatformApplicationAPIClient
}

// Config configures Run. Zero fields take the defaults.
type Config struct {
	SQS      QueueAPI
	QueueURL string // the phone's queue (Resources.QueueURL)

	// SNS, PlatformApplicationArn and MotoURL enable the device channel:
	// the endpoints of the application are the phone's devices, and their
	// messages are read from moto at MotoURL (AWS_ENDPOINT_URL). Any of them
	// empty: the topic channel only.
	SNS                    EndpointsAPI
	PlatformApplicationArn string
	MotoURL                string
	HTTPClient             *http.Client // moto reads (default: 2 min timeout: moto renders all its state)

	// Path is the pushes file (DefaultPath).
	Path string
	// Wait is the queue's long poll (default 10 s, at most 20 s).
	Wait time.Duration
	// DevicePoll is the pause between reads of the device channel (default
	// 1 s). moto renders its whole state for one read (seconds on a busy
	// moto), so only a phone with devices reads it.
	DevicePoll time.Duration
	// Logger receives a line per push and per error (default slog.Default()).
	Logger *slog.Logger
	// AfterAppend, when set, runs after pushes were appended and synced and
	// before their queue messages are deleted (tests: a crash there). An
	// error from it ends Run with that error and nothing deleted.
	AfterAppend func() error
}

// Run reads the phone's channels and appends every push to the file until
// ctx ends (then it returns nil). A queue message is deleted only once its
// push is in the file and the file is synced. SQS or moto errors are logged
// and retried; a file that cannot be written ends Run with the error, since
// nothing can be taken off the queue without it.
func Run(ctx context.Context, cfg Config) error {
	if cfg.SQS == nil || cfg.QueueURL == "" {
		return errors.New("phone: Run needs an SQS client and the phone's queue URL")
	}
	if cfg.Path == "" {
		return errors.New("phone: Run needs the pushes file's path")
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 10 * time.Second
	}
	cfg.Wait = min(cfg.Wait, 20*time.Second)
	if cfg.DevicePoll <= 0 {
		cfg.DevicePoll = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 2 * time.Minute}
	}
	f, err := openFile(cfg.Path)
	if err != nil {
		return err
	}
	defer f.close()

	// The first fatal error (the file) stops both channels and is returned;
	// the parent context ending is a normal stop.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		fatal error
	)
	stop := func(err error) {
		mu.Lock()
		if fatal == nil {
			fatal = err
		}
		mu.Unlock()
		cancel()
	}
	var wg sync.WaitGroup
	if cfg.SNS != nil && cfg.PlatformApplicationArn != "" && cfg.MotoURL != "" {
		wg.Go(func() {
			if err := readDevices(ctx, cfg, f); err != nil {
				stop(err)
			}
		})
	}
	if err := readQueue(ctx, cfg, f); err != nil {
		stop(err)
	}
	cancel()
	wg.Wait()
	return fatal
}

// file is the pushes file, appended under a lock by both channels.
type file struct {
	mu   sync.Mutex
	f    *os.File
	seen map[string]bool // keys of the pushes in the file: the device channel's cursor
}

func openFile(path string) (*file, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("phone: %w", err)
	}
	existing, err := Read(path)
	if err != nil {
		return nil, err
	}
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("phone: open %s: %w", path, err)
	}
	if errors.Is(statErr, os.ErrNotExist) {
		// A new file's name is durable once its directory is synced.
		if err := syncDir(filepath.Dir(path)); err != nil {
			f.Close()
			return nil, err
		}
	}
	fl := &file{f: f, seen: map[string]bool{}}
	if err := fl.repairTornTail(); err != nil {
		f.Close()
		return nil, err
	}
	for _, p := range existing {
		fl.seen[p.key()] = true
	}
	return fl, nil
}

// repairTornTail cuts a last line a crash left without its newline (Read
// already ignores it), so the next append starts a line of its own. The
// torn push was never deleted from its queue: it comes again.
func (fl *file) repairTornTail() error {
	st, err := fl.f.Stat()
	if err != nil || st.Size() == 0 {
		return err
	}
	b, err := os.ReadFile(fl.f.Name())
	if err != nil {
		return fmt.Errorf("phone: %w", err)
	}
	end := bytes.LastIndexByte(b, '\n') + 1
	if end == len(b) {
		return nil
	}
	if err := fl.f.Truncate(int64(end)); err != nil {
		return fmt.Errorf("phone: cut the torn last line of %s: %w", fl.f.Name(), err)
	}
	return fl.f.Sync()
}

// append writes pushes and syncs the file: when it returns nil they are on
// disk, and only then may their queue messages be deleted.
func (fl *file) append(pushes []Push) error {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	var buf bytes.Buffer
	for _, p := range pushes {
		b, err := json.Marshal(p)
		if err != nil {
			return fmt.Errorf("phone: encode push %s: %w", p.MessageID, err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	if _, err := fl.f.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("phone: append to %s: %w", fl.f.Name(), err)
	}
	if err := fl.f.Sync(); err != nil {
		return fmt.Errorf("phone: sync %s: %w", fl.f.Name(), err)
	}
	for _, p := range pushes {
		fl.seen[p.key()] = true
	}
	return nil
}

func (fl *file) has(p Push) bool {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.seen[p.key()]
}

func (fl *file) close() { fl.f.Close() }

// readQueue long-polls the phone's queue until ctx ends.
func readQueue(ctx context.Context, cfg Config, fl *file) error {
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		err := receiveOnce(ctx, cfg, fl)
		var fatal fatalError
		switch {
		case err == nil:
			backoff = 0
			continue
		case errors.As(err, &fatal):
			return fatal.err
		case ctx.Err() != nil:
			return nil
		}
		backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
		cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "phone: queue read failed; retrying", slog.String("err", err.Error()), slog.Duration("backoff", backoff))
		sleep(ctx, backoff)
	}
	return nil
}

// fatalError ends Run: the file, not the queue, failed.
type fatalError struct{ err error }

func (f fatalError) Error() string { return f.err.Error() }

// receiveOnce makes one long-poll receive, appends what it got, and deletes
// it once appended.
func receiveOnce(ctx context.Context, cfg Config, fl *file) error {
	out, err := cfg.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: &cfg.QueueURL, MaxNumberOfMessages: 10, WaitTimeSeconds: int32(cfg.Wait / time.Second),
	})
	if err != nil {
		return fmt.Errorf("phone: receive: %w", err)
	}
	if len(out.Messages) == 0 {
		return nil
	}
	now := time.Now().UTC()
	var pushes []Push
	var del []sqstypes.DeleteMessageBatchRequestEntry
	for i, m := range out.Messages {
		del = append(del, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: m.ReceiptHandle})
		p, err := fromQueue(m, now)
		if err != nil {
			// Not a push (nothing a device would show): logged and taken
			// off the queue, or it would come back forever.
			cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "phone: dropped a message that is not a push",
				slog.String("message_id", aws.ToString(m.MessageId)), slog.String("err", err.Error()))
			continue
		}
		pushes = append(pushes, p)
	}
	if len(pushes) > 0 {
		if err := fl.append(pushes); err != nil {
			return fatalError{err}
		}
		for _, p := range pushes {
			cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "phone: push received", slog.String("channel", p.Channel),
				slog.String("payment_id", p.PaymentID), slog.String("event_id", p.EventID), slog.String("replace_id", p.ReplaceID))
		}
	}
	if cfg.AfterAppend != nil {
		if err := cfg.AfterAppend(); err != nil {
			return fatalError{err}
		}
	}
	// A failed delete leaves the messages to come back after the visibility
	// timeout: appended twice, one alert (Show counts message ids).
	if _, err := cfg.SQS.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &cfg.QueueURL, Entries: del}); err != nil {
		return fmt.Errorf("phone: delete %d received: %w", len(del), err)
	}
	return nil
}

// fromQueue decodes one queue message: SNS's notification envelope around
// the topic's notify.Data document (raw delivery off), or the document
// itself if someone turned raw delivery on.
func fromQueue(m sqstypes.Message, now time.Time) (Push, error) {
	body := aws.ToString(m.Body)
	var env struct {
		Type      string
		MessageID string `json:"MessageId"`
		TopicArn  string
		Message   string
		Timestamp time.Time
	}
	p := Push{ReceivedAt: now, Channel: ChannelTopic, MessageID: aws.ToString(m.MessageId)}
	doc := body
	if err := json.Unmarshal([]byte(body), &env); err == nil && env.Type == "Notification" {
		doc, p.MessageID, p.Source, p.SentAt = env.Message, env.MessageID, env.TopicArn, env.Timestamp.UTC()
	}
	var d notify.Data
	if err := json.Unmarshal([]byte(doc), &d); err != nil || d.ReplaceID == "" {
		return Push{}, fmt.Errorf("phone: %.80q is not a push document", doc)
	}
	p.ReplaceID, p.PaymentID, p.EventID, p.State, p.Title, p.Body = d.ReplaceID, d.PaymentID, d.EventID, d.State, d.Title, d.Body
	p.Payload = json.RawMessage(doc)
	return p, nil
}

// readDevices polls the phone's devices until ctx ends.
func readDevices(ctx context.Context, cfg Config, fl *file) error {
	t := time.NewTicker(cfg.DevicePoll)
	defer t.Stop()
	for {
		if err := devicesOnce(ctx, cfg, fl); err != nil {
			var fatal fatalError
			if errors.As(err, &fatal) {
				return fatal.err
			}
			if ctx.Err() == nil {
				cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "phone: device read failed; retrying", slog.String("err", err.Error()))
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// devicesOnce appends every message moto recorded on a device of the
// phone's application that the file does not hold yet.
func devicesOnce(ctx context.Context, cfg Config, fl *file) error {
	devices := map[string]bool{}
	pages := sns.NewListEndpointsByPlatformApplicationPaginator(cfg.SNS, &sns.ListEndpointsByPlatformApplicationInput{PlatformApplicationArn: &cfg.PlatformApplicationArn})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("phone: devices of %s: %w", cfg.PlatformApplicationArn, err)
		}
		for _, e := range page.Endpoints {
			devices[aws.ToString(e.EndpointArn)] = true
		}
	}
	if len(devices) == 0 {
		return nil // no device: moto's state is not worth reading
	}
	endpoints, err := motoEndpoints(ctx, cfg.HTTPClient, cfg.MotoURL)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	var pushes []Push
	for _, e := range endpoints {
		if !devices[e.Arn] {
			continue
		}
		for _, m := range e.Messages {
			p := Push{ReceivedAt: now, Channel: ChannelDevice, Source: e.Arn, MessageID: m.id}
			if fl.has(p) {
				continue
			}
			if err := p.fromDevice(m.body); err != nil {
				cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "phone: a device message is not a push",
					slog.String("endpoint", e.Arn), slog.String("message_id", m.id), slog.String("err", err.Error()))
			}
			pushes = append(pushes, p) // recorded either way: the device buzzed
		}
	}
	if len(pushes) == 0 {
		return nil
	}
	if err := fl.append(pushes); err != nil {
		return fatalError{err}
	}
	for _, p := range pushes {
		cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "phone: push received", slog.String("channel", p.Channel),
			slog.String("payment_id", p.PaymentID), slog.String("event_id", p.EventID), slog.String("replace_id", p.ReplaceID))
	}
	return nil
}

// fromDevice fills p from a message moto recorded on a platform endpoint:
// the whole published document, of which the device gets its platform's
// part (the endpoint ARN names the platform: .../endpoint/<platform>/...).
func (p *Push) fromDevice(msg string) error {
	p.Payload = json.RawMessage(msg)
	var parts map[string]string
	if err := json.Unmarshal([]byte(msg), &parts); err != nil {
		p.Title = msg // a plain-text publish: the device shows the text
		return nil
	}
	platform := ""
	if _, rest, ok := strings.Cut(p.Source, ":endpoint/"); ok {
		platform, _, _ = strings.Cut(rest, "/")
	}
	part, ok := parts[platform]
	if !ok {
		p.Title = parts["default"]
		return nil
	}
	p.Payload = json.RawMessage(part)
	switch notify.Platform(platform) {
	case notify.GCM:
		var g struct {
			FCM struct {
				Message struct {
					Notification struct{ Title, Body string }
					Data         struct {
						ReplaceID string `json:"replace_id"`
						PaymentID string `json:"payment_id"`
						EventID   string `json:"event_id"`
					}
					Android struct {
						Notification struct{ Tag string }
					}
				}
			} `json:"fcmV1Message"`
		}
		if err := json.Unmarshal([]byte(part), &g); err != nil {
			return fmt.Errorf("phone: GCM part: %w", err)
		}
		m := g.FCM.Message
		// Android collapses on the notification's tag.
		p.ReplaceID, p.PaymentID, p.EventID = m.Android.Notification.Tag, m.Data.PaymentID, m.Data.EventID
		if p.ReplaceID == "" {
			p.ReplaceID = m.Data.ReplaceID
		}
		p.Title, p.Body = m.Notification.Title, m.Notification.Body
	case notify.APNS, notify.APNSSandbox:
		var a struct {
			APS struct {
				Alert struct{ Title, Body string }
			} `json:"aps"`
			ReplaceID string `json:"replace_id"`
			PaymentID string `json:"payment_id"`
			EventID   string `json:"event_id"`
		}
		if err := json.Unmarshal([]byte(part), &a); err != nil {
			return fmt.Errorf("phone: APNs part: %w", err)
		}
		// The collapse id travels as a message attribute moto does not
		// record; the payload's replace id is the same value.
		p.ReplaceID, p.PaymentID, p.EventID = a.ReplaceID, a.PaymentID, a.EventID
		p.Title, p.Body = a.APS.Alert.Title, a.APS.Alert.Body
	}
	return nil
}

type motoEndpoint struct {
	Arn      string          `json:"arn"`
	Messages orderedMessages `json:"messages"`
}

// orderedMessages keeps moto's messages in the order they were published
// (a JSON object in insertion order): the later push replaces the earlier.
type orderedMessages []struct{ id, body string }

func (o *orderedMessages) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil || tok == nil {
		return err // null: no messages
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return err
		}
		var v string
		if err := dec.Decode(&v); err != nil {
			return err
		}
		id, _ := k.(string)
		*o = append(*o, struct{ id, body string }{id, v})
	}
	return nil
}

// motoEndpoints reads every platform endpoint moto holds, with the messages
// published to it (moto only: /moto-api/data.json).
func motoEndpoints(ctx context.Context, hc *http.Client, base string) ([]motoEndpoint, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/moto-api/data.json", nil)
	if err != nil {
		return nil, fmt.Errorf("phone: moto data request: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("phone: read moto data: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return nil, fmt.Errorf("phone: moto data: %s: %s", resp.Status, b)
	}
	var data struct {
		SNS struct {
			PlatformEndpoint []motoEndpoint `json:"PlatformEndpoint"`
		} `json:"sns"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&data); err != nil {
		return nil, fmt.Errorf("phone: decode moto data: %w", err)
	}
	return data.SNS.PlatformEndpoint, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("phone: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("phone: sync %s: %w", dir, err)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
