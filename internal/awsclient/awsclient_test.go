package awsclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncepay/oncepay/internal/awsclient"
	"github.com/oncepay/oncepay/internal/awsclient/dynamoclient"
	"github.com/oncepay/oncepay/internal/awsclient/snsclient"
	"github.com/oncepay/oncepay/internal/awsclient/sqsclient"
	"github.com/oncepay/oncepay/internal/awsclient/streamsclient"
)

// recorder answers every request with a server error (the client gives up
// after its retries) and records the Authorization headers it saw.
type recorder struct {
	mu    sync.Mutex
	auths []string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.auths = append(r.auths, req.Header.Get("Authorization"))
	r.mu.Unlock()
	w.WriteHeader(http.StatusBadRequest)
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.auths...)
}

// Each service's own endpoint variable wins over AWS_ENDPOINT_URL, as with
// the SDK's environment configuration, and the calls are signed with the
// environment's key for the environment's region.
func TestServiceEndpointVariablesAndEnvironmentCredentials(t *testing.T) {
	t.Setenv("AWS_REGION", "eu-west-3")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDENVONLY")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_SESSION_TOKEN", "token")
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1") // nothing listens: a call that goes here fails to connect
	calls := map[string]func(cfg aws.Config, ctx context.Context) error{
		"DYNAMODB": func(cfg aws.Config, ctx context.Context) error {
			_, err := dynamoclient.New(cfg).ListTables(ctx, &dynamodb.ListTablesInput{})
			return err
		},
		"DYNAMODB_STREAMS": func(cfg aws.Config, ctx context.Context) error {
			_, err := streamsclient.New(cfg).ListStreams(ctx, &dynamodbstreams.ListStreamsInput{})
			return err
		},
		"SQS": func(cfg aws.Config, ctx context.Context) error {
			_, err := sqsclient.New(cfg).ListQueues(ctx, &sqs.ListQueuesInput{})
			return err
		},
		"SNS": func(cfg aws.Config, ctx context.Context) error {
			_, err := snsclient.New(cfg).ListTopics(ctx, &sns.ListTopicsInput{})
			return err
		},
	}
	for svc, call := range calls {
		t.Run(svc, func(t *testing.T) {
			rec := &recorder{}
			srv := httptest.NewServer(rec)
			defer srv.Close()
			t.Setenv("AWS_ENDPOINT_URL_"+svc, srv.URL)
			cfg, err := awsclient.Config(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := call(cfg, ctx); err == nil {
				t.Fatal("the recorder's 400 was taken for an answer")
			}
			auths := rec.seen()
			if len(auths) == 0 {
				t.Fatalf("AWS_ENDPOINT_URL_%s was not used", svc)
			}
			if !strings.Contains(auths[0], "Credential=AKIDENVONLY/") || !strings.Contains(auths[0], "/eu-west-3/") {
				t.Fatalf("signed as %q", auths[0])
			}
		})
	}
}

func TestConfigNamesWhatIsMissing(t *testing.T) {
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	if _, err := awsclient.Config(context.Background()); err == nil || !strings.Contains(err.Error(), "AWS_REGION") {
		t.Fatalf("no region: err = %v", err)
	}
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_ACCESS_KEY", "")
	if _, err := awsclient.Config(context.Background()); err == nil || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Fatalf("no key: err = %v", err)
	}
}

func TestServiceEndpointVar(t *testing.T) {
	if got := awsclient.ServiceEndpointVar("DynamoDB Streams"); got != "AWS_ENDPOINT_URL_DYNAMODB_STREAMS" {
		t.Fatal(got)
	}
}
