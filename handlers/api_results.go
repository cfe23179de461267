package handlers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// resultsRequest is the body of POST /results: a batch of results.
type resultsRequest struct {
	Results []json.RawMessage `json:"results"`
}

// resultItem is one result of a batch: the body of POST
// /delegations/{id}/result, with the delegation it answers and its
// idempotency key (the header's part) as fields.
type resultItem struct {
	DelegationID   string `json:"delegation_id"`
	IdempotencyKey string `json:"idempotency_key"`
	models.ResultInput
}

// validate lists every problem with the item: the contract's, and the
// delegation id and key the single endpoint takes from its path and header.
func (it *resultItem) validate() error {
	v := &models.ValidationError{}
	if it.DelegationID == "" {
		v.Add("delegation_id", "is required")
	}
	if p := keyProblem(it.IdempotencyKey); p != "" {
		v.Add("idempotency_key", "%s", p)
	}
	var ve *models.ValidationError
	if err := it.ResultInput.Validate(); err != nil {
		if !asValidation(err, &ve) {
			return err
		}
		v.Fields = append(v.Fields, ve.Fields...)
	}
	return v.Err()
}

// resultEntry is one result's answer in a batch: what the single endpoint
// would have answered for it, status and body.
type resultEntry struct {
	Status   int             `json:"status"`
	Outcome  *sessionWritten `json:"outcome,omitempty"`
	Replayed bool            `json:"replayed,omitempty"`
	Problem  *Problem        `json:"problem,omitempty"`
}

// submitResults serves POST /results: up to models.MaxResultBatch results,
// each judged and applied as POST /delegations/{id}/result would (its own
// contract check, lease fence, version and idempotency key), written in one
// group transaction (models.Store.SubmitResults). The answer is 200 with
// one entry per result in request order, its status and its outcome or
// problem; a bad item writes nothing for itself and takes no other down.
// An item that is not a JSON object makes the whole request a 422.
func (a *API) submitResults(c echo.Context) error {
	var in resultsRequest
	// An Idempotency-Key header is checked like any other but not used:
	// each result carries its own key, so a retried batch replays the
	// results that committed and applies the rest.
	if _, err := bind(c, &in, func() error { return validateBatch(len(in.Results)) }); err != nil {
		return err
	}
	if err := validateBatch(len(in.Results)); err != nil {
		return err
	}
	// An item that is not an object is not a result at all: the request
	// is malformed, as a body that is not an object is.
	notObjects := &models.ValidationError{}
	for i, raw := range in.Results {
		if b := bytes.TrimSpace(raw); len(b) == 0 || b[0] != '{' {
			notObjects.Add(fmt.Sprintf("results[%d]", i), "must be a JSON object")
		}
	}
	if err := notObjects.Err(); err != nil {
		return err
	}
	entries := make([]resultEntry, len(in.Results))
	var (
		items []models.ResultSubmission
		at    []int // the entry of each item
	)
	for i, raw := range in.Results {
		var it resultItem
		err := bindObject(bytes.TrimSpace(raw), &it, it.validate, nil)
		if err == nil {
			err = it.validate()
		}
		if err != nil {
			entries[i] = problemEntry(err)
			continue
		}
		items = append(items, models.ResultSubmission{DelegationID: it.DelegationID, IdempotencyKey: it.IdempotencyKey, Input: it.ResultInput})
		at = append(at, i)
	}
	outs, err := a.Store.SubmitResults(c.Request().Context(), actor(c), items)
	if err != nil {
		return err
	}
	for j, o := range outs {
		if o.Err != nil {
			if StatusFor(o.Err) >= 500 {
				a.log().Error("batch result failed", "err", o.Err, "delegation_id", items[j].DelegationID, "request_id", RequestID(c))
			}
			entries[at[j]] = problemEntry(o.Err)
			continue
		}
		w := written(o.Outcome)
		entries[at[j]] = resultEntry{Status: http.StatusOK, Outcome: &w, Replayed: o.Outcome.Replayed}
	}
	return c.JSON(http.StatusOK, map[string]any{"results": entries})
}

func problemEntry(err error) resultEntry {
	p := ProblemFor(err)
	return resultEntry{Status: p.Status, Problem: &p}
}

// validateBatch checks the number of results of a batch.
func validateBatch(n int) error {
	v := &models.ValidationError{}
	switch {
	case n == 0:
		v.Add("results", "must hold at least one result")
	case n > models.MaxResultBatch:
		v.Add("results", "must hold at most %d results, not %d", models.MaxResultBatch, n)
	}
	return v.Err()
}
