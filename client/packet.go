package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// RunReason is why a worker runs: kind first_run, retry, lease_expired,
// after_input, after_human or after_join; Detail is the last failure's
// message, the input answer, the human's decision and note or the join
// result; Question is the question an input answered.
type RunReason struct {
	Kind      string `json:"kind"`
	Detail    string `json:"detail,omitempty"`
	Attempt   int    `json:"attempt"`
	Question  string `json:"question,omitempty"`
	By        string `json:"by,omitempty"`
	AtVersion int64  `json:"at_version,omitempty"`
}

// PacketNote is a human's note in a packet.
type PacketNote struct {
	By        string `json:"by"`
	Text      string `json:"text"`
	AtVersion int64  `json:"at_version"`
}

// PreviousOutput is what an earlier step (or, after a join, a child
// session: SessionID, Status and Goal set) produced.
type PreviousOutput struct {
	Step      string          `json:"step"`
	SessionID string          `json:"session_id,omitempty"`
	Status    string          `json:"status,omitempty"`
	Goal      string          `json:"goal,omitempty"`
	Output    json.RawMessage `json:"output,omitempty"`
	Evidence  []Evidence      `json:"evidence"`
	AtVersion int64           `json:"at_version"`
}

// PacketBudget is the packet's byte budget, its size and what was trimmed
// to fit.
type PacketBudget struct {
	MaxBytes int      `json:"max_bytes"`
	Bytes    int      `json:"bytes"`
	Trimmed  []string `json:"trimmed"`
}

// Usage is the token usage a worker reports with a result; the server's
// metrics derive the prompt-cache hit rate from it.
type Usage struct {
	InputTokens       int64 `json:"input_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens"`
}

// Prompt is a packet rendered as text for a model. The first PrefixBytes
// bytes of Text are the stable prefix and PrefixHash is their SHA-256
// (hex): while it does not change, a prompt cache can reuse that prefix.
type Prompt struct {
	Text        string
	PrefixBytes int
	PrefixHash  string
}

// PacketPrompt returns the session's context packet rendered for a model
// (GET /sessions/{id}/packet?format=prompt).
func (c *Client) PacketPrompt(ctx context.Context, id string) (Prompt, error) {
	path := "/api/v1/sessions/" + esc(id) + "/packet"
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path+"?format=prompt", nil)
	if err != nil {
		return Prompt{}, fmt.Errorf("GET %s: %w", path, err)
	}
	req.Header.Set("Accept", "text/plain")
	req.Header.Set("User-Agent", c.userAgent)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return Prompt{}, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return Prompt{}, fmt.Errorf("GET %s: read answer: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return Prompt{}, decodeProblem(http.MethodGet, path, resp.StatusCode, data)
	}
	n, err := strconv.Atoi(resp.Header.Get("Prefix-Bytes"))
	if err != nil || n < 0 || n > len(data) {
		return Prompt{}, fmt.Errorf("GET %s: bad Prefix-Bytes %q", path, resp.Header.Get("Prefix-Bytes"))
	}
	return Prompt{Text: string(data), PrefixBytes: n, PrefixHash: resp.Header.Get("Prefix-Hash")}, nil
}
