package localenv

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile writes a local-cloud state file atomically (a temporary file,
// then a rename) with mode 0600, creating its directory: the state files
// hold secrets or positions a half-written file would corrupt. WriteFile's
// mode applies only to a new file, so a temporary file left from an older,
// wider-moded run is removed first.
func WriteFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("localcloud: %w", err)
	}
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("localcloud: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("localcloud: %w", err)
	}
	return nil
}
