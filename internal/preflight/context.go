package preflight

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The context keys the app reads (cdk/oncepay: profile.go, regions.go),
// named here by their strings: importing cdk/oncepay would link jsii and
// the CDK into this binary.
const (
	KeyProfile             = "oncepay:profile"
	KeyEmailFrom           = "oncepay:emailFrom"
	KeyPlatformApps        = "oncepay:platformApplicationArns"
	KeyAlbCertificateArn   = "oncepay:albCertificateArn"
	KeyCognitoDomainPrefix = "oncepay:albCognitoDomainPrefix"
	KeyResolverConcurrency = "oncepay:resolverReservedConcurrency"
	KeyLedgerProxy         = "oncepay:ledgerProxy"
	KeyRegions             = "oncepay:regions"
	KeyAvailabilityZoneIDs = "oncepay:availabilityZoneIds"
)

// Context is the CDK context the app would see, by key.
type Context map[string]any

// Flags collects -c key=value flags in order (a flag.Value).
type Flags []string

// String implements flag.Value.
func (f *Flags) String() string {
	if f == nil {
		return ""
	}
	return strings.Join(*f, " ")
}

// Set implements flag.Value; like the cdk CLI it takes key=value, split at
// the first '='.
func (f *Flags) Set(v string) error {
	if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
		return fmt.Errorf("context %q is not key=value", v)
	}
	*f = append(*f, v)
	return nil
}

// LoadContext merges the context the cdk CLI gives the app, from lowest to
// highest precedence: ~/.cdk.json's "context" (home "" skips it),
// cdk.context.json and cdk.json's "context" in dir, then the -c flags. A
// missing file is no context; cdk.json itself must exist, so a wrong dir
// is not mistaken for an empty context.
func LoadContext(dir, home string, flags Flags) (Context, error) {
	c := Context{}
	if home != "" {
		if err := mergeFile(c, filepath.Join(home, ".cdk.json"), true, false); err != nil {
			return nil, err
		}
	}
	if err := mergeFile(c, filepath.Join(dir, "cdk.context.json"), false, false); err != nil {
		return nil, err
	}
	if err := mergeFile(c, filepath.Join(dir, "cdk.json"), true, true); err != nil {
		return nil, err
	}
	for _, f := range flags {
		k, v, _ := strings.Cut(f, "=")
		c[k] = v
	}
	return c, nil
}

// mergeFile copies a JSON file's context into c: its "context" object when
// nested (cdk.json, ~/.cdk.json), else the whole object (cdk.context.json).
func mergeFile(c Context, path string, nested, required bool) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !required {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read context: %w", err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("read context %s: %w", path, err)
	}
	if nested {
		raw, ok := doc["context"]
		if !ok {
			return nil
		}
		doc = nil
		if err := json.Unmarshal(raw, &doc); err != nil {
			return fmt.Errorf("read context %s: \"context\": %w", path, err)
		}
	}
	for k, raw := range doc {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("read context %s: %s: %w", path, k, err)
		}
		c[k] = v
	}
	return nil
}

// Settings are what the app makes of the context, for the checks.
type Settings struct {
	// Prod is the prod profile (else the sandbox).
	Prod bool
	// ResolverReservedConcurrency is what the resolver reserves.
	ResolverReservedConcurrency int
	// LedgerProxy: the stack puts RDS Proxy in front of the ledger.
	LedgerProxy             bool
	EmailFrom               string
	PlatformApplicationArns []string
	// AlbCertificateArn adds the ALB, the only user of CognitoDomainPrefix.
	AlbCertificateArn   string
	CognitoDomainPrefix string
	AvailabilityZoneIDs []string
	// Regions is oncepay:regions; nil deploys one stack in the CLI's Region.
	Regions []string
}

// SettingsFromContext reads c as the app does: strings only, lists
// comma-separated, the profile's defaults where a key is absent.
func SettingsFromContext(c Context) (Settings, error) {
	var s Settings
	get := func(key string) (string, error) {
		v, ok := c[key]
		if !ok || v == nil {
			return "", nil
		}
		str, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("context %s must be a string, got %v", key, v)
		}
		return strings.TrimSpace(str), nil
	}
	vals := map[string]string{}
	for _, k := range []string{KeyProfile, KeyEmailFrom, KeyPlatformApps, KeyAlbCertificateArn, KeyCognitoDomainPrefix,
		KeyResolverConcurrency, KeyLedgerProxy, KeyRegions, KeyAvailabilityZoneIDs} {
		v, err := get(k)
		if err != nil {
			return Settings{}, err
		}
		vals[k] = v
	}
	switch vals[KeyProfile] {
	case "", "sandbox":
	case "prod":
		s.Prod = true
	default:
		return Settings{}, fmt.Errorf("context %s: unknown profile %q (want sandbox or prod)", KeyProfile, vals[KeyProfile])
	}
	// The stack's defaults (cdk/oncepay): prod reserves one sweep at a time
	// for the resolver and pools connections through RDS Proxy; the
	// sandbox does neither. The context overrides both.
	if s.Prod {
		s.ResolverReservedConcurrency = 1
		s.LedgerProxy = true
	}
	if v := vals[KeyResolverConcurrency]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return Settings{}, fmt.Errorf("context %s must be a whole number >= 0, got %q", KeyResolverConcurrency, v)
		}
		s.ResolverReservedConcurrency = n
	}
	switch v := vals[KeyLedgerProxy]; v {
	case "":
	case "true", "false":
		s.LedgerProxy = v == "true"
	default:
		return Settings{}, fmt.Errorf("context %s must be true or false, got %q", KeyLedgerProxy, v)
	}
	s.EmailFrom = vals[KeyEmailFrom]
	s.PlatformApplicationArns = list(vals[KeyPlatformApps])
	s.AlbCertificateArn = vals[KeyAlbCertificateArn]
	s.CognitoDomainPrefix = vals[KeyCognitoDomainPrefix]
	s.AvailabilityZoneIDs = list(vals[KeyAvailabilityZoneIDs])
	s.Regions = list(vals[KeyRegions])
	return s, nil
}

func list(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}
