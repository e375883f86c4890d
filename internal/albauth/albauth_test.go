package albauth_test

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/albauth"
	"github.com/oncepay/oncepay/internal/testkit/albsign"
)

var now = time.Unix(1_800_000_000, 0)

func clock() time.Time { return now }

// A token the stack's load balancer signed gives its sub, with the key
// fetched from the key endpoint (once per kid); every forgery the issue
// names is refused: another load balancer's token, a valid header over
// someone else's claims, an expired token, the plain identity header's
// value, a different algorithm.
func TestOnlyTheStacksLoadBalancerNamesTheCaller(t *testing.T) {
	alb := albsign.New(albsign.ARN)
	srv := alb.KeyServer()
	defer srv.Close()
	fetches := 0
	keys := albauth.HTTPKeys(srv.URL, nil)
	v, err := albauth.New(alb.ARN, func(ctx context.Context, kid string) (*ecdsa.PublicKey, error) { fetches++; return keys(ctx, kid) }, clock)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if sub, err := v.Verify(ctx, alb.Sign("u1", now.Add(time.Minute))); err != nil || sub != "u1" {
			t.Fatalf("the stack's token: %q, %v", sub, err)
		}
	}
	if fetches != 1 {
		t.Errorf("%d key fetches for one kid, want 1", fetches)
	}

	other := albsign.New("arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/app/someone-else/fedcba9876543210")
	good := alb.Sign("u1", now.Add(time.Minute))
	parts := strings.Split(good, ".")
	victim := strings.Split(alb.Sign("u2", now.Add(time.Minute)), ".")
	forgeries := map[string]string{
		"another ALB of the account":             other.Sign("u2", now.Add(time.Minute)),
		"another ALB claiming to be this one":    other.SignWith(map[string]any{"alg": "ES256", "kid": alb.Kid, "signer": alb.ARN, "exp": now.Add(time.Minute).Unix()}, map[string]any{"sub": "u2"}),
		"this ALB's signature over other claims": parts[0] + "." + victim[1] + "." + parts[2],
		"expired":                                alb.Sign("u1", now.Add(-albauth.Leeway)),
		"the plain identity header":              "u2",
		"alg none":                               alb.SignWith(map[string]any{"alg": "none", "kid": alb.Kid, "signer": alb.ARN, "exp": now.Add(time.Minute).Unix()}, map[string]any{"sub": "u2"}),
		"no exp":                                 alb.SignWith(map[string]any{"alg": "ES256", "kid": alb.Kid, "signer": alb.ARN}, map[string]any{"sub": "u2"}),
		"no sub":                                 alb.SignWith(map[string]any{"alg": "ES256", "kid": alb.Kid, "signer": alb.ARN, "exp": now.Add(time.Minute).Unix()}, map[string]any{}),
		"a kid that is a path":                   alb.SignWith(map[string]any{"alg": "ES256", "kid": "../x", "signer": alb.ARN, "exp": now.Add(time.Minute).Unix()}, map[string]any{"sub": "u2"}),
		"empty":                                  "",
	}
	for name, tok := range forgeries {
		if sub, err := v.Verify(ctx, tok); !errors.Is(err, albauth.ErrInvalid) {
			t.Errorf("%s: %q, %v; want ErrInvalid", name, sub, err)
		}
	}
}

// A key endpoint that fails is no proof of forgery: ErrKeyUnavailable, and
// the next request tries again.
func TestAnUnreachableKeyEndpointIsRetryableNotUnauthorized(t *testing.T) {
	alb := albsign.New(albsign.ARN)
	down := true
	v, err := albauth.New(alb.ARN, func(ctx context.Context, kid string) (*ecdsa.PublicKey, error) {
		if down {
			return nil, errors.New("dial tcp: i/o timeout")
		}
		return alb.Keys()(ctx, kid)
	}, clock)
	if err != nil {
		t.Fatal(err)
	}
	tok := alb.Sign("u1", now.Add(time.Minute))
	if _, err := v.Verify(context.Background(), tok); !errors.Is(err, albauth.ErrKeyUnavailable) || errors.Is(err, albauth.ErrInvalid) {
		t.Fatalf("key endpoint down: %v, want ErrKeyUnavailable only", err)
	}
	down = false
	if sub, err := v.Verify(context.Background(), tok); err != nil || sub != "u1" {
		t.Fatalf("after it is back: %q, %v", sub, err)
	}
}

// A kid the key endpoint does not have (403 or 404) is a forgery, not an
// outage: ErrInvalid (401), and the kid is refused for a while without
// another fetch. A token a few seconds past its exp (clock skew) is taken;
// one past the leeway is not.
func TestAKidTheEndpointDoesNotHaveIsAForgeryAndIsNotFetchedAgain(t *testing.T) {
	alb := albsign.New(albsign.ARN)
	srv := alb.KeyServer()
	defer srv.Close()
	fetches := 0
	keys := albauth.HTTPKeys(srv.URL, nil)
	at := now
	v, err := albauth.New(alb.ARN, func(ctx context.Context, kid string) (*ecdsa.PublicKey, error) { fetches++; return keys(ctx, kid) }, func() time.Time { return at })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	made := alb.SignWith(map[string]any{"alg": "ES256", "kid": "made-up-kid", "signer": alb.ARN, "exp": now.Add(time.Minute).Unix()}, map[string]any{"sub": "u2"})
	for range 3 {
		if _, err := v.Verify(ctx, made); !errors.Is(err, albauth.ErrInvalid) || errors.Is(err, albauth.ErrKeyUnavailable) {
			t.Fatalf("a made-up kid: %v, want ErrInvalid only", err)
		}
	}
	if fetches != 1 {
		t.Errorf("%d fetches of a kid the endpoint does not have, want 1", fetches)
	}
	at = now.Add(31 * time.Second)
	if _, err := v.Verify(ctx, made); !errors.Is(err, albauth.ErrInvalid) || fetches != 2 {
		t.Errorf("after the memory's TTL: %v, %d fetches, want ErrInvalid after a second fetch", err, fetches)
	}
	at = now
	if sub, err := v.Verify(ctx, alb.Sign("u1", now.Add(-albauth.Leeway+time.Second))); err != nil || sub != "u1" {
		t.Errorf("a token inside the leeway: %q, %v", sub, err)
	}
	if _, err := v.Verify(ctx, alb.Sign("u1", now.Add(-albauth.Leeway))); !errors.Is(err, albauth.ErrInvalid) {
		t.Errorf("a token past the leeway: %v", err)
	}
}

func TestNewRefusesASignerThatIsNoLoadBalancer(t *testing.T) {
	for _, arn := range []string{"", "u1", "arn:aws:elasticloadbalancing:us-east-1:1:targetgroup/x/y"} {
		if _, err := albauth.New(arn, albsign.Default.Keys(), nil); err == nil {
			t.Errorf("New(%q) accepted", arn)
		}
	}
}

func FuzzVerify(f *testing.F) {
	alb := albsign.New(albsign.ARN)
	f.Add(alb.Sign("u1", now.Add(time.Minute)))
	f.Add("a.b.c")
	f.Add("")
	v, _ := albauth.New(alb.ARN, alb.Keys(), clock)
	f.Fuzz(func(t *testing.T, tok string) {
		sub, err := v.Verify(context.Background(), tok)
		if err == nil && sub == "" {
			t.Fatal("accepted with no sub")
		}
		if err != nil && strings.Contains(err.Error(), tok) && len(tok) > 16 {
			t.Fatalf("the error carries the token: %v", err)
		}
	})
}
