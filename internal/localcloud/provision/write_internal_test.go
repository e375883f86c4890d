package provision

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
)

// .local/env holds the PSP simulator's webhook secret: it is written
// owner-only, also over an older, world-readable one.
func TestTheLocalEnvHoldingTheWebhookSecretIsOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "env")
	if err := os.WriteFile(path+".tmp", nil, 0o644); err != nil { // a leftover of an older run
		t.Fatal(err)
	}
	c := Config{StateDir: dir, StackName: "Oncepay"}
	env := localenv.Env{stackenv.PSPSimWebhookSecret: "whsec_test"}
	if err := c.write(env, map[string]string{}, map[string]Physical{}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"env", "outputs.json", ResourcesFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if m := st.Mode().Perm(); m != 0o600 {
			t.Errorf("%s is written %o, want 0600", f, m)
		}
	}
}
