package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestReindexCommand: reindex reports every B-tree index of sessions with
// its size and estimate, and every counter table with its pages (the
// rebuilds themselves: models' TestIndexUpkeep and
// TestIndexUpkeepCounterTables),
// refuses SQLite and bad bounds with exit status 2.
func TestReindexCommand(t *testing.T) {
	pg := migratedURL(t, storetest.NewURL(t, models.Postgres))
	if r := runCLI(t, nil, "", "bench", "seed", "--database-url", pg, "--sessions", "60", "--events", "400", "--progress", "0"); r.code != 0 {
		t.Fatalf("bench seed exited %d: %s", r.code, r.stderr)
	}
	r := runCLI(t, nil, "", "reindex", "--database-url", pg, "--dry-run")
	if r.code != 0 || !strings.Contains(r.stdout, "sessions_updated_idx") || !strings.Contains(r.stdout, "dry run: nothing rebuilt") ||
		!strings.Contains(r.stdout, "inbox_counts") || !strings.Contains(r.stdout, "dry run: nothing rewritten") {
		t.Fatalf("dry run exited %d:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, "", "reindex", "--database-url", pg, "--json")
	var rep models.IndexUpkeepReport
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil || len(rep.Checked) < 4 || len(rep.Tables) != 5 {
		t.Fatalf("json run exited %d: %q", r.code, r.stdout)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--database-url", "sqlite:" + t.TempDir() + "/x.db"}, "reindex is for PostgreSQL"},
		{[]string{"--database-url", pg, "--max-bloat", "0.5"}, "--max-bloat must be at least 1"},
		{[]string{"--database-url", pg, "extra"}, "reindex takes no arguments"},
	} {
		if c.args[1] != pg {
			migratedURL(t, c.args[1])
		}
		r := runCLI(t, nil, "", append([]string{"reindex"}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("reindex %v: exit %d, stderr %q; want 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
}
