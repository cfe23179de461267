package models_test

import (
	"gorm.io/gorm"

	"github.com/taskpilots/handoff/models"
)

// execWithoutTriggers runs stmts in one PostgreSQL transaction with the
// triggers off (session_replication_role = replica), as a bulk load would:
// the maintained tables (counts, rollups, the inbox search's copy) do not
// follow, and foreign keys are not checked.
func execWithoutTriggers(s *models.Store, stmts ...string) error {
	return s.DB.Transaction(func(tx *gorm.DB) error {
		for _, q := range append([]string{`SET LOCAL session_replication_role = replica`}, stmts...) {
			if err := tx.Exec(q).Error; err != nil {
				return err
			}
		}
		return nil
	})
}
