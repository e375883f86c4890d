// Package apispec holds the payment API's HTTP contract as an OpenAPI 3.1
// document: the routes, every answer of the answer table with its problem
// type, and the headers (Idempotency-Key, Idempotent-Replayed, Retry-After,
// Location). The local front door serves it at /openapi.yaml; the api's
// contract test validates the handler's real answers against it.
package apispec

import _ "embed"

// YAML is the document.
//
//go:embed openapi.yaml
var YAML []byte

// Path is where the local front door serves YAML.
const Path = "/openapi.yaml"
