package devices_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/devices"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/testkit/faultnet"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// world is a ledger of the test's own and moto's SNS with a GCM platform
// application: the devices function's two stores.
type world struct {
	t    *testing.T
	pool *pgxpool.Pool
	dsn  string
	sns  *sns.Client
	app  string
	h    devices.Handler
}

func newWorld(t *testing.T) *world {
	t.Helper()
	pool, dsn := testenv.Ledger(t)
	s := testenv.SNS(t)
	out, err := s.CreatePlatformApplication(context.Background(), &sns.CreatePlatformApplicationInput{
		Name: aws.String("t-devices-" + testenv.RandomID(4)), Platform: aws.String("GCM"),
		Attributes: map[string]string{"PlatformCredential": "test-key"},
	})
	if err != nil {
		t.Fatal(err)
	}
	app := aws.ToString(out.PlatformApplicationArn)
	t.Cleanup(func() {
		_, _ = s.DeletePlatformApplication(context.Background(), &sns.DeletePlatformApplicationInput{PlatformApplicationArn: aws.String(app)})
	})
	reg, err := devices.NewRegistry(pool, s, map[notify.Platform]string{notify.GCM: app}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return &world{t: t, pool: pool, dsn: dsn, sns: s, app: app, h: devices.Handler{Store: reg, Log: quiet}}
}

// do sends one request as the front door would, for caller.
func (w *world) do(caller, method, deviceID string, counter int64, body string) (int, devices.Answer, problem.Problem) {
	w.t.Helper()
	h := http.Header{}
	if counter > 0 {
		h.Set(devices.CounterHeader, strconv.FormatInt(counter, 10))
	}
	r := w.h.Serve(context.Background(), devices.Request{Method: method, Path: "/devices/" + deviceID, Headers: h, Body: []byte(body), Caller: caller})
	var a devices.Answer
	var p problem.Problem
	if r.Status < 300 {
		if err := json.Unmarshal(r.Body, &a); err != nil {
			w.t.Fatalf("answer %s: %v", r.Body, err)
		}
	} else if err := json.Unmarshal(r.Body, &p); err != nil || r.Headers.Get("Content-Type") != problem.ContentType {
		w.t.Fatalf("problem %s (%s): %v", r.Body, r.Headers.Get("Content-Type"), err)
	}
	return r.Status, a, p
}

func register(token string) string {
	b, _ := json.Marshal(map[string]string{"platform": "GCM", "token": token})
	return string(b)
}

// endpoints are the caller's devices as the worker reads them to push.
func (w *world) endpoints(caller string) []string {
	w.t.Helper()
	devs, err := notify.NewDeviceStore(w.pool).Endpoints(context.Background(), caller)
	if err != nil {
		w.t.Fatal(err)
	}
	var arns []string
	for _, d := range devs {
		arns = append(arns, d.EndpointArn)
	}
	return arns
}

// tokenOf is the push token SNS holds for an endpoint.
func (w *world) tokenOf(arn string) (string, error) {
	out, err := w.sns.GetEndpointAttributes(context.Background(), &sns.GetEndpointAttributesInput{EndpointArn: aws.String(arn)})
	if err != nil {
		return "", err
	}
	return out.Attributes["Token"], nil
}

// Branch V: register (41), update (42), and the resent 41 arrives last:
// the device keeps 42's token, and the 41 is answered with what the row
// holds. Then delete (43) and a late 42: still removed, and the worker
// finds nothing to push to.
func TestBranchV_TheDeviceKeepsTheNewestCounterAndARemovalIsATombstone(t *testing.T) {
	w := newWorld(t)
	if st, a, _ := w.do("u1", http.MethodPut, "D1", 41, register("tok-A")); st != http.StatusCreated || !a.Applied || a.Counter != 41 || a.State != devices.Active {
		t.Fatalf("register 41: %d %+v", st, a)
	}
	if st, a, _ := w.do("u1", http.MethodPut, "D1", 42, register("tok-B")); st != http.StatusOK || !a.Applied || a.Counter != 42 {
		t.Fatalf("update 42: %d %+v", st, a)
	}
	if st, a, _ := w.do("u1", http.MethodPut, "D1", 41, register("tok-A")); st != http.StatusOK || a.Applied || a.Counter != 42 || a.State != devices.Active {
		t.Fatalf("the resent 41: %d %+v, want 200 with the row's 42, not applied", st, a)
	}
	eps := w.endpoints("u1")
	if len(eps) != 1 {
		t.Fatalf("endpoints %v, want one", eps)
	}
	if tok, err := w.tokenOf(eps[0]); err != nil || tok != "tok-B" {
		t.Fatalf("the device's endpoint holds token %q (%v), want 42's tok-B", tok, err)
	}

	if st, a, _ := w.do("u1", http.MethodDelete, "D1", 43, ""); st != http.StatusOK || !a.Applied || a.State != devices.Removed || a.Counter != 43 {
		t.Fatalf("delete 43: %d %+v", st, a)
	}
	if st, a, _ := w.do("u1", http.MethodPut, "D1", 42, register("tok-B")); st != http.StatusOK || a.Applied || a.State != devices.Removed || a.Counter != 43 {
		t.Fatalf("the late 42: %d %+v, want the tombstone", st, a)
	}
	if eps := w.endpoints("u1"); len(eps) != 0 {
		t.Fatalf("after the removal the worker would push to %v", eps)
	}
	// The endpoints no row names are gone from SNS: both tokens'.
	for _, tok := range []string{"tok-A", "tok-B"} {
		if w.hasToken(tok) {
			t.Errorf("SNS still holds an endpoint for %s", tok)
		}
	}
	// A registration with a newer counter brings the device back.
	if st, a, _ := w.do("u1", http.MethodPut, "D1", 44, register("tok-C")); st != http.StatusOK || !a.Applied || a.State != devices.Active {
		t.Fatalf("register 44: %d %+v", st, a)
	}
	if eps := w.endpoints("u1"); len(eps) != 1 {
		t.Fatalf("after 44: endpoints %v", eps)
	}
}

func (w *world) hasToken(token string) bool {
	w.t.Helper()
	p := sns.NewListEndpointsByPlatformApplicationPaginator(w.sns, &sns.ListEndpointsByPlatformApplicationInput{PlatformApplicationArn: aws.String(w.app)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			w.t.Fatal(err)
		}
		if slices.ContainsFunc(page.Endpoints, func(e snstypes.Endpoint) bool { return e.Attributes["Token"] == token }) {
			return true
		}
	}
	return false
}

// A removal sent before a registration and delivered first leaves a
// tombstone, so the late registration finds it.
func TestARemovalOfADeviceNeverSeenLeavesATombstone(t *testing.T) {
	w := newWorld(t)
	if st, a, _ := w.do("u1", http.MethodDelete, "D2", 8, ""); st != http.StatusOK || !a.Applied || a.State != devices.Removed {
		t.Fatalf("delete 8: %d %+v", st, a)
	}
	if st, a, _ := w.do("u1", http.MethodPut, "D2", 7, register("tok-7")); st != http.StatusOK || a.Applied || a.State != devices.Removed {
		t.Fatalf("the registration 7: %d %+v", st, a)
	}
	if eps := w.endpoints("u1"); len(eps) != 0 {
		t.Fatalf("endpoints %v", eps)
	}
}

// A caller only ever reaches its own devices: the same device id under two
// callers is two rows, and a removal by one leaves the other's.
func TestACallerReachesOnlyItsOwnDevices(t *testing.T) {
	w := newWorld(t)
	for _, c := range []struct{ caller, token string }{{"u1", "tok-1"}, {"u2", "tok-2"}} {
		if st, a, _ := w.do(c.caller, http.MethodPut, "D1", 1, register(c.token)); st != http.StatusCreated || !a.Applied {
			t.Fatalf("%s's register: %d %+v", c.caller, st, a)
		}
	}
	if st, a, _ := w.do("u2", http.MethodDelete, "D1", 2, ""); st != http.StatusOK || !a.Applied {
		t.Fatalf("u2's delete: %d %+v", st, a)
	}
	eps := w.endpoints("u1")
	if len(eps) != 1 {
		t.Fatalf("u1's endpoints %v after u2 removed its own", eps)
	}
	if tok, err := w.tokenOf(eps[0]); err != nil || tok != "tok-1" {
		t.Errorf("u1's endpoint: token %q, %v", tok, err)
	}
	if st, _, _ := w.do("", http.MethodPut, "D1", 3, register("tok-x")); st != http.StatusUnauthorized {
		t.Errorf("no caller: %d, want 401", st)
	}
}

// A push token belongs to one device of one caller at a time: an app
// reinstalled under a new device id takes its caller's earlier row's
// endpoint over (that row becomes a tombstone), so the phone is pushed
// once. A phone changes hands by signing out (the app removes its device)
// and in as the other caller, who then registers the freed token; while
// the token is live on the new caller's device, the earlier caller cannot
// take it back. Once no row names the endpoint, SNS has it no more.
func TestAPhoneThatChangedHandsIsPushedOnceAndOnlyForItsNewCaller(t *testing.T) {
	w := newWorld(t)
	w.do("u1", http.MethodPut, "D1", 1, register("tok-S"))
	if st, a, _ := w.do("u1", http.MethodPut, "D2", 1, register("tok-S")); st != http.StatusCreated || !a.Applied {
		t.Fatalf("the reinstall's register: %d %+v", st, a)
	}
	if eps := w.endpoints("u1"); len(eps) != 1 {
		t.Fatalf("u1's endpoints after a reinstall: %v, want one (no push twice)", eps)
	}
	if st, a, _ := w.do("u1", http.MethodDelete, "D2", 2, ""); st != http.StatusOK || !a.Applied {
		t.Fatalf("u1's sign-out: %d %+v", st, a)
	}
	if st, a, _ := w.do("u2", http.MethodPut, "D3", 1, register("tok-S")); st != http.StatusCreated || !a.Applied {
		t.Fatalf("u2's register: %d %+v", st, a)
	}
	if eps := w.endpoints("u1"); len(eps) != 0 {
		t.Fatalf("u1 would still be pushed on the phone now signed in as u2: %v", eps)
	}
	if eps := w.endpoints("u2"); len(eps) != 1 {
		t.Fatalf("u2's endpoints %v", eps)
	}
	// u1's resent register finds its tombstone; a newer one meets u2's
	// live device.
	if st, a, _ := w.do("u1", http.MethodPut, "D2", 1, register("tok-S")); st != http.StatusOK || a.Applied || a.State != devices.Removed {
		t.Fatalf("u1's resent register: %d %+v, want its tombstone", st, a)
	}
	if st, _, p := w.do("u1", http.MethodPut, "D2", 3, register("tok-S")); st != http.StatusConflict || p.Type != devices.TypeTokenInUse {
		t.Fatalf("u1's newer register of u2's live token: %d %+v, want 409", st, p)
	}
	w.do("u2", http.MethodDelete, "D3", 2, "")
	if w.hasToken("tok-S") {
		t.Error("no row names the endpoint, and SNS still has it")
	}
}

// pausingSNS holds CreatePlatformEndpoint for one token until released,
// after SNS answered it: a registration that has its endpoint and has not
// yet written its row.
type pausingSNS struct {
	devices.SNSAPI
	token            string
	reached, release chan struct{}
}

func (p *pausingSNS) CreatePlatformEndpoint(ctx context.Context, in *sns.CreatePlatformEndpointInput, opts ...func(*sns.Options)) (*sns.CreatePlatformEndpointOutput, error) {
	out, err := p.SNSAPI.CreatePlatformEndpoint(ctx, in, opts...)
	if aws.ToString(in.Token) == p.token && p.reached != nil {
		close(p.reached)
		<-p.release
		p.reached = nil
	}
	return out, err
}

// A removal that releases an endpoint while another caller's registration
// of the same token is between SNS and its row: the registration finds the
// endpoint gone under its lock and makes it again, so the row it commits
// names an endpoint that exists.
func TestARemovalRacingARegistrationOfTheSameTokenLeavesAnEndpoint(t *testing.T) {
	w := newWorld(t)
	w.do("u1", http.MethodPut, "D1", 1, register("tok-R"))
	p := &pausingSNS{SNSAPI: w.sns, token: "tok-R", reached: make(chan struct{}), release: make(chan struct{})}
	reg, err := devices.NewRegistry(w.pool, p, map[notify.Platform]string{notify.GCM: w.app}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	racing := devices.Handler{Store: reg, Log: quiet}
	done := make(chan devices.Response, 1)
	go func() {
		done <- racing.Serve(context.Background(), devices.Request{Method: http.MethodPut, Path: "/devices/D9",
			Headers: http.Header{devices.CounterHeader: {"1"}}, Body: []byte(register("tok-R")), Caller: "u2"})
	}()
	<-p.reached
	if st, a, _ := w.do("u1", http.MethodDelete, "D1", 2, ""); st != http.StatusOK || !a.Applied {
		t.Fatalf("u1's delete: %d %+v", st, a)
	}
	if w.hasToken("tok-R") {
		t.Fatal("the removal left the endpoint: the race did not happen")
	}
	close(p.release)
	if r := <-done; r.Status != http.StatusCreated {
		t.Fatalf("u2's register: %d %s", r.Status, r.Body)
	}
	eps := w.endpoints("u2")
	if len(eps) != 1 {
		t.Fatalf("u2's endpoints %v", eps)
	}
	if tok, err := w.tokenOf(eps[0]); err != nil || tok != "tok-R" {
		t.Fatalf("u2's row names an endpoint SNS does not have (%q, %v)", tok, err)
	}
}

// An endpoint SNS disabled (the platform refused a push to it) is enabled
// again by a registration of its token; moto, unlike AWS, refuses to make
// it and names it, which is AWS's documented answer for a token it holds
// under other attributes: either way the row names the enabled endpoint.
func TestARegistrationReenablesADisabledEndpoint(t *testing.T) {
	w := newWorld(t)
	w.do("u1", http.MethodPut, "D1", 1, register("tok-D"))
	arn := w.endpoints("u1")[0]
	if _, err := w.sns.SetEndpointAttributes(context.Background(), &sns.SetEndpointAttributesInput{EndpointArn: aws.String(arn),
		Attributes: map[string]string{"Enabled": "false"}}); err != nil {
		t.Fatal(err)
	}
	if st, a, p := w.do("u1", http.MethodPut, "D1", 2, register("tok-D")); st != http.StatusOK || !a.Applied {
		t.Fatalf("re-register: %d %+v %+v", st, a, p)
	}
	out, err := w.sns.GetEndpointAttributes(context.Background(), &sns.GetEndpointAttributesInput{EndpointArn: aws.String(arn)})
	if err != nil || out.Attributes["Enabled"] != "true" {
		t.Fatalf("the endpoint after the registration: %v, %v", out, err)
	}
}

// A removal resent with its own counter changes nothing more: it answers
// what the row holds, not applied, as any counter at or below the mark.
func TestAResentRemovalIsNotAppliedTwice(t *testing.T) {
	w := newWorld(t)
	w.do("u1", http.MethodPut, "D1", 42, register("tok-R"))
	if st, a, _ := w.do("u1", http.MethodDelete, "D1", 43, ""); st != http.StatusOK || !a.Applied || a.State != devices.Removed {
		t.Fatalf("delete 43: %d %+v", st, a)
	}
	if st, a, _ := w.do("u1", http.MethodDelete, "D1", 43, ""); st != http.StatusOK || a.Applied || a.State != devices.Removed || a.Counter != 43 {
		t.Fatalf("the resent 43: %d %+v, want 200, not applied, the row's 43", st, a)
	}
}

// The worker disables the device a push found gone only while its row
// holds the registration the push was read from: a registration since (a
// higher counter, on the same endpoint) stays enabled.
func TestAStaleDisableLeavesANewerRegistration(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.do("u1", http.MethodPut, "D1", 1, register("tok-S"))
	store := notify.NewDeviceStore(w.pool)
	read, err := store.Endpoints(ctx, "u1")
	if err != nil || len(read) != 1 {
		t.Fatalf("endpoints %v, %v", read, err)
	}
	if st, a, _ := w.do("u1", http.MethodPut, "D1", 2, register("tok-S")); st != http.StatusOK || !a.Applied {
		t.Fatalf("register 2: %d %+v", st, a)
	}
	if err := store.Disable(ctx, read[0]); err != nil {
		t.Fatal(err)
	}
	if eps := w.endpoints("u1"); len(eps) != 1 {
		t.Fatalf("after the stale disable the worker would push to %v, want the newer registration", eps)
	}
}

// Bad input is a 400 problem naming the field, and changes nothing.
func TestBadInputIsAProblemAndChangesNothing(t *testing.T) {
	w := newWorld(t)
	w.do("u1", http.MethodPut, "D1", 5, register("tok-5"))
	cases := []struct {
		name, method, id string
		counter          int64
		body, field      string
	}{
		{"no counter", http.MethodPut, "D1", 0, register("tok-6"), devices.CounterHeader},
		{"bad device id", http.MethodPut, "D%201", 6, register("tok-6"), "device_id"},
		{"long device id", http.MethodDelete, string(make([]byte, 129)), 6, "", "device_id"},
		{"no platform", http.MethodPut, "D1", 6, `{"token":"t"}`, "platform"},
		{"unknown platform", http.MethodPut, "D1", 6, `{"platform":"WNS","token":"t"}`, "platform"},
		{"no token", http.MethodPut, "D1", 6, `{"platform":"GCM"}`, "token"},
		{"a space in the token", http.MethodPut, "D1", 6, `{"platform":"GCM","token":"a b"}`, "token"},
		{"not json", http.MethodPut, "D1", 6, `platform=GCM`, "body"},
		{"two objects", http.MethodPut, "D1", 6, register("t") + register("t"), "body"},
		{"delete without counter", http.MethodDelete, "D1", 0, "", devices.CounterHeader},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, _, p := w.do("u1", c.method, c.id, c.counter, c.body)
			if st != http.StatusBadRequest || p.Type != problem.TypeBadRequest || p.Extensions["field"] != c.field {
				t.Errorf("%d %+v, want 400 on %s", st, p, c.field)
			}
		})
	}
	h := http.Header{devices.CounterHeader: {"6", "7"}}
	r := w.h.Serve(context.Background(), devices.Request{Method: http.MethodDelete, Path: "/devices/D1", Headers: h, Caller: "u1"})
	if r.Status != http.StatusBadRequest {
		t.Errorf("two counters: %d", r.Status)
	}
	for _, c := range []string{"0", "-1", "07", "1e3", "9223372036854775808", " 6"} {
		h := http.Header{devices.CounterHeader: {c}}
		if r := w.h.Serve(context.Background(), devices.Request{Method: http.MethodDelete, Path: "/devices/D1", Headers: h, Caller: "u1"}); r.Status != http.StatusBadRequest {
			t.Errorf("counter %q: %d, want 400", c, r.Status)
		}
	}
	post := w.h.Serve(context.Background(), devices.Request{Method: http.MethodPost, Path: "/devices/D1",
		Headers: http.Header{devices.CounterHeader: {"6"}}, Body: []byte(register("t")), Caller: "u1"})
	if post.Status != http.StatusMethodNotAllowed || post.Headers.Get("Allow") != "PUT, DELETE" {
		t.Errorf("POST: %d, Allow %q", post.Status, post.Headers.Get("Allow"))
	}
	if eps := w.endpoints("u1"); len(eps) != 1 {
		t.Fatalf("endpoints %v after the bad requests", eps)
	}
	if tok, _ := w.tokenOf(w.endpoints("u1")[0]); tok != "tok-5" {
		t.Errorf("the device's token is %q after the bad requests, want tok-5", tok)
	}
	var counter int64
	if err := w.pool.QueryRow(context.Background(), `SELECT counter FROM devices WHERE caller_id = 'u1' AND device_id = 'D1'`).Scan(&counter); err != nil || counter != 5 {
		t.Errorf("the row's counter %d (%v), want 5", counter, err)
	}
}

// A platform the deployment has no application for is a 422 that writes
// nothing, and the next registration with the same counter can still go.
func TestAPlatformNotConfiguredIs422AndWritesNothing(t *testing.T) {
	w := newWorld(t)
	st, _, p := w.do("u1", http.MethodPut, "D9", 3, `{"platform":"APNS","token":"abc"}`)
	if st != http.StatusUnprocessableEntity || p.Type != devices.TypePlatformNotConfigured {
		t.Fatalf("%d %+v", st, p)
	}
	var n int
	if err := w.pool.QueryRow(context.Background(), `SELECT count(*) FROM devices`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows (%v) after a refused registration", n, err)
	}
	if st, a, _ := w.do("u1", http.MethodPut, "D9", 3, register("abc")); st != http.StatusCreated || !a.Applied {
		t.Fatalf("the same counter on a configured platform: %d %+v", st, a)
	}
}

// The ledger down: 503 and nothing changes.
func TestALedgerThatCannotBeReachedIs503(t *testing.T) {
	w := newWorld(t)
	w.pool.Close()
	st, _, p := w.do("u1", http.MethodPut, "D1", 1, register("tok"))
	if st != http.StatusServiceUnavailable || p.Type != problem.TypeLedgerUnavailable {
		t.Fatalf("%d %+v", st, p)
	}
}

func TestPlatformAppsReadsOnePerPlatform(t *testing.T) {
	apps, err := devices.PlatformApps("arn:aws:sns:us-east-1:1:app/GCM/a, arn:aws:sns:us-east-1:1:app/APNS/b")
	if err != nil || apps[notify.GCM] != "arn:aws:sns:us-east-1:1:app/GCM/a" || apps[notify.APNS] != "arn:aws:sns:us-east-1:1:app/APNS/b" {
		t.Fatalf("%v, %v", apps, err)
	}
	for _, bad := range []string{"arn:aws:sns:us-east-1:1:topic", "arn:aws:sns:us-east-1:1:app/WNS/x", "arn:x:app/GCM/a,arn:y:app/GCM/b"} {
		if _, err := devices.PlatformApps(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if apps, err := devices.PlatformApps(""); err != nil || len(apps) != 0 {
		t.Errorf("none: %v, %v", apps, err)
	}
}

// FuzzParseRegistration: whatever a client sends, the parser answers a
// registration within the limits or an InputError naming a field; it
// never panics.
func FuzzParseRegistration(f *testing.F) {
	f.Add("D1", "41", register("tok"))
	f.Add("", "1", `{}`)
	f.Add("a.b_c-D", "9223372036854775807", `{"platform":"APNS_SANDBOX","token":"`+string(make([]byte, 10))+`"}`)
	f.Add("D1", "0", `{"platform":"GCM","token":"x","extra":[1,2]}`)
	f.Add("D/1", "01", `null`)
	f.Fuzz(func(t *testing.T, id, counter, body string) {
		reg, err := devices.ParseRegistration(id, http.Header{devices.CounterHeader: {counter}}, []byte(body))
		var in *devices.InputError
		switch {
		case err != nil && !errors.As(err, &in):
			t.Fatalf("error %v is not an InputError", err)
		case err != nil && in.Field == "":
			t.Fatalf("an InputError names no field: %v", err)
		case err == nil:
			if reg.Counter < 1 || reg.DeviceID != id || len(id) > devices.MaxDeviceID || reg.Token == "" || len(reg.Token) > devices.MaxToken {
				t.Fatalf("accepted %+v from %q %q %q", reg, id, counter, body)
			}
			if _, err := devices.ParseDeviceID(reg.DeviceID); err != nil {
				t.Fatalf("accepted device id %q: %v", reg.DeviceID, err)
			}
		}
	})
}

// A commit whose reply is lost: the device moved, and the answer says it is
// not known (503), never "nothing ran". The app sends the same counter
// again and hears what the row holds: its own counter, applied earlier.
func TestALostCommitReplyIs503AndTheResendSeesItApplied(t *testing.T) {
	w := newWorld(t)
	u, err := url.Parse(w.dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultnet.Listen(u.Host, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	u.Host = proxy.Addr()
	pool, err := pgxpool.New(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	reg, err := devices.NewRegistry(pool, w.sns, map[notify.Platform]string{notify.GCM: w.app}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	w.h = devices.Handler{Store: reg, Log: quiet}
	if err := proxy.Arm(faultnet.Rule{Statement: "COMMIT"}); err != nil {
		t.Fatal(err)
	}
	st, _, p := w.do("u1", http.MethodPut, "D1", 5, register("tok-L"))
	if st != http.StatusServiceUnavailable || p.Type != problem.TypeLedgerUnavailable || proxy.Fired()["COMMIT"] != 1 {
		t.Fatalf("the lost commit: %d %+v (fired %v), want 503", st, p, proxy.Fired())
	}
	if eps := w.endpoints("u1"); len(eps) != 1 {
		t.Fatalf("the row did commit: endpoints %v", eps)
	}
	if st, a, _ := w.do("u1", http.MethodPut, "D1", 5, register("tok-L")); st != http.StatusOK || a.Applied || a.Counter != 5 {
		t.Fatalf("the resend: %d %+v, want 200 with the row's own 5, applied earlier", st, a)
	}
}

// A registration that applies makes its caller's pushes waiting for a
// device due at once (the worker's next sweep sends them to it), in its own
// transaction. Another caller's waiting pushes, and the caller's pushes
// backing off after an SNS failure, keep their times; a registration that
// does not apply (a resent, older counter) wakes nothing.
func TestARegistrationMakesOnlyItsCallersWaitingPushesDue(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	if _, err := w.pool.Exec(ctx, `
		INSERT INTO notif (event_id, channel, state, replace_id, caller_id, next_attempt_at, awaiting_device_since) VALUES
		  ('pay_1:SUCCEEDED', 'push', 'PENDING', 'pay_1', 'u1', now() + interval '1 hour', now()),
		  ('pay_2:SUCCEEDED', 'push', 'PENDING', 'pay_2', 'u2', now() + interval '1 hour', now()),
		  ('pay_3:SUCCEEDED', 'push', 'PENDING', 'pay_3', 'u1', now() + interval '1 hour', NULL)`); err != nil {
		t.Fatal(err)
	}
	due := func() map[string]bool {
		t.Helper()
		rows, err := w.pool.Query(ctx, `SELECT event_id, next_attempt_at IS NULL FROM notif`)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for rows.Next() {
			var id string
			var d bool
			if err := rows.Scan(&id, &d); err != nil {
				t.Fatal(err)
			}
			out[id] = d
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if st, a, _ := w.do("u1", http.MethodPut, "D1", 5, register("tok-W")); st != http.StatusCreated || !a.Applied {
		t.Fatalf("register: %d %+v", st, a)
	}
	if got := due(); !got["pay_1:SUCCEEDED"] || got["pay_2:SUCCEEDED"] || got["pay_3:SUCCEEDED"] {
		t.Fatalf("due after u1's registration: %v; want only u1's waiting push", got)
	}
	if _, err := w.pool.Exec(ctx, `UPDATE notif SET next_attempt_at = now() + interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	if st, a, _ := w.do("u1", http.MethodPut, "D1", 4, register("tok-W")); st != http.StatusOK || a.Applied {
		t.Fatalf("the resent older registration: %d %+v", st, a)
	}
	if got := due(); got["pay_1:SUCCEEDED"] {
		t.Fatalf("due after a registration that did not apply: %v", got)
	}
}

// A push token live on another caller's device is not taken from it: the
// registration is 409 token-in-use and writes nothing (no row, no move of
// the other caller's row, its endpoint untouched), so a caller who learnt
// someone's token can neither silence that phone's pushes nor send it its
// own. Once the other caller removed its device (the app's sign-out), or
// the platform reported the token gone (the endpoint disabled), the token
// is free and the registration goes through.
func TestATokenLiveForAnotherCallerIsRefusedAndWritesNothing(t *testing.T) {
	w := newWorld(t)
	if st, a, _ := w.do("u1", http.MethodPut, "D1", 1, register("tok-S")); st != http.StatusCreated || !a.Applied {
		t.Fatalf("u1's register: %d %+v", st, a)
	}
	st, a, p := w.do("u2", http.MethodPut, "D9", 1, register("tok-S"))
	if st != http.StatusConflict || p.Type != devices.TypeTokenInUse || p.Extensions["field"] != "token" {
		t.Errorf("u2's register of u1's live token: %d %+v %+v, want 409 %s", st, a, p, devices.TypeTokenInUse)
	}
	eps := w.endpoints("u1")
	if len(eps) != 1 {
		t.Fatalf("u1's endpoints %v: u1's phone no longer gets u1's pushes", eps)
	}
	if tok, err := w.tokenOf(eps[0]); err != nil || tok != "tok-S" {
		t.Errorf("u1's endpoint: token %q, %v", tok, err)
	}
	if eps := w.endpoints("u2"); len(eps) != 0 {
		t.Errorf("u2's pushes would go to u1's phone: %v", eps)
	}
	var rows int
	if err := w.pool.QueryRow(context.Background(), `SELECT count(*) FROM devices WHERE caller_id = 'u2'`).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("the refused registration wrote %d rows (%v)", rows, err)
	}

	// u1 signs out (removes its device): the token is free for u2.
	if st, a, _ := w.do("u1", http.MethodDelete, "D1", 2, ""); st != http.StatusOK || !a.Applied {
		t.Fatalf("u1's delete: %d %+v", st, a)
	}
	if st, a, p := w.do("u2", http.MethodPut, "D9", 1, register("tok-S")); st != http.StatusCreated || !a.Applied {
		t.Fatalf("u2's register after u1's removal: %d %+v %+v", st, a, p)
	}
	if eps := w.endpoints("u2"); len(eps) != 1 {
		t.Fatalf("u2's endpoints %v", eps)
	}

	// A token whose endpoint the platform reported gone (the worker
	// disabled u1's device) is no one's: it moves, and u1's row is a tombstone.
	w.do("u1", http.MethodPut, "D2", 3, register("tok-Z"))
	store := notify.NewDeviceStore(w.pool)
	read, err := store.Endpoints(context.Background(), "u1")
	if err != nil || len(read) != 1 {
		t.Fatalf("u1's endpoints %v, %v", read, err)
	}
	if err := store.Disable(context.Background(), read[0]); err != nil {
		t.Fatal(err)
	}
	if st, a, p := w.do("u2", http.MethodPut, "D8", 1, register("tok-Z")); st != http.StatusCreated || !a.Applied {
		t.Fatalf("u2's register of a disabled token: %d %+v %+v", st, a, p)
	}
	var state string
	if err := w.pool.QueryRow(context.Background(), `SELECT CASE WHEN removed_at IS NULL THEN 'live' ELSE 'removed' END FROM devices WHERE caller_id = 'u1' AND device_id = 'D2'`).Scan(&state); err != nil || state != "removed" {
		t.Errorf("u1's disabled device: %s (%v), want a tombstone", state, err)
	}
}
