// Package secretsext stands in for the AWS Parameters and Secrets Lambda
// extension on the local cloud: the HTTP server a function reaches on
// localhost:PARAMETERS_SECRETS_EXTENSION_HTTP_PORT (2773 by default) to read
// a secret without a Secrets Manager client of its own.
//
// What it emulates: GET /secretsmanager/get?secretId=<id>[&versionId=|&versionStage=]
// answers Secrets Manager's GetSecretValue JSON (ARN, Name, VersionId,
// SecretString, VersionStages, CreatedDate); a request without the
// X-Aws-Parameters-Secrets-Token header, or with one that is not the
// function's AWS_SESSION_TOKEN, is refused with 401 before any secret is
// read, as the extension refuses it. What it leaves out: the cache (every
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

// Handler is the extension's HTTP API for the functions that hold Token.
type Handler struct {
	Secrets Secrets
	// Token is the session token of the functions it serves (the local
	// runtime's AWS_SESSION_TOKEN); empty refuses every request.
	Token string
	Log   *slog.Logger // nil: slog.Default()
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
	if h.Token == "" || subtle.ConstantTimeCompare([]byte(got), []byte(h.Token)) != 1 {
		log.Warn("refused: wrong or missing session token", "path", r.URL.Path, "token_sent", got != "")
		http.Error(w, "unauthorized: "+TokenHeader+" is missing or not this function's session token", http.StatusUnauthorized)
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
