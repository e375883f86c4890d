// Command chaos runs randomized fault schedules over the whole payment path
// on the local cloud (after `make up`) and checks the effectively-once
// invariants after each one (internal/chaos). It exits non-zero when any
// schedule finds a violation; a failing seed replays with -runs 1 -seed S.
//
// A long run (10,000 schedules) takes -fresh-every N: after every N
// schedules, once that batch's worlds are closed, it runs -fresh (by
// default a restart of DynamoDB Local, whose writes slow tenfold as the
// stream records of deleted tables pile up). Every world makes its own
// tables, so no schedule sees the restart. It is for the emulators alone
// (`scripts/localcloud.sh up`): the restart refuses while the live stack
// runs, whose provisioned tables and stream it would take away.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"

	"github.com/oncepay/oncepay/internal/testkit/chaos"
)

func main() {
	runs := flag.Int("runs", 200, "how many schedules")
	seed := flag.Uint64("seed", 1, "the first schedule's seed; the others follow it")
	workers := flag.Int("workers", 4, "worlds played side by side")
	trace := flag.Bool("trace", false, "print every schedule's steps")
	progress := flag.Int("progress", 100, "print a progress line to stderr every N schedules (0: none)")
	freshEvery := flag.Int("fresh-every", 0, "run -fresh after every N schedules (0: never)")
	fresh := flag.String("fresh", "bash "+filepath.Join(moduleRoot(), "scripts", "localcloud.sh")+" restart-dynamodb", "the command -fresh-every runs (through sh -c)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var tw io.Writer
	if *trace {
		tw = os.Stdout
	}
	cfg := chaos.Config{First: *seed, Runs: *runs, Workers: *workers, Trace: tw}
	if *progress > 0 {
		cfg.Progress, cfg.ProgressEvery = os.Stderr, *progress
	}
	if *freshEvery > 0 {
		cfg.BatchRuns = *freshEvery
		cfg.Between = func(ctx context.Context) error {
			cmd := exec.CommandContext(ctx, "sh", "-c", *fresh)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("%s: %w", *fresh, err)
			}
			return nil
		}
	}
	sum, err := chaos.RunMany(ctx, cfg)
	sum.Print(os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	if err := sum.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// moduleRoot is the nearest directory at or above the working directory
// holding go.mod (the working directory itself when there is none), so the
// default -fresh command finds the scripts from anywhere in the checkout.
func moduleRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		if filepath.Dir(dir) == dir {
			return wd
		}
	}
}
