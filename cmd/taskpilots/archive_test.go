package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
)

func TestParseAge(t *testing.T) {
	for in, want := range map[string]time.Duration{"90d": 90 * 24 * time.Hour, "0d": 0, "36h": 36 * time.Hour, "1h30m": 90 * time.Minute} {
		if got, err := parseAge(in); err != nil || got != want {
			t.Errorf("parseAge(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "-3d", "3w", "-1h", "ninety days"} {
		if _, err := parseAge(in); err == nil {
			t.Errorf("parseAge(%q) accepted", in)
		}
	}
}

// TestArchiveCommand: on a seeded database of each dialect, `archive` moves
// every closed session to files, `verify` stays clean, `archive verify`
// checks the files (and fails on a changed one), and bad flags are usage
// errors that touch nothing.
func TestArchiveCommand(t *testing.T) {
	eachURL(t, func(t *testing.T, dbURL string) {
		if r := runCLI(t, nil, "", "bench", "seed", "--database-url", dbURL, "--sessions", "40", "--events", "300", "--progress", "0"); r.code != 0 {
			t.Fatalf("bench seed exited %d", r.code)
		}
		dir := t.TempDir()
		for _, args := range [][]string{
			{"archive", "--database-url", dbURL, "--to", dir},                              // no cut-off
			{"archive", "--database-url", dbURL, "--closed-before", "ninety", "--to", dir}, // bad age
			{"archive", "--database-url", dbURL, "--closed-before", "90d"},                 // no directory
		} {
			if r := runCLI(t, nil, "", args...); r.code != 2 {
				t.Fatalf("%v: exit %d, want 2", args, r.code)
			}
		}
		r := runCLI(t, nil, "", "archive", "--database-url", dbURL, "--closed-before", "0d", "--dry-run", "--json")
		var dry models.ArchiveReport
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &dry) != nil || dry.Candidates == 0 {
			t.Fatalf("dry run: exit %d, %q", r.code, r.stdout)
		}
		r = runCLI(t, nil, "", "archive", "--database-url", dbURL, "--closed-before", "0d", "--to", dir, "--json")
		var rep models.ArchiveReport
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil || rep.Archived == 0 || rep.Archived+rep.Deferred > dry.Candidates {
			t.Fatalf("archive: exit %d, %q (dry run found %d)", r.code, r.stdout, dry.Candidates)
		}
		if r := runCLI(t, nil, "", "verify", "--database-url", dbURL); r.code != 0 {
			t.Fatalf("verify after archive: exit %d", r.code)
		}
		if r := runCLI(t, nil, "", "archive", "verify", "--database-url", dbURL, "--to", dir); r.code != 0 || !strings.Contains(r.stdout, "no problems") {
			t.Fatalf("archive verify: exit %d, %q", r.code, r.stdout)
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*", "*.json"))
		if len(files) != rep.Archived {
			t.Fatalf("%d files for %d archived sessions", len(files), rep.Archived)
		}
		if err := os.WriteFile(files[0], []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		if r := runCLI(t, nil, "", "archive", "verify", "--database-url", dbURL, "--to", dir); r.code != 1 {
			t.Fatalf("archive verify with a changed file: exit %d", r.code)
		}
	})
}

// TestArchiveRestoreCommand: on a seeded database of each dialect, archive
// → verify → restore → verify is a round trip: the same events (ids,
// payloads, hashes) and states come back, verify is clean, and a second
// restore finds nothing; bad flags are usage errors.
func TestArchiveRestoreCommand(t *testing.T) {
	eachURL(t, func(t *testing.T, dbURL string) {
		if r := runCLI(t, nil, "", "bench", "seed", "--database-url", dbURL, "--sessions", "40", "--events", "300", "--progress", "0"); r.code != 0 {
			t.Fatalf("bench seed exited %d", r.code)
		}
		snapshot := func() string {
			s, err := models.Open(context.Background(), dbURL, models.OpenOpts{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var rows []struct{ ID, Payload, Hash, State string }
			if err := s.DB.Raw(`SELECT e.id, e.payload, e.hash, st.state FROM events e JOIN session_states st ON st.session_id = e.session_id
				ORDER BY e.session_id, e.seq`).Scan(&rows).Error; err != nil {
				t.Fatal(err)
			}
			return fmt.Sprint(rows)
		}
		before := snapshot()
		dir := t.TempDir()
		if r := runCLI(t, nil, "", "archive", "restore", "--database-url", dbURL); r.code != 2 {
			t.Fatalf("restore without --from: exit %d, want 2", r.code)
		}
		r := runCLI(t, nil, "", "archive", "--database-url", dbURL, "--closed-before", "0d", "--to", dir, "--json")
		var rep models.ArchiveReport
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil || rep.Archived == 0 {
			t.Fatalf("archive: exit %d, %q", r.code, r.stdout)
		}
		if r := runCLI(t, nil, "", "verify", "--database-url", dbURL); r.code != 0 {
			t.Fatalf("verify after archive: exit %d", r.code)
		}
		if snapshot() == before {
			t.Fatal("archive changed nothing; the round trip checks nothing")
		}
		r = runCLI(t, nil, "", "archive", "restore", "--database-url", dbURL, "--from", dir, "--json")
		var rr models.RestoreReport
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rr) != nil || rr.Restored != rep.Archived || rr.Events != rep.Events {
			t.Fatalf("restore: exit %d, %q; archived %+v", r.code, r.stdout, rep)
		}
		if r := runCLI(t, nil, "", "verify", "--database-url", dbURL); r.code != 0 {
			t.Fatalf("verify after restore: exit %d: %s", r.code, r.stdout)
		}
		if snapshot() != before {
			t.Fatal("events or states differ after archive and restore")
		}
		r = runCLI(t, nil, "", "archive", "restore", "--database-url", dbURL, "--from", dir)
		if r.code != 0 || !strings.Contains(r.stdout, "restored 0 sessions") {
			t.Fatalf("second restore: exit %d, %q", r.code, r.stdout)
		}
	})
}
