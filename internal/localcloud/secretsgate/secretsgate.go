// Package secretsgate is Secrets Manager's front door for the local cloud's
// functions: `localcloud serve` points each function's
// AWS_ENDPOINT_URL_SECRETS_MANAGER at it, and it answers their GetSecretValue
// calls from moto (or LocalStack) after the authorization Secrets Manager
// would apply on AWS. moto applies none, so without the gate a function whose
// role lacks the grant would read the secret locally and fail on AWS
// (docs/mechanism.md#design-6b: what AWS refuses is refused here too).
//
// What it checks, in order: the call is a SigV4-signed awsJson1.1 request
// for the secretsmanager service in the local cloud's Region; its session
// token (X-Amz-Security-Token) is one function's own (each has its own,
// provision.Envs), else UnrecognizedClientException; the operation is
// GetSecretValue, the only one the functions make, else
// UnknownOperationException; the function's role allows
// secretsmanager:GetSecretValue on the secret and kms:Decrypt on its key,
// checked on the ARN moto resolved, else AccessDeniedException, and the
// value is not sent. What it leaves out: the signature itself is not
// recomputed (the credentials are the local cloud's static test pair), and
// resource policies, version ids and stages are not evaluated.
package secretsgate

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/aws/smithy-go"
)

// Secrets is the part of the Secrets Manager client the gate uses.
type Secrets interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// Caller is one function as the gate sees it.
type Caller struct {
	Function string // logical id, for the log and the errors
	// MayRead reports whether the function's role allows reading the secret
	// with this ARN (GetSecretValue, and kms:Decrypt on its key); nil
	// allows nothing.
	MayRead func(secretARN string) bool
}

// Handler serves the functions in Callers.
type Handler struct {
	Secrets Secrets
	// Region is the only Region a call may be signed for.
	Region string
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

// fail answers an awsJson1.1 error as Secrets Manager does: 400 (500 for
// its own failures) with the exception's name in __type.
func fail(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-ErrorType", code)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": code, "message": msg})
}

// ServeHTTP answers one call; it blocks while moto answers.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	log := h.Log
	if log == nil {
		log = slog.Default()
	}
	log = log.With("scope", "secretsgate")
	auth := r.Header.Get("Authorization")
	scope := "/" + h.Region + "/secretsmanager/aws4_request"
	if r.Method != http.MethodPost || !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 ") || !strings.Contains(auth, scope) {
		log.Warn("refused: not a SigV4 call for secretsmanager in the local Region", "method", r.Method, "region", h.Region)
		fail(w, http.StatusBadRequest, "InvalidSignatureException", "The request must be a POST signed with SigV4 for "+scope)
		return
	}
	c, ok := h.caller(r.Header.Get("X-Amz-Security-Token"))
	if !ok {
		log.Warn("refused: the session token is no function's")
		fail(w, http.StatusBadRequest, "UnrecognizedClientException", "The security token included in the request is invalid.")
		return
	}
	log = log.With("function", c.Function)
	if op := r.Header.Get("X-Amz-Target"); op != "secretsmanager.GetSecretValue" {
		log.Warn("refused: an operation the gate does not serve", "target", op)
		fail(w, http.StatusBadRequest, "UnknownOperationException", "The local cloud's functions may only call GetSecretValue; got "+op)
		return
	}
	var in struct{ SecretId string }
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	if err == nil {
		err = json.Unmarshal(body, &in)
	}
	if err != nil || in.SecretId == "" {
		fail(w, http.StatusBadRequest, "InvalidParameterException", "SecretId is required")
		return
	}
	out, err := h.Secrets.GetSecretValue(r.Context(), &secretsmanager.GetSecretValueInput{SecretId: aws.String(in.SecretId)})
	if err != nil {
		var nf *smtypes.ResourceNotFoundException
		var api smithy.APIError
		switch {
		case errors.As(err, &nf) && (c.MayRead == nil || !c.MayRead(in.SecretId)):
			// AWS authorizes the request before it looks: a role without the
			// grant learns nothing of which secrets exist.
			fail(w, http.StatusBadRequest, "AccessDeniedException", fmt.Sprintf(
				"User: function %s is not authorized to perform: secretsmanager:GetSecretValue on resource: %s", c.Function, in.SecretId))
		case errors.As(err, &nf):
			fail(w, http.StatusBadRequest, "ResourceNotFoundException", "Secrets Manager can't find the specified secret.")
		case errors.As(err, &api):
			fail(w, http.StatusBadRequest, api.ErrorCode(), api.ErrorMessage())
		default:
			log.Warn("moto did not answer", "secret_id", in.SecretId, "err", err)
			fail(w, http.StatusInternalServerError, "InternalServiceError", err.Error())
		}
		return
	}
	// Checked on the ARN moto resolved (the call may name the secret by
	// name or partial ARN); the value is not sent when denied.
	if out.ARN == nil || c.MayRead == nil || !c.MayRead(*out.ARN) {
		log.Warn("refused: the function's role does not allow reading the secret", "secret_id", in.SecretId)
		fail(w, http.StatusBadRequest, "AccessDeniedException", fmt.Sprintf(
			"User: function %s is not authorized to perform: secretsmanager:GetSecretValue on resource: %s because no identity-based policy allows the secretsmanager:GetSecretValue action (or kms:Decrypt on its key)",
			c.Function, in.SecretId))
		return
	}
	var created *float64
	if out.CreatedDate != nil {
		s := float64(out.CreatedDate.UnixMilli()) / 1000
		created = &s
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_ = json.NewEncoder(w).Encode(struct {
		ARN           *string
		Name          *string
		VersionId     *string
		SecretString  *string
		VersionStages []string
		CreatedDate   *float64
	}{out.ARN, out.Name, out.VersionId, out.SecretString, out.VersionStages, created})
}
