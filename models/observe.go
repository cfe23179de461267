package models

// Observer hears about writes after they commit or are rejected, so that
// metrics can count them without models knowing any metrics library.
// Implementations must be fast and safe for concurrent use.
type Observer interface {
	// Committed is called once per event after its transaction commits;
	// queue is the session's queue after the event (the queue it was last
	// delegated to, "" before its first delegation).
	Committed(ev Event, next Status, queue string)
	// Rejected is called when a command is refused (stale version, lost
	// lease, idempotent replay, invalid input, illegal transition), after
	// the refusal has been counted in write_rejections. reason is one of
	// the Reject* reasons; queue is the session's queue when it is known.
	Rejected(t EventType, reason, queue string)
}
