package localenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
)

func TestParseAndFormatRoundTrip(t *testing.T) {
	env, err := Parse(strings.NewReader("# comment\nA=1\n\nexport B=x=y\n"))
	if err != nil {
		t.Fatal(err)
	}
	if env["A"] != "1" || env["B"] != "x=y" {
		t.Fatalf("env = %v", env)
	}
	if got := env.Format(); got != "A=1\nB=x=y\n" {
		t.Fatalf("Format = %q", got)
	}
	if _, err := Parse(strings.NewReader("no equals sign\n")); err == nil {
		t.Fatal("a line without = was accepted")
	}
}

func TestADeployedStacksOutputsFileStandsInForTheLocalEnv(t *testing.T) {
	p := filepath.Join(t.TempDir(), "outputs.json")
	if err := os.WriteFile(p, []byte(`{"Oncepay":{"IdemTableName":"real-idem","EventsQueueUrl":"https://sqs/q.fifo","Unrelated":"x"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ONCEPAY_OUTPUTS", p)
	t.Setenv(stackenv.EventsQueueURL, "https://override")
	env, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if env.Get(stackenv.IdemTable) != "real-idem" || env.Get(stackenv.EventsQueueURL) != "https://override" || len(env) != 2 {
		t.Fatalf("env = %v", env)
	}
}
