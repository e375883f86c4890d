// Package albauth verifies the user claims an Application Load Balancer's
// authenticate action signs and passes to its targets in x-amzn-oidc-data.
//
// Why: the api reads the caller of an ALB request from the load balancer,
// and only the signed claims prove which load balancer authenticated it.
// x-amzn-oidc-identity is plain text; any other load balancer (or anyone
// who can invoke the function) can set it, and a forged caller could read
// another caller's keys. So the caller is the sub of a token whose
// signature checks out against the ALB's public key for its kid, whose
// signer is this stack's load balancer, and which has not expired.
//
// The token is a JWT (header.payload.signature), ES256 over P-256, whose
// segments the ALB encodes as base64url with padding (strict JWT parsers
// refuse the padding, which is why this small reader exists rather than a
// JWT library in the 10 MiB-budgeted api). The public key of a kid is a
// PEM document at https://public-keys.auth.elb.<region>.amazonaws.com/<kid>
// (PublicKeysURL); keys do not change under a kid, so each is fetched once
// per process.
package albauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
)

// ErrInvalid: the token is missing, malformed, not signed by the expected
// load balancer, or expired. The request is unauthenticated (401).
var ErrInvalid = errors.New("albauth: invalid x-amzn-oidc-data")

// ErrKeyUnavailable: the ALB's public key could not be fetched. Nothing
// says the request is forged; the answer is a retryable 5xx.
var ErrKeyUnavailable = errors.New("albauth: public key unavailable")

// ErrNoSuchKey: the key endpoint says it has no key of that kid (403 or
// 404). The load balancer signs only with keys it has published, so the
// token was not signed by it (ErrInvalid), and no retry will change that.
var ErrNoSuchKey = errors.New("albauth: no such key")

// Keys returns the public key of a kid.
type Keys func(ctx context.Context, kid string) (*ecdsa.PublicKey, error)

// Leeway is how far past its exp a token is still taken: the load
// balancer's clock and the function's are both NTP-synced, but not the same
// clock.
const Leeway = 5 * time.Second

// unknownKidTTL is how long a kid the endpoint said it does not have is
// refused without asking again, and maxUnknownKids bounds that memory (a
// forger can make up kids without end; past the bound the memory restarts).
const (
	unknownKidTTL  = 30 * time.Second
	maxUnknownKids = 1024
)

// PublicKeysURL is the ALB public key endpoint of region (commercial and
// China partitions; GovCloud publishes its keys elsewhere: give the base
// explicitly there).
func PublicKeysURL(region string) string {
	suffix := "amazonaws.com"
	if strings.HasPrefix(region, "cn-") {
		suffix = "amazonaws.com.cn"
	}
	return "https://public-keys.auth.elb." + region + "." + suffix
}

// kidPattern keeps a kid a single path segment of the key URL.
var kidPattern = regexp.MustCompile(`^[A-Za-z0-9-]{1,128}$`)

// HTTPKeys fetches <base>/<kid> with hc (nil: a client with a 3 s timeout).
func HTTPKeys(base string, hc *http.Client) Keys {
	if hc == nil {
		hc = &http.Client{Timeout: 3 * time.Second}
	}
	base = strings.TrimSuffix(base, "/")
	return func(ctx context.Context, kid string) (*ecdsa.PublicKey, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/"+kid, nil)
		if err != nil {
			return nil, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
		if err != nil {
			return nil, err
		}
		switch resp.StatusCode {
		case http.StatusOK:
		case http.StatusForbidden, http.StatusNotFound:
			// The endpoint is an object store: an unknown object can be 403.
			return nil, fmt.Errorf("%w: GET %s/%s: %s", ErrNoSuchKey, base, kid, resp.Status)
		default:
			return nil, fmt.Errorf("GET %s/%s: %s", base, kid, resp.Status)
		}
		return ParsePublicKey(data)
	}
}

// ParsePublicKey reads a PEM "PUBLIC KEY" holding a P-256 ECDSA key.
func ParsePublicKey(data []byte) (*ecdsa.PublicKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse public key: %w", err)
	}
	ec, ok := k.(*ecdsa.PublicKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, errors.New("not a P-256 ECDSA key")
	}
	return ec, nil
}

// Verifier checks tokens signed for one load balancer. Safe for concurrent
// use.
type Verifier struct {
	signer string
	keys   Keys
	now    func() time.Time

	mu      sync.Mutex
	cache   map[string]*ecdsa.PublicKey
	unknown map[string]time.Time // kid -> until when it is refused unasked
}

// New returns a Verifier that accepts only tokens whose signer is the load
// balancer ARN signer. now nil is time.Now.
func New(signer string, keys Keys, now func() time.Time) (*Verifier, error) {
	if !strings.HasPrefix(signer, "arn:") || !strings.Contains(signer, ":loadbalancer/app/") {
		return nil, fmt.Errorf("albauth: signer %q is not an Application Load Balancer ARN", signer)
	}
	if keys == nil {
		return nil, errors.New("albauth: no key source")
	}
	if now == nil {
		now = time.Now
	}
	return &Verifier{signer: signer, keys: keys, now: now, cache: map[string]*ecdsa.PublicKey{}, unknown: map[string]time.Time{}}, nil
}

// header is the token header the ALB writes.
type header struct {
	Alg    string `json:"alg"`
	Kid    string `json:"kid"`
	Signer string `json:"signer"`
	Exp    int64  `json:"exp"`
}

// Verify returns the sub claim of token (the value of x-amzn-oidc-data).
// Errors wrap ErrInvalid or ErrKeyUnavailable; they never carry the token.
func (v *Verifier) Verify(ctx context.Context, token string) (string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", fmt.Errorf("%w: not three segments", ErrInvalid)
	}
	var h header
	if err := decodeJSON(parts[0], &h); err != nil {
		return "", fmt.Errorf("%w: header: %w", ErrInvalid, err)
	}
	switch {
	case h.Alg != "ES256":
		return "", fmt.Errorf("%w: alg %q, want ES256", ErrInvalid, h.Alg)
	case h.Signer != v.signer:
		// Another load balancer signed it: the forgery this package exists for.
		return "", fmt.Errorf("%w: signed by %.120q, not this stack's load balancer", ErrInvalid, h.Signer)
	case !kidPattern.MatchString(h.Kid):
		return "", fmt.Errorf("%w: malformed kid", ErrInvalid)
	case h.Exp == 0 || !v.now().Before(time.Unix(h.Exp, 0).Add(Leeway)):
		return "", fmt.Errorf("%w: expired (exp %d)", ErrInvalid, h.Exp)
	}
	sig, err := decode(parts[2])
	if err != nil || len(sig) != 64 {
		return "", fmt.Errorf("%w: signature is not 64 bytes of base64url", ErrInvalid)
	}
	pub, err := v.key(ctx, h.Kid)
	if err != nil {
		return "", err
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
	if !ecdsa.Verify(pub, digest[:], r, s) {
		return "", fmt.Errorf("%w: bad signature", ErrInvalid)
	}
	var claims struct {
		Sub string `json:"sub"`
		Exp int64  `json:"exp"`
	}
	if err := decodeJSON(parts[1], &claims); err != nil {
		return "", fmt.Errorf("%w: claims: %w", ErrInvalid, err)
	}
	if claims.Sub == "" {
		return "", fmt.Errorf("%w: no sub claim", ErrInvalid)
	}
	if claims.Exp != 0 && !v.now().Before(time.Unix(claims.Exp, 0).Add(Leeway)) {
		return "", fmt.Errorf("%w: claims expired", ErrInvalid)
	}
	return claims.Sub, nil
}

// key returns the kid's key, fetched once. A kid the endpoint does not have
// is a forgery (ErrInvalid), remembered for a while so that a flood of
// such tokens does not become a flood of fetches; any other failure is
// ErrKeyUnavailable and the next request asks again.
func (v *Verifier) key(ctx context.Context, kid string) (*ecdsa.PublicKey, error) {
	now := v.now()
	v.mu.Lock()
	k, ok := v.cache[kid]
	until, refused := v.unknown[kid]
	v.mu.Unlock()
	switch {
	case ok:
		return k, nil
	case refused && now.Before(until):
		return nil, fmt.Errorf("%w: kid %s: %w (remembered)", ErrInvalid, kid, ErrNoSuchKey)
	}
	k, err := v.keys(ctx, kid)
	if errors.Is(err, ErrNoSuchKey) {
		v.mu.Lock()
		if len(v.unknown) >= maxUnknownKids {
			v.unknown = map[string]time.Time{}
		}
		v.unknown[kid] = now.Add(unknownKidTTL)
		v.mu.Unlock()
		return nil, fmt.Errorf("%w: kid %s: %w", ErrInvalid, kid, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: kid %s: %w", ErrKeyUnavailable, kid, err)
	}
	v.mu.Lock()
	v.cache[kid] = k
	delete(v.unknown, kid)
	v.mu.Unlock()
	return k, nil
}

// decode reads base64url with or without padding (the ALB pads).
func decode(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

func decodeJSON(s string, v any) error {
	b, err := decode(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
