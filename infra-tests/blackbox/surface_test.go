package blackbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/localcloud/frontdoor"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// The stack outputs the suite reads besides the ones localenv maps
// (cdk/oncepay's OutputHTTPAPIURL and OutputWebhookURL; lambdas/ and cdk/
// stay out of a test's imports, so the ids are spelled here).
const (
	outputHTTPAPIURL = "HttpApiUrl"
	outputWebhookURL = "WebhookUrl"
)

// Variables a deployed run sets (docs/deploy.md, "The black-box suite").
const (
	// envTokenCommand prints a bearer token for the caller given as its
	// first argument (a Cognito sign-in, say). Locally tokens are minted
	// with the front door's key, as `make token` does.
	envTokenCommand = "ONCEPAY_TOKEN_COMMAND"
	// envInspect is the inspect command (`make -s inspect`'s); the payment
	// is appended as `--payment <id>`. Default: ./cmd/inspect, built once.
	envInspect = "ONCEPAY_INSPECT"
	// envPSPKey is the Stripe test key a deployed run counts charges with.
	envPSPKey = "ONCEPAY_PSP_API_KEY"
	// envAdminAddr is the local cloud's admin API (localcloud serve -admin).
	envAdminAddr = "ONCEPAY_ADMIN_ADDR"
)

// surface is the stack's public surface, shared by every case of a run.
type surface struct {
	deployed   bool   // ONCEPAY_OUTPUTS names a deployed stack's outputs
	apiURL     string // HttpApiUrl, ending in "/"
	webhookURL string // WebhookUrl
	pspURL     string // the PSP simulator (local) or Stripe's API (deployed)
	adminURL   string // the local cloud's admin API; "" when deployed
	topicArn   string // PushTopicArn
	totals     string // TotalsTableName: the stream job's sink
	recount    string // RecountQueueUrl: the stream job's recount requests

	httpc   *http.Client
	tokens  tokens
	pushes  *pushLog
	inspect *inspector
	psp     psp
}

var (
	sharedOnce sync.Once
	shared     *surface
	sharedErr  error
	// closers undo what the suite made on the stack (its push queue and
	// subscription, its inspect build); TestMain runs them after every case.
	closers []func()
)

// lateWatch is how long the suite keeps watching its last checked payment
// for a late second push before it ends. Earlier payments are watched for
// the rest of the suite (the crash run's minutes included); a redelivery
// comes after the events queue's 180 s visibility timeout, so only payments
// checked that long before the end are covered against it, and the summary
// line says how long they were watched (shortest, median).
const lateWatch = 20 * time.Second

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil && shared.pushes != nil {
		late, n, shortest, median := shared.pushes.lateCopies(lateWatch)
		errs := shared.pushes.readErrors()
		fmt.Printf("blackbox: late pushes: %d of %d checked payments (watched after their checks: shortest %s, median %s; %d receive errors)\n",
			len(late), n, shortest.Round(time.Second), median.Round(time.Second), errs)
		if errs > 0 && len(late) > 0 {
			// A receive whose delete failed hands the same push back after
			// the suite queue's visibility timeout: said, not excused.
			fmt.Println("blackbox: the suite's push reader had errors: a late copy may be its own redelivery")
		}
		for _, l := range late {
			fmt.Println("blackbox: FAIL: a push after its case had counted them:", l)
		}
		if len(late) > 0 && code == 0 {
			code = 1
		}
	}
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
	os.Exit(code)
}

// unavailable is testenv's rule for what the suite finds missing: skip
// outside CI, fail with CI set.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("CI: required part of the stack unavailable: "+format, args...)
	}
	t.Skipf("stack unavailable (run `make up`): "+format, args...)
}

// live returns the stack's surface, checking on every call that its parts
// answer (testenv's CI rule applies), and opening the shared parts (the push
// queue, inspect) on the first.
func live(t *testing.T) *surface {
	t.Helper()
	env := testenv.Load(t)
	deployed := os.Getenv("ONCEPAY_OUTPUTS") != ""
	outputs, err := readOutputs(deployed)
	if err != nil {
		unavailable(t, "stack outputs: %v", err)
	}
	s := &surface{deployed: deployed, topicArn: env.Get(stackenv.PushTopicArn)}
	s.apiURL = outputs[outputHTTPAPIURL]
	s.totals = outputs["TotalsTableName"]
	s.recount = outputs["RecountQueueUrl"]
	if s.apiURL == "" && !deployed {
		// A local cloud provisioned before the front door wrote its
		// outputs: the front door's address is the same URL.
		s.apiURL = env.Get(stackenv.FrontDoorURL)
	}
	if s.apiURL == "" {
		unavailable(t, "no %s output", outputHTTPAPIURL)
	}
	s.apiURL = strings.TrimRight(s.apiURL, "/") + "/"
	s.webhookURL = outputs[outputWebhookURL]
	if s.webhookURL == "" {
		s.webhookURL = s.apiURL + "webhooks/psp"
	}
	if s.topicArn == "" {
		unavailable(t, "no PushTopicArn output")
	}
	testenv.Reachable(t, "the HTTP API", s.apiURL)
	if deployed {
		s.pspURL = "https://api.stripe.com"
		if u := os.Getenv(stackenv.PSPURL); u != "" {
			s.pspURL = u
		}
	} else {
		s.pspURL = env.Get(stackenv.PSPURL)
		if s.pspURL == "" {
			unavailable(t, "%s not in .local/env", stackenv.PSPURL)
		}
		testenv.Reachable(t, "the PSP simulator", s.pspURL)
		addr := os.Getenv(envAdminAddr)
		if addr == "" {
			addr = "127.0.0.1:8071"
		}
		s.adminURL = "http://" + addr
		testenv.Reachable(t, "the local cloud's admin API (localcloud serve)", s.adminURL)
	}
	// The AWS clients check their endpoints per the same rule.
	sqsc, snsc := testenv.SQS(t), testenv.SNS(t)

	sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		sh := &surface{httpc: &http.Client{Timeout: 60 * time.Second}}
		if sh.tokens, sharedErr = newTokens(deployed); sharedErr != nil {
			return
		}
		if sh.pushes, sharedErr = subscribe(ctx, sqsc, snsc, s.topicArn); sharedErr != nil {
			return
		}
		if sh.inspect, sharedErr = newInspector(ctx); sharedErr != nil {
			return
		}
		shared = sh
	})
	if sharedErr != nil {
		t.Fatalf("the suite's own parts on the stack: %v", sharedErr)
	}
	s.httpc, s.tokens, s.pushes, s.inspect = shared.httpc, shared.tokens, shared.pushes, shared.inspect
	if deployed {
		s.psp = stripeCharges{url: s.pspURL, key: os.Getenv(envPSPKey), httpc: s.httpc}
	} else {
		s.psp = &simulator{url: s.pspURL, httpc: s.httpc}
	}
	return s
}

// readOutputs reads the stack outputs: ONCEPAY_OUTPUTS (a `cdk deploy
// --outputs-file`), else the local cloud's .local/outputs.json, which has
// the same shape.
func readOutputs(deployed bool) (map[string]string, error) {
	path := os.Getenv("ONCEPAY_OUTPUTS")
	if !deployed {
		root, err := localenv.Root()
		if err != nil {
			return nil, err
		}
		path = filepath.Join(root, ".local", "outputs.json")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var stacks map[string]map[string]string
	if err := json.Unmarshal(b, &stacks); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(stacks) != 1 {
		return nil, fmt.Errorf("%s: want exactly one stack, found %d", path, len(stacks))
	}
	for _, o := range stacks {
		return o, nil
	}
	return nil, nil
}

// needSim skips a case that injects PSP faults when the stack talks to
// Stripe, which takes no faults. Locally the simulator is always there
// (live checked it, failing in CI).
func (s *surface) needSim(t *testing.T) *simulator {
	t.Helper()
	sim, ok := s.psp.(*simulator)
	if !ok {
		t.Skip("a deployed stack charges through Stripe: no PSP fault can be injected (run this case locally)")
	}
	return sim
}

// needAdmin skips a case that kills execution environments on a deployed
// stack, where Lambda offers no such action.
func (s *surface) needAdmin(t *testing.T) {
	t.Helper()
	if s.adminURL == "" {
		t.Skip("a deployed stack has no admin API to kill execution environments (run this case locally)")
	}
}

// tokens hands out a bearer token per caller.
type tokens struct {
	mint   func(caller string) (string, error)
	mu     *sync.Mutex
	byUser map[string]string
}

func newTokens(deployed bool) (tokens, error) {
	tk := tokens{mu: &sync.Mutex{}, byUser: map[string]string{}}
	if deployed {
		cmd := os.Getenv(envTokenCommand)
		if cmd == "" {
			return tk, fmt.Errorf("%s is not set: a deployed stack's callers need real tokens (docs/deploy.md)", envTokenCommand)
		}
		tk.mint = func(caller string) (string, error) {
			out, err := exec.Command("sh", "-c", cmd+` "$1"`, "sh", caller).Output()
			if err != nil {
				return "", fmt.Errorf("%s %s: %w", envTokenCommand, caller, err)
			}
			return strings.TrimSpace(string(out)), nil
		}
		return tk, nil
	}
	root, err := localenv.Root()
	if err != nil {
		return tk, err
	}
	// Read, never create: a key the front door does not hold would only
	// mint tokens it refuses.
	b, err := os.ReadFile(filepath.Join(root, ".local", "frontdoor.key"))
	if err != nil {
		return tk, fmt.Errorf("the front door's key (make up writes it): %w", err)
	}
	secret := []byte(strings.TrimSpace(string(b)))
	tk.mint = func(caller string) (string, error) {
		return frontdoor.Mint(secret, caller, 2*time.Hour, time.Now())
	}
	return tk, nil
}

func (tk tokens) of(caller string) (string, error) {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	if tok, ok := tk.byUser[caller]; ok {
		return tok, nil
	}
	tok, err := tk.mint(caller)
	if err != nil {
		return "", err
	}
	tk.byUser[caller] = tok
	return tok, nil
}

// payBody is POST /payments' body (docs/mechanism.md#design-2).
type payBody struct {
	MerchantID    string `json:"merchant_id"`
	OrderID       string `json:"order_id"`
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
	ReceiptEmail  string `json:"receipt_email,omitempty"`
}

// answer is what the API answered one call.
type answer struct {
	Status   int
	Replayed bool // Idempotent-Replayed: true
	Location string
	Raw      string
	Body     struct {
		PaymentID   string `json:"payment_id"`
		State       string `json:"state"`
		MerchantID  string `json:"merchant_id"`
		Amount      int64  `json:"amount"`
		PSPCharge   string `json:"psp_charge"`
		DeclineCode string `json:"decline_code"`
	}
	At time.Time // when the answer arrived
}

func (a answer) String() string {
	return fmt.Sprintf("%d replayed=%v %s", a.Status, a.Replayed, a.Raw)
}

// pay makes one POST /payments as caller with key.
func (s *surface) pay(ctx context.Context, caller, key string, body payBody) (answer, error) {
	tok, err := s.tokens.of(caller)
	if err != nil {
		return answer{}, err
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.apiURL+"payments", bytes.NewReader(b))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.httpc.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("POST payments (caller %s, key %s): %w", caller, key, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, fmt.Errorf("POST payments: read answer: %w", err)
	}
	a := answer{Status: resp.StatusCode, Replayed: resp.Header.Get("Idempotent-Replayed") == "true",
		Location: resp.Header.Get("Location"), Raw: string(bytes.TrimSpace(raw)), At: time.Now()}
	_ = json.Unmarshal(raw, &a.Body) // a problem+json answer fills none of it
	return a, nil
}

// post sends a JSON body and decodes a JSON answer into out (if not nil).
func post(ctx context.Context, c *http.Client, url string, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(b)
	}
	return do(ctx, c, http.MethodPost, url, body, out)
}

func get(ctx context.Context, c *http.Client, url string, out any) (int, error) {
	return do(ctx, c, http.MethodGet, url, nil, out)
}

func do(ctx context.Context, c *http.Client, method, url string, body io.Reader, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	var status int
	err = decodeStatus(c, req, out, &status)
	return status, err
}

// decodeResponse sends req and decodes a 2xx JSON answer into out.
func decodeResponse(c *http.Client, req *http.Request, out any) error {
	var status int
	return decodeStatus(c, req, out, &status)
}

func decodeStatus(c *http.Client, req *http.Request, out any, status *int) error {
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	*status = resp.StatusCode
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: read: %w", req.Method, req.URL, err)
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", req.Method, req.URL, resp.StatusCode, bytes.TrimSpace(raw))
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%s %s: decode %.200q: %w", req.Method, req.URL, raw, err)
		}
	}
	return nil
}

// errNotYet marks a condition eventually keeps waiting for.
var errNotYet = errors.New("not yet")

// eventually calls check until it returns nil or within runs out, and
// returns its last error (nil on success) and how long it took.
func eventually(ctx context.Context, within, every time.Duration, check func(context.Context) error) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(within)
	for {
		err := check(ctx)
		if err == nil {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return time.Since(start), err
		}
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
	}
}
