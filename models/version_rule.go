package models

// Invariant 10, "only work moves the version".
//
// Every event takes the next seq of its session: seq is the event's position
// in the hash chain and always increments. The state version is what a write
// names (expected_version, the console forms' hidden state_version): it says
// "the work as I saw it". Only events that change the work move it; an
// audit-only event is appended, numbered and hashed like any other, but
// leaves the version where it was, so a write based on that version is still
// correct after it and is not answered 409 (nor counted as a conflict).
//
// The work is what the next write depends on: the status, the delegation and
// its lease and holder, the facts, outputs and evidence, the open questions
// and risks, and everything that reaches the next worker's packet or the next
// human's page (invariant 9). Audit-only is what records how the work was
// done without changing it: a reviewer's score of an escalation package and
// the SLA breach marker of an escalation.
//
// Notes (human.noted) are work, deliberately: a note and its evidence reach
// the next worker's packet and the next human's page, and a packet names the
// version it is based on, so a note must move the version or two different
// packets would claim the same one. A human who decides on a version from
// before a colleague's note has not read it; the 409 shows them the note.
// Notes themselves name no version (they are recorded whatever happened
// meanwhile), so writing a note never fails on a conflict.
//
// Review assignment (claiming a review item) and SLA near-breach warnings
// are not events at all: they live in review_claims and the SLA query.

// VersionEffect is what an event type does to the state version.
type VersionEffect int

// The two effects.
const (
	// MovesVersion: the event changes the work; the version moves by one.
	MovesVersion VersionEffect = iota + 1
	// AuditOnly: the event is logged and hashed; the version stays.
	AuditOnly
)

// versionEffects is the rule, one row per event type. TestVersionRule
// checks that every type has a row, so a new event type must choose.
var versionEffects = map[EventType]VersionEffect{
	EventSessionCreated:        MovesVersion,
	EventSessionPaused:         MovesVersion,
	EventSessionResumed:        MovesVersion,
	EventSessionEscalated:      MovesVersion,
	EventSessionCancelled:      MovesVersion,
	EventDelegationCreated:     MovesVersion,
	EventDelegationLeased:      MovesVersion,
	EventDelegationExpired:     MovesVersion,
	EventResultCompleted:       MovesVersion,
	EventResultNeedsInput:      MovesVersion,
	EventResultRejected:        MovesVersion,
	EventResultEscalated:       MovesVersion,
	EventResultFailed:          MovesVersion,
	EventInputProvided:         MovesVersion,
	EventHumanClaimed:          MovesVersion,
	EventHumanReleased:         MovesVersion,
	EventHumanNoted:            MovesVersion,
	EventHumanRequestedInput:   MovesVersion,
	EventHumanResumed:          MovesVersion,
	EventHumanHandedBack:       MovesVersion,
	EventHumanCompleted:        MovesVersion,
	EventHumanRejected:         MovesVersion,
	EventChildrenSpawned:       MovesVersion,
	EventChildrenJoined:        MovesVersion,
	EventRiskResolved:          MovesVersion,
	EventReviewScored:          AuditOnly,
	EventEscalationSLABreached: AuditOnly,
}

// VersionEffectOf returns the rule's row for t; a type without one moves the
// version (the safe side: a spurious conflict, never a lost update).
func VersionEffectOf(t EventType) VersionEffect {
	if v, ok := versionEffects[t]; ok {
		return v
	}
	return MovesVersion
}

// VersionStep is how far an event of type t moves the version: 1 or 0.
func VersionStep(t EventType) int64 {
	if VersionEffectOf(t) == AuditOnly {
		return 0
	}
	return 1
}

// legacyAuditEvent reports whether e is an audit-only event written before
// invariant 10, when every event moved the version. Such events are
// immutable and hashed, so replay must accept them as they are. They are
// recognisable on their own: before the rule seq and version_after were
// always equal, and once a session has one audit-only event under the rule
// its seq runs ahead of its version for good.
func legacyAuditEvent(e Event) bool {
	return VersionEffectOf(e.Type) == AuditOnly && e.VersionAfter == e.VersionBefore+1 && e.Seq == e.VersionAfter
}
