// Package secretsext stands in for the AWS Parameters and Secrets Lambda
// extension on the local cloud: the HTTP server a function reaches on
// localhost:PARAMETERS_SECRETS_EXTENSION_HTTP_PORT (2773 by default) to read
// a secret without a Secrets Manager client of its own.
//
// What it emulates: GET /secretsmanager/get?secretId=<id>[&versionId=|&versionStage=]
// answers Secrets Manager's GetSecretValue JSON (ARN, Name, VersionId,
// SecretString, VersionStages, CreatedDate); a request without the
// X-Aws-Parameters-Secrets-Token header, or with one that is no function's
// AWS_SESSION_TOKEN, is refused with 401 before any secret is read, as the
// extension refuses it. The token names the calling function (each has its
// own, provision.Envs), and what AWS would refuse that function is refused
// here too (DESIGN §6b): a function without the extension's layer has no
// extension on AWS, so its connection is closed unanswered (the nearest
// local analogue of a closed port; the log names the function and the
// layer); a function whose role does not allow secretsmanager:GetSecretValue
// on the secret (or kms:Decrypt on its key) gets the AccessDeniedException
// Secrets Manager returns, relayed as 400. What it leaves out: the cache (every
// request reads moto, i.e. PARAMETERS_SECRETS_EXTENSION_CACHE_ENABLED=false,
// which is what the migration function sets), SSM parameters, and binary
// secrets.
package secretsext

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
)

// TokenHeader carries the caller's session token.
const TokenHeader = "X-Aws-Parameters-Secrets-Token"

// Secrets is the part of the Secrets Manager client the extension uses.
type Secrets interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// Caller is one function as the extension sees it: what its template
// entry lets it do.
type Caller struct {
	Function string // logical id, for the log and the errors
	// HasLayer: the function's Layers hold the Parameters and Secrets
	// extension; without it there is no extension on AWS.
	HasLayer bool
	// MayRead reports whether the function's role allows reading the secret
	// with this ARN (GetSecretValue, and kms:Decrypt on its key); nil
	// allows nothing.
	MayRead func(secretARN string) bool
}

// Handler is the extension's HTTP API for the functions in Callers.
type Handler struct {
	Secrets Secrets
	// Callers are the functions by their session token (the AWS_SESSION_TOKEN
	// the local runtime gives each); a token not in it is refused.
	Callers map[string]Caller
	Log     *slog.Logger // nil: slog.Default()
}

// caller finds the function holding token, in constant time per entry.
func (h *Handler) caller(token string) (Caller, bool) {
	var found Caller
	ok := false
	for t, c := range h.Callers {
		if t != "" && subtle.ConstantTimeCompare([]byte(token), []byte(t)) == 1 {
			found, ok = c, true
		}
	}
	return found, ok
}

// ServeHTTP answers one request; it blocks while Secrets Manager answers.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	log := h.Log
	if log == nil {
		log = slog.Default()
	}
	log = log.With("scope", "secretsext")
	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	got := r.Header.Get(TokenHeader)
	c, ok := h.caller(got)
	if !ok {
		log.Warn("refused: wrong or missing session token", "path", r.URL.Path, "token_sent", got != "")
		http.Error(w, "unauthorized: "+TokenHeader+" is missing or not this function's session token", http.StatusUnauthorized)
		return
	}
	log = log.With("function", c.Function)
	if !c.HasLayer {
		// On AWS nothing listens on the port of a function without the
		// layer: the caller gets a transport error, not an answer.
		log.Error("refused: the function does not have the AWS Parameters and Secrets Lambda Extension layer; on AWS its connection to the extension's port is refused",
			"path", r.URL.Path)
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		http.Error(w, "no extension: function "+c.Function+" does not have the AWS Parameters and Secrets Lambda Extension layer", http.StatusServiceUnavailable)
		return
	}
	if r.URL.Path != "/secretsmanager/get" {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	id := q.Get("secretId")
	if id == "" {
		http.Error(w, "bad request: secretId is required", http.StatusBadRequest)
		return
	}
	in := &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)}
	if v := q.Get("versionId"); v != "" {
		in.VersionId = aws.String(v)
	}
	if v := q.Get("versionStage"); v != "" {
		in.VersionStage = aws.String(v)
	}
	out, err := h.Secrets.GetSecretValue(r.Context(), in)
	if err != nil {
		var nf *smtypes.ResourceNotFoundException
		status := http.StatusInternalServerError
		if errors.As(err, &nf) {
			status = http.StatusNotFound
		}
		log.Warn("secret not served", "secret_id", id, "error", err.Error())
		http.Error(w, fmt.Sprintf("secretsext: get %s: %v", id, err), status)
		return
	}
	// Checked on the ARN Secrets Manager resolved (the request may name
	// the secret by name or partial ARN); the value is not sent when denied.
	if out.ARN == nil || c.MayRead == nil || !c.MayRead(*out.ARN) {
		log.Warn("refused: the function's role does not allow reading the secret", "secret_id", id)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{
			"__type": "AccessDeniedException",
			"message": fmt.Sprintf("User: function %s is not authorized to perform: secretsmanager:GetSecretValue on resource: %s because no identity-based policy allows the secretsmanager:GetSecretValue action (or kms:Decrypt on its key)",
				c.Function, id),
		})
		return
	}
	var created *string
	if out.CreatedDate != nil {
		created = aws.String(out.CreatedDate.UTC().Format(time.RFC3339Nano))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(struct {
		ARN           *string
		Name          *string
		VersionId     *string
		SecretString  *string
		VersionStages []string
		CreatedDate   *string
	}{out.ARN, out.Name, out.VersionId, out.SecretString, out.VersionStages, created})
}
