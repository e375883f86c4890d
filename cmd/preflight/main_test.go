package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// noAWS leaves the SDK nothing to find: no Region, no credentials, no
// files, no instance metadata.
func noAWS(t *testing.T) {
	t.Helper()
	for _, k := range []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"} {
		t.Setenv(k, "")
	}
	missing := filepath.Join(t.TempDir(), "missing")
	t.Setenv("AWS_CONFIG_FILE", missing)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", missing)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("HOME", t.TempDir())
}

func TestRunRefusesBeforeAnyCall(t *testing.T) {
	repo := filepath.Join("..", "..")
	for _, tc := range []struct {
		name   string
		env    map[string]string
		args   []string
		stderr string
	}{
		{"a context flag that is no assignment", nil, []string{"-app", repo, "-c", "oncepay:profile"}, "not key=value"},
		{"a stray argument", nil, []string{"-app", repo, "deploy"}, "unexpected arguments"},
		{"no cdk.json", nil, []string{"-app", t.TempDir()}, "cdk.json"},
		{"a context the app refuses", nil, []string{"-app", repo, "-c", "oncepay:profile=staging"}, "unknown profile"},
		{"no Region", nil, []string{"-app", repo}, "no Region"},
		{"no credentials", map[string]string{"AWS_REGION": "us-east-1"}, []string{"-app", repo}, "no usable AWS credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noAWS(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stdout, stderr strings.Builder
			if code := run(context.Background(), tc.args, &stdout, &stderr); code != 2 {
				t.Errorf("exit %d, want 2 (stderr %q)", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr %q does not say %q", stderr.String(), tc.stderr)
			}
			if stdout.Len() > 0 {
				t.Errorf("printed results: %s", stdout.String())
			}
		})
	}
}
