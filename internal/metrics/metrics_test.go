package metrics

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestEMFLineAndSum(t *testing.T) {
	var buf bytes.Buffer
	e := New(&buf, "api")
	e.Count("KeyStoreDegraded", 1)
	e.Count("KeyStoreDegraded", 2)
	e.Count("Other", 5)
	var first map[string]any
	if err := json.Unmarshal(bytes.Split(buf.Bytes(), []byte("\n"))[0], &first); err != nil {
		t.Fatal(err)
	}
	aws, _ := first["_aws"].(map[string]any)
	if aws == nil || first["Function"] != "api" || first["KeyStoreDegraded"] != float64(1) {
		t.Fatalf("EMF line = %v", first)
	}
	if got := Sum(buf.Bytes(), "KeyStoreDegraded"); got != 3 {
		t.Fatalf("Sum = %v, want 3", got)
	}
	var nilE *Emitter
	nilE.Count("x", 1) // must not panic
}
