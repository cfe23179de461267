package models

import "context"

// onChildDone is called after a child session reaches a terminal status, to
// evaluate its parent's join contract. (Stub: being filled in.)
func (s *Store) onChildDone(ctx context.Context, parentID string) {}
