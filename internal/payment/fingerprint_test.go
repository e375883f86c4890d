package payment

import (
	"strings"
	"sync"
	"testing"
)

// A deploy bumps the version while a key is in flight: the fingerprint the
// key record and the ledger row hold was written in v1, the retry is checked
// by the new build. The same request still matches what was stored (so the
// retry is answered, not refused with 422); a different one still does not.
// After a rollback, what the new build wrote is still readable.
// baseline is the table as the build ships it, which the drills put back.
var baseline = table.Load().forms

func TestAnInFlightKeyStillMatchesAfterADeployBumpsTheFingerprintVersion(t *testing.T) {
	stored := seedRequest.Fingerprint()
	other := seedRequest
	other.Amount = 3500

	rollback := DeployNextVersion()
	defer func() {
		// Leave the table as other tests expect it, whatever happened.
		table.Store(&fingerprints{current: FingerprintVersion, forms: baseline})
	}()
	written := seedRequest.Fingerprint()
	if written == stored || !strings.HasPrefix(written, "v3:") {
		t.Fatalf("after the deploy the fingerprint is %s (before %s): want a v3 value (the drill's, after v1 and v2), unlike v1", written, stored)
	}
	if !seedRequest.Matches(stored) {
		t.Fatal("the same request no longer matches its v1 fingerprint after the deploy: every in-flight key would answer 422")
	}
	if !seedRequest.Matches(written) {
		t.Fatal("the request does not match its own new fingerprint")
	}
	if other.Matches(stored) || other.Matches(written) {
		t.Fatal("a different request matches: a key reuse would be answered as the original")
	}

	rollback()
	if got := seedRequest.Fingerprint(); got != stored {
		t.Fatalf("after the rollback new fingerprints are %s, want v1 again (%s)", got, stored)
	}
	if !seedRequest.Matches(written) || other.Matches(written) {
		t.Fatal("after the rollback the v3 fingerprints written meanwhile are no longer checked right")
	}
}

// A stored value this build cannot check never matches: no version, a
// version it does not know, a malformed digest.
func TestMatchesRefusesWhatItCannotCheck(t *testing.T) {
	fp := seedRequest.Fingerprint()
	for _, stored := range []string{
		"", "v1", "v1:", fp[3:], "v9" + fp[2:], strings.ToUpper(fp), fp + "0", " " + fp,
	} {
		if seedRequest.Matches(stored) {
			t.Errorf("Matches(%q) = true", stored)
		}
	}
	if !seedRequest.Matches(fp) {
		t.Fatalf("Matches(own fingerprint %q) = false", fp)
	}
}

// Deploys and checks race in a running process (the drill flips the version
// under live requests): the table is swapped whole, so -race stays quiet.
func TestFingerprintTableIsSafeUnderConcurrentDeploys(t *testing.T) {
	defer table.Store(&fingerprints{current: FingerprintVersion, forms: baseline})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				fp := seedRequest.Fingerprint()
				if !seedRequest.Matches(fp) {
					t.Error("a request does not match its own fingerprint during a deploy")
					return
				}
			}
		})
	}
	for range 10 {
		DeployNextVersion()()
	}
	wg.Wait()
}
