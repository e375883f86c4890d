package lambdarun

import (
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/localenv"
)

// DefaultMaxEnvironments is the local cap on a function's execution
// environments when the template reserves no concurrency for it. Lambda's
// account pool would give it up to 1,000; this machine has 2 cores, and four
// warm environments of a function already keep both busy.
const DefaultMaxEnvironments = 4

// Config says where the runner finds its tools and puts its files. The zero
// value is the repository's layout under .local/.
type Config struct {
	// Root is the module root (default: the nearest go.mod upwards).
	Root string
	// DefaultMaxEnvironments caps the environments of a function without
	// reserved concurrency (default DefaultMaxEnvironments).
	DefaultMaxEnvironments int
	// Region, AccessKeyID and SecretAccessKey stand in for what Lambda gives
	// a function from its region and execution role (defaults: us-east-1,
	// test, test: the emulators accept any key). The function's environment
	// map overrides them.
	Region, AccessKeyID, SecretAccessKey string
	// RIE is aws-lambda-rie (default .local/bin/aws-lambda-rie, from make
	// setup).
	RIE string
	// Bootstraps holds <fn>/bootstrap (default .local/lambdas).
	Bootstraps string
	// Logs holds fn-<fn>.log, each function's output (default .local/logs).
	Logs string
	// Logger gets the runner's own events (default: discarded).
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Root == "" {
		root, err := localenv.Root()
		if err != nil {
			return c, fmt.Errorf("lambdarun: %w", err)
		}
		c.Root = root
	}
	if c.DefaultMaxEnvironments <= 0 {
		c.DefaultMaxEnvironments = DefaultMaxEnvironments
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.AccessKeyID == "" {
		c.AccessKeyID = "test"
	}
	if c.SecretAccessKey == "" {
		c.SecretAccessKey = "test"
	}
	if c.RIE == "" {
		c.RIE = filepath.Join(c.Root, ".local", "bin", "aws-lambda-rie")
	}
	if c.Bootstraps == "" {
		c.Bootstraps = filepath.Join(c.Root, ".local", "lambdas")
	}
	if c.Logs == "" {
		c.Logs = filepath.Join(c.Root, ".local", "logs")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Function is one AWS::Lambda::Function of the template, as the runner runs
// it.
type Function struct {
	// LogicalID names the function everywhere in the local cloud.
	LogicalID string
	// Name is its AWS_LAMBDA_FUNCTION_NAME: the template's FunctionName, or
	// its logical id, which is also what a Ref to it resolves to locally
	// (CloudFormation would generate <stack>-<id>-<suffix>; a function
	// must see the name the stack's references give it).
	Name string
	// Package is its main package's directory in the module ("lambdas/api").
	Package string
	// Bootstrap is the built binary the environments run.
	Bootstrap string
	// Log is the file every environment of the function writes to.
	Log string
	// Timeout ends an invocation (template Timeout, default 3 s).
	Timeout time.Duration
	// MemoryMB is reported to the function; nothing enforces it.
	MemoryMB int
	// Reserved is the template's ReservedConcurrentExecutions, -1 when unset.
	Reserved int
	// MaxEnvironments is the concurrency it may reach: Reserved where set,
	// else Config.DefaultMaxEnvironments.
	MaxEnvironments int
	// Env is its environment: the template's, resolved to local values, and
	// what the Lambda runtime sets.
	Env map[string]string
}

type template struct {
	Resources map[string]struct {
		Type       string          `json:"Type"`
		Properties json.RawMessage `json:"Properties"`
		Metadata   struct {
			AssetPath string `json:"aws:asset:path"`
		} `json:"Metadata"`
	} `json:"Resources"`
}

type functionProps struct {
	FunctionName any `json:"FunctionName"`
	Timeout      any `json:"Timeout"`
	MemorySize   any `json:"MemorySize"`
	Reserved     any `json:"ReservedConcurrentExecutions"`
}

// FromTemplate returns one Function per AWS::Lambda::Function in the
// template at templatePath, sorted by logical id, each with envs[logical id]
// as its environment (the template's variables resolved to local values)
// plus what the Lambda runtime sets.
//
// A function's package is read from its code: the asset the template names
// (Metadata aws:asset:path, cdk.out/asset.<hash>/bootstrap) is a Go binary
// whose build info records the main package it was built from. That holds
// whatever the construct is called (its aws:cdk:path says "Migration" for
// lambdas/migrate) and wherever the bootstraps were built. A function whose
// asset is missing or was not built from a lambdas/ package of this module
// is an error: the runner never guesses what to run.
func FromTemplate(templatePath string, envs map[string]map[string]string, cfg Config) ([]Function, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(templatePath)
	if err != nil {
		return nil, fmt.Errorf("lambdarun: read template: %w", err)
	}
	var t template
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("lambdarun: parse template %s: %w", templatePath, err)
	}
	module, err := modulePath(cfg.Root)
	if err != nil {
		return nil, err
	}
	var fns []Function
	for id, r := range t.Resources {
		if r.Type != "AWS::Lambda::Function" {
			continue
		}
		var p functionProps
		if len(r.Properties) > 0 {
			if err := json.Unmarshal(r.Properties, &p); err != nil {
				return nil, fmt.Errorf("lambdarun: %s: properties: %w", id, err)
			}
		}
		pkg, err := assetPackage(filepath.Dir(templatePath), r.Metadata.AssetPath, module, cfg.Root)
		if err != nil {
			return nil, fmt.Errorf("lambdarun: %s: %w", id, err)
		}
		f := Function{LogicalID: id, Package: pkg, Reserved: -1}
		f.Name, _ = p.FunctionName.(string)
		if f.Name == "" {
			f.Name = id
		}
		timeout, err := intProp(p.Timeout, 3)
		if err != nil {
			return nil, fmt.Errorf("lambdarun: %s: Timeout: %w", id, err)
		}
		f.Timeout = time.Duration(timeout) * time.Second
		if f.MemoryMB, err = intProp(p.MemorySize, 128); err != nil {
			return nil, fmt.Errorf("lambdarun: %s: MemorySize: %w", id, err)
		}
		if f.Reserved, err = intProp(p.Reserved, -1); err != nil {
			return nil, fmt.Errorf("lambdarun: %s: ReservedConcurrentExecutions: %w", id, err)
		}
		f.MaxEnvironments = cfg.DefaultMaxEnvironments
		if f.Reserved >= 0 {
			// Zero is Lambda's "throttle every invocation", kept as such.
			f.MaxEnvironments = f.Reserved
		}
		base := path.Base(pkg)
		f.Bootstrap = filepath.Join(cfg.Bootstraps, base, "bootstrap")
		f.Log = filepath.Join(cfg.Logs, "fn-"+base+".log")
		f.Env = functionEnv(f, envs[id], cfg)
		fns = append(fns, f)
	}
	sort.Slice(fns, func(i, j int) bool { return fns[i].LogicalID < fns[j].LogicalID })
	return fns, nil
}

// functionEnv is what a function's process sees: the role's region and
// credentials (overridable, they are local stand-ins), the resolved
// environment, then the runtime's own variables, which win over it as
// Lambda's reserved variables do (a resolver may well set them too, from
// the same template numbers).
func functionEnv(f Function, resolved map[string]string, cfg Config) map[string]string {
	env := map[string]string{
		"AWS_REGION":            cfg.Region,
		"AWS_DEFAULT_REGION":    cfg.Region,
		"AWS_ACCESS_KEY_ID":     cfg.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY": cfg.SecretAccessKey,
		// What a provided.al2023 environment has; the host's PATH, HOME and
		// the rest stay out, as they would on Lambda (no ~/.aws/config).
		"PATH": "/usr/local/bin:/usr/bin/:/bin:/opt/bin",
		"LANG": "en_US.UTF-8",
		"TZ":   ":UTC",
	}
	maps.Copy(env, resolved)
	if v, ok := resolved["AWS_REGION"]; ok {
		if _, both := resolved["AWS_DEFAULT_REGION"]; !both {
			env["AWS_DEFAULT_REGION"] = v
		}
	}
	maps.Copy(env, runtimeEnv(f))
	return env
}

// runtimeEnv is what the Lambda runtime sets from the function's
// configuration; the runner sets it again at each environment's start, so
// a Function's fields, not its Env, are the truth.
func runtimeEnv(f Function) map[string]string {
	return map[string]string{
		"AWS_LAMBDA_FUNCTION_NAME":        f.Name,
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": strconv.Itoa(f.MemoryMB),
		// Not a Lambda variable: aws-lambda-rie reads it to enforce the
		// timeout and to give the runtime its deadline.
		"AWS_LAMBDA_FUNCTION_TIMEOUT":    strconv.Itoa(int(f.Timeout / time.Second)),
		"AWS_LAMBDA_FUNCTION_VERSION":    "$LATEST",
		"AWS_LAMBDA_LOG_GROUP_NAME":      "/aws/lambda/" + f.Name,
		"AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
		"_HANDLER":                       "bootstrap",
		"LAMBDA_TASK_ROOT":               filepath.Dir(f.Bootstrap),
		"LAMBDA_RUNTIME_DIR":             filepath.Dir(f.Bootstrap),
	}
}

// assetPackage returns the module-relative directory ("lambdas/api") of the
// main package the asset's bootstrap was built from.
func assetPackage(templateDir, asset, module, root string) (string, error) {
	if asset == "" {
		return "", errors.New("no aws:asset:path in its Metadata: cannot tell which lambdas/ package it runs")
	}
	bin := filepath.Join(templateDir, asset, "bootstrap")
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("asset %s is not a Go bootstrap (run make synth): %w", bin, err)
	}
	rel, ok := strings.CutPrefix(info.Path, module+"/")
	if !ok || path.Dir(rel) != "lambdas" {
		return "", fmt.Errorf("asset %s was built from %s, not from a lambdas/<fn> package of %s", bin, info.Path, module)
	}
	if st, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil || !st.IsDir() {
		return "", fmt.Errorf("asset %s was built from %s, which this tree does not have", bin, info.Path)
	}
	return rel, nil
}

// modulePath reads the module line of root/go.mod.
func modulePath(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("lambdarun: read go.mod: %w", err)
	}
	for l := range strings.Lines(string(b)) {
		if m, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`), nil
		}
	}
	return "", errors.New("lambdarun: go.mod has no module line")
}

// intProp reads a template number (JSON number or numeric string), or def
// when absent.
func intProp(v any, def int) (int, error) {
	switch x := v.(type) {
	case nil:
		return def, nil
	case float64:
		return int(x), nil
	case string:
		return strconv.Atoi(x)
	default:
		return 0, fmt.Errorf("not a number: %v", v)
	}
}
