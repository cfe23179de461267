package models

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
)

// Packet is the minimal context a worker gets: built from the latest valid
// state only, never from the raw history. Stable fields come first and are
// covered by PrefixHash, so callers can reuse a cached prompt prefix.
type Packet struct {
	SessionID      string         `json:"session_id"`
	BasedOnVersion int64          `json:"based_on_version"`
	Goal           string         `json:"goal"`
	Constraints    []string       `json:"constraints"`
	Resources      []Resource     `json:"resources"`
	DoneCriteria   []string       `json:"done_criteria"`
	ConfirmedFacts map[string]any `json:"confirmed_facts"`
	OpenQuestions  []string       `json:"open_questions"`
	CompletedSteps []PacketStep   `json:"completed_steps"`
	Risks          []string       `json:"risks"`
	Step           string         `json:"step"`
	Instructions   string         `json:"instructions"`
	PrefixHash     string         `json:"prefix_hash"`
}

// PacketStep summarises a finished step for the packet.
type PacketStep struct {
	Step       string `json:"step"`
	ResultType string `json:"result_type"`
	NextStep   string `json:"next_step,omitempty"`
}

// Bounds of a packet, whatever the history length.
const (
	packetSteps = 10
	packetFacts = 100
	packetRisks = 10
	packetQs    = 10
)

// BuildPacket builds the context packet for the session's current step.
func BuildPacket(st State, instructions string) Packet {
	p := Packet{
		SessionID: st.SessionID, BasedOnVersion: st.Version, Goal: st.Goal,
		Constraints: nonNil(st.Constraints), Resources: nonNil(st.Resources), DoneCriteria: nonNil(st.DoneCriteria),
		ConfirmedFacts: boundFacts(st.Facts), OpenQuestions: nonNil(keepLast(st.OpenQuestions, packetQs)),
		Risks: nonNil(keepLast(st.Risks, packetRisks)), Step: st.CurrentStep, Instructions: instructions,
		CompletedSteps: []PacketStep{},
	}
	if instructions == "" && st.Delegation != nil {
		p.Instructions = st.Delegation.Instructions
	}
	for _, s := range keepLast(st.CompletedSteps, packetSteps) {
		p.CompletedSteps = append(p.CompletedSteps, PacketStep{Step: s.Step, ResultType: s.ResultType, NextStep: s.NextStep})
	}
	p.PrefixHash = PrefixHash(st)
	return p
}

// PrefixHash hashes the stable part of the context: goal, constraints,
// resources and done criteria.
func PrefixHash(st State) string {
	b, err := Canonical(struct {
		Goal         string     `json:"goal"`
		Constraints  []string   `json:"constraints"`
		Resources    []Resource `json:"resources"`
		DoneCriteria []string   `json:"done_criteria"`
	}{st.Goal, nonNil(st.Constraints), nonNil(st.Resources), nonNil(st.DoneCriteria)})
	if err != nil {
		panic("models: prefix does not encode: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func nonNil[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}

func boundFacts(f map[string]any) map[string]any {
	out := make(map[string]any, min(len(f), packetFacts))
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys[:min(len(keys), packetFacts)] {
		out[k] = f[k]
	}
	return out
}
