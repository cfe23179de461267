package web

import (
	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/handlers"
	"github.com/taskpilots/handoff/models"
)

// reviewAdminRoutes registers the reviewers' and the admins' console:
// the review queue, rubric and statistics (reviewers and admins), the audit
// trail with its exports, verification, users, API tokens, webhooks and the admin log
// (admins), and the metrics dashboard (admins and reviewers).
func reviewAdminRoutes(e *echo.Echo, s *models.Store, cfg Config) {
	reviewers := handlers.RequireUser(models.RoleReviewer)
	admins := handlers.RequireUser(models.RoleAdmin)
	p := cfg.Reviews

	e.GET("/console/reviews", handlers.ReviewQueue(s, p), reviewers)
	e.GET("/console/reviews/stats", handlers.ReviewStats(s), reviewers)
	e.POST("/console/reviews/next", handlers.ReviewNext(s, p), reviewers)
	e.GET("/console/reviews/:id/:version", handlers.ReviewItem(s), reviewers)
	e.POST("/console/reviews/:id/:version/claim", handlers.ReviewClaim(s, p), reviewers)
	e.POST("/console/reviews/:id/:version/release", handlers.ReviewRelease(s), reviewers)
	e.POST("/console/reviews/:id/:version/score", handlers.ReviewScore(s, p), reviewers)

	e.GET("/console/audit", handlers.AuditTrail(s), admins)
	e.GET("/console/audit/export.csv", handlers.AuditExport(s, handlers.ExportCSV), admins)
	e.GET("/console/audit/export.jsonl", handlers.AuditExport(s, handlers.ExportJSONL), admins)
	e.GET("/console/audit/sessions/:id/transcript.json", handlers.SessionTranscript(s, cfg.checkpointer), admins)

	e.GET("/console/admin", handlers.AdminIndex, admins)
	e.GET("/console/admin/metrics", handlers.MetricsDashboard(s), reviewers)
	e.GET("/console/admin/audit", handlers.AdminLog(s), admins)

	v := &models.Verifier{Store: s, Log: cfg.Logger, PublicKeys: cfg.checkpointer.PublicKeys()}
	e.GET("/console/admin/verify", handlers.AdminVerifyPage(s, v, cfg.checkpointer), admins)
	e.GET("/console/admin/verify/status", handlers.AdminVerifyStatus(s, v), admins)
	e.POST("/console/admin/verify", handlers.AdminVerifyStart(v), admins)
	e.POST("/console/admin/checkpoints", handlers.AdminCheckpointWrite(s, cfg.checkpointer), admins)
	e.POST("/console/admin/erase", handlers.AdminErase(s), admins)

	e.GET("/console/admin/users", handlers.AdminUsers(s), admins)
	e.POST("/console/admin/users", handlers.AdminCreateUser(s), admins)
	for _, a := range handlers.AdminUserActions() {
		e.POST("/console/admin/users/:id/"+a, handlers.AdminUserAction(s, a), admins)
	}
	e.GET("/console/admin/tokens", handlers.AdminTokens(s), admins)
	e.POST("/console/admin/tokens", handlers.AdminCreateToken(s), admins)
	e.POST("/console/admin/tokens/:id/revoke", handlers.AdminRevokeToken(s), admins)

	e.GET("/console/admin/queues", handlers.AdminQueues(s), admins)
	e.POST("/console/admin/queues", handlers.AdminPutQueue(s), admins)

	e.GET("/console/admin/webhooks", handlers.AdminWebhooks(s), admins)
	e.POST("/console/admin/webhooks", handlers.AdminCreateWebhook(s), admins)
	e.GET("/console/admin/webhooks/:id", handlers.AdminWebhook(s), admins)
	e.POST("/console/admin/webhooks/:id/delete", handlers.AdminDeleteWebhook(s), admins)
	e.POST("/console/admin/webhooks/:id/rotate-secret", handlers.AdminRotateWebhook(s), admins)
	e.POST("/console/admin/webhooks/:id/deliveries/:event_id/redeliver", handlers.AdminRedeliverWebhook(s), admins)
}
