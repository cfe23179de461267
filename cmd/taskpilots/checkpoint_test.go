package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestCheckpointCommand signs a checkpoint from the CLI with a key file it
// creates owner-only, prints the public key, signs nothing when nothing
// changed, and then verify names a session deleted behind the
// application's back, and the next checkpoint refuses to sign.
func TestCheckpointCommand(t *testing.T) {
	eachURL(t, func(t *testing.T, dbURL string) {
		migratedURL(t, dbURL)
		s := openTestStore(t, dbURL)
		victim := seedSessions(t, s)
		keyFile := filepath.Join(t.TempDir(), "keys", "checkpoint.key")

		r := runCLI(t, nil, "", "checkpoint", "--database-url", dbURL, "--checkpoint-key", keyFile)
		if r.code != 0 {
			t.Fatalf("checkpoint exited %d", r.code)
		}
		wantContains(t, "checkpoint", r.stdout, "checkpoint 1 signed: 4 sessions, 6 events, root ")
		fi, err := os.Stat(keyFile)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("key file: %v %v", fi, err)
		}
		pub := runCLI(t, nil, "", "checkpoint", "pubkey", "--checkpoint-key", keyFile)
		key := strings.TrimSpace(pub.stdout)
		if pub.code != 0 || !strings.HasPrefix(key, models.CheckpointKeyName+"+") {
			t.Fatalf("pubkey = %q (%d)", pub.stdout, pub.code)
		}
		if r := runCLI(t, nil, "", "checkpoint", "--database-url", dbURL, "--checkpoint-key", keyFile); r.code != 0 ||
			!strings.Contains(r.stdout, "nothing changed since checkpoint 1") {
			t.Fatalf("second checkpoint: %d %q", r.code, r.stdout)
		}
		show := runCLI(t, nil, "", "checkpoint", "show", "--database-url", dbURL)
		if _, err := models.OpenCheckpoint(show.stdout, []string{key}); err != nil {
			t.Fatalf("checkpoint show prints no valid note: %v\n%s", err, show.stdout)
		}

		ok := runCLI(t, nil, "", "verify", "--database-url", dbURL, "--checkpoint-pubkey", key)
		if ok.code != 0 {
			t.Fatalf("verify of an untouched log exited %d", ok.code)
		}
		wantContains(t, "verify", ok.stdout, "checked against checkpoint 1 ")

		for _, q := range []string{`DELETE FROM delegations WHERE session_id = ?`, `DELETE FROM events WHERE session_id = ?`, `DELETE FROM sessions WHERE id = ?`} {
			if err := s.DB.Exec(q, victim).Error; err != nil {
				t.Fatal(err)
			}
		}
		// The per-session checks alone have nothing to report: the session
		// is simply gone. The key comes from --checkpoint-key here.
		bad := runCLI(t, nil, "", "verify", "--database-url", dbURL, "--checkpoint-key", keyFile, "--json")
		if bad.code != 1 {
			t.Fatalf("verify after deleting a session exited %d", bad.code)
		}
		wantContains(t, "verify", bad.stdout, "missing: session "+victim+" missing since checkpoint 1, which recorded 2 events")
		if strings.Contains(bad.stdout, "recorded in the database") {
			t.Errorf("verify with a key file says the keys came from the database")
		}
		lines := strings.Split(strings.TrimSpace(bad.stdout), "\n")
		var rep verifyJSON
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil || rep.OK || rep.Checkpoints == nil || rep.Checkpoints.Latest.Seq != 1 {
			t.Fatalf("report %+v, %v", rep, err)
		}
		refused := runCLI(t, nil, "", "checkpoint", "--database-url", dbURL, "--checkpoint-key", keyFile)
		if refused.code != 1 || !strings.Contains(refused.stderr, "not signed: 1 problem since checkpoint 1") {
			t.Fatalf("checkpoint over a deleted session: %d\n%s", refused.code, refused.stderr)
		}
	})
}

// TestCheckpointKeyNextToSQLite: with SQLite and no key configured, the key
// is created next to the database file, and verify finds it there.
func TestCheckpointKeyNextToSQLite(t *testing.T) {
	dbURL := filepath.Join(t.TempDir(), "tp.db")
	migratedURL(t, dbURL)
	seedSessions(t, openTestStore(t, dbURL))
	if r := runCLI(t, nil, "", "checkpoint", "--database-url", dbURL); r.code != 0 {
		t.Fatalf("checkpoint exited %d", r.code)
	}
	if _, err := os.Stat(strings.TrimSuffix(dbURL, ".db") + ".checkpoint-key"); err != nil {
		t.Fatalf("no key next to the database: %v", err)
	}
	r := runCLI(t, nil, "", "verify", "--database-url", dbURL)
	if r.code != 0 || strings.Contains(r.stdout, "recorded in the database") {
		t.Fatalf("verify: %d\n%s", r.code, r.stdout)
	}
	// PostgreSQL has no default place: checkpoints are off until configured.
	if r := runCLI(t, nil, "", "checkpoint", "pubkey", "--database-url", "postgres://nowhere/x"); r.code != 1 ||
		!strings.Contains(r.stderr, "checkpoints are off") {
		t.Fatalf("pubkey without a key on PostgreSQL: %d %s", r.code, r.stderr)
	}
}

// TestVerifyTranscriptOffline exports a transcript with its checkpoint,
// checks it offline, then cuts its tail the careful way (fixing last_hash
// and state_version so that the chain still verifies): the offline check
// reports it truncated. A transcript re-signed by another key fails against
// the pinned key.
func TestVerifyTranscriptOffline(t *testing.T) {
	eachURL(t, func(t *testing.T, dbURL string) {
		migratedURL(t, dbURL)
		s := openTestStore(t, dbURL)
		ctx := context.Background()
		sid, _ := storetest.Delegated(ctx, t, s, "refunds")
		for i := range 3 {
			if _, err := s.Transition(ctx, sid, []models.EventType{models.EventSessionPaused, models.EventSessionResumed, models.EventSessionPaused}[i],
				"test:controller", "", models.TransitionInput{ExpectedVersion: storetest.Ptr(int64(2 + i))}); err != nil {
				t.Fatal(err)
			}
		}
		skey, err := models.GenerateCheckpointKey()
		if err != nil {
			t.Fatal(err)
		}
		key, _ := models.ParseCheckpointKey(skey)
		cp := &models.Checkpointer{Store: s, Key: key}
		proof, err := s.TranscriptCheckpointFor(ctx, sid, cp, "test")
		if err != nil || proof == nil || proof.EventCount != 5 {
			t.Fatalf("transcript checkpoint = %+v, %v", proof, err)
		}
		var buf strings.Builder
		if err := s.WriteTranscript(ctx, &buf, sid, "test", proof); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		write := func(name string, v any) string {
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}
		good := filepath.Join(dir, "good.json")
		if err := os.WriteFile(good, []byte(buf.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		// Offline: a database URL that could not be opened changes nothing.
		r := runCLI(t, nil, "", "verify", "--transcript", good, "--checkpoint-pubkey", key.PublicKey, "--database-url", "postgres://nowhere/x")
		if r.code != 0 {
			t.Fatalf("verify of an intact transcript exited %d", r.code)
		}
		wantContains(t, "verify", r.stdout, "transcript of "+sid+": 5 events, checkpoint 1 covers 5 events: no problems")
		if loose := runCLI(t, nil, "", "verify", "--transcript", good); loose.code != 0 || !strings.Contains(loose.stdout, "no public key given") {
			t.Fatalf("verify without a pinned key: %d\n%s", loose.code, loose.stdout)
		}

		var tr map[string]any
		if err := json.Unmarshal([]byte(buf.String()), &tr); err != nil {
			t.Fatal(err)
		}
		evs := tr["events"].([]any)
		tr["events"] = evs[:3]
		tr["last_hash"] = evs[2].(map[string]any)["hash"]
		tr["state_version"] = 3
		tr["last_seq"] = 3
		cut := write("cut.json", tr)
		r = runCLI(t, nil, "", "verify", "--transcript", cut, "--checkpoint-pubkey", key.PublicKey)
		if r.code != 1 {
			t.Fatalf("verify of a cut transcript exited %d", r.code)
		}
		wantContains(t, "verify", r.stdout, "truncated: session "+sid+" truncated: 3 events left, checkpoint 1 recorded 5 events")

		// The forger also lowers the count in the checkpoint entry: the
		// inclusion proof no longer reaches the signed root.
		c := tr["checkpoint"].(map[string]any)
		c["event_count"] = 3
		c["head_hash"] = tr["last_hash"]
		r = runCLI(t, nil, "", "verify", "--transcript", write("cut2.json", tr), "--checkpoint-pubkey", key.PublicKey)
		if r.code != 1 || !strings.Contains(r.stdout, "is not in the signed tree") {
			t.Fatalf("verify of a cut transcript with a lowered entry: %d\n%s", r.code, r.stdout)
		}
	})
}
