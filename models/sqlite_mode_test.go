package models_test

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
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

// TestSQLiteWritesTakeTheLockAtBegin: two processes write one SQLite file
// (two Stores here). A write transaction reads before it writes; begun
// deferred, a commit by the other process in between makes SQLite refuse
// its first write at once (SQLITE_BUSY on a stale snapshot, no busy wait),
// so the whole write runs again, and under steady writes from the other
// process it can fail every retry (a -race CI run did). Begun IMMEDIATE, it
// holds the write lock from the start: the other process waits for it
// (busy_timeout) and the write runs once.
func TestSQLiteWritesTakeTheLockAtBegin(t *testing.T) {
	ctx := context.Background()
	url := storetest.NewURL(t, models.SQLite)
	open := func() *models.Store {
		t.Helper()
		s, err := models.Open(ctx, url, models.OpenOpts{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	if err := a.DB.Exec(`CREATE TABLE probe (n INTEGER)`).Error; err != nil {
		t.Fatal(err)
	}
	runs := 0
	other := make(chan error, 1)
	err := a.Transact(ctx, func(tx *gorm.DB) error {
		runs++
		var n int64
		if err := tx.Raw(`SELECT count(*) FROM probe`).Scan(&n).Error; err != nil {
			return err
		}
		if runs == 1 {
			// The other process writes while this transaction is open. It
			// gets 500 ms to commit: time enough when nothing holds the
			// lock, and it must not get the lock while this one runs.
			go func() { other <- b.DB.Exec(`INSERT INTO probe VALUES (2)`).Error }()
			select {
			case err := <-other:
				other <- err
			case <-time.After(500 * time.Millisecond):
			}
		}
		return tx.Exec(`INSERT INTO probe VALUES (1)`).Error
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-other; err != nil {
		t.Fatalf("the other process's write: %v", err)
	}
	if runs != 1 {
		t.Fatalf("the write ran %d times: the other process committed inside it, so it did not hold the write lock from BEGIN", runs)
	}
	var rows []int64
	if err := a.DB.Raw(`SELECT n FROM probe ORDER BY rowid`).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0] != 1 || rows[1] != 2 {
		t.Fatalf("rows %v, want [1 2]: the other process waits for the open write", rows)
	}
}
