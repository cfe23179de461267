package handlers_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskpilots/handoff/models"
	"github.com/taskpilots/handoff/models/storetest"
)

// TestAPIPacketV2 covers the packet over HTTP: the v2 fields in the lease
// and in GET …/packet, the JSON within its budget, the prompt rendering
// with its prefix headers, and a bad format.
func TestAPIPacketV2(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		sid := e.createSession(map[string]any{"goal": "Refund order 1182 if eligible", "constraints": []string{"refunds over 200 EUR need a human"},
			"done_criteria": []string{"refund issued or denial explained"}, "facts": map[string]any{"order": "1182"}})
		huge := strings.Repeat("<line of a long report>\n", 20_000) // 480 KB
		e.delegate(sid, 1, "api-pk", map[string]any{"packet_max_bytes": 4096, "facts": map[string]any{"report": huge}})
		l := e.lease("api-pk", "w-1", 0)
		if l.Packet.RunReason.Kind != models.RunFirst || l.Packet.Budget.MaxBytes != 4096 || l.Packet.Budget.Bytes > 4096 {
			t.Fatalf("lease packet: %+v %+v", l.Packet.RunReason, l.Packet.Budget)
		}

		r := wantStatus(t, e.get(e.worker, "/sessions/"+sid+"/packet"), http.StatusOK)
		var pk models.Packet
		r.Decode(t, &pk)
		if len(r.Body) > 4096 || pk.Budget.Bytes != len(r.Body) {
			t.Fatalf("GET packet is %d bytes, budget %+v", len(r.Body), pk.Budget)
		}
		if !strings.HasPrefix(string(r.Body), `{"goal":"Refund order 1182 if eligible","constraints":`) {
			t.Fatalf("stable fields do not come first: %.120s", r.Body)
		}
		if rep, _ := pk.ConfirmedFacts["report"].(string); !strings.HasSuffix(rep, "bytes cut]") {
			t.Fatalf("newest fact not kept truncated: %.80q", rep)
		}
		same := wantStatus(t, e.get(e.worker, "/sessions/"+sid+"/packet?format=json"), http.StatusOK)
		if string(same.Body) != string(r.Body) {
			t.Fatal("format=json differs from the default")
		}

		pr := wantStatus(t, e.get(e.worker, "/sessions/"+sid+"/packet?format=prompt"), http.StatusOK)
		if ct := pr.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
			t.Fatalf("content type %q", ct)
		}
		n, err := strconv.Atoi(pr.Header.Get("Prefix-Bytes"))
		if err != nil || n <= 0 || n > len(pr.Body) {
			t.Fatalf("Prefix-Bytes %q", pr.Header.Get("Prefix-Bytes"))
		}
		sum := sha256.Sum256(pr.Body[:n])
		if pr.Header.Get("Prefix-Hash") != hex.EncodeToString(sum[:]) {
			t.Fatalf("Prefix-Hash %s is not the hash of the first %d bytes", pr.Header.Get("Prefix-Hash"), n)
		}
		prefix := string(pr.Body[:n])
		if !strings.HasPrefix(prefix, "# Goal\nRefund order 1182 if eligible\n") || !strings.Contains(prefix, "refund issued or denial explained") ||
			strings.Contains(prefix, sid) || strings.Contains(prefix, "report") {
			t.Fatalf("prefix:\n%s", prefix)
		}
		if !strings.Contains(string(pr.Body[n:]), "Why you are running: first_run") {
			t.Fatalf("prompt:\n%s", pr.Body)
		}

		// The prefix stays byte-identical when the volatile part changes.
		res := completedResult(l)
		res["next_step"] = "decide"
		wantStatus(t, e.post(e.worker, "/delegations/"+l.DelegationID+"/result", res), http.StatusOK)
		e.delegate(sid, 4, "api-pk", map[string]any{"instructions": "Decide."})
		pr2 := wantStatus(t, e.get(e.worker, "/sessions/"+sid+"/packet?format=prompt"), http.StatusOK)
		if pr2.Header.Get("Prefix-Hash") != pr.Header.Get("Prefix-Hash") || string(pr2.Body) == string(pr.Body) {
			t.Fatal("the stable prefix changed with the volatile part")
		}

		for _, f := range []string{"xml", "PROMPT", "text"} {
			wantFields(t, wantProblem(t, e.get(e.worker, "/sessions/"+sid+"/packet?format="+f), http.StatusUnprocessableEntity), "format")
		}
		wantProblem(t, e.get(e.worker, "/sessions/ses_nope/packet?format=prompt"), http.StatusNotFound)

		// packet_max_bytes out of range: 422 naming it, nothing written.
		noWrites(t, s, func() {
			for _, n := range []any{100, 2_000_000} {
				body := map[string]any{"queue": "api-pk", "step": "x", "expected_version": 5, "packet_max_bytes": n}
				wantFields(t, wantProblem(t, e.post(e.controller, "/sessions/"+sid+"/delegations", body), http.StatusUnprocessableEntity), "packet_max_bytes")
			}
		})
	})
}

// TestAPIResultUsage checks usage validation over HTTP and the prompt-cache
// hit rate per queue in /api/v1/metrics.
func TestAPIResultUsage(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, s *models.Store) {
		e := newAPIEnv(t, s)
		for i, q := range []string{"cache-a", "cache-a", "cache-b"} {
			sid := e.createSession(nil)
			e.delegate(sid, 1, q, nil)
			l := e.lease(q, "w", 0)
			if i == 0 {
				noWrites(t, s, func() {
					bad := completedResult(l)
					bad["usage"] = map[string]any{"input_tokens": -1, "cached_input_tokens": -1}
					wantFields(t, wantProblem(t, e.post(e.worker, "/delegations/"+l.DelegationID+"/result", bad), http.StatusUnprocessableEntity),
						"usage.input_tokens", "usage.cached_input_tokens")
					bad["usage"] = map[string]any{"input_tokens": 10, "cached_input_tokens": 11}
					wantFields(t, wantProblem(t, e.post(e.worker, "/delegations/"+l.DelegationID+"/result", bad), http.StatusUnprocessableEntity),
						"usage.cached_input_tokens")
				})
			}
			res := completedResult(l)
			res["usage"] = map[string]any{"input_tokens": 1000, "cached_input_tokens": []int{600, 900, 0}[i]}
			wantStatus(t, e.post(e.worker, "/delegations/"+l.DelegationID+"/result", res), http.StatusOK)
		}
		// The window ends at the current second, exclusive: look from a
		// little later.
		s.Now = func() time.Time { return time.Now().Add(2 * time.Second) }
		var pm models.ProductMetrics
		wantStatus(t, e.get(e.worker, "/metrics?queue="), http.StatusOK).Decode(t, &pm)
		a, b := pm.Queues["cache-a"].PromptCache, pm.Queues["cache-b"].PromptCache
		if a.Results != 2 || a.InputTokens != 2000 || a.CachedInputTokens != 1500 || a.HitRate == nil || *a.HitRate != 0.75 {
			t.Fatalf("cache-a: %+v", a)
		}
		if b.HitRate == nil || *b.HitRate != 0 || pm.Overall.PromptCache.CachedInputTokens != 1500 || pm.Overall.PromptCache.InputTokens != 3000 {
			t.Fatalf("cache-b %+v overall %+v", b, pm.Overall.PromptCache)
		}
		raw, _ := json.Marshal(pm.Queues["cache-a"])
		if !strings.Contains(string(raw), `"prompt_cache":{"results":2,"input_tokens":2000,"cached_input_tokens":1500,"hit_rate":0.75}`) {
			t.Fatalf("metrics JSON %s", raw)
		}
	})
}
