package handlers

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// delegationWritten is the answer to POST /sessions/{id}/delegations.
type delegationWritten struct {
	DelegationID string        `json:"delegation_id"`
	SessionID    string        `json:"session_id"`
	StateVersion int64         `json:"state_version"`
	Status       models.Status `json:"status"`
}

// delegate serves POST /sessions/{id}/delegations.
func (a *API) delegate(c echo.Context) error {
	var in models.DelegateInput
	key, err := bind(c, &in, func() error { return in.Validate() })
	if err != nil {
		return err
	}
	out, err := a.Store.Delegate(c.Request().Context(), c.Param("id"), actor(c), key, in)
	if err != nil {
		return err
	}
	var d models.DelegationCreated
	if err := out.DecodeData(&d); err != nil {
		return err
	}
	return writeOutcome(c, http.StatusCreated, out, delegationWritten{
		DelegationID: d.DelegationID, SessionID: out.SessionID, StateVersion: out.StateVersion, Status: out.Status,
	})
}

// leaseView is a granted lease with the packet to work from.
type leaseView struct {
	Queue          string         `json:"queue"`
	DelegationID   string         `json:"delegation_id"`
	SessionID      string         `json:"session_id"`
	Step           string         `json:"step"`
	Attempt        int            `json:"attempt"`
	LeaseToken     string         `json:"lease_token"`
	LeaseExpiresAt models.UTCTime `json:"lease_expires_at"`
	Packet         models.Packet  `json:"packet"`
	// Traceparent and Tracestate are the W3C trace context of the request
	// that created the delegation: the worker continues the trace.
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// lease serves POST /queues/{queue}/lease: a long poll that answers 200 with
// a lease as soon as work is available, or 204 when none became available
// within wait_seconds (or the caller went away).
func (a *API) lease(c echo.Context) error {
	var in models.LeaseInput
	queue := c.Param("queue")
	key, err := bind(c, &in, func() error { return in.Validate(queue) })
	if err != nil {
		return err
	}
	if err := in.Validate(queue); err != nil {
		return err
	}
	wait := time.Duration(0)
	if in.WaitSeconds != nil {
		wait = min(time.Duration(*in.WaitSeconds)*time.Second, models.MaxWaitSeconds*time.Second)
	}
	ctx := c.Request().Context()
	if in.Max != nil {
		return a.leaseBatch(c, queue, in, key, wait)
	}
	l, err := a.Store.ClaimWait(ctx, queue, in.Worker, actor(c), key, wait)
	if err != nil && ctx.Err() != nil {
		// The caller hung up (or the server is stopping) while waiting; the
		// claim, if one had started, rolled back with the context, so nothing
		// was leased to anyone.
		a.log().Debug("lease poll ended by its context", "queue", queue, "worker", in.Worker, "err", err)
		return c.NoContent(http.StatusNoContent)
	}
	if err != nil {
		return err
	}
	if l == nil {
		return c.NoContent(http.StatusNoContent)
	}
	return c.JSON(http.StatusOK, newLeaseView(queue, *l))
}

func newLeaseView(queue string, l models.Lease) leaseView {
	return leaseView{
		Queue: queue, DelegationID: l.DelegationID, SessionID: l.SessionID, Step: l.Step, Attempt: l.Attempt,
		LeaseToken: l.LeaseToken, LeaseExpiresAt: models.NewUTCTime(l.LeaseExpiresAt), Packet: l.Packet,
		Traceparent: l.Traceparent, Tracestate: l.Tracestate,
	}
}

// leaseBatchView is the answer to a lease request with max: the leases
// granted, at least one, at most max, each exactly as a single lease.
type leaseBatchView struct {
	Leases []leaseView `json:"leases"`
}

// leaseBatch is lease with max set: up to max leases in one claim. Without
// max the answer keeps its single-lease shape, so existing workers see no
// change.
func (a *API) leaseBatch(c echo.Context, queue string, in models.LeaseInput, key string, wait time.Duration) error {
	ctx := c.Request().Context()
	ls, err := a.Store.ClaimBatchWait(ctx, queue, in.Worker, actor(c), key, *in.Max, wait)
	if err != nil && ctx.Err() != nil {
		a.log().Debug("lease poll ended by its context", "queue", queue, "worker", in.Worker, "err", err)
		return c.NoContent(http.StatusNoContent)
	}
	if err != nil {
		return err
	}
	if len(ls) == 0 {
		return c.NoContent(http.StatusNoContent)
	}
	out := leaseBatchView{Leases: make([]leaseView, len(ls))}
	for i, l := range ls {
		out.Leases[i] = newLeaseView(queue, l)
	}
	return c.JSON(http.StatusOK, out)
}

type heartbeatInput struct {
	LeaseToken string `json:"lease_token"`
}

type heartbeatView struct {
	DelegationID   string         `json:"delegation_id"`
	LeaseExpiresAt models.UTCTime `json:"lease_expires_at"`
}

// heartbeat serves POST /delegations/{id}/heartbeat. Heartbeats change no
// session state and are naturally repeatable, so they take no idempotency
// key beyond checking its form.
func (a *API) heartbeat(c echo.Context) error {
	var in heartbeatInput
	if _, err := bind(c, &in, nil); err != nil {
		return err
	}
	id := c.Param("id")
	expires, err := a.Store.Heartbeat(c.Request().Context(), id, in.LeaseToken)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, heartbeatView{DelegationID: id, LeaseExpiresAt: models.NewUTCTime(expires)})
}

// submitResult serves POST /delegations/{id}/result: the return contract.
func (a *API) submitResult(c echo.Context) error {
	var in models.ResultInput
	key, err := bind(c, &in, func() error { return in.Validate() })
	if err != nil {
		return err
	}
	out, err := a.Store.SubmitResult(c.Request().Context(), c.Param("id"), actor(c), key, in)
	if err != nil {
		return err
	}
	return writeOutcome(c, http.StatusOK, out, written(out))
}

// expireLeases serves POST /queues/{queue}/expire-leases (admin tokens
// only): a lease fault injection for recovery drills (models.ExpireLeases).
func (a *API) expireLeases(c echo.Context) error {
	var in models.ExpireLeasesInput
	if _, err := bind(c, &in, func() error { return in.Validate() }); err != nil {
		return err
	}
	rep, err := a.Store.ExpireLeases(c.Request().Context(), actor(c), c.Param("queue"), in)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, rep)
}
