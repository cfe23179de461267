package models

import (
	"encoding/json"
	"testing"

	"pgregory.net/rapid"
)

// TestJSONStringLenProperty: the budget counts strings exactly as encoding/json
// writes them.
func TestJSONStringLenProperty(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "a", "<>&", "\"\\", "\n\r\t\b\f\x00\x1f", "é日本\u2028\u2029", "\xff\xfe", "a\xe2\x80"} {
		if b, _ := json.Marshal(s); jsonStringLen(s) != len(b) {
			t.Errorf("%q: %d, encoding/json writes %d", s, jsonStringLen(s), len(b))
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		s := string(rapid.SliceOf(rapid.Byte()).Draw(t, "bytes"))
		if u := rapid.String().Draw(t, "utf8"); rapid.Bool().Draw(t, "valid") {
			s = u
		}
		if b, _ := json.Marshal(s); jsonStringLen(s) != len(b) {
			t.Fatalf("%q: %d, encoding/json writes %d", s, jsonStringLen(s), len(b))
		}
	})
}
