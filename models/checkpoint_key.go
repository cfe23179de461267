package models

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// The checkpoint signing key is an Ed25519 key in the signed-note format of
// the Go checksum database and of C2SP (golang.org/x/mod/sumdb/note): the
// private key is the text "PRIVATE+KEY+<name>+<hash>+<base64>", the public
// key "<name>+<hash>+<base64>", where <hash> is a 32-bit fingerprint of the
// key. It lives in a file outside the database (owner-only, created on first
// start) or in the TASKPILOTS_CHECKPOINT_KEY variable, never in the database:
// whoever can rewrite the database must not be able to sign over it.

// CheckpointKeyName is the name in keys made by TaskPilots.
const CheckpointKeyName = "taskpilots-handoff"

// checkpointKeyMode is the key file's mode: the private key is the one
// secret that makes a checkpoint worth anything.
const checkpointKeyMode = 0o600

// CheckpointKey signs checkpoints.
type CheckpointKey struct {
	signer note.Signer
	// PublicKey is the verifier key, "<name>+<hash>+<base64>": what an
	// outside verifier pins.
	PublicKey string
	// Path is the file the key came from ("" for a key from the environment).
	Path string
}

// ParseCheckpointKey reads a private key in note format.
func ParseCheckpointKey(text string) (*CheckpointKey, error) {
	text = strings.TrimSpace(text)
	signer, err := note.NewSigner(text)
	if err != nil {
		return nil, fmt.Errorf("checkpoint key: want a note private key (PRIVATE+KEY+name+hash+base64): %w", err)
	}
	pub, err := publicKeyOf(text)
	if err != nil {
		return nil, err
	}
	return &CheckpointKey{signer: signer, PublicKey: pub}, nil
}

// publicKeyOf derives the verifier key from a private key: note keeps the
// Ed25519 seed, from which the public key follows.
func publicKeyOf(private string) (string, error) {
	// PRIVATE+KEY+name+hash+base64(alg || seed)
	parts := strings.SplitN(private, "+", 5)
	if len(parts) != 5 {
		return "", errors.New("checkpoint key: malformed private key")
	}
	name := parts[2]
	seed, err := decodeKeyData(parts[4])
	if err != nil || len(seed) != 33 || seed[0] != 1 {
		return "", errors.New("checkpoint key: not an Ed25519 note key")
	}
	pub := ed25519PublicFromSeed(seed[1:])
	vkey, err := note.NewEd25519VerifierKey(name, pub)
	if err != nil {
		return "", fmt.Errorf("checkpoint key: %w", err)
	}
	return vkey, nil
}

// GenerateCheckpointKey makes a new private key in note format.
func GenerateCheckpointKey() (string, error) {
	skey, _, err := note.GenerateKey(rand.Reader, CheckpointKeyName)
	if err != nil {
		return "", fmt.Errorf("generate checkpoint key: %w", err)
	}
	return skey, nil
}

// LoadCheckpointKey reads the key file at path, creating it (owner-only,
// and its directory) with a new key when it does not exist. created reports
// whether it did; warn is set when an existing file is readable by others.
func LoadCheckpointKey(path string) (key *CheckpointKey, created bool, warn string, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		created, err = createKeyFile(path)
		if err != nil {
			return nil, false, "", err
		}
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, false, "", fmt.Errorf("read checkpoint key %s: %w", path, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		warn = fmt.Sprintf("checkpoint key %s is readable by others (mode %v); chmod 600 it", path, fi.Mode().Perm())
	}
	key, err = ParseCheckpointKey(string(b))
	if err != nil {
		return nil, false, "", fmt.Errorf("%s: %w", path, err)
	}
	key.Path = path
	return key, created, warn, nil
}

// createKeyFile writes a new key with O_EXCL, so that two replicas starting
// at once on a shared volume end with one key: the loser reads the winner's.
func createKeyFile(path string) (bool, error) {
	if dir := filepath.Dir(path); dir != "" && dir != "." {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return false, fmt.Errorf("create checkpoint key directory %s: %w", dir, err)
		}
	}
	skey, err := GenerateCheckpointKey()
	if err != nil {
		return false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, checkpointKeyMode)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("create checkpoint key %s: %w", path, err)
	}
	_, werr := f.WriteString(skey + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(path)
		return false, fmt.Errorf("write checkpoint key %s: %w", path, werr)
	}
	return true, nil
}

// DefaultCheckpointKeyPath is where the key of a SQLite database lives when
// none is configured: next to the database file, as
// "<name>.checkpoint-key". PostgreSQL has no such place (replicas run on
// several machines and must share one key), so ok is false there and for an
// in-memory database.
func DefaultCheckpointKeyPath(databaseURL string) (path string, ok bool) {
	d, dsn, err := ParseDatabaseURL(databaseURL)
	if err != nil || d != SQLite {
		return "", false
	}
	dsn = strings.TrimPrefix(dsn, "file:")
	if i := strings.IndexByte(dsn, '?'); i >= 0 {
		dsn = dsn[:i]
	}
	if dsn == "" || strings.Contains(dsn, ":memory:") || strings.Contains(databaseURL, "mode=memory") {
		return "", false
	}
	return strings.TrimSuffix(dsn, ".db") + ".checkpoint-key", true
}

// ParsePublicKeys reads verifier keys separated by commas, spaces or
// newlines, checking each.
func ParsePublicKeys(text string) ([]string, error) {
	var out []string
	for _, k := range strings.FieldsFunc(text, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' || r == '\r' }) {
		if _, err := note.NewVerifier(k); err != nil {
			return nil, fmt.Errorf("public key %q: %w", k, err)
		}
		out = append(out, k)
	}
	return out, nil
}

func decodeKeyData(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }

func ed25519PublicFromSeed(seed []byte) ed25519.PublicKey {
	return ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
}
