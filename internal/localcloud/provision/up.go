package provision

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"
	sestypes "github.com/aws/aws-sdk-go-v2/service/sesv2/types"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/awsclient/dynamoclient"
	"github.com/oncepay/oncepay/internal/awsclient/fullconfig"
	"github.com/oncepay/oncepay/internal/awsclient/sesclient"
	"github.com/oncepay/oncepay/internal/awsclient/snsclient"
	"github.com/oncepay/oncepay/internal/awsclient/sqsclient"
	"github.com/oncepay/oncepay/internal/home"
	"github.com/oncepay/oncepay/internal/ledger/migrations"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/phone"
	"github.com/oncepay/oncepay/internal/secrets"
)

// Config says where the local cloud listens and where to write its environment.
type Config struct {
	Template  string        // path of the synthesized template
	StateDir  string        // .local
	StackName string        // the outputs file's top-level key
	Region    string        // the emulators' region
	DynamoURL string        // DynamoDB Local (and its streams)
	AWSURL    string        // moto_server (SQS, SNS); LocalStack's port
	PGHost    string        // the project's own PostgreSQL cluster
	PGPort    int           //
	Database  string        // the ledger database
	PSPURL    string        // the PSP simulator
	CacheURL  string        // the dedup cache (redis://)
	FrontDoor string        // the local front door
	Timeout   time.Duration // readiness wait per service
	Log       io.Writer
	// SecretPrefix goes before each secret's logical id in its local name
	// (empty for make up; tests give their own).
	SecretPrefix string
	// The second Region's stores (issue 15), when R2PGPort is set: Up
	// gives its PostgreSQL cluster the first's roles and the migrated
	// TemplateDB, waits for its DynamoDB Local, and writes both endpoints
	// into .local/env (localenv.R2DynamoURL, localenv.R2LedgerAdminDSN).
	// None of the stack is provisioned there: tests make their own tables
	// and databases in both Regions.
	R2Region    string
	R2DynamoURL string
	R2PGPort    int
	// Replicas are the DynamoDB Locals of the other Regions of a
	// two-Region stack, by Region (a global table's replicas are made in
	// each; see Provisioner.Replicas).
	Replicas map[string]string
	// RegionURLs replaces the api's ONCEPAY_REGION_URLS (JSON, Region to
	// base URL): the local Regions' front doors.
	RegionURLs string
}

// secondary reports whether a DB cluster's properties make it an Aurora
// global database's secondary: a member of a global cluster (the primary's
// cluster is not one: the global cluster is made from it). A secondary
// with credentials or a database name of its own is refused, as RDS
// refuses it.
func secondary(props map[string]any) (bool, error) {
	if _, member := props["GlobalClusterIdentifier"]; !member {
		return false, nil
	}
	for _, k := range []string{"MasterUsername", "MasterUserPassword", "ManageMasterUserPassword", "DatabaseName"} {
		if _, set := props[k]; set {
			return true, fmt.Errorf("a global database's secondary sets %s: RDS takes it from the primary and refuses it here", k)
		}
	}
	return true, nil
}

// LocalEmailFrom is the local cloud's email sender (see Up).
const LocalEmailFrom = "receipts@oncepay.local"

// TemplateDB is the migrated, never-connected database tests clone from.
const TemplateDB = "oncepay_tmpl"

// BaseEnv is the environment that points the SDK at the emulators.
func (c Config) BaseEnv() localenv.Env {
	return localenv.Env{
		"AWS_REGION":                        c.Region,
		"AWS_ACCESS_KEY_ID":                 "test",
		"AWS_SECRET_ACCESS_KEY":             "test",
		"AWS_ENDPOINT_URL":                  c.AWSURL,
		"AWS_ENDPOINT_URL_DYNAMODB":         c.DynamoURL,
		"AWS_ENDPOINT_URL_DYNAMODB_STREAMS": c.DynamoURL,
		stackenv.PSPURL:                     c.PSPURL,
		stackenv.FrontDoorURL:               c.FrontDoor,
		stackenv.DedupCacheURL:              c.CacheURL,
	}
}

// DSN returns the connection string of database db on the local cluster.
func (c Config) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@%s:%d/%s?sslmode=disable", c.PGHost, c.PGPort, db)
}

// Up waits for the emulators and PostgreSQL, provisions the template's
// resources (tables, queues, topics, secrets; the DB cluster as the local
// PostgreSQL with its master user and database), migrates the test template
// database, resolves every function's environment, and writes .local/env,
// .local/outputs.json, .local/resources.json and .local/functions.json.
//
// It does not migrate the ledger database: as on AWS, only the template's
// migration custom resource does (localcloud/customresource, driven once
// the function runner can invoke the migration function).
func Up(ctx context.Context, c Config) (localenv.Env, error) {
	env := c.BaseEnv()
	if err := env.Export(); err != nil {
		return nil, err
	}
	cfg, err := fullconfig.Load(ctx)
	if err != nil {
		return nil, err
	}
	p := &Provisioner{DynamoDB: dynamoclient.New(cfg), SQS: sqsclient.New(cfg), SNS: snsclient.New(cfg),
		Secrets: secretsmanager.NewFromConfig(cfg), SecretPrefix: c.SecretPrefix, Log: c.Log, Region: c.Region}
	if err := c.waitReady(ctx, p); err != nil {
		return nil, err
	}
	for region, url := range c.Replicas {
		if p.Replicas == nil {
			p.Replicas = map[string]*dynamodb.Client{}
		}
		p.Replicas[region] = dynamoclient.New(cfg, func(o *dynamodb.Options) {
			o.BaseEndpoint, o.Region = aws.String(url), region
		})
		if err := c.waitFor(ctx, "the "+region+" replica's DynamoDB Local at "+url, func(ctx context.Context) error {
			_, err := p.Replicas[region].ListTables(ctx, &dynamodb.ListTablesInput{})
			return err
		}); err != nil {
			return nil, err
		}
	}
	t, err := ReadTemplate(c.Template)
	if err != nil {
		return nil, err
	}
	prev, err := ReadResources(c.StateDir)
	if err != nil && !errors.Is(err, localenv.ErrNotProvisioned) {
		return nil, err
	}
	phys, err := p.Provision(ctx, t)
	if err != nil {
		return nil, err
	}
	maps.Copy(phys, LocalClusters(t, c.Region, AccountID, c.PGHost, c.PGPort))
	maps.Copy(phys, Lambdas(t, c.Region, AccountID, prev))
	if err := p.ProvisionSecrets(ctx, t, phys); err != nil {
		return nil, err
	}
	ev := c.Evaluator(t, phys, p.Secrets)
	for _, id := range t.OfType("AWS::RDS::DBCluster") {
		sec, err := secondary(t.Resources[id].Properties)
		if err != nil {
			return nil, fmt.Errorf("localcloud: cluster %s: %w", id, err)
		}
		if sec {
			// An Aurora global database's secondary: its roles, schema and
			// rows are the primary's, copied (localcloud standby; the
			// replication itself is internal/localcloud/pgrepl's).
			p.logf("cluster %s: a global database's secondary on :%d; its ledger comes from the primary", id, c.PGPort)
			continue
		}
		if err := c.LocalCluster(ctx, ev, id); err != nil {
			return nil, err
		}
	}
	outputs := Outputs(t, phys)
	outputs["LedgerEndpoint"] = fmt.Sprintf("%s:%d", c.PGHost, c.PGPort)
	// The HTTP API is the stack's front door: the same outputs a deployed
	// stack has, pointing at the local one.
	if _, ok := t.Outputs["HttpApiUrl"]; ok && c.FrontDoor != "" {
		outputs["HttpApiUrl"] = strings.TrimSuffix(c.FrontDoor, "/")
	}
	if _, ok := t.Outputs["WebhookUrl"]; ok && c.FrontDoor != "" {
		outputs["WebhookUrl"] = strings.TrimSuffix(c.FrontDoor, "/") + "/webhooks/psp"
	}
	for out, v := range outputs {
		if name, ok := stackenv.OutputVars[out]; ok {
			env[name] = v
		}
	}
	// LOCAL-ONLY: the phone (a queue on the push topic, a platform
	// application for devices) is no resource of the template; its outputs
	// and variables sit beside the stack's so the phone's reader and the
	// tools find it, and a deployed stack's outputs have none of them.
	ph, err := phone.Provision(ctx, p.SQS, p.SNS, outputs["PushTopicArn"], phone.Names{})
	if err != nil {
		return nil, fmt.Errorf("localcloud: %w", err)
	}
	maps.Copy(outputs, ph.Outputs())
	maps.Copy(env, ph.Env())
	p.logf("phone: queue %s on the push topic (raw delivery off), devices under %s", phone.QueueName, ph.PlatformApplicationArn)
	// LOCAL-ONLY: the email channel's sender. A deployed stack sends from
	// the address oncepay:emailFrom names; a local template names none, so
	// the worker sends from LocalEmailFrom, an identity moto verifies at
	// once, and the emails are read back from moto (oncepay phone).
	if _, err := sesclient.New(cfg).CreateEmailIdentity(ctx, &sesv2.CreateEmailIdentityInput{EmailIdentity: aws.String(LocalEmailFrom)}); err != nil {
		var exists *sestypes.AlreadyExistsException
		if !errors.As(err, &exists) {
			return nil, fmt.Errorf("localcloud: email identity %s: %w", LocalEmailFrom, err)
		}
	}
	env[stackenv.LedgerDSN] = c.DSN(c.Database)
	env[localenv.LedgerAdminDSN] = c.DSN("postgres")
	if err := c.migrateTemplate(ctx, p); err != nil {
		return nil, err
	}
	if err := c.upRegion2(ctx, p, cfg, ev, env); err != nil {
		return nil, err
	}
	ec := c.EnvConfig(p.Secrets)
	// LOCAL-ONLY: a deployed stack names its SNS platform applications by
	// context, and a local template has none; the devices function
	// registers devices under the phone's, so a device registered through
	// the front door is one the phone reads.
	ec.Defaults[stackenv.PushPlatformApps] = ph.PlatformApplicationArn
	ec.Defaults[stackenv.EmailFrom] = LocalEmailFrom
	// LOCAL-ONLY: the dedup cache is ElastiCache in a deployed stack (its
	// endpoint in the worker's environment); locally the redis-server
	// scripts/localcloud.sh runs.
	ec.Defaults[stackenv.DedupCacheURL] = c.CacheURL
	// A second Up keeps each function's session token: a running stack's
	// Secrets Manager gate knows the functions by them.
	if old, err := ReadFunctionEnvs(c.StateDir); err == nil {
		ec.SessionTokens = map[string]string{}
		for id, e := range old {
			ec.SessionTokens[id] = e["AWS_SESSION_TOKEN"]
		}
	}
	envs, err := Envs(ctx, t, phys, ec)
	if err != nil {
		return nil, err
	}
	// LOCAL-ONLY: a 421 names the Region's API by the URL the app was
	// synthesized with (https, a domain the operator owns); locally the
	// Regions' front doors are plain http on 127.0.0.1.
	if c.RegionURLs != "" {
		local, err := home.ParseURLs(c.RegionURLs)
		if err != nil {
			return nil, fmt.Errorf("localcloud: -region-urls: %w", err)
		}
		for id, e := range envs {
			v, ok := e[stackenv.RegionURLs]
			if !ok {
				continue
			}
			// The same Regions, or the template and the local cloud
			// disagree on where callers go.
			synthesized, err := home.ParseURLs(v)
			if err != nil {
				return nil, fmt.Errorf("localcloud: function %s: %s: %w", id, stackenv.RegionURLs, err)
			}
			if !slices.Equal(slices.Sorted(maps.Keys(synthesized)), slices.Sorted(maps.Keys(local))) {
				return nil, fmt.Errorf("localcloud: function %s: the template's Regions %v are not -region-urls' %v",
					id, slices.Sorted(maps.Keys(synthesized)), slices.Sorted(maps.Keys(local)))
			}
			e[stackenv.RegionURLs] = c.RegionURLs
		}
	}
	// The simulator signs its webhooks with the secret the webhook
	// function verifies: the webhook_secret field of the signing secret
	// its environment names. The API key's secret needs no hand-over: the
	// simulator takes any key, and the api and the resolver read theirs
	// from moto through the gate.
	for _, id := range t.OfType("AWS::Lambda::Function") {
		arn := envs[id][stackenv.WebhookSecretArn]
		if arn == "" {
			continue
		}
		s, err := secretField(ctx, p.Secrets, arn, stackenv.PSPSecretWebhookSecret)
		if err != nil {
			return nil, fmt.Errorf("localcloud: function %s: %w", id, err)
		}
		env[stackenv.PSPSimWebhookSecret] = s
	}
	if err := c.write(env, outputs, phys); err != nil {
		return nil, err
	}
	if err := WriteFunctionEnvs(c.StateDir, envs); err != nil {
		return nil, err
	}
	return env, nil
}

// Evaluator returns the evaluator of t over phys with this local cloud's
// region, account and stack.
func (c Config) Evaluator(t *Template, phys map[string]Physical, secrets SecretGetter) *Evaluator {
	return &Evaluator{Template: t, Physical: phys, Region: c.Region, AccountID: AccountID, StackName: c.StackName, Secrets: secrets}
}

// EnvConfig is what Envs needs of this local cloud.
func (c Config) EnvConfig(secrets SecretGetter) EnvConfig {
	return EnvConfig{Region: c.Region, AccountID: AccountID, StackName: c.StackName, Secrets: secrets,
		Runtime: c.RuntimeEnv(), Defaults: map[string]string{stackenv.PSPURL: c.PSPURL}}
}

// FunctionEnvsFile holds each function's resolved environment by logical
// id (secrets included: it is written 0600, under the git-ignored .local).
const FunctionEnvsFile = "functions.json"

// WriteFunctionEnvs writes envs to stateDir/functions.json.
func WriteFunctionEnvs(stateDir string, envs map[string]map[string]string) error {
	b, err := json.MarshalIndent(envs, "", "  ")
	if err != nil {
		return err
	}
	return localenv.WriteFile(filepath.Join(stateDir, FunctionEnvsFile), append(b, '\n'))
}

// ReadFunctionEnvs loads what the last Up resolved.
func ReadFunctionEnvs(stateDir string) (map[string]map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, FunctionEnvsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, localenv.ErrNotProvisioned
	}
	if err != nil {
		return nil, fmt.Errorf("localcloud: %w", err)
	}
	var envs map[string]map[string]string
	if err := json.Unmarshal(b, &envs); err != nil {
		return nil, fmt.Errorf("localcloud: %s: %w", FunctionEnvsFile, err)
	}
	return envs, nil
}

// migrateTemplate makes TemplateDB current. The test kit clones it and
// migrates each clone with the tree's migrations: that database, not the
// stack's, is the provisioner's to migrate.
func (c Config) migrateTemplate(ctx context.Context, p *Provisioner) error {
	if err := c.ensureDatabase(ctx, TemplateDB); err != nil {
		return err
	}
	applied, err := migrations.Apply(ctx, c.DSN(TemplateDB))
	if err != nil {
		return fmt.Errorf("localcloud: migrate %s on :%d: %w", TemplateDB, c.PGPort, err)
	}
	if len(applied) > 0 {
		p.logf("database %s on :%d: applied migrations %v", TemplateDB, c.PGPort, applied)
	}
	return nil
}

// upRegion2 readies the second Region's stores, if the config names them:
// the cluster gets what the first got from the provisioner (the template's
// cluster roles and the migrated TemplateDB; not the stack's database, which
// only the stack's own migration fills), so a database cloned in either
// Region has the same schema and roles. Local only (issue 15).
func (c Config) upRegion2(ctx context.Context, p *Provisioner, cfg aws.Config, ev *Evaluator, env localenv.Env) error {
	if c.R2PGPort == 0 {
		return nil
	}
	r2 := c
	r2.PGPort = c.R2PGPort
	if c.R2DynamoURL != "" {
		db := dynamoclient.New(cfg, func(o *dynamodb.Options) {
			o.BaseEndpoint = aws.String(c.R2DynamoURL)
			if c.R2Region != "" {
				o.Region = c.R2Region
			}
		})
		if err := c.waitFor(ctx, "the second Region's DynamoDB Local at "+c.R2DynamoURL, func(ctx context.Context) error {
			_, err := db.ListTables(ctx, &dynamodb.ListTablesInput{})
			return err
		}); err != nil {
			return err
		}
		env[localenv.R2DynamoURL] = c.R2DynamoURL
	}
	if err := r2.waitFor(ctx, fmt.Sprintf("the second Region's PostgreSQL at %s:%d", r2.PGHost, r2.PGPort), r2.pgReady); err != nil {
		return err
	}
	for _, id := range ev.Template.OfType("AWS::RDS::DBCluster") {
		if err := r2.localCluster(ctx, ev, id, false); err != nil {
			return err
		}
	}
	if err := r2.migrateTemplate(ctx, p); err != nil {
		return err
	}
	env[localenv.R2LedgerAdminDSN] = r2.DSN("postgres")
	if c.R2Region != "" {
		env[localenv.R2Region] = c.R2Region
	}
	return nil
}

func (c Config) pgReady(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// waitFor retries check, each try bounded to 2 s, until it passes or
// c.Timeout has passed.
func (c Config) waitFor(ctx context.Context, name string, check func(context.Context) error) error {
	deadline := time.Now().Add(c.Timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := check(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("localcloud: %s not ready after %s (is `make up` running it? see .local/logs): %w", name, c.Timeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("localcloud: waiting for %s: %w", name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c Config) waitReady(ctx context.Context, p *Provisioner) error {
	checks := []struct {
		name  string
		check func(context.Context) error
	}{
		{"DynamoDB Local at " + c.DynamoURL, func(ctx context.Context) error {
			_, err := p.DynamoDB.ListTables(ctx, &dynamodb.ListTablesInput{})
			return err
		}},
		{"moto (SQS) at " + c.AWSURL, func(ctx context.Context) error {
			_, err := p.SQS.ListQueues(ctx, &sqs.ListQueuesInput{})
			return err
		}},
		{"moto (SNS) at " + c.AWSURL, func(ctx context.Context) error {
			_, err := p.SNS.ListTopics(ctx, &sns.ListTopicsInput{})
			return err
		}},
		{"moto (Secrets Manager) at " + c.AWSURL, func(ctx context.Context) error {
			_, err := p.Secrets.ListSecrets(ctx, &secretsmanager.ListSecretsInput{})
			return err
		}},
		{fmt.Sprintf("PostgreSQL at %s:%d", c.PGHost, c.PGPort), c.pgReady},
	}
	for _, ch := range checks {
		if err := c.waitFor(ctx, ch.name, ch.check); err != nil {
			return err
		}
	}
	return nil
}

func (c Config) ensureDatabase(ctx context.Context, db string) error {
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("localcloud: connect: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", db).Scan(&exists); err != nil {
		return fmt.Errorf("localcloud: look up database %s: %w", db, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
		return fmt.Errorf("localcloud: create database %s: %w", db, err)
	}
	return nil
}

// ResourcesFile holds the physical resources by logical id, for Describe.
const ResourcesFile = "resources.json"

func (c Config) write(env localenv.Env, outputs map[string]string, phys map[string]Physical) error {
	if err := os.MkdirAll(c.StateDir, 0o755); err != nil {
		return fmt.Errorf("localcloud: %w", err)
	}
	if err := localenv.WriteFile(filepath.Join(c.StateDir, "env"), []byte(env.Format())); err != nil {
		return err
	}
	out, err := json.MarshalIndent(map[string]map[string]string{c.StackName: outputs}, "", "  ")
	if err != nil {
		return err
	}
	if err := localenv.WriteFile(filepath.Join(c.StateDir, "outputs.json"), append(out, '\n')); err != nil {
		return err
	}
	res, err := json.MarshalIndent(phys, "", "  ")
	if err != nil {
		return err
	}
	return localenv.WriteFile(filepath.Join(c.StateDir, ResourcesFile), append(res, '\n'))
}

// ReadResources loads what the last Up provisioned.
func ReadResources(stateDir string) (map[string]Physical, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, ResourcesFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, localenv.ErrNotProvisioned
	}
	if err != nil {
		return nil, fmt.Errorf("localcloud: %w", err)
	}
	var phys map[string]Physical
	if err := json.Unmarshal(b, &phys); err != nil {
		return nil, fmt.Errorf("localcloud: %s: %w", ResourcesFile, err)
	}
	return phys, nil
}

// secretField reads one string field of a JSON secret.
func secretField(ctx context.Context, sm SecretGetter, arn, field string) (string, error) {
	out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: &arn})
	if err != nil {
		return "", fmt.Errorf("read secret %s: %w", arn, err)
	}
	return secrets.FieldOf(aws.ToString(out.SecretString), arn, field)
}
