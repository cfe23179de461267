package models

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// ResultInput is the return contract a worker sends for its delegation.
type ResultInput struct {
	LeaseToken  string          `json:"lease_token"`
	SessionID   string          `json:"session_id"`
	Step        string          `json:"step"`
	ResultType  string          `json:"result_type"`
	Output      json.RawMessage `json:"output"`
	Evidence    []Evidence      `json:"evidence"`
	Uncertainty *Uncertainty    `json:"uncertainty"`
	NextStep    string          `json:"next_step"`
	Question    string          `json:"question"`
	Risks       []string        `json:"risks"`
	Failure     *Failure        `json:"failure"`
	// Usage is what the worker's model call cost, for the prompt-cache hit
	// rate in the product metrics.
	Usage *Usage `json:"usage"`
	// ResolvedRisks names open risks of the session that this result
	// resolves; each must be open when the result is applied.
	ResolvedRisks []string `json:"resolved_risks"`
}

// Usage is the token usage a worker reports with a result.
type Usage struct {
	InputTokens       *int64 `json:"input_tokens"`
	CachedInputTokens *int64 `json:"cached_input_tokens"`
}

func (u *Usage) validate(v *ValidationError) {
	if u == nil {
		return
	}
	if u.InputTokens == nil {
		v.Add("usage.input_tokens", "is required with usage")
	} else if *u.InputTokens < 0 {
		v.Add("usage.input_tokens", "must not be negative")
	}
	switch {
	case u.CachedInputTokens == nil:
		// Absent means nothing was cached.
	case *u.CachedInputTokens < 0:
		v.Add("usage.cached_input_tokens", "must not be negative")
	case u.InputTokens != nil && *u.CachedInputTokens > *u.InputTokens:
		v.Add("usage.cached_input_tokens", "must not exceed usage.input_tokens (%d)", *u.InputTokens)
	}
}

// MaxOutputBytes bounds a result's output so that the state stays small.
const MaxOutputBytes = 64 << 10

// Validate checks the contract and lists every violation. It does not look at
// the database; the lease and the delegation's session and step are checked
// by SubmitResult.
func (in ResultInput) Validate() error {
	v := &ValidationError{}
	CheckNUL(v, "", in) // every text field; see NULMessage
	if in.LeaseToken == "" {
		v.Add("lease_token", "is required")
	}
	if in.SessionID == "" {
		v.Add("session_id", "is required")
	}
	if strings.TrimSpace(in.Step) == "" {
		v.Add("step", "is required")
	}
	if _, ok := resultEvents[in.ResultType]; !ok {
		v.Add("result_type", "must be one of completed, needs_input, rejected, escalated, failed")
	}
	if len(in.Output) > 0 {
		if !json.Valid(in.Output) {
			v.Add("output", "must be valid JSON")
		} else if len(in.Output) > MaxOutputBytes {
			v.Add("output", "must be at most %d bytes", MaxOutputBytes)
		}
	}
	if len(in.Evidence) > MaxListItems {
		v.Add("evidence", "must have at most %d items", MaxListItems)
	}
	for i, e := range in.Evidence {
		if strings.TrimSpace(e.Claim) == "" {
			v.Add(fmt.Sprintf("evidence[%d].claim", i), "is required")
		} else if len(e.Claim) > MaxItemLen {
			v.Add(fmt.Sprintf("evidence[%d].claim", i), "must be at most %d bytes", MaxItemLen)
		}
		if len(e.Source) > MaxItemLen {
			v.Add(fmt.Sprintf("evidence[%d].source", i), "must be at most %d bytes", MaxItemLen)
		}
	}
	if u := in.Uncertainty; u != nil && (math.IsNaN(u.Level) || u.Level < 0 || u.Level > 1) {
		v.Add("uncertainty.level", "must be between 0 and 1")
	}
	validateList(v, "risks", in.Risks)
	validateList(v, "resolved_risks", in.ResolvedRisks)
	if len(in.NextStep) > 200 {
		v.Add("next_step", "must be at most 200 bytes")
	}
	if len(in.Question) > MaxItemLen {
		v.Add("question", "must be at most %d bytes", MaxItemLen)
	}
	switch in.ResultType {
	case ResultCompleted:
		if len(in.Evidence) == 0 {
			v.Add("evidence", "is required for completed: at least one item")
		}
	case ResultNeedsInput, ResultEscalated:
		if strings.TrimSpace(in.NextStep) == "" && strings.TrimSpace(in.Question) == "" {
			v.Add("next_step", "next_step or question is required for %s", in.ResultType)
		}
	case ResultFailed:
		if in.Failure == nil {
			v.Add("failure", "is required for failed")
		} else {
			switch in.Failure.Class {
			case FailureTransient, FailureBadInput, FailurePermanent:
			default:
				v.Add("failure.class", "must be one of transient, bad_input, permanent")
			}
			if len(in.Failure.Message) > MaxItemLen {
				v.Add("failure.message", "must be at most %d bytes", MaxItemLen)
			}
		}
	}
	in.Usage.validate(v)
	if in.ResultType != ResultFailed && in.ResultType != "" && in.Failure != nil {
		v.Add("failure", "must be null unless result_type is failed")
	}
	return v.Err()
}
