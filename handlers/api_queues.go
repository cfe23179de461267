package handlers

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// queueFlowList is the answer to GET /queues.
type queueFlowList struct {
	Queues []models.QueueFlow `json:"queues"`
}

// putQueue serves PUT /queues/{queue}: sets (replaces) the queue's flow
// settings (admin).
func (a *API) putQueue(c echo.Context) error {
	queue := c.Param("queue")
	var in models.QueueFlowInput
	key, err := bind(c, &in, func() error { return in.Validate(queue) })
	if err != nil {
		return err
	}
	ctx, replayed := models.NoteReplay(c.Request().Context())
	f, err := a.Store.PutQueueFlow(ctx, actor(c), key, queue, in)
	if err != nil {
		return err
	}
	markReplayed(c, *replayed)
	return c.JSON(http.StatusOK, f)
}

// getQueue serves GET /queues/{queue}: its flow settings and in-flight
// count (no limits for a queue never configured).
func (a *API) getQueue(c echo.Context) error {
	f, err := a.Store.GetQueueFlow(c.Request().Context(), c.Param("queue"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, f)
}

// listQueues serves GET /queues: every queue with settings or leases out.
func (a *API) listQueues(c echo.Context) error {
	fs, err := a.Store.ListQueueFlows(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, queueFlowList{Queues: fs})
}
