// Package albsign signs x-amzn-oidc-data the way an Application Load
// Balancer does (ES256, base64url with padding, the load balancer's ARN as
// signer), for tests that play the ALB front door in process. Test code
// only: the key is made in the process.
package albsign

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/albauth"
)

// ARN is the load balancer the test kit's front doors stand for.
const ARN = "arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/app/oncepay-test/0123456789abcdef"

// Signer is one load balancer's signing key.
type Signer struct {
	ARN string
	Kid string
	key *ecdsa.PrivateKey
}

// New returns a signer for the load balancer arn with a fresh key.
func New(arn string) *Signer {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	return &Signer{ARN: arn, Kid: fmt.Sprintf("%x-%x", id[:4], id[4:]), key: k}
}

// Default is the test kit's load balancer (ARN), shared by every in-process
// ALB event and the verifiers the test worlds give the api.
var Default = New(ARN)

// Sign returns the token the load balancer passes for sub, expiring at exp.
func (s *Signer) Sign(sub string, exp time.Time) string {
	return s.SignWith(map[string]any{"alg": "ES256", "kid": s.Kid, "signer": s.ARN, "iss": "https://cognito-idp.us-east-1.amazonaws.com/test", "client": "test", "exp": exp.Unix()},
		map[string]any{"sub": sub, "exp": exp.Unix(), "iss": "https://cognito-idp.us-east-1.amazonaws.com/test"})
}

// SignWith signs any header and claims (for tokens a test forges on purpose).
func (s *Signer) SignWith(header, claims map[string]any) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.URLEncoding.EncodeToString(b) // padded, as the ALB sends it
	}
	signing := enc(header) + "." + enc(claims)
	digest := sha256.Sum256([]byte(signing))
	r, sig, err := ecdsa.Sign(rand.Reader, s.key, digest[:])
	if err != nil {
		panic(err)
	}
	raw := make([]byte, 64)
	r.FillBytes(raw[:32])
	sig.FillBytes(raw[32:])
	return signing + "." + base64.URLEncoding.EncodeToString(raw)
}

// PEM is the public key as the ALB's key endpoint serves it.
func (s *Signer) PEM() []byte {
	der, err := x509.MarshalPKIXPublicKey(&s.key.PublicKey)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// Keys answers the signer's own kid and nothing else.
func (s *Signer) Keys() albauth.Keys {
	return func(_ context.Context, kid string) (*ecdsa.PublicKey, error) {
		if kid != s.Kid {
			return nil, fmt.Errorf("albsign: unknown kid %s", kid)
		}
		return &s.key.PublicKey, nil
	}
}

// Verifier is the api's verifier for this load balancer on clock now.
func (s *Signer) Verifier(now func() time.Time) *albauth.Verifier {
	v, err := albauth.New(s.ARN, s.Keys(), now)
	if err != nil {
		panic(err)
	}
	return v
}

// KeyServer serves the public key at /<kid>, as the ALB's key endpoint does.
func (s *Signer) KeyServer() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.TrimPrefix(r.URL.Path, "/") != s.Kid {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(s.PEM())
	}))
}
