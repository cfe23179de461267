package models

// Observer hears about writes after they commit or are rejected, so that
// metrics can count them without models knowing any metrics library.
// Implementations must be fast and safe for concurrent use.
type Observer interface {
	// Committed is called once per event after its transaction commits.
	Committed(ev Event, next Status)
	// Rejected is called when a command is refused (stale version, lost
	// lease, duplicate, invalid input, illegal transition).
	Rejected(t EventType, code Code)
}
