// Package client is how a correct app pays (seed Part 2 "Who makes the key,
// and when", Part 4 "Resolve, don't just look"): the key is made at the tap
// and journaled before the first send; every retry reuses it; an unknown
// outcome is resolved, not guessed; a new key is made only after the server
// said "not found, and it never will be".
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Outcome states a Result can carry.
const (
	Succeeded  = "SUCCEEDED"
	FailedPay  = "FAILED"
	Void       = "VOID"
	Processing = "PROCESSING"
	Unknown    = "UNKNOWN" // still unresolved: the intent stays open, same key next time
)

// Result is what the app tells the buyer.
type Result struct {
	Key       string `json:"key"`
	PaymentID string `json:"payment_id,omitempty"`
	State     string `json:"state"`
	Replayed  bool   `json:"replayed,omitempty"`
	Attempts  int    `json:"attempts"`
	Detail    string `json:"detail,omitempty"`
}

// Config configures a Client; zero fields take the defaults.
type Config struct {
	BaseURL string // the API's base URL
	Token   string // the caller's bearer token
	// Timeout is the client's timeout per request (default 10 s: the
	// server's deadline plus its margin and the network fit inside it).
	Timeout time.Duration
	// Attempts bounds the sends of one request before it is resolved (default 4).
	Attempts int
	// BackoffBase and BackoffCap shape the exponential backoff with full
	// jitter (defaults 200 ms and 5 s).
	BackoffBase, BackoffCap time.Duration
	// ResolvePolls bounds the resolve calls while the payment is still
	// being confirmed (default 10).
	ResolvePolls int
	// HTTP makes the calls (default: a client with Timeout).
	HTTP *http.Client
	// Sleep waits (default: a timer honouring ctx); tests shorten it.
	Sleep func(ctx context.Context, d time.Duration) error
	// Progress hears about every retry (for a progress line).
	Progress func(attempt int, wait time.Duration, why string)
	// AfterJournal and AfterSend are crash points for tests: the CLI kills
	// itself there when told to.
	AfterJournal, AfterSend func()
}

// Client pays through the API, journaling every intent.
type Client struct {
	cfg     Config
	journal *Journal
}

// New returns a Client over journal.
func New(cfg Config, journal *Journal) *Client {
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Attempts == 0 {
		cfg.Attempts = 4
	}
	if cfg.BackoffBase == 0 {
		cfg.BackoffBase = 200 * time.Millisecond
	}
	if cfg.BackoffCap == 0 {
		cfg.BackoffCap = 5 * time.Second
	}
	if cfg.ResolvePolls == 0 {
		cfg.ResolvePolls = 10
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: cfg.Timeout}
	}
	if cfg.Sleep == nil {
		cfg.Sleep = func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return &Client{cfg: cfg, journal: journal}
}

// NewKey makes an Idempotency-Key: random, so it carries no personal data.
func NewKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ErrChanged means the order's open intent was for a different payment: the
// app must resolve it before it asks for something else.
var ErrChanged = errors.New("client: the order has an unresolved intent for a different payment")

// Pay pays for p. If the journal holds an open intent for the order it is
// resumed with its key; a final one is answered from the journal; a voided
// or rejected one makes way for a new key.
func (c *Client) Pay(ctx context.Context, p Payment) (Result, error) {
	in, err := c.journal.ForOrder(p.OrderID)
	switch {
	case err == nil && in.State == Open:
		if in.Payment != p {
			return Result{Key: in.Key, State: Unknown}, ErrChanged
		}
	case err == nil && in.State == Final:
		return Result{Key: in.Key, PaymentID: in.PaymentID, State: in.Outcome, Attempts: in.Attempts, Replayed: true}, nil
	case err == nil || errors.Is(err, ErrNoIntent):
		now := time.Now().UTC()
		in = Intent{Key: NewKey(), Payment: p, State: Open, CreatedAt: now, UpdatedAt: now}
		if err := c.journal.Put(in); err != nil {
			return Result{}, err
		}
		if c.cfg.AfterJournal != nil {
			c.cfg.AfterJournal()
		}
	default:
		return Result{}, err
	}
	return c.run(ctx, in)
}

// Resume finishes every open intent in the journal (an app that restarts).
func (c *Client) Resume(ctx context.Context) ([]Result, error) {
	open, err := c.journal.Open()
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, in := range open {
		r, err := c.run(ctx, in)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// run sends the intent until it has an answer, then resolves what is left.
func (c *Client) run(ctx context.Context, in Intent) (Result, error) {
	body, err := json.Marshal(in.Payment)
	if err != nil {
		return Result{}, err
	}
	for attempt := 0; attempt < c.cfg.Attempts; attempt++ {
		in.Attempts++
		a, err := c.send(ctx, http.MethodPost, "/payments", in.Key, body)
		if c.cfg.AfterSend != nil {
			c.cfg.AfterSend()
		}
		if err != nil {
			if ctx.Err() != nil {
				return c.keep(in, Unknown, "stopped: "+ctx.Err().Error())
			}
			if werr := c.wait(ctx, attempt, 0, "no answer: "+shortErr(err)); werr != nil {
				return c.keep(in, Unknown, werr.Error())
			}
			continue
		}
		switch {
		case a.status == http.StatusCreated || a.status == http.StatusPaymentRequired:
			return c.finish(in, a)
		case a.status == http.StatusAccepted:
			return c.resolve(ctx, in)
		case a.status == http.StatusConflict && strings.HasSuffix(a.problemType, "/key-voided"):
			return c.voided(in)
		case a.status == http.StatusConflict || a.status == http.StatusTooManyRequests || a.status >= 500:
			if werr := c.wait(ctx, attempt, a.retryAfter, fmt.Sprintf("answered %d", a.status)); werr != nil {
				return c.keep(in, Unknown, werr.Error())
			}
		case a.status == http.StatusUnauthorized:
			return c.keep(in, Unknown, "unauthorized: check the token")
		default: // 400, 413, 422: the request itself is refused; nothing ran
			in.State, in.Outcome = Rejected, a.title
			if err := c.journal.Put(c.touch(in)); err != nil {
				return Result{}, err
			}
			return Result{Key: in.Key, State: "REJECTED", Attempts: in.Attempts, Detail: a.title}, nil
		}
	}
	// Out of attempts with no answer: ask, don't guess.
	return c.resolve(ctx, in)
}

// resolve asks "did it go through?" until the answer is final or void.
func (c *Client) resolve(ctx context.Context, in Intent) (Result, error) {
	for poll := 0; poll < c.cfg.ResolvePolls; poll++ {
		a, err := c.send(ctx, http.MethodPost, "/payments/"+url.PathEscape(in.Key)+"/resolve", "", nil)
		if err == nil {
			switch a.State {
			case Succeeded, FailedPay:
				return c.finish(in, a)
			case Void:
				return c.voided(in)
			}
			if strings.HasSuffix(a.problemType, "/key-voided") {
				return c.voided(in)
			}
		}
		why := "still confirming"
		if err != nil {
			why = "no answer: " + shortErr(err)
		}
		if werr := c.wait(ctx, poll, a.retryAfter, why); werr != nil {
			break
		}
	}
	return c.keep(in, Unknown, "the payment is still being confirmed; it will be resumed with the same key")
}

func (c *Client) finish(in Intent, a answer) (Result, error) {
	in.State, in.Outcome, in.PaymentID = Final, a.State, a.PaymentID
	if err := c.journal.Put(c.touch(in)); err != nil {
		return Result{}, err
	}
	return Result{Key: in.Key, PaymentID: a.PaymentID, State: a.State, Replayed: a.replayed, Attempts: in.Attempts}, nil
}

func (c *Client) voided(in Intent) (Result, error) {
	in.State, in.Outcome = Voided, Void
	if err := c.journal.Put(c.touch(in)); err != nil {
		return Result{}, err
	}
	return Result{Key: in.Key, State: Void, Attempts: in.Attempts, Detail: "not found, and it never will be: a new tap makes a new key"}, nil
}

// keep leaves the intent open: the next run resumes it with the same key.
func (c *Client) keep(in Intent, state, detail string) (Result, error) {
	if err := c.journal.Put(c.touch(in)); err != nil {
		return Result{}, err
	}
	return Result{Key: in.Key, State: state, Attempts: in.Attempts, Detail: detail}, nil
}

func (c *Client) touch(in Intent) Intent {
	in.UpdatedAt = time.Now().UTC()
	return in
}

// wait sleeps with exponential backoff and full jitter, at least retryAfter.
func (c *Client) wait(ctx context.Context, attempt int, retryAfter time.Duration, why string) error {
	d := Backoff(attempt, c.cfg.BackoffBase, c.cfg.BackoffCap)
	if retryAfter > d {
		d = retryAfter
	}
	if c.cfg.Progress != nil {
		c.cfg.Progress(attempt+1, d, why)
	}
	return c.cfg.Sleep(ctx, d)
}

// Backoff is full jitter: a uniform wait in [0, min(cap, base·2^attempt)).
func Backoff(attempt int, base, cap time.Duration) time.Duration {
	ceil := cap
	if attempt < 30 && base<<attempt < cap {
		ceil = base << attempt
	}
	if ceil <= 0 {
		return 0
	}
	n, err := rand.Int(rand.Reader, big.NewInt(int64(ceil)))
	if err != nil {
		return ceil / 2
	}
	return time.Duration(n.Int64())
}

type answer struct {
	status      int
	replayed    bool
	retryAfter  time.Duration
	problemType string
	title       string
	PaymentID   string `json:"payment_id"`
	State       string `json:"state"`
}

func (c *Client) send(ctx context.Context, method, path, key string, body []byte) (answer, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.cfg.BaseURL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.cfg.HTTP.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return answer{}, err
	}
	a := answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		a.retryAfter = time.Duration(s) * time.Second
	}
	_ = json.Unmarshal(b, &a)
	var prob struct {
		Type  string `json:"type"`
		Title string `json:"title"`
	}
	if json.Unmarshal(b, &prob) == nil {
		a.problemType, a.title = prob.Type, prob.Title
	}
	return a, nil
}

func shortErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return "timeout"
		}
		return ue.Err.Error()
	}
	return err.Error()
}
