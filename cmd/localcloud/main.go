// Command localcloud provisions the local cloud from the synthesized template,
// describes what it holds, and runs it as a stack.
//
//	localcloud up [--template cdk.out/Oncepay.template.json]
//	localcloud describe
//	localcloud serve [--admin 127.0.0.1:8071]   run the stack until SIGTERM
//	localcloud status [--admin 127.0.0.1:8071]  print the running stack's status
//	localcloud standby --primary-pg-port P      give this cluster the primary's roles and ledger schema
//
// A Region of the two-Region local cloud (scripts/localcloud.sh regions-up,
// docs/regions.md) is one `up` and one `serve` with a state directory, an
// admin address, a front door and stores of its own.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/awsclient/dynamoclient"
	"github.com/oncepay/oncepay/internal/awsclient/fullconfig"
	"github.com/oncepay/oncepay/internal/awsclient/snsclient"
	"github.com/oncepay/oncepay/internal/awsclient/sqsclient"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/provision"
	"github.com/oncepay/oncepay/internal/localcloud/stack"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: localcloud up|describe|serve|status [flags]")
	}
	root, err := localenv.Root()
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	c := provision.Config{StateDir: filepath.Join(root, ".local"), Log: os.Stdout}
	fs.StringVar(&c.Template, "template", filepath.Join(root, "cdk.out", "Oncepay.template.json"), "synthesized template")
	fs.StringVar(&c.StackName, "stack", "Oncepay", "stack name (the outputs file's key)")
	fs.StringVar(&c.Region, "region", "us-east-1", "region the emulators use")
	fs.StringVar(&c.DynamoURL, "dynamodb", envOr("ONCEPAY_DDB_URL", "http://127.0.0.1:8000"), "DynamoDB Local endpoint")
	fs.StringVar(&c.AWSURL, "aws", envOr("ONCEPAY_AWS_URL", "http://127.0.0.1:4566"), "moto / LocalStack endpoint")
	fs.StringVar(&c.PGHost, "pg-host", "127.0.0.1", "PostgreSQL host")
	pgPort, err := strconv.Atoi(envOr("ONCEPAY_PG_PORT", "54329"))
	if err != nil {
		return fmt.Errorf("localcloud: ONCEPAY_PG_PORT: %w", err)
	}
	fs.IntVar(&c.PGPort, "pg-port", pgPort, "PostgreSQL port (default $ONCEPAY_PG_PORT, as scripts/localcloud.sh starts it)")
	fs.StringVar(&c.Database, "db", "oncepay", "ledger database")
	// The second Region's stores (issue 15): tests only, nothing of the stack.
	fs.StringVar(&c.R2Region, "r2-region", "us-west-2", "the second Region's name")
	fs.StringVar(&c.R2DynamoURL, "r2-dynamodb", envOr("ONCEPAY_R2_DDB_URL", "http://127.0.0.1:8001"), "the second Region's DynamoDB Local")
	r2PGPort, err := strconv.Atoi(envOr("ONCEPAY_R2_PG_PORT", "54330"))
	if err != nil {
		return fmt.Errorf("localcloud: ONCEPAY_R2_PG_PORT: %w", err)
	}
	fs.IntVar(&c.R2PGPort, "r2-pg-port", r2PGPort, "the second Region's PostgreSQL port, 0 for none (default $ONCEPAY_R2_PG_PORT, as scripts/localcloud.sh starts it)")
	fs.StringVar(&c.PSPURL, "psp", envOr("ONCEPAY_PSP_URL", "http://127.0.0.1:8090"), "PSP simulator URL")
	fs.StringVar(&c.CacheURL, "cache", "redis://127.0.0.1:"+envOr("ONCEPAY_CACHE_PORT", "56379"), "the dedup cache (as scripts/localcloud.sh starts it)")
	fs.StringVar(&c.FrontDoor, "frontdoor", envOr("ONCEPAY_FRONTDOOR_URL", "http://127.0.0.1:8080"), "local front door URL")
	fs.DurationVar(&c.Timeout, "timeout", 60*time.Second, "readiness wait per service")
	fs.StringVar(&c.StateDir, "state", c.StateDir, "state directory (env, resources, checkpoints)")
	replicas := fs.String("replica-dynamodb", "", "a two-Region stack's other Regions' DynamoDB Locals, region=url,… (a global table's replicas are made there too)")
	fs.StringVar(&c.RegionURLs, "region-urls", "", "the api's ONCEPAY_REGION_URLS (JSON): the local Regions' front doors")
	primaryPG := fs.Int("primary-pg-port", 0, "standby: the primary Region's PostgreSQL port")
	admin := fs.String("admin", envOr(stack.AdminAddrVar, stack.DefaultAdminAddr), "admin API address (serve listens, status asks)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *replicas != "" {
		c.Replicas = map[string]string{}
		for _, pair := range strings.Split(*replicas, ",") {
			region, url, ok := strings.Cut(pair, "=")
			if !ok || region == "" || url == "" {
				return fmt.Errorf("localcloud: -replica-dynamodb: %q is not region=url", pair)
			}
			c.Replicas[region] = url
		}
	}
	switch args[0] {
	case "serve":
		return serve(ctx, c, *admin)
	case "status":
		return status(ctx, os.Stdout, *admin)
	case "standby":
		if *primaryPG == 0 {
			return fmt.Errorf("localcloud: standby needs -primary-pg-port")
		}
		return c.Standby(ctx, *primaryPG)
	case "up":
		if _, err := provision.Up(ctx, c); err != nil {
			return err
		}
		fmt.Println("localcloud: provisioned; environment in .local/env, outputs in .local/outputs.json")
		return nil
	case "describe":
		env, err := localenv.Load()
		if err != nil {
			return err
		}
		if err := env.Export(); err != nil {
			return err
		}
		phys, err := provision.ReadResources(c.StateDir)
		if err != nil {
			return err
		}
		cfg, err := fullconfig.Load(ctx)
		if err != nil {
			return err
		}
		p := &provision.Provisioner{DynamoDB: dynamoclient.New(cfg), SQS: sqsclient.New(cfg), SNS: snsclient.New(cfg)}
		out, err := p.Describe(ctx, phys)
		if err != nil {
			return err
		}
		fmt.Print(out)
		fmt.Printf("postgres ledger %s\n", env.Get(stackenv.LedgerDSN))
		return nil
	}
	return fmt.Errorf("localcloud: unknown command %q", args[0])
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
