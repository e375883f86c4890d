package preflight

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/cognitoidentityprovider"
	cogtypes "github.com/aws/aws-sdk-go-v2/service/cognitoidentityprovider/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"
	sestypes "github.com/aws/aws-sdk-go-v2/service/sesv2/types"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/smithy-go"
)

// recorded answers each call with a file under testdata/, named by the
// request's key; a call with no file named fails the test, so each case
// also shows which calls a check makes.
type recorded struct {
	t          *testing.T
	settings   string            // lambda GetAccountSettings
	account    string            // sesv2 GetAccount
	identities map[string]string // sesv2 GetEmailIdentity, by identity
	apps       map[string]string // sns GetPlatformApplicationAttributes, by ARN
	domains    map[string]string // cognito DescribeUserPoolDomain, by prefix
	hosts      map[string]string // LookupHost, by host
	azs        string            // ec2 DescribeAvailabilityZones
}

func (r *recorded) clients() Clients {
	return Clients{Lambda: r, SES: r, SNS: r, Cognito: r, EC2: r, DNS: r}
}

// load decodes file into out, or returns the error it records as a
// generic API error.
func (r *recorded) load(what, file string, out any) error {
	r.t.Helper()
	if file == "" {
		r.t.Fatalf("unexpected call: %s (no recorded answer)", what)
	}
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		r.t.Fatal(err)
	}
	var e struct {
		Type    string `json:"__type"`
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &e) == nil && e.Type != "" {
		return &smithy.GenericAPIError{Code: e.Type, Message: e.Message}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		r.t.Fatalf("%s: %v", file, err)
	}
	return nil
}

// typed turns a recorded error of code into the SDK's typed error, as the
// SDK's deserializer does.
func typed(err error, code string, to func(msg *string) error) error {
	var g *smithy.GenericAPIError
	if errors.As(err, &g) && g.Code == code {
		return to(&g.Message)
	}
	return err
}

func (r *recorded) GetAccountSettings(context.Context, *lambda.GetAccountSettingsInput, ...func(*lambda.Options)) (*lambda.GetAccountSettingsOutput, error) {
	var out lambda.GetAccountSettingsOutput
	if err := r.load("GetAccountSettings", r.settings, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (r *recorded) GetAccount(context.Context, *sesv2.GetAccountInput, ...func(*sesv2.Options)) (*sesv2.GetAccountOutput, error) {
	var out sesv2.GetAccountOutput
	if err := r.load("GetAccount", r.account, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (r *recorded) GetEmailIdentity(_ context.Context, in *sesv2.GetEmailIdentityInput, _ ...func(*sesv2.Options)) (*sesv2.GetEmailIdentityOutput, error) {
	var out sesv2.GetEmailIdentityOutput
	if err := r.load("GetEmailIdentity "+*in.EmailIdentity, r.identities[*in.EmailIdentity], &out); err != nil {
		return nil, typed(err, "NotFoundException", func(m *string) error { return &sestypes.NotFoundException{Message: m} })
	}
	return &out, nil
}

func (r *recorded) GetPlatformApplicationAttributes(_ context.Context, in *sns.GetPlatformApplicationAttributesInput, _ ...func(*sns.Options)) (*sns.GetPlatformApplicationAttributesOutput, error) {
	var out sns.GetPlatformApplicationAttributesOutput
	if err := r.load("GetPlatformApplicationAttributes "+*in.PlatformApplicationArn, r.apps[*in.PlatformApplicationArn], &out); err != nil {
		return nil, typed(err, "NotFound", func(m *string) error { return &snstypes.NotFoundException{Message: m} })
	}
	return &out, nil
}

func (r *recorded) DescribeUserPoolDomain(_ context.Context, in *cognitoidentityprovider.DescribeUserPoolDomainInput, _ ...func(*cognitoidentityprovider.Options)) (*cognitoidentityprovider.DescribeUserPoolDomainOutput, error) {
	var out cognitoidentityprovider.DescribeUserPoolDomainOutput
	if err := r.load("DescribeUserPoolDomain "+*in.Domain, r.domains[*in.Domain], &out); err != nil {
		return nil, typed(err, "ResourceNotFoundException", func(m *string) error { return &cogtypes.ResourceNotFoundException{Message: m} })
	}
	return &out, nil
}

func (r *recorded) DescribeAvailabilityZones(context.Context, *ec2.DescribeAvailabilityZonesInput, ...func(*ec2.Options)) (*ec2.DescribeAvailabilityZonesOutput, error) {
	var out ec2.DescribeAvailabilityZonesOutput
	if err := r.load("DescribeAvailabilityZones", r.azs, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (r *recorded) LookupHost(_ context.Context, host string) ([]string, error) {
	var out struct {
		Addrs       []string `json:"addrs"`
		Err         string   `json:"err"`
		IsNotFound  bool     `json:"isNotFound"`
		IsTemporary bool     `json:"isTemporary"`
	}
	if err := r.load("LookupHost "+host, r.hosts[host], &out); err != nil {
		return nil, err
	}
	if out.Err != "" {
		return nil, &net.DNSError{Err: out.Err, Name: host, IsNotFound: out.IsNotFound, IsTemporary: out.IsTemporary}
	}
	return out.Addrs, nil
}

// settings reads key=value pairs as the app's context.
func settings(t *testing.T, kv ...string) Settings {
	t.Helper()
	c := Context{}
	for _, p := range kv {
		k, v, _ := strings.Cut(p, "=")
		c[k] = v
	}
	s, err := SettingsFromContext(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// expect checks a result's status and that its detail holds each of want.
func expect(t *testing.T, got Result, status Status, want ...string) {
	t.Helper()
	if got.Status != status {
		t.Errorf("status %s, want %s: %s", got.Status, status, got.Detail)
	}
	for _, w := range want {
		if !strings.Contains(got.Detail, w) {
			t.Errorf("detail does not say %q: %s", w, got.Detail)
		}
	}
}
