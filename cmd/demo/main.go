// Command demo runs on the local cloud (after `make up`): it shows what the
// template provisioned, plays the story's opening beat through the front
// door — the PSP charges but its reply (and its webhook) is lost, so the
// payment is UNKNOWN — then a live payment with the CLI from the tap to the
// push on the phone, then the story's whole story on the real handlers with a
// fake clock (internal/story), printing its event table and final count, then
// the Region beat on two local Regions (internal/testkit/regions), and
// last the opening's payment as the live resolver settled it on its
// schedule. It exits non-zero when any beat's count differs from what it
// must be.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/localcloud/frontdoor"
	"github.com/oncepay/oncepay/internal/localcloud/inspect"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/phone"
	"github.com/oncepay/oncepay/internal/testkit/regions"
	"github.com/oncepay/oncepay/internal/testkit/story"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "demo: FAILED:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	root, err := localenv.Root()
	if err != nil {
		return err
	}
	env, err := localenv.Load()
	if err != nil {
		return err
	}
	fmt.Println("== the local cloud, provisioned from cdk.out/Oncepay.template.json")
	describe := exec.CommandContext(ctx, "go", "run", "./cmd/localcloud", "describe")
	describe.Dir, describe.Stdout, describe.Stderr = root, os.Stdout, os.Stderr
	if err := describe.Run(); err != nil {
		return fmt.Errorf("describe: %w", err)
	}

	secret, err := frontdoor.LoadOrCreateSecret(filepath.Join(root, ".local", "frontdoor.key"))
	if err != nil {
		return err
	}
	token, err := frontdoor.Mint(secret, "u1", time.Hour, time.Now())
	if err != nil {
		return err
	}
	door, sim := env.Get(stackenv.FrontDoorURL), env.Get(stackenv.PSPURL)
	lost, err := lostReply(ctx, door, sim, token)
	if err != nil {
		return err
	}
	if err := liveBeat(ctx, root, door, env.Get(stackenv.LedgerDSN), token); err != nil {
		return err
	}

	fmt.Println("\n== the story end to end (docs/mechanism.md §2), on the real handlers over the local cloud, on a fake clock")
	if _, err := story.Run(ctx, os.Stdout); err != nil {
		return fmt.Errorf("story: %w", err)
	}
	fmt.Println("== the count is the story's")

	fmt.Println("\n== the sixth beat, across Regions (docs/regions.md): two local Regions, each its own DynamoDB Local, PostgreSQL cluster, queues and topic, replicating with a real 1.0 s lag")
	if err := regions.Run(ctx, os.Stdout); err != nil {
		return fmt.Errorf("regions: %w", err)
	}
	fmt.Println("== the Region beat's count is the seed's")

	return settled(ctx, root, door, sim, env.Get(stackenv.LedgerDSN), token, lost)
}

// opening is the lost-reply beat's payment, for the settling beat.
type opening struct {
	key, pid, body string
	answered       time.Time // when the 202 came
}

// lostReply is the story's opening beat: the PSP charges, but its reply is
// lost and its webhook is late, so the api can only answer 202 and record
// UNKNOWN. On the live stack the webhook would otherwise settle the payment
// within the api's own deadline (the simulator sends it at once), and the
// beat would show a 201 instead of the unknown the story starts from.
func lostReply(ctx context.Context, door, sim, token string) (opening, error) {
	key := fmt.Sprintf("demo-%d", time.Now().UnixNano())
	o := opening{key: key, pid: ids.PaymentID(ids.Scope("u1", key)),
		body: `{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_card_visa"}`}
	fmt.Printf("\n== tapped once: u1 pays order 42, $30.00, Idempotency-Key %s (payment %s)\n", key, o.pid)
	for _, f := range []string{
		fmt.Sprintf(`{"match":{"idempotency_key":%q},"kind":"lose_reply","delay_ms":8000}`, ids.ChargeKey(o.pid)),
		fmt.Sprintf(`{"match":{"idempotency_key":%q},"kind":"webhook_delay","delay_ms":%d}`, ids.ChargeKey(o.pid), webhookDelay.Milliseconds()),
	} {
		if r, _, err := call(ctx, http.MethodPost, sim+"/_sim/faults", "", "", f); err != nil || r.status/100 != 2 {
			return o, fmt.Errorf("inject fault %s: %d %s %v", f, r.status, r.body, err)
		}
	}
	fmt.Printf("   the PSP will charge, then lose its reply; its webhook will come %s late\n", webhookDelay)
	start := time.Now()
	resp, hdr, err := call(ctx, http.MethodPost, door+"/payments", token, key, o.body)
	if err != nil {
		return o, err
	}
	o.answered = time.Now()
	fmt.Printf("   first call  (%4.1fs): %d %s  Location: %s\n", time.Since(start).Seconds(), resp.status, resp.body, hdr.Get("Location"))
	if resp.status != http.StatusAccepted {
		return o, fmt.Errorf("first call answered %d, want 202 PROCESSING", resp.status)
	}
	resp, hdr, err = call(ctx, http.MethodPost, door+"/payments", token, key, o.body)
	if err != nil {
		return o, err
	}
	fmt.Printf("   the retry           : %d %s  Idempotent-Replayed: %s\n", resp.status, resp.body, hdr.Get("Idempotent-Replayed"))
	if resp.status != http.StatusAccepted || hdr.Get("Idempotent-Replayed") != "true" {
		return o, fmt.Errorf("retry answered %d (replayed=%q), want 202 from the pointer", resp.status, hdr.Get("Idempotent-Replayed"))
	}
	if err := oneCharge(ctx, sim, o.pid); err != nil {
		return o, err
	}
	fmt.Printf("\n== tapped once, charged once: 1 charge; the payment is UNKNOWN until the resolver settles it (every minute; the demo comes back to it at the end)\n")
	return o, nil
}

// webhookDelay holds the opening's webhook past the demo, so the resolver
// alone settles the payment.
const webhookDelay = 3 * time.Minute

// settleLimit bounds the wait for the resolver after the opening's 202: its
// schedule is every minute, plus the run itself.
const settleLimit = 100 * time.Second

// settled is the last beat: the opening's UNKNOWN payment, settled by the
// live resolver on its schedule with no client help; a retry of the key then
// answers 201 SUCCEEDED, and the PSP still holds one charge.
func settled(ctx context.Context, root, door, sim, dsn, token string, o opening) error {
	fmt.Printf("\n== the opening's lost reply (its 202 was %s ago): waiting for the resolver (every minute), which replays the charge with the same key\n", time.Since(o.answered).Round(time.Second))
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to the ledger: %w", err)
	}
	defer conn.Close(context.Background())
	phonePath := phone.DefaultPath(filepath.Join(root, ".local"))
	var rep inspect.Report
	for {
		if rep, err = inspect.Read(ctx, conn, phonePath, o.pid); err != nil {
			return fmt.Errorf("inspect %s: %w", o.pid, err)
		}
		if rep.Payment.State != "UNKNOWN" && len(rep.Pushes) > 0 {
			break
		}
		if time.Since(o.answered) > settleLimit {
			return fmt.Errorf("payment %s is %s with %d push(es) %s after its 202, want SUCCEEDED and its push (is the resolver's schedule running? `make status`)",
				o.pid, rep.Payment.State, len(rep.Pushes), settleLimit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	p := rep.Payment
	fmt.Printf("   ledger: %s at +%.0fs after the 202, psp_charge %s, resolve_attempts %d, %d credit(s)\n",
		p.State, p.UpdatedAt.Sub(o.answered).Seconds(), deref(p.PSPCharge), p.ResolveAttempts, len(rep.Credits))
	for _, ph := range rep.Pushes {
		fmt.Printf("   the phone got: %q %q  replace id %s\n", ph.Title, ph.Body, ph.ReplaceID)
	}
	if p.State != "SUCCEEDED" || len(rep.Credits) != 1 || rep.Credits[0].Amount != 3000 {
		return fmt.Errorf("payment %s settled %s with %d credit(s), want SUCCEEDED credited once with 3000", o.pid, p.State, len(rep.Credits))
	}
	for _, e := range phone.Show(rep.Pushes) {
		if e.Alerts != 1 {
			return fmt.Errorf("the phone shows %d alerts under replace id %s, want 1", e.Alerts, e.ReplaceID)
		}
	}
	resp, hdr, err := call(ctx, http.MethodPost, door+"/payments", token, o.key, o.body)
	if err != nil {
		return err
	}
	fmt.Printf("   a retry now : %d %s  Idempotent-Replayed: %s\n", resp.status, resp.body, hdr.Get("Idempotent-Replayed"))
	if resp.status != http.StatusCreated || !strings.Contains(resp.body, `"SUCCEEDED"`) {
		return fmt.Errorf("the retry after settling answered %d %s, want 201 SUCCEEDED", resp.status, resp.body)
	}
	if err := oneCharge(ctx, sim, o.pid); err != nil {
		return err
	}
	fmt.Println("\n== settled with no client help: one charge, one credit, one push")
	return nil
}

// oneCharge checks that the PSP simulator holds exactly one charge for pid.
func oneCharge(ctx context.Context, sim, pid string) error {
	charges, _, err := call(ctx, http.MethodGet, sim+"/_sim/charges", "", "", "")
	if err != nil {
		return err
	}
	var list []struct {
		ID             string `json:"id"`
		IdempotencyKey string `json:"idempotency_key"`
		Amount         int64  `json:"amount"`
	}
	if err := json.Unmarshal([]byte(charges.body), &list); err != nil {
		return fmt.Errorf("charges: %w", err)
	}
	n := 0
	for _, c := range list {
		if c.IdempotencyKey == ids.ChargeKey(pid) {
			n++
			fmt.Printf("   PSP charge %s under key %s, amount %d\n", c.ID, c.IdempotencyKey, c.Amount)
		}
	}
	if n != 1 {
		return fmt.Errorf("the PSP holds %d charges for %s, want exactly 1", n, pid)
	}
	return nil
}

type answer struct {
	status int
	body   string
}

func call(ctx context.Context, method, url, token, key, body string) (answer, http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // the client's timeout
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewBufferString(body))
	if err != nil {
		return answer{}, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, nil, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: string(bytes.TrimSpace(b))}, resp.Header, nil
}
