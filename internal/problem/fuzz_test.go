package problem

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzMarshal: whatever the strings, a problem marshals to one valid JSON
// object whose standard members are the Problem's own, whatever extension
// is added beside them, and which reads back to the same bytes.
func FuzzMarshal(f *testing.F) {
	f.Add("https://oncepay.dev/problems/bad-request", "Invalid request", 400, "amount: required", "/payments", "field", "amount")
	f.Add("", "", 0, "", "", "status", "forged")
	f.Add("a\"b", "\xff", -1, "\u2028</script>", "\x00", "Detail", "x")
	f.Fuzz(func(t *testing.T, typ, title string, status int, detail, instance, extName, extValue string) {
		p := Problem{Type: typ, Title: title, Status: status, Detail: detail, Instance: instance,
			Extensions: map[string]any{extName: extValue}}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%+v -> %q: %v", p, b, err)
		}
		// Standard members come from the Problem's fields, never the
		// extension. (Invalid UTF-8 is written as U+FFFD, so compare what a
		// reader sees for the member, not the Go string.)
		want := decodeString(t, typ)
		if typ == "" {
			want = "about:blank"
		}
		if m["type"] != want {
			t.Fatalf("type = %v, want %q", m["type"], want)
		}
		if status != 0 && m["status"] != float64(status) || status == 0 && m["status"] != nil {
			t.Fatalf("status = %v, want %d", m["status"], status)
		}
		for name, v := range map[string]string{"title": title, "detail": detail, "instance": instance} {
			if v == "" && m[name] != nil || v != "" && m[name] != decodeString(t, v) {
				t.Fatalf("%s = %v, want %q", name, m[name], v)
			}
		}
		switch {
		case isStandardName(extName):
			// covered above: every standard member holds the field's value
		case standard(extName):
			if _, ok := m[decodeString(t, extName)]; ok {
				t.Fatalf("case-variant extension %q written: %s", extName, b)
			}
		default:
			if m[decodeString(t, extName)] != decodeString(t, extValue) {
				t.Fatalf("extension %q lost: %s", extName, b)
			}
		}
		var back Problem
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		again, err := json.Marshal(back)
		if err != nil {
			t.Fatal(err)
		}
		var m2 map[string]any
		if err := json.Unmarshal(again, &m2); err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip: %s -> %s (%v)", b, again, err)
		}
	})
}

// decodeString is s as a JSON reader sees it after Marshal.
func decodeString(t *testing.T, s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out string
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// isStandardName reports whether name is exactly a standard member's name.
func isStandardName(name string) bool {
	switch name {
	case "type", "title", "status", "detail", "instance":
		return true
	}
	return false
}
