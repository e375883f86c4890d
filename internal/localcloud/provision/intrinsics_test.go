package provision_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/localcloud/provision"
)

func evaluator() *provision.Evaluator {
	t := &provision.Template{
		Parameters: map[string]provision.Parameter{
			"Stage":            {Type: "String", Default: "dev"},
			"BootstrapVersion": {Type: "AWS::SSM::Parameter::Value<String>", Default: "/cdk-bootstrap/hnb659fds/version"},
		},
		Resources: map[string]provision.Resource{
			"Table":   {Type: "AWS::DynamoDB::Table"},
			"Queue":   {Type: "AWS::SQS::Queue"},
			"Cluster": {Type: "AWS::RDS::DBCluster"},
			"Key":     {Type: "AWS::KMS::Key"},
			"Fn":      {Type: "AWS::Lambda::Function"},
		},
	}
	return &provision.Evaluator{Template: t, Region: "us-east-1", AccountID: "123456789012", StackName: "Oncepay",
		Physical: map[string]provision.Physical{
			"Table":   {Type: "AWS::DynamoDB::Table", Name: "claims", Arn: "arn:table", StreamArn: "arn:stream"},
			"Queue":   {Type: "AWS::SQS::Queue", Name: "q.fifo", URL: "http://127.0.0.1:4566/123456789012/q.fifo", Arn: "arn:q"},
			"Cluster": {Type: "AWS::RDS::DBCluster", Name: "cluster", Address: "127.0.0.1", Port: "54329"},
			"Fn":      {Type: "AWS::Lambda::Function", Name: "Fn", Arn: "arn:aws:lambda:us-east-1:123456789012:function:Fn"},
		}}
}

// The intrinsics the template uses evaluate to what CloudFormation gives.
func TestIntrinsicsEvaluateAsCloudFormationDoes(t *testing.T) {
	ev := evaluator()
	for name, c := range map[string]struct {
		in   any
		want string
	}{
		"Ref table":        {map[string]any{"Ref": "Table"}, "claims"},
		"Ref queue is URL": {map[string]any{"Ref": "Queue"}, "http://127.0.0.1:4566/123456789012/q.fifo"},
		"GetAtt stream":    {map[string]any{"Fn::GetAtt": []any{"Table", "StreamArn"}}, "arn:stream"},
		"GetAtt dotted":    {map[string]any{"Fn::GetAtt": "Cluster.Endpoint.Port"}, "54329"},
		"Join DSN": {map[string]any{"Fn::Join": []any{"", []any{"postgres://app@",
			map[string]any{"Fn::GetAtt": []any{"Cluster", "Endpoint.Address"}}, ":",
			map[string]any{"Fn::GetAtt": []any{"Cluster", "Endpoint.Port"}}, "/oncepay?sslmode=require"}}},
			"postgres://app@127.0.0.1:54329/oncepay?sslmode=require"},
		"Sub": {map[string]any{"Fn::Sub": "${AWS::Region}/${Table}/${Cluster.Endpoint.Address}/${!Literal}/${Stage}"},
			"us-east-1/claims/127.0.0.1/${Literal}/dev"},
		"Sub with map": {map[string]any{"Fn::Sub": []any{"${X}-${AWS::AccountId}", map[string]any{"X": map[string]any{"Ref": "Queue"}}}},
			"http://127.0.0.1:4566/123456789012/q.fifo-123456789012"},
		"Select of Split": {map[string]any{"Fn::Select": []any{"1", map[string]any{"Fn::Split": []any{"/", "a/b/c"}}}}, "b"},
		"number":          {float64(30), "30"},
		"function arn":    {map[string]any{"Fn::GetAtt": []any{"Fn", "Arn"}}, "arn:aws:lambda:us-east-1:123456789012:function:Fn"},
		"stack id":        {map[string]any{"Ref": "AWS::StackId"}, ev.StackID()},
	} {
		got, err := ev.String(context.Background(), c.in)
		if err != nil || got != c.want {
			t.Errorf("%s: got %q, %v; want %q", name, got, err, c.want)
		}
	}
	if !strings.HasPrefix(ev.StackID(), "arn:aws:cloudformation:us-east-1:123456789012:stack/Oncepay/") {
		t.Errorf("stack id %s", ev.StackID())
	}
}

// What the local cloud cannot evaluate is an error that names it, never an
// empty string.
func TestAnUnknownIntrinsicIsAnError(t *testing.T) {
	ev := evaluator()
	for name, c := range map[string]struct {
		in   any
		want string
	}{
		"Fn::If":             {map[string]any{"Fn::If": []any{"IsProd", "a", "b"}}, "Fn::If"},
		"Fn::ImportValue":    {map[string]any{"Fn::Join": []any{"", []any{"x", map[string]any{"Fn::ImportValue": "Shared"}}}}, "Fn::ImportValue"},
		"unknown resource":   {map[string]any{"Ref": "Nope"}, "Ref Nope"},
		"unrun type":         {map[string]any{"Fn::GetAtt": []any{"Key", "Arn"}}, "AWS::KMS::Key"},
		"unknown attribute":  {map[string]any{"Fn::GetAtt": []any{"Table", "LatestStreamLabel"}}, "Table.LatestStreamLabel"},
		"SSM parameter":      {map[string]any{"Ref": "BootstrapVersion"}, "BootstrapVersion"},
		"pseudo":             {map[string]any{"Ref": "AWS::NotificationARNs"}, "AWS::NotificationARNs"},
		"Sub of unknown":     {map[string]any{"Fn::Sub": "${Nope.Arn}"}, "Nope"},
		"Select out of list": {map[string]any{"Fn::Select": []any{float64(5), []any{"a"}}}, "out of"},
		"ssm dynamic ref":    {"{{resolve:ssm:/param}}", "ssm"},
		"secret without SM":  {"{{resolve:secretsmanager:s:SecretString:k::}}", "Secrets Manager"},
	} {
		got, err := ev.String(context.Background(), c.in)
		if !errors.Is(err, provision.ErrUnresolvable) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %q, %v; want an ErrUnresolvable naming %q", name, got, err, c.want)
		}
	}
	// Envs names the function and the variable.
	ev.Template.Resources["Api"] = provision.Resource{Type: "AWS::Lambda::Function", Properties: map[string]any{
		"Environment": map[string]any{"Variables": map[string]any{"SHARED": map[string]any{"Fn::ImportValue": "Shared"}}}}}
	_, err := provision.Envs(context.Background(), ev.Template, ev.Physical, provision.EnvConfig{Region: "us-east-1"})
	if err == nil || !strings.Contains(err.Error(), "Api") || !strings.Contains(err.Error(), "SHARED") || !strings.Contains(err.Error(), "Fn::ImportValue") {
		t.Errorf("Envs: %v; want an error naming Api, SHARED and Fn::ImportValue", err)
	}
}

// A version resource new to the template (the CDK renames it when the
// function's code changes) is published as the function's next number; a
// known one keeps its number.
func TestANewVersionIsPublishedAsTheNextNumber(t *testing.T) {
	tmpl := func(version string) *provision.Template {
		return &provision.Template{Resources: map[string]provision.Resource{
			"Fn":    {Type: "AWS::Lambda::Function"},
			version: {Type: "AWS::Lambda::Version", Properties: map[string]any{"FunctionName": map[string]any{"Ref": "Fn"}}},
		}}
	}
	first := provision.Lambdas(tmpl("FnVersionA"), "us-east-1", "123456789012", nil)
	if v := first["FnVersionA"]; v.Version != "1" || v.Arn != "arn:aws:lambda:us-east-1:123456789012:function:Fn:1" {
		t.Fatalf("first version %+v", v)
	}
	same := provision.Lambdas(tmpl("FnVersionA"), "us-east-1", "123456789012", first)
	if same["FnVersionA"].Version != "1" {
		t.Errorf("an unchanged version was republished: %+v", same["FnVersionA"])
	}
	next := provision.Lambdas(tmpl("FnVersionB"), "us-east-1", "123456789012", same)
	if next["FnVersionB"].Version != "2" {
		t.Errorf("a changed function's version is %+v, want 2", next["FnVersionB"])
	}
}
