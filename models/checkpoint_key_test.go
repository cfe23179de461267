package models_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
)

// TestCheckpointKeyFile: the key file is created owner-only in a new
// directory, read back as the same key, flagged when others can read it,
// and refused when it holds something else; the default path exists only
// for a SQLite file.
func TestCheckpointKeyFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "secrets", "tp.checkpoint-key")
	k1, created, warn, err := models.LoadCheckpointKey(path)
	if err != nil || !created || warn != "" {
		t.Fatalf("create: %v %v %q", created, err, warn)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", fi.Mode(), err)
	}
	b, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(b), "PRIVATE+KEY+"+models.CheckpointKeyName+"+") {
		t.Fatalf("key file holds %q", b)
	}
	k2, created, _, err := models.LoadCheckpointKey(path)
	if err != nil || created || k2.PublicKey != k1.PublicKey {
		t.Fatalf("reload: %v %v %q vs %q", created, err, k2.PublicKey, k1.PublicKey)
	}
	if keys, err := models.ParsePublicKeys(k1.PublicKey + ", " + k1.PublicKey); err != nil || len(keys) != 2 {
		t.Fatalf("public key does not parse: %v", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, warn, err := models.LoadCheckpointKey(path); err != nil || !strings.Contains(warn, "readable by others") {
		t.Fatalf("open key file: %q %v", warn, err)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := models.LoadCheckpointKey(bad); err == nil {
		t.Fatal("a file without a key was accepted")
	}
	if _, err := models.ParsePublicKeys("nope"); err == nil {
		t.Fatal("a malformed public key was accepted")
	}
	for url, want := range map[string]string{
		"./data/taskpilots.db":         "./data/taskpilots.checkpoint-key",
		"sqlite:/var/lib/tp/x.db?_p=1": "/var/lib/tp/x.checkpoint-key",
		"sqlite::memory:":              "",
		"postgres://db.internal/tp":    "",
	} {
		got, ok := models.DefaultCheckpointKeyPath(url)
		if got != want || ok != (want != "") {
			t.Errorf("DefaultCheckpointKeyPath(%q) = %q, %v; want %q", url, got, ok, want)
		}
	}
}
