package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestLogFormatJSON: with TASKPILOTS_LOG_FORMAT=json every log line a command
// writes is one JSON object with the level and message as fields, which is
// what log pipelines parse; an unknown format stops the command before it does
// anything.
func TestLogFormatJSON(t *testing.T) {
	run1 := func(vars map[string]string, args ...string) (int, string) {
		var out, errb bytes.Buffer
		env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errb,
			getenv: func(k string) string { return vars[k] }}
		return run(context.Background(), env, args), errb.String()
	}
	dbURL := "sqlite://" + filepath.Join(t.TempDir(), "t.db")

	code, stderr := run1(map[string]string{"TASKPILOTS_LOG_FORMAT": "json"}, "migrate", "up", "--database-url", dbURL)
	if code != 0 {
		t.Fatalf("migrate up exited %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatal("migrate up logged nothing; the test needs a command that logs")
	}
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q (%v)", l, err)
		}
		if rec["level"] == nil || rec["msg"] == nil || rec["time"] == nil {
			t.Fatalf("log line lacks time/level/msg: %q", l)
		}
	}

	code, stderr = run1(map[string]string{"TASKPILOTS_LOG_FORMAT": "yaml"}, "migrate", "up", "--database-url", dbURL)
	if code != 2 || !strings.Contains(stderr, `TASKPILOTS_LOG_FORMAT="yaml"`) {
		t.Fatalf("unknown format: exit %d, stderr %q; want 2 naming the variable", code, stderr)
	}
}
