package preflight

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The cdk CLI's order: -c flags, then cdk.json, then cdk.context.json,
// then ~/.cdk.json.
func TestLoadContextPrecedence(t *testing.T) {
	dir, home := t.TempDir(), t.TempDir()
	write(t, filepath.Join(dir, "cdk.json"), `{"app": "go run ./cdk", "context": {"oncepay:profile": "sandbox", "oncepay:emailFrom": "cdkjson@example.com"}}`)
	write(t, filepath.Join(dir, "cdk.context.json"), `{"oncepay:emailFrom": "cached@example.com", "oncepay:regions": "us-east-1,us-west-2"}`)
	write(t, filepath.Join(home, ".cdk.json"), `{"context": {"oncepay:ledgerProxy": "false", "oncepay:profile": "sandbox", "oncepay:regions": "eu-west-1,eu-central-1"}}`)
	var flags Flags
	for _, f := range []string{"oncepay:profile=prod", "oncepay:regionUrls=us-east-1=https://a.example.com"} {
		if err := flags.Set(f); err != nil {
			t.Fatal(err)
		}
	}
	c, err := LoadContext(dir, home, flags)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]any{
		"oncepay:profile":     "prod",                            // the flag over cdk.json
		"oncepay:emailFrom":   "cdkjson@example.com",             // cdk.json over cdk.context.json
		"oncepay:regions":     "us-east-1,us-west-2",             // cdk.context.json over ~/.cdk.json
		"oncepay:ledgerProxy": "false",                           // ~/.cdk.json alone
		"oncepay:regionUrls":  "us-east-1=https://a.example.com", // split at the first '='
		"app":                 nil,                               // not context
	} {
		if got := c[key]; got != want {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	}
	s, err := SettingsFromContext(c)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Prod || s.LedgerProxy || s.ResolverReservedConcurrency != 1 || !slices.Equal(s.Regions, []string{"us-east-1", "us-west-2"}) {
		t.Errorf("settings %+v", s)
	}
}

func TestLoadContextNeedsCdkJSON(t *testing.T) {
	if _, err := LoadContext(t.TempDir(), "", nil); err == nil {
		t.Fatal("no cdk.json read as an empty context")
	}
}

func TestFlagsNeedKeyValue(t *testing.T) {
	var f Flags
	for _, bad := range []string{"oncepay:profile", "=prod"} {
		if err := f.Set(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The repository's own cdk.json reads as the sandbox.
func TestRepositoryCdkJSON(t *testing.T) {
	c, err := LoadContext(filepath.Join("..", ".."), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := SettingsFromContext(c)
	if err != nil {
		t.Fatal(err)
	}
	if s.Prod || s.ResolverReservedConcurrency != 0 || s.LedgerProxy {
		t.Errorf("settings %+v", s)
	}
}

func TestSettingsFromContext(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ctx      Context
		reserved int
		proxy    bool
		wantErr  bool
	}{
		{"sandbox by default: nothing reserved, no proxy", Context{}, 0, false, false},
		{"prod: the resolver reserves 1, RDS Proxy on", Context{KeyProfile: "prod"}, 1, true, false},
		{"prod with the reservation off", Context{KeyProfile: "prod", KeyResolverConcurrency: "0"}, 0, true, false},
		{"prod without the proxy", Context{KeyProfile: "prod", KeyLedgerProxy: "false"}, 1, false, false},
		{"an unknown profile", Context{KeyProfile: "staging"}, 0, false, true},
		{"a reservation that is no number", Context{KeyResolverConcurrency: "one"}, 0, false, true},
		{"a negative reservation", Context{KeyResolverConcurrency: "-1"}, 0, false, true},
		{"a value that is no string (cdk.json JSON number)", Context{KeyResolverConcurrency: float64(1)}, 0, false, true},
		{"ledgerProxy neither true nor false", Context{KeyLedgerProxy: "yes"}, 0, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := SettingsFromContext(tc.ctx)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if err == nil && (s.ResolverReservedConcurrency != tc.reserved || s.LedgerProxy != tc.proxy) {
				t.Errorf("reserved %d proxy %v, want %d %v", s.ResolverReservedConcurrency, s.LedgerProxy, tc.reserved, tc.proxy)
			}
		})
	}
}
