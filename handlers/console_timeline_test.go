package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
	"github.com/taskpilots/handoff/views"
	"github.com/taskpilots/handoff/web"
)

// TestConsoleTimelinePages: a session with more events than a timeline page
// shows the newest views.TimelinePage of them and links back through the
// older ones, the type filter kept; a bad ?before= is a 422, not a 500.
func TestConsoleTimelinePages(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		ctx := context.Background()
		b := newBrowser(t, s, web.Config{})
		ana, u := agent(t, b, "Ana Agent", models.RoleAgent)
		id := escalate(t, s, 3, "T-900")
		v := int64(2)
		if _, err := s.ClaimEscalation(ctx, id, u, "", models.ClaimInput{ExpectedVersion: &v}); err != nil {
			t.Fatal(err)
		}
		const notes = views.TimelinePage + 30
		for v = 3; v < 3+notes; v++ {
			if _, err := s.AddNote(ctx, id, u, "", models.NoteInput{ExpectedVersion: &v, Text: fmt.Sprintf("note %d", v)}); err != nil {
				t.Fatal(err)
			}
		}
		total := 3 + notes // created, escalated, claimed, the notes

		seqs := func(path string) []int64 {
			t.Helper()
			doc := getDoc(ana, path)
			var out []int64
			for _, a := range attrs(doc.Find(`[data-testid="event-row"]`), "data-seq") {
				n, _ := strconv.ParseInt(a, 10, 64)
				out = append(out, n)
			}
			return out
		}
		doc := getDoc(ana, "/console/sessions/"+id)
		newest := seqs("/console/sessions/" + id)
		if len(newest) != views.TimelinePage || newest[len(newest)-1] != int64(total) || newest[0] != int64(total-views.TimelinePage+1) {
			t.Fatalf("first page shows %d events, %v..", len(newest), newest[:3])
		}
		older, _ := doc.Find(`[data-testid="timeline-older"]`).Attr("href")
		if want := fmt.Sprintf("/console/sessions/%s?before=%d#timeline", id, newest[0]); older != want {
			t.Fatalf("older link = %q, want %q", older, want)
		}
		rest := seqs(fmt.Sprintf("/console/sessions/%s?before=%d", id, newest[0]))
		if len(rest) != total-views.TimelinePage || rest[0] != 1 || rest[len(rest)-1] != newest[0]-1 {
			t.Fatalf("second page = %v", rest)
		}

		// The filter applies before paging: the notes alone, newest page.
		notesDoc := getDoc(ana, "/console/sessions/"+id+"?type=human.noted")
		if n := notesDoc.Find(`[data-testid="event-row"][data-type="human.noted"]`).Length(); n != views.TimelinePage {
			t.Fatalf("filtered page shows %d notes", n)
		}
		if href, _ := notesDoc.Find(`[data-testid="timeline-older"]`).Attr("href"); href == "" || !strings.Contains(href, "type=human.noted") {
			t.Fatalf("filtered older link = %q", href)
		}

		for _, bad := range []string{"abc", "0", "-3"} {
			if p := ana.get("/console/sessions/" + id + "?before=" + bad); p.StatusCode != http.StatusUnprocessableEntity {
				t.Errorf("?before=%s: status %d", bad, p.StatusCode)
			}
		}
	})
}
