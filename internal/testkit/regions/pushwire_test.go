package regions_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/testkit/regions"
	"github.com/oncepay/oncepay/internal/testkit/story"
)

// A push publish whose answer is lost on the way back (a connection the
// emulator dropped) went out all the same, and the SDK's retry sends it
// again: the phone gets one copy per lost answer, each with the payment's
// replace id, from one notification intent, and the Regions' wire counts
// the lost answers (what the chaos check allows for).
func TestAPushWhoseAnswerIsLostIsSentAgainAndCounted(t *testing.T) {
	s := newSystem(t, regions.Options{})
	ctx := context.Background()
	pid := story.PaymentID("u1", "K1")
	s.LosePushAnswers(ids.ReplaceID(pid), 2)
	s.R1.SetClock(0.02)
	if a := s.R1.Pay(ctx, "u1", "K1", story.Body, s.R1.At(0.02)); a.Status != http.StatusCreated {
		t.Fatalf("pay in R1: %d %s", a.Status, a.Body)
	}
	if err := s.R1.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	copies := 0
	for _, d := range s.R1.PushLog() {
		if d.ReplaceID != ids.ReplaceID(pid) {
			t.Errorf("a push with replace id %q", d.ReplaceID)
		}
		copies++
	}
	sent, err := s.R1.Int(ctx, `SELECT count(*) FROM notif WHERE state = 'SENT' AND event_id = $1`, ids.EventID(pid, "SUCCEEDED"))
	if err != nil {
		t.Fatal(err)
	}
	if copies != 3 || sent != 1 || s.LostPushAnswers(ids.ReplaceID(pid)) != 2 {
		t.Fatalf("%d push(es) on the phone from %d SENT notification(s), %d lost answer(s) counted; want 3 copies of 1 notification, 2 counted",
			copies, sent, s.LostPushAnswers(ids.ReplaceID(pid)))
	}
}
