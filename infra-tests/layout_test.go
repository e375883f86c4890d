package infratests

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeployedFunctionsImportNeitherTheLocalCloudNorTheTestKit keeps the
// layout honest: what deploys (lambdas/, cdk/) never links a package that
// stands in for AWS locally or that only tests use.
func TestDeployedFunctionsImportNeitherTheLocalCloudNorTheTestKit(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../lambdas/...", "../cdk/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var deps int
	for _, p := range strings.Fields(string(out)) {
		if !strings.HasPrefix(p, "github.com/oncepay/oncepay/") {
			continue
		}
		deps++
		for _, banned := range []string{"/internal/localcloud", "/internal/testkit"} {
			if strings.Contains(p, banned) {
				t.Errorf("a deployed package depends on %s", p)
			}
		}
	}
	if deps < 10 {
		t.Fatalf("go list found only %d of our packages: the check is looking at the wrong tree", deps)
	}
}
