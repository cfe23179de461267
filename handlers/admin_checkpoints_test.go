package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/web"
)

// TestAdminCheckpoints: the verify page shows the public key; the button
// signs a checkpoint (recorded in the admin log); a transcript carries it
// and verifies offline; a session deleted in SQL afterwards is named by the
// console's verification, and the button then refuses to sign.
func TestAdminCheckpoints(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		skey, err := models.GenerateCheckpointKey()
		if err != nil {
			t.Fatal(err)
		}
		key, _ := models.ParseCheckpointKey(skey)
		b := newBrowser(t, s, web.Config{CheckpointKey: key})
		root, _ := agent(t, b, "Root Admin", models.RoleAdmin)
		_, ana := agent(t, b, "Ana Agent", models.RoleAgent)
		kept := decidedBy(t, s, ana)
		gone := storetest.Session(ctx, t, s, nil)

		doc := getDoc(root, "/console/admin/verify")
		if got := strings.TrimSpace(doc.Find(`[data-testid="checkpoint-pubkey"]`).Text()); got != key.PublicKey {
			t.Fatalf("public key shown = %q", got)
		}
		if doc.Find(`[data-testid="checkpoint-none"]`).Length() != 1 {
			t.Fatal("a checkpoint before any was signed")
		}
		if p := root.submit("/console/admin/verify", "/console/admin/checkpoints", nil); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign: %d", p.StatusCode)
		}
		doc = getDoc(root, "/console/admin/verify")
		if txt := doc.Find(`[data-testid="checkpoint-latest"]`).Text(); !strings.Contains(txt, "checkpoint 1") || !strings.Contains(txt, "2 sessions") ||
			!strings.Contains(txt, "by Root Admin") {
			t.Fatalf("newest checkpoint shown: %q", txt)
		}
		if !strings.Contains(doc.Find(".banner").Text(), "Checkpoint 1 signed over 2 sessions") {
			t.Fatalf("banner: %q", doc.Find(".banner").Text())
		}
		if got := attrs(getDoc(root, "/console/admin/audit").Find(`[data-testid="admin-log-row"]`), "data-action"); len(got) == 0 || got[0] != models.AdminCheckpointWrite {
			t.Fatalf("admin log = %v", got)
		}

		p := root.get("/console/audit/sessions/" + kept + "/transcript.json")
		var tr models.Transcript
		if p.StatusCode != http.StatusOK || json.Unmarshal([]byte(p.Body), &tr) != nil || tr.Checkpoint == nil ||
			tr.Checkpoint.Seq != 1 || tr.Checkpoint.EventCount != int64(len(tr.Events)) {
			t.Fatalf("transcript: %d %+v", p.StatusCode, tr.Checkpoint)
		}
		if rep, err := models.VerifyTranscript(strings.NewReader(p.Body), []string{key.PublicKey}); err != nil || !rep.OK() || rep.Covered != int64(len(tr.Events)) {
			t.Fatalf("offline check of the download: %+v %v", rep, err)
		}

		for _, q := range []string{`DELETE FROM events WHERE session_id = ?`, `DELETE FROM sessions WHERE id = ?`} {
			if err := s.DB.Exec(q, gone).Error; err != nil {
				t.Fatal(err)
			}
		}
		if p := root.submit("/console/admin/verify", "/console/admin/verify", nil); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("start: %d", p.StatusCode)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			frag := getDoc(root, "/console/admin/verify/status", "HX-Request", "true")
			if st, _ := frag.Find(`[data-testid="verify-status"]`).Attr("data-state"); st != "running" {
				rows := frag.Find(`[data-testid="verify-checkpoint"] [data-testid="problem"]`)
				if st != "problems" || rows.Length() != 1 || attrs(rows, "data-session-id")[0] != gone || attrs(rows, "data-kind")[0] != models.ProblemMissing {
					t.Fatalf("state %q, checkpoint findings %v", st, attrs(rows, "data-session-id"))
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("verification did not finish")
			}
			time.Sleep(20 * time.Millisecond)
		}
		root.submit("/console/admin/verify", "/console/admin/checkpoints", nil)
		if txt := getDoc(root, "/console/admin/verify").Find(".banner").Text(); !strings.Contains(txt, "refusing to sign") || !strings.Contains(txt, gone) {
			t.Fatalf("refusal banner: %q", txt)
		}
	})
}

// TestAdminCheckpointsOff: without a key the page says so and the button
// signs nothing.
func TestAdminCheckpointsOff(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		b := newBrowser(t, s, web.Config{})
		root, _ := agent(t, b, "Root Admin", models.RoleAdmin)
		if getDoc(root, "/console/admin/verify").Find(`[data-testid="checkpoints-off"]`).Length() != 1 {
			t.Fatal("no notice that checkpoints are off")
		}
		if p := root.submit("/console/admin/verify", "/console/admin/checkpoints", nil); p.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign: %d", p.StatusCode)
		}
		var n int64
		if err := s.DB.Raw(`SELECT count(*) FROM checkpoints`).Scan(&n).Error; err != nil || n != 0 {
			t.Fatalf("%d checkpoints without a key (%v)", n, err)
		}
	})
}
