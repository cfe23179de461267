package models_test

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/taskpilots/handoff/models"
)

// TestSQLiteFilesAreOwnerOnly: the embedded database holds every session,
// user and token hash, so its directory is created 0700 and the database
// with its -wal and -shm files 0600, and an existing file is tightened.
func TestSQLiteFilesAreOwnerOnly(t *testing.T) {
	ctx := context.Background()
	quiet := models.OpenOpts{Logger: slog.New(slog.DiscardHandler)}
	mode := func(p string) fs.FileMode {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}

	dir := filepath.Join(t.TempDir(), "data")
	path := filepath.Join(dir, "taskpilots.db")
	s, err := models.Open(ctx, "sqlite:"+path, quiet)
	if err != nil {
		t.Fatal(err)
	}
	// Migrating writes, which creates the -wal and -shm files.
	if _, err := s.MigrateUp(ctx); err != nil {
		t.Fatal(err)
	}
	if m := mode(dir); m != 0o700 {
		t.Errorf("directory mode %o, want 700", m)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if m := mode(p); m != 0o600 {
			t.Errorf("%s mode %o, want 600", filepath.Base(p), m)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// A database file left world-readable by an earlier version is
	// tightened when it is opened.
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o644); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	s, err = models.Open(ctx, path, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CheckSchema(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if m, err := os.Stat(p); err == nil && m.Mode().Perm() != 0o600 {
			t.Errorf("reopened %s mode %o, want 600", filepath.Base(p), m.Mode().Perm())
		}
	}
}
