package models

// LaterChecked lets the external tests queue a statement judged in Go.
func (t *Tx) LaterChecked(check func(rows int64, err error) error, query string, args ...any) {
	t.laterChecked(check, query, args...)
}

// SetBulkHook runs hook before each session of a bulk is written.
func (s *Store) SetBulkHook(hook func(sessionID string)) { s.bulkHook = hook }
