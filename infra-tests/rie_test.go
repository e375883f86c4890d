package infratests

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// TestAPIBootstrapUnderTheLambdaRuntimeInterfaceEmulator builds the api
// function exactly as `make lambdas` does (same package, tags and flags; the
// host's architecture instead of arm64, which this machine cannot run), runs
// it under aws-lambda-rie, and sends it an HTTP API event for one payment.
func TestAPIBootstrapUnderTheLambdaRuntimeInterfaceEmulator(t *testing.T) {
	env := testenv.AWS(t)
	// The function's world: a table and a database of this test's own, and
	// the PSP simulator.
	db := testenv.DynamoDB(t)
	table := testenv.NewTable(t, db, "pk")
	_, dsn := testenv.Ledger(t)
	sim := pspsim.New(pspsim.Config{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	psp := httptest.NewServer(sim)
	defer psp.Close()
	defer sim.Close()

	invoke := testenv.Lambda(t, "api", []string{
		"AWS_REGION=" + env.Get("AWS_REGION"),
		"AWS_ENDPOINT_URL=" + env.Get("AWS_ENDPOINT_URL"),
		"AWS_ENDPOINT_URL_DYNAMODB=" + env.Get("AWS_ENDPOINT_URL_DYNAMODB"),
		stackenv.IdemTable + "=" + table,
		stackenv.LedgerDSN + "=" + dsn,
		stackenv.PSPURL + "=" + psp.URL,
	})
	ev := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "POST /payments", RawPath: "/payments",
		Headers: map[string]string{"idempotency-key": "rie-K1", "content-type": "application/json"},
		Body:    `{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"pm_card_visa"}`,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			TimeEpoch: time.Now().UnixMilli(),
			HTTP:      events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/payments"},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": "u1"}},
			},
		},
	}
	ev.RequestContext.TimeEpoch = time.Now().UnixMilli()
	var resp events.APIGatewayV2HTTPResponse
	if out := invoke(ev); json.Unmarshal(out, &resp) != nil {
		t.Fatalf("invocation answered %q", out)
	}
	if resp.StatusCode != http.StatusCreated || !strings.Contains(resp.Body, `"state":"SUCCEEDED"`) {
		t.Fatalf("answer %d %s", resp.StatusCode, resp.Body)
	}
	if ch := sim.Charges(); len(ch) != 1 || ch[0].Amount != 3000 || !strings.HasSuffix(ch[0].IdempotencyKey, ":charge") {
		t.Fatalf("charges = %+v", ch)
	}
}
