package client_test

import (
	"path/filepath"
	"testing"

	"github.com/oncepay/oncepay/internal/client"
)

// The helpers that touch the journal's API live here, apart from the tests.

func openJournal(t *testing.T) *client.Journal {
	t.Helper()
	j := openJournalAt(t, filepath.Join(t.TempDir(), "journal"))
	t.Cleanup(func() { j.Close() })
	return j
}

func openJournalAt(t *testing.T, path string) *client.Journal {
	t.Helper()
	j, err := client.OpenJournal(path, client.JournalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// intentFor is the newest intent for order (merchant m1) of caller at api.
func intentFor(j *client.Journal, api, caller, order string) (client.Intent, error) {
	return j.ForOrder(client.Scope{API: client.NormalizeAPI(api), Caller: caller}, "m1", order)
}
