// Package client is how a correct app pays (docs/mechanism.md#seed-part-2,
// docs/mechanism.md#seed-part-4): the key is made at the tap and journaled
// before the first send; every retry reuses it; an unknown
// outcome is resolved, not guessed; a new key is made only after the server
// said "not found, and it never will be" (or gave a definite decline and the
// buyer asked to pay again).
//
// The rules, in one place (see also decide):
//   - An answer is final only when it is the API's own final answer: 201 with
//     state SUCCEEDED, 402 with state FAILED.
//   - 409 in progress, 429 and 5xx are retried with the same key; no answer
//     (timeout, reset) is retried with the same key.
//   - Anything else (a 4xx, a 409 "voided", a 2xx or 3xx the API never sends
//     to POST /payments) is a question, not an answer
//     (docs/mechanism.md#seed-part-1): the key is resolved with
//     POST /payments/{key}/resolve before anything is decided. Only the
//     resolve call's "not found, and it never will be" ends a key without a
//     final answer; until then the intent stays open under its key.
//   - 401 decides nothing: the intent stays open for a fresh token.
//   - Intents are scoped by API and caller, and by merchant and order: a key
//     is only ever sent under the scope it was made for.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Outcome states a Result can carry.
const (
	Succeeded  = "SUCCEEDED"
	FailedPay  = "FAILED"
	Void       = "VOID"
	Refused    = "REJECTED" // refused, and the key voided: nothing ran
	Processing = "PROCESSING"
	Unknown    = "UNKNOWN" // still unresolved: the intent stays open, same key next time
)

// Result is what the app tells the buyer.
type Result struct {
	Key         string `json:"key"`
	PaymentID   string `json:"payment_id,omitempty"`
	State       string `json:"state"`
	Replayed    bool   `json:"replayed,omitempty"`     // the server answered from what it stored
	FromJournal bool   `json:"from_journal,omitempty"` // answered from the journal, nothing sent
	Attempts    int    `json:"attempts"`
	Replaces    string `json:"replaces,omitempty"` // the previous intent's key, when this tap made a new one
	Detail      string `json:"detail,omitempty"`
}

// Config configures a Client; zero fields take the defaults.
type Config struct {
	BaseURL string // the API's base URL
	Token   string // the caller's bearer token
	// Caller names the caller in the journal. Default: the token's subject
	// (the JWT's sub, which is who the server scopes keys by); needed only
	// for a token that is not a JWT.
	Caller string
	// Timeout is the client's timeout per request (default 10 s: the
	// server's deadline plus its margin and the network fit inside it).
	Timeout time.Duration
	// Attempts bounds the sends of one request before it is resolved (default 4).
	Attempts int
	// BackoffBase and BackoffCap shape the exponential backoff with full
	// jitter (defaults 200 ms and 5 s).
	BackoffBase, BackoffCap time.Duration
	// RetryAfterCap bounds what a Retry-After header can make the client
	// wait (default 20 s): a wait is the server's value, capped, stretched
	// by a random 0–50 % so clients told the same value do not come back in
	// step; so no single wait exceeds 1.5 × RetryAfterCap.
	RetryAfterCap time.Duration
	// ResolvePolls bounds the resolve calls while the payment is still
	// being confirmed (default 10).
	ResolvePolls int
	// HomeURLs are the deployment's Region API base URLs (docs/regions.md):
	// a 421 is followed only to one of them, since the bearer token goes
	// along. Empty: a 421 is never followed (the intent stays open).
	HomeURLs []string
	// HTTP makes the calls (default: a client with Timeout). Redirects are
	// never followed: a POST /payments answered with a 3xx is a question.
	HTTP *http.Client
	// Sleep waits (default: a timer honouring ctx); tests shorten it.
	Sleep func(ctx context.Context, d time.Duration) error
	// Progress hears about every retry (for a progress line).
	Progress func(attempt int, wait time.Duration, why string)
	// AfterJournal, AfterSend and AfterFinal are crash points for tests
	// (the CLI kills itself there when told to): after a tap's new intent
	// is journaled and before its first send; after a reply arrives and
	// before anything about it is journaled; after the outcome is journaled.
	AfterJournal, AfterSend, AfterFinal func()
}

// Client pays through the API, journaling every intent.
type Client struct {
	cfg     Config
	journal *Journal
	scope   Scope
	err     error // why this client cannot pay (no caller)

	// home is the base URL a 421 sent this client to (docs/regions.md):
	// later sends go there first. "" until a 421 names one.
	homeMu sync.Mutex
	home   string
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
	if cfg.RetryAfterCap == 0 {
		cfg.RetryAfterCap = 20 * time.Second
	}
	if cfg.ResolvePolls == 0 {
		cfg.ResolvePolls = 10
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: cfg.Timeout}
	}
	hc := *cfg.HTTP
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	cfg.HTTP = &hc
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
	c := &Client{cfg: cfg, journal: journal}
	caller := cfg.Caller
	if caller == "" {
		caller, c.err = CallerOf(cfg.Token)
	}
	c.scope = Scope{API: NormalizeAPI(cfg.BaseURL), Caller: caller}
	return c
}

// Scope is the journal scope this client's intents live in.
func (c *Client) Scope() Scope { return c.scope }

// CallerOf reads the caller a bearer token names: its JWT subject. The
// signature is not checked (the server does that); the subject only keeps
// one caller's intents apart from another's in the journal.
func CallerOf(token string) (string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", errors.New("client: the token is not a JWT: set the caller explicitly")
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", fmt.Errorf("client: the token's payload: %w", err)
	}
	var claims struct {
		Sub string `json:"sub"`
	}
	if err := json.Unmarshal(b, &claims); err != nil || claims.Sub == "" {
		return "", errors.New("client: the token names no subject: set the caller explicitly")
	}
	return claims.Sub, nil
}

// NormalizeAPI is the form of a base URL the journal scopes by: scheme and
// host lower-cased, no trailing slash, no query or fragment.
func NormalizeAPI(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" {
		return strings.TrimRight(strings.TrimSpace(raw), "/")
	}
	u.Scheme, u.Host = strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	u.Path, u.RawPath = strings.TrimRight(u.Path, "/"), ""
	u.RawQuery, u.Fragment, u.User = "", "", nil
	return u.String()
}

// NewKey makes an Idempotency-Key: a random (version 4) UUID, so it carries
// no personal data, and only RFC 3986 unreserved characters (hex digits and
// '-'), so it goes into the resolve path verbatim.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	const hexd = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, x := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hexd[x>>4], hexd[x&0x0f])
	}
	return string(out)
}

// unreserved reports whether key is 1–255 RFC 3986 unreserved characters:
// what goes into a path as it is.
func unreserved(key string) bool {
	if key == "" || len(key) > 255 {
		return false
	}
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '.', c == '_', c == '~':
		default:
			return false
		}
	}
	return true
}

// ErrChanged means the order's open intent was for a different payment: the
// app must resolve it before it asks for something else.
var ErrChanged = errors.New("client: the order has an unresolved intent for a different payment")

// Pay pays for p (one tap). If the journal holds an open intent for the
// order it is resumed with its key; a paid one is answered from the
// journal; a voided or refused one makes way for a new key; a declined one
// is answered from the journal unless p differs from it (a new card: a new
// payment, with a new key).
func (c *Client) Pay(ctx context.Context, p Payment) (Result, error) {
	return c.tap(ctx, p, false)
}

// PayAgain is the buyer's "try again" after a decline: a new payment with a
// new key even if p is what was declined (the buyer topped up the card).
// Anything but a declined order behaves as Pay: a paid order is never paid
// again, an open intent is resumed with its key.
func (c *Client) PayAgain(ctx context.Context, p Payment) (Result, error) {
	return c.tap(ctx, p, true)
}

// decide is what a tap does with the order's newest intent: the journal's
// rule for when a new key may be made. Resume (same key) unless the
// previous intent ended without charging anything: voided, refused (and
// voided), or declined and the buyer is paying anew (another payment, or
// again). A paid order is answered, never paid twice.
func decide(prev *Intent, p Payment, again bool) (resume, answer bool, err error) {
	switch {
	case prev == nil:
		return false, false, nil
	case prev.State == Open && prev.Payment != p:
		return false, false, ErrChanged
	case prev.State == Open:
		return true, false, nil
	case prev.State == Final && prev.Outcome == Succeeded:
		return false, true, nil
	case prev.State == Final && prev.Outcome == FailedPay:
		return false, !again && prev.Payment == p, nil
	case prev.State == Voided, prev.State == Rejected:
		return false, false, nil
	}
	return false, false, fmt.Errorf("client: intent %s is in an unknown state %q", prev.Key, prev.State)
}

func (c *Client) tap(ctx context.Context, p Payment, again bool) (Result, error) {
	if c.err != nil {
		return Result{}, c.err
	}
	var fromJournal bool
	now := time.Now().UTC()
	in, isNew, err := c.journal.tap(c.scope, p, func(prev *Intent) (Intent, bool, error) {
		resume, ans, err := decide(prev, p, again)
		switch {
		case err != nil:
			if prev != nil {
				return *prev, false, err
			}
			return Intent{}, false, err
		case resume || ans:
			fromJournal = ans
			return *prev, false, nil
		}
		next := Intent{Key: NewKey(), Scope: c.scope, Payment: p, State: Open, CreatedAt: now, UpdatedAt: now}
		if prev != nil {
			next.Replaces = prev.Key
		}
		return next, true, nil
	})
	switch {
	case errors.Is(err, ErrChanged):
		return Result{Key: in.Key, State: Unknown}, err
	case err != nil:
		return Result{}, err
	case fromJournal:
		return Result{Key: in.Key, PaymentID: in.PaymentID, State: in.Outcome, Attempts: in.Attempts, FromJournal: true,
			Detail: "answered from the journal"}, nil
	}
	if isNew && c.cfg.AfterJournal != nil {
		c.cfg.AfterJournal()
	}
	r, err := c.fly(ctx, in)
	if isNew {
		r.Replaces = in.Replaces
	}
	return r, err
}

// Resume finishes every open intent of this client's scope (an app that
// restarts). Open intents of other callers or APIs are left for them.
func (c *Client) Resume(ctx context.Context) ([]Result, error) {
	if c.err != nil {
		return nil, c.err
	}
	open, _, err := c.journal.OpenIntents(c.scope)
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, in := range open {
		r, err := c.fly(ctx, in)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// fly runs the intent, or waits for the run of it already in progress in
// this process (two taps at once share one run).
func (c *Client) fly(ctx context.Context, in Intent) (Result, error) {
	r, _, err := c.journal.fly(in.Key, ctx.Done(), func() (Result, error) {
		// Re-read: a run that just ended may have settled it.
		if cur, err := c.journal.Get(in.Key); err == nil {
			in = cur
		}
		if in.State != Open {
			return Result{Key: in.Key, PaymentID: in.PaymentID, State: resultState(in), Attempts: in.Attempts, FromJournal: true}, nil
		}
		return c.run(ctx, in)
	})
	return r, err
}

func resultState(in Intent) string {
	switch in.State {
	case Voided:
		return Void
	case Rejected:
		return Refused
	}
	return in.Outcome
}

// run sends the intent until it has an answer, then resolves what is left.
func (c *Client) run(ctx context.Context, in Intent) (Result, error) {
	if in.Scope != c.scope {
		// Sent under another caller the key would name a new payment.
		return Result{}, fmt.Errorf("client: intent %s belongs to %s at %s, not %s at %s", in.Key, in.Scope.Caller, in.Scope.API, c.scope.Caller, c.scope.API)
	}
	if !unreserved(in.Key) {
		return Result{}, fmt.Errorf("client: key %q is not made of URL-unreserved characters", in.Key)
	}
	body, err := json.Marshal(in.Payment)
	if err != nil {
		return Result{}, err
	}
	for attempt := 0; attempt < c.cfg.Attempts; attempt++ {
		in.Attempts++
		a, err := c.send(ctx, "/payments", in.Key, body)
		if c.cfg.AfterSend != nil {
			c.cfg.AfterSend()
		}
		if err != nil {
			if ctx.Err() != nil {
				return c.keep(in, "stopped: "+ctx.Err().Error())
			}
			if attempt+1 < c.cfg.Attempts {
				if werr := c.wait(ctx, attempt, 0, "no answer: "+shortErr(err)); werr != nil {
					return c.keep(in, werr.Error())
				}
			}
			continue
		}
		switch {
		case a.final():
			return c.finish(in, a)
		case a.status == http.StatusAccepted:
			return c.resolve(ctx, in, nil)
		case a.retryable():
			if attempt+1 < c.cfg.Attempts {
				if werr := c.wait(ctx, attempt, a.retryAfter, fmt.Sprintf("answered %d", a.status)); werr != nil {
					return c.keep(in, werr.Error())
				}
			}
		case a.status == http.StatusUnauthorized:
			return c.keep(in, "unauthorized: check the token")
		case a.misdirected():
			// Not followed (a 421 loop, or a home URL it must not send
			// the token to): nothing ran where it was answered.
			return c.keep(in, "misdirected: the caller's home "+a.HomeURL+" was not followed")
		default:
			// A refusal, or an answer the API never gives: a question. An
			// earlier send (this run's or a killed one's) may have paid.
			return c.resolve(ctx, in, &a)
		}
	}
	// Out of attempts with no answer: ask, don't guess.
	return c.resolve(ctx, in, nil)
}

// resolve asks "did it go through?" until the answer is final or void.
// refusal is the answer that sent us here, if one did: when the key turns
// out void, the intent is refused rather than merely voided.
func (c *Client) resolve(ctx context.Context, in Intent, refusal *answer) (Result, error) {
	// The key goes into the path verbatim: it is made of unreserved
	// characters only, so the path names exactly the key that was sent.
	path := "/payments/" + in.Key + "/resolve"
	for poll := 0; poll < c.cfg.ResolvePolls; poll++ {
		a, err := c.send(ctx, path, "", nil)
		why := ""
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return c.keep(in, "stopped: "+ctx.Err().Error())
			}
			why = "no answer: " + shortErr(err)
		case a.final():
			return c.finish(in, a)
		case a.status == http.StatusOK && a.State == Void, a.voided():
			if refusal != nil && !refusal.voided() {
				return c.refused(in, *refusal)
			}
			return c.voided(in)
		case a.status == http.StatusUnauthorized:
			return c.keep(in, "unauthorized: check the token")
		case a.status == http.StatusAccepted:
			why = "still confirming"
		default:
			why = fmt.Sprintf("resolve answered %d", a.status)
		}
		if poll+1 < c.cfg.ResolvePolls {
			if werr := c.wait(ctx, poll, a.retryAfter, why); werr != nil {
				break
			}
		}
	}
	return c.keep(in, "the payment is still being confirmed; it will be resumed with the same key")
}

func (c *Client) finish(in Intent, a answer) (Result, error) {
	in.State, in.Outcome, in.PaymentID = Final, a.State, a.PaymentID
	if err := c.put(in); err != nil {
		return Result{}, err
	}
	return Result{Key: in.Key, PaymentID: a.PaymentID, State: a.State, Replayed: a.replayed, Attempts: in.Attempts}, nil
}

func (c *Client) voided(in Intent) (Result, error) {
	in.State, in.Outcome = Voided, Void
	if err := c.put(in); err != nil {
		return Result{}, err
	}
	return Result{Key: in.Key, State: Void, Attempts: in.Attempts, Detail: "not found, and it never will be: a new tap makes a new key"}, nil
}

func (c *Client) refused(in Intent, a answer) (Result, error) {
	why := a.title
	if why == "" {
		why = http.StatusText(a.status)
	}
	in.State, in.Outcome = Rejected, fmt.Sprintf("%d %s", a.status, why)
	if err := c.put(in); err != nil {
		return Result{}, err
	}
	return Result{Key: in.Key, State: Refused, Attempts: in.Attempts,
		Detail: "refused (" + in.Outcome + "); nothing was charged and the key is void: a new tap makes a new key"}, nil
}

// keep leaves the intent open: the next run resumes it with the same key.
func (c *Client) keep(in Intent, detail string) (Result, error) {
	if err := c.put(in); err != nil {
		return Result{}, err
	}
	return Result{Key: in.Key, State: Unknown, Attempts: in.Attempts, Detail: detail}, nil
}

func (c *Client) put(in Intent) error {
	in.UpdatedAt = time.Now().UTC()
	if err := c.journal.Put(in); err != nil {
		return err
	}
	if in.State != Open && c.cfg.AfterFinal != nil {
		c.cfg.AfterFinal()
	}
	return nil
}

// wait sleeps with exponential backoff and full jitter, or for what the
// server's Retry-After asked, capped and jittered, whichever is longer.
func (c *Client) wait(ctx context.Context, attempt int, retryAfter time.Duration, why string) error {
	d := c.delay(attempt, retryAfter)
	if c.cfg.Progress != nil {
		c.cfg.Progress(attempt+1, d, why)
	}
	return c.cfg.Sleep(ctx, d)
}

// delay is the wait before the next try (see Config.RetryAfterCap).
func (c *Client) delay(attempt int, retryAfter time.Duration) time.Duration {
	d := Backoff(attempt, c.cfg.BackoffBase, c.cfg.BackoffCap)
	if retryAfter > 0 {
		ra := min(retryAfter, c.cfg.RetryAfterCap)
		d = max(d, ra+uniform(ra/2))
	}
	return d
}

// Backoff is full jitter: a uniform wait in [0, min(cap, base·2^attempt)).
func Backoff(attempt int, base, cap time.Duration) time.Duration {
	ceil := cap
	if attempt < 30 && base<<attempt < cap {
		ceil = base << attempt
	}
	return uniform(ceil)
}

// uniform is a random duration in [0, ceil).
func uniform(ceil time.Duration) time.Duration {
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
	HomeURL     string `json:"home_url"` // a 421's: the caller's home
}

// misdirected is the API's 421: another Region is the caller's home.
func (a answer) misdirected() bool {
	return a.status == http.StatusMisdirectedRequest && strings.HasSuffix(a.problemType, "/misdirected")
}

// final is the API's own final answer, and nothing else: 201 SUCCEEDED,
// 402 FAILED, or 502 psp-rejected with state FAILED (the PSP refused the
// request itself on its first call: nothing charged, the same answer
// wherever it is rendered), each with the payment id.
func (a answer) final() bool {
	return a.PaymentID != "" &&
		(a.status == http.StatusCreated && a.State == Succeeded || a.status == http.StatusPaymentRequired && a.State == FailedPay ||
			a.status == http.StatusBadGateway && a.State == FailedPay && strings.HasSuffix(a.problemType, "/psp-rejected"))
}

// retryable answers say "not now", never "no": the same key, later.
func (a answer) retryable() bool {
	return a.status == http.StatusConflict && !a.voided() || a.status == http.StatusTooManyRequests || a.status >= 500
}

func (a answer) voided() bool {
	return a.status == http.StatusConflict && strings.HasSuffix(a.problemType, "/key-voided")
}

// maxFollows bounds how many 421s one send follows: two moves while a
// request is on its way is already a failover gone round; more is a loop.
const maxFollows = 2

// send posts to the caller's home: the base URL, or where a 421 sent this
// client. A 421 (misdirected: another Region is the caller's home) is
// followed at once with the same key and body, because nothing ran where
// it was answered.
func (c *Client) send(ctx context.Context, path, key string, body []byte) (answer, error) {
	for hop := 0; ; hop++ {
		base := c.base()
		a, err := c.sendTo(ctx, base, path, key, body)
		if base != c.cfg.BaseURL && (err != nil || a.status == http.StatusTooManyRequests || a.status >= 500) {
			// The home a 421 named stopped answering, or is fenced (a
			// stage throttled to 0 answers 429) or failing (its Region may
			// be failing over): the next send goes to the entry point
			// again, which names the home as it is then.
			c.forget(base)
		}
		if err != nil || !a.misdirected() || hop == maxFollows || !c.follow(a.HomeURL) {
			return a, err
		}
	}
}

// forget drops home as this client's home, if it still is.
func (c *Client) forget(home string) {
	c.homeMu.Lock()
	defer c.homeMu.Unlock()
	if c.home == home {
		c.home = ""
	}
}

// base is where the next send goes.
func (c *Client) base() string {
	c.homeMu.Lock()
	defer c.homeMu.Unlock()
	if c.home != "" {
		return c.home
	}
	return c.cfg.BaseURL
}

// follow takes a 421's home URL as this client's home, if it is one of
// Config.HomeURLs: the bearer token goes there, so never to a host the
// client was not configured with, whatever a response says.
func (c *Client) follow(homeURL string) bool {
	known := false
	for _, u := range c.cfg.HomeURLs {
		if strings.TrimRight(u, "/") == strings.TrimRight(homeURL, "/") && homeURL != "" {
			known = true
		}
	}
	if !known {
		return false
	}
	c.homeMu.Lock()
	defer c.homeMu.Unlock()
	c.home = homeURL
	return true
}

func (c *Client) sendTo(ctx context.Context, base, path, key string, body []byte) (answer, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+path, bytes.NewReader(body))
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
	a := answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true",
		retryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now())}
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

// retryAfter reads a Retry-After value: delay-seconds or an HTTP-date
// (RFC 9110 §10.2.3). Anything else, or a time already past, is none.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, int64(1<<62/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
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
