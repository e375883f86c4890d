// Command demo runs on the local cloud (after `make up`): it shows what the
// template provisioned, plays the seed's opening beat through the front
// door — the PSP charges but its reply is lost — and then the seed's whole
// story on the real handlers with a fake clock (internal/story), printing its
// event table and final count. It exits non-zero when any count differs
// from the seed's.
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
	"time"

	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/localcloud/frontdoor"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/stackenv"
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
	key := fmt.Sprintf("demo-%d", time.Now().UnixNano())
	pid := ids.PaymentID(ids.Scope("u1", key))

	fmt.Printf("\n== tapped once: u1 pays order 42, $30.00, Idempotency-Key %s (payment %s)\n", key, pid)
	fault := fmt.Sprintf(`{"match":{"idempotency_key":%q},"kind":"lose_reply","delay_ms":8000}`, ids.ChargeKey(pid))
	if _, _, err := call(ctx, http.MethodPost, sim+"/_sim/faults", "", "", fault); err != nil {
		return fmt.Errorf("inject fault: %w", err)
	}
	fmt.Println("   the PSP will charge, then lose its reply")
	body := `{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_card_visa"}`
	start := time.Now()
	resp, hdr, err := call(ctx, http.MethodPost, door+"/payments", token, key, body)
	if err != nil {
		return err
	}
	fmt.Printf("   first call  (%4.1fs): %d %s  Location: %s\n", time.Since(start).Seconds(), resp.status, resp.body, hdr.Get("Location"))
	if resp.status != http.StatusAccepted {
		return fmt.Errorf("first call answered %d, want 202 PROCESSING", resp.status)
	}
	resp, hdr, err = call(ctx, http.MethodPost, door+"/payments", token, key, body)
	if err != nil {
		return err
	}
	fmt.Printf("   the retry           : %d %s  Idempotent-Replayed: %s\n", resp.status, resp.body, hdr.Get("Idempotent-Replayed"))
	if resp.status != http.StatusAccepted || hdr.Get("Idempotent-Replayed") != "true" {
		return fmt.Errorf("retry answered %d (replayed=%q), want 202 from the pointer", resp.status, hdr.Get("Idempotent-Replayed"))
	}
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
	fmt.Println("\n== tapped once, charged once: 1 charge; the payment stays UNKNOWN until the resolver settles it")

	fmt.Println("\n== the seed's story end to end (Part 13), on the real handlers over the local cloud, on a fake clock")
	if _, err := story.Run(ctx, os.Stdout); err != nil {
		return fmt.Errorf("story: %w", err)
	}
	fmt.Println("== the count is the seed's")
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
