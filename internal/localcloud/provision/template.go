// Package localcloud provisions the local cloud from the synthesized
// CloudFormation template: the template is the contract, so a key schema or a
// queue attribute changed in the CDK code changes the tests' world. It creates
// in DynamoDB Local and moto what the template defines (tables, streams, TTL,
// queues with their redrive, topics), resolves the stack's outputs to the
// local physical values, and writes the environment the handlers get.
package provision

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

// Template is the part of a CloudFormation template the provisioner reads.
type Template struct {
	Parameters map[string]Parameter `json:"Parameters"`
	Resources  map[string]Resource  `json:"Resources"`
	Outputs    map[string]Output    `json:"Outputs"`
	// Mappings are read for a Fn::FindInMap (the stack's templates have none; a stack test keeps it so).
	Mappings map[string]map[string]map[string]any `json:"Mappings"`
}

// Parameter is one template parameter.
type Parameter struct {
	Type    string `json:"Type"`
	Default any    `json:"Default"`
}

// Resource is one template resource.
type Resource struct {
	Type       string         `json:"Type"`
	Properties map[string]any `json:"Properties"`
}

// Output is one stack output.
type Output struct {
	Value any `json:"Value"`
}

// ReadTemplate parses the template at path.
func ReadTemplate(path string) (*Template, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("localcloud: read template: %w", err)
	}
	var t Template
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("localcloud: parse template %s: %w", path, err)
	}
	return &t, nil
}

// OfType returns the logical ids of the resources of type typ, sorted.
func (t *Template) OfType(typ string) []string {
	var ids []string
	for id, r := range t.Resources {
		if r.Type == typ {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// Ref returns the logical id a {"Ref": id} or {"Fn::GetAtt": [id, attr]}
// (or "id.attr") names, and the attribute ("" for Ref): the one reader of
// references the local cloud's parts share.
func Ref(v any) (id, attr string, ok bool) {
	m, isMap := v.(map[string]any)
	if !isMap {
		return "", "", false
	}
	if r, isRef := m["Ref"].(string); isRef {
		return r, "", true
	}
	if ga, isGA := m["Fn::GetAtt"].([]any); isGA && len(ga) == 2 {
		i, _ := ga[0].(string)
		a, _ := ga[1].(string)
		return i, a, i != "" && a != ""
	}
	if ga, isGA := m["Fn::GetAtt"].(string); isGA {
		i, a, found := strings.Cut(ga, ".")
		return i, a, found
	}
	return "", "", false
}

func str(props map[string]any, key string) string {
	s, _ := props[key].(string)
	return s
}

func boolProp(props map[string]any, key string) bool {
	switch v := props[key].(type) {
	case bool:
		return v
	case string:
		return v == "true"
	}
	return false
}
