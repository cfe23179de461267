package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	latest, err := latestSchema()
	if err != nil || latest < 1 {
		t.Fatalf("latestSchema = %d, %v", latest, err)
	}
	r := runCLI(t, nil, "", "version")
	if r.code != 0 {
		t.Fatalf("version exited %d", r.code)
	}
	wantContains(t, "version", r.stdout, "taskpilots ", "go: "+runtime.Version()+"\n", "schema: ")

	r = runCLI(t, nil, "", "version", "--json")
	var bi buildInfo
	if err := json.Unmarshal([]byte(r.stdout), &bi); err != nil {
		t.Fatalf("version --json: %v", err)
	}
	if bi.Schema != latest || bi.Go != runtime.Version() || bi.Version == "" || bi.DatabaseSchema != nil {
		t.Fatalf("version --json = %+v", bi)
	}
}

func TestVersionReportsDatabaseSchema(t *testing.T) {
	dbURL := migratedURL(t, "sqlite:"+t.TempDir()+"/v.db")
	r := runCLI(t, map[string]string{"TASKPILOTS_DATABASE_URL": dbURL}, "", "version")
	wantContains(t, "version", r.stdout, "database schema: ")
}

// TestVersionLdflags checks the value -ldflags "-X main.version=…" sets wins.
// Not parallel: it changes a package variable.
func TestVersionLdflags(t *testing.T) {
	old := version
	t.Cleanup(func() { version = old })
	version = "v9.8.7"
	r := runCLI(t, nil, "", "version")
	if !strings.HasPrefix(r.stdout, "taskpilots v9.8.7\n") {
		t.Fatalf("stdout = %q", r.stdout)
	}
}
