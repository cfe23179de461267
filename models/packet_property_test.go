package models_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/taskpilots/handoff/models"
)

// text draws a string of up to n bytes (usually short, sometimes huge),
// with characters JSON must escape (HTML, quotes, control) and multi-byte
// runes, so that budget arithmetic on escaped lengths is exercised.
func text(t *rapid.T, label string, n int) string {
	size := rapid.OneOf(rapid.IntRange(0, 40), rapid.IntRange(0, n)).Draw(t, label+"_len")
	unit := rapid.SampledFrom([]string{"a", "<", "é", "\"", "\n", "日本", "&x", "\u2028"}).Draw(t, label+"_unit")
	return strings.Repeat(unit, size/len(unit))
}

// packetState draws an arbitrary state: huge facts, long lists, children's
// results, an input answer, notes, big stable fields.
func packetState(t *rapid.T) models.State {
	st := models.State{
		SessionID: "ses_prop", Goal: text(t, "goal", 12000), Status: models.StatusQueued,
		Version: rapid.Int64Range(1, 20000).Draw(t, "version"), CurrentStep: text(t, "step", 200),
		Facts: map[string]any{}, FactVersions: map[string]int64{},
		Delegation: &models.ActiveDelegation{ID: "dlg_p", Queue: "q", Step: "s", Attempt: 1, MaxAttempts: 3,
			Instructions: text(t, "instructions", 16000)},
	}
	for i := range rapid.IntRange(0, 50).Draw(t, "constraints") {
		st.Constraints = append(st.Constraints, text(t, fmt.Sprintf("constraint%d", i), 2000))
	}
	for i := range rapid.IntRange(0, 5).Draw(t, "resources") {
		st.Resources = append(st.Resources, models.Resource{Name: text(t, fmt.Sprintf("res%d", i), 200), URI: "db://x"})
	}
	for i := range rapid.IntRange(0, 5).Draw(t, "done") {
		st.DoneCriteria = append(st.DoneCriteria, text(t, fmt.Sprintf("done%d", i), 2000))
	}
	for i := range rapid.IntRange(0, 150).Draw(t, "facts") {
		k := fmt.Sprintf("fact_%03d", i)
		switch rapid.IntRange(0, 3).Draw(t, "kind_"+k) {
		case 0:
			st.Facts[k] = text(t, k, 900_000)
		case 1:
			st.Facts[k] = map[string]any{"nested": []any{text(t, k+"n", 50_000), 1.5, true}}
		default:
			st.Facts[k] = float64(i)
		}
		if rapid.Bool().Draw(t, "versioned_"+k) {
			st.FactVersions[k] = rapid.Int64Range(1, st.Version).Draw(t, "v_"+k)
		}
	}
	for i := range rapid.IntRange(0, 25).Draw(t, "notes") {
		st.Notes = append(st.Notes, models.Note{By: "user:u", Text: text(t, fmt.Sprintf("note%d", i), 8000), AtVersion: int64(i + 1)})
	}
	for i := range rapid.IntRange(0, 20).Draw(t, "steps") {
		out, _ := json.Marshal(map[string]string{"r": text(t, fmt.Sprintf("out%d", i), 65000)})
		var ev []models.Evidence
		for j := range rapid.IntRange(0, 50).Draw(t, fmt.Sprintf("ev%d", i)) {
			ev = append(ev, models.Evidence{Claim: text(t, fmt.Sprintf("claim%d_%d", i, j), 2000), Source: "s"})
		}
		st.CompletedSteps = append(st.CompletedSteps, models.StepRecord{Step: fmt.Sprintf("step-%d", i), ResultType: models.ResultCompleted,
			Output: out, Evidence: ev, AtVersion: int64(i + 1)})
	}
	for i := range rapid.IntRange(0, 20).Draw(t, "risks") {
		st.Risks = append(st.Risks, text(t, fmt.Sprintf("risk%d", i), 2000))
	}
	for i := range rapid.IntRange(0, 12).Draw(t, "questions") {
		st.OpenQuestions = append(st.OpenQuestions, text(t, fmt.Sprintf("q%d", i), 2000))
	}
	if rapid.Bool().Draw(t, "joined") {
		j := &models.JoinedChildren{Result: "met", AtVersion: st.Version}
		for i := range rapid.IntRange(1, 50).Draw(t, "children") {
			out, _ := json.Marshal(text(t, fmt.Sprintf("child%d", i), 65000))
			j.Children = append(j.Children, models.ChildOutcome{SessionID: fmt.Sprintf("ses_c%d", i), Status: models.StatusCompleted, Output: out})
		}
		st.Joined = j
	}
	if rapid.Bool().Draw(t, "answered") {
		answer := text(t, "answer", 8000)
		st.RunReason = &models.RunReason{Kind: models.RunAfterInput, Detail: answer, Question: text(t, "question", 4000), Attempt: 1}
		st.Facts[models.FactInputAnswer] = answer
		st.FactVersions[models.FactInputAnswer] = rapid.Int64Range(1, st.Version).Draw(t, "answer_v")
	}
	return st
}

// kept says whether got is want, or want truncated with a marker.
func kept(got, want string) bool {
	if got == want {
		return true
	}
	head, _, ok := strings.Cut(got, " [... ")
	return ok && strings.HasSuffix(got, " bytes cut]") && strings.HasPrefix(want, head)
}

// TestPacketBudgetProperty: for arbitrary states, the packet's JSON never
// exceeds its budget, says its own size, and keeps the newest fact, the
// newest note and the input answer (truncated at worst).
func TestPacketBudgetProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		st := packetState(t)
		maxBytes := rapid.OneOf(rapid.SampledFrom([]int{4096, 8192, 32768}), rapid.IntRange(4096, 300_000)).Draw(t, "max_bytes")
		p := models.BuildPacketWithin(st, "", maxBytes)
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > maxBytes {
			t.Fatalf("packet is %d bytes, budget %d (trimmed %v)", len(b), maxBytes, p.Budget.Trimmed)
		}
		if p.Budget.Bytes != len(b) || p.Budget.MaxBytes != maxBytes {
			t.Fatalf("budget %+v for %d bytes", p.Budget, len(b))
		}
		// The newest fact: the highest version, then the last key.
		newest, nv := "", int64(-1)
		for k := range st.Facts {
			if v := st.FactVersions[k]; v > nv || (v == nv && k > newest) {
				newest, nv = k, v
			}
		}
		if newest != "" {
			if _, ok := p.ConfirmedFacts[newest]; !ok {
				t.Fatalf("newest fact %s dropped (trimmed %v)", newest, p.Budget.Trimmed)
			}
		}
		if n := len(st.Notes); n > 0 {
			last := st.Notes[n-1]
			if m := len(p.Notes); m == 0 || p.Notes[m-1].AtVersion != last.AtVersion || !kept(p.Notes[m-1].Text, last.Text) {
				t.Fatalf("newest note dropped: %d notes kept", m)
			}
		}
		if r := st.RunReason; r != nil && r.Kind == models.RunAfterInput {
			if p.RunReason.Kind != models.RunAfterInput || !kept(p.RunReason.Detail, r.Detail) {
				t.Fatalf("answer dropped from the run reason: %+v", p.RunReason)
			}
			if got, _ := p.ConfirmedFacts[models.FactInputAnswer].(string); !kept(got, r.Detail) {
				t.Fatalf("answer fact dropped: %.80q", got)
			}
		}
		// Nothing is trimmed from a packet that fit.
		if len(p.Budget.Trimmed) == 0 {
			for k := range st.Facts {
				if _, ok := p.ConfirmedFacts[k]; !ok {
					t.Fatalf("fact %s missing though nothing was trimmed", k)
				}
			}
		}
	})
}
