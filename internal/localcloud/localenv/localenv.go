// Package localenv reads the environment the local cloud's provisioner writes
// (.local/env: KEY=VALUE lines) so tests and local tools see the same names,
// URLs and endpoints the handlers get. Variables already set in the process
// win, so a deployed stack's values (or LocalStack's endpoint) can be supplied
// from outside.
package localenv

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
)

// ErrNotProvisioned means .local/env does not exist: `make up` has not run.
var ErrNotProvisioned = errors.New("localenv: .local/env not found (run `make up`)")

// Env is the loaded environment: file values overlaid by the process's own.
type Env map[string]string

// Get returns the value of key, or "".
func (e Env) Get(key string) string { return e[key] }

// Root returns the repository root: the nearest directory upwards from the
// working directory that holds go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("localenv: getwd: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("localenv: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Path returns the env file's path: $ONCEPAY_ENV_FILE or <root>/.local/env.
func Path() (string, error) {
	if p := os.Getenv("ONCEPAY_ENV_FILE"); p != "" {
		return p, nil
	}
	root, err := Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".local", "env"), nil
}

// Load reads the env file and overlays the process environment's values for
// the same keys. It returns ErrNotProvisioned if the file is absent.
func Load() (Env, error) {
	if outputs := os.Getenv("ONCEPAY_OUTPUTS"); outputs != "" {
		return LoadOutputs(outputs)
	}
	p, err := Path()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNotProvisioned
	}
	if err != nil {
		return nil, fmt.Errorf("localenv: open %s: %w", p, err)
	}
	defer f.Close()
	env, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("localenv: %s: %w", p, err)
	}
	for k := range env {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	return env, nil
}

// Parse reads KEY=VALUE lines; blank lines and lines starting with # are skipped.
func Parse(r interface{ Read([]byte) (int, error) }) (Env, error) {
	env := Env{}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("line %d: want KEY=VALUE", n)
		}
		env[strings.TrimPrefix(k, "export ")] = v
	}
	return env, sc.Err()
}

// Export sets every variable of env in the process environment that is not
// already set there, so SDK default config picks the endpoints up.
func (e Env) Export() error {
	for k, v := range e {
		if _, ok := os.LookupEnv(k); ok {
			continue
		}
		if err := os.Setenv(k, v); err != nil {
			return fmt.Errorf("localenv: setenv %s: %w", k, err)
		}
	}
	return nil
}

// Format renders env as sorted KEY=VALUE lines.
func (e Env) Format() string {
	keys := make([]string, 0, len(e))
	for k := range e {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, e[k])
	}
	return b.String()
}

// LoadOutputs reads a deployed stack's outputs file (`cdk deploy
// --outputs-file`: {"<stack>": {"<output id>": "<value>"}}) and maps each
// known output onto its variable. Endpoints are AWS's own: the SDK's default
// resolution applies, and the process environment still wins.
func LoadOutputs(path string) (Env, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("localenv: outputs: %w", err)
	}
	var stacks map[string]map[string]string
	if err := json.Unmarshal(b, &stacks); err != nil {
		return nil, fmt.Errorf("localenv: outputs %s: %w", path, err)
	}
	if len(stacks) != 1 {
		return nil, fmt.Errorf("localenv: outputs %s: want exactly one stack, found %d", path, len(stacks))
	}
	env := Env{}
	for _, outputs := range stacks {
		for id, v := range outputs {
			if name, ok := stackenv.OutputVars[id]; ok {
				env[name] = v
			}
		}
	}
	for k := range env {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	return env, nil
}
