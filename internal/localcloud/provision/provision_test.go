package provision_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncepay/oncepay/internal/awsclient"
	"github.com/oncepay/oncepay/internal/awsclient/dynamoclient"
	"github.com/oncepay/oncepay/internal/awsclient/snsclient"
	"github.com/oncepay/oncepay/internal/awsclient/sqsclient"
	"github.com/oncepay/oncepay/internal/localcloud/provision"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// fixture writes the test template with unique resource names.
func fixture(t *testing.T) (*provision.Template, string) {
	t.Helper()
	prefix := "lc" + testenv.RandomID(4)
	b, err := os.ReadFile("testdata/template.json")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "template.json")
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(b), "__PREFIX__", prefix)), 0o644); err != nil {
		t.Fatal(err)
	}
	tpl, err := provision.ReadTemplate(p)
	if err != nil {
		t.Fatal(err)
	}
	return tpl, prefix
}

func TestProvisionFromTemplateIsIdempotent(t *testing.T) {
	testenv.AWS(t)
	ctx := context.Background()
	cfg, err := awsclient.Config(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := &provision.Provisioner{DynamoDB: dynamoclient.New(cfg), SQS: sqsclient.New(cfg), SNS: snsclient.New(cfg)}
	tpl, prefix := fixture(t)

	first, err := p.Provision(ctx, tpl)
	if err != nil {
		t.Fatal(err)
	}
	second, err := p.Provision(ctx, tpl)
	if err != nil {
		t.Fatalf("second provision: %v", err)
	}
	a, _ := json.Marshal(first)
	b, _ := json.Marshal(second)
	if string(a) != string(b) {
		t.Errorf("provisioning twice changed the world:\n%s\n%s", a, b)
	}

	out := provision.Outputs(tpl, first)
	if out["IdemTableName"] != prefix+"-claims" {
		t.Errorf("IdemTableName = %q", out["IdemTableName"])
	}
	if !strings.Contains(out["OutboxStreamArn"], prefix+"-outbox/stream/") {
		t.Errorf("OutboxStreamArn = %q", out["OutboxStreamArn"])
	}
	if !strings.HasSuffix(out["EventsQueueUrl"], prefix+"-events.fifo") {
		t.Errorf("EventsQueueUrl = %q", out["EventsQueueUrl"])
	}
	if _, ok := out["LedgerSecretArn"]; ok {
		t.Errorf("an output of a resource the local cloud does not run was resolved: %q", out["LedgerSecretArn"])
	}

	ttl, err := p.DynamoDB.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(prefix + "-claims")})
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToString(ttl.TimeToLiveDescription.AttributeName); got != "expires_at" {
		t.Errorf("ttl attribute = %q", got)
	}
	qa, err := p.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(out["EventsQueueUrl"]), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll},
	})
	if err != nil {
		t.Fatal(err)
	}
	if qa.Attributes["FifoQueue"] != "true" || qa.Attributes["ContentBasedDeduplication"] != "false" || qa.Attributes["VisibilityTimeout"] != "180" {
		t.Errorf("queue attributes = %v", qa.Attributes)
	}
	var rp struct {
		DeadLetterTargetArn string          `json:"deadLetterTargetArn"`
		MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(qa.Attributes["RedrivePolicy"]), &rp); err != nil {
		t.Fatalf("redrive policy %q: %v", qa.Attributes["RedrivePolicy"], err)
	}
	if rp.DeadLetterTargetArn != out["EventsDlqArn"] || strings.Trim(string(rp.MaxReceiveCount), `"`) != "5" {
		t.Errorf("redrive policy = %+v, want the DLQ %s with maxReceiveCount 5", rp, out["EventsDlqArn"])
	}

	// A changed attribute in the template changes the local world.
	tpl.Resources["Events"].Properties["VisibilityTimeout"] = float64(90)
	if _, err := p.Provision(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	qa, err = p.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(out["EventsQueueUrl"]), AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameVisibilityTimeout},
	})
	if err != nil {
		t.Fatal(err)
	}
	if qa.Attributes["VisibilityTimeout"] != "90" {
		t.Errorf("visibility after template change = %q, want 90", qa.Attributes["VisibilityTimeout"])
	}
}
