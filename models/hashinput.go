package models

import (
	"encoding/json"
	"strconv"
)

// appendHashInput appends to dst the bytes an event's hash is computed over:
// exactly what json.Marshal(hashInput{…}) gives, which is the definition
// (FuzzHashInput holds the two to it). payload must be valid JSON.
//
// Why not json.Marshal itself: it walks hashInput by reflection and copies
// the payload through its compactor, which together cost twice the SHA-256
// of the bytes; hashing is what verify and every write do per event. Every
// stored payload is already compact and HTML-escaped (the write path stores
// what encoding/json produced), and ids, hashes, actors and times need no
// escapes, so the bytes can be laid down as they are. Anything else (a string
// needing an escape, a payload with spaces between tokens or a raw '<')
// takes json.Marshal, so the result never depends on the shortcut.
//
// payload is a string or bytes: verify hashes the payloads as pgx scanned
// them (strings), and a copy into bytes per event was a measurable share of
// its CPU.
func appendHashInput[P ~string | ~[]byte](dst []byte, e Event, key string, payload P) []byte {
	created := e.CreatedAt.String()
	if verbatimFields(e, key, created) && compactEscaped(payload) {
		return appendVerbatim(dst, e, key, created, payload)
	}
	return appendMarshalled(dst, e, key, created, json.RawMessage(payload))
}

// appendStoredHashInput is appendHashInput for a payload as stored, which a
// corrupted row may have made invalid JSON. A corrupted payload must still
// hash (to a mismatch), not fail. json.Valid would be a second full scan of
// every payload, the largest cost of a hash after SHA-256 itself (a tenth
// of verify's CPU), and only json.Marshal needs it (it rejects invalid
// JSON): a payload laid down verbatim is laid down valid or not, and one
// that would take json.Marshal is checked first and, if invalid, hashed as
// a JSON string. Either way the bytes differ from the valid payload the
// stored hash covers, and the fields around the payload (quote-free or
// escaped strings) cannot absorb the difference (TestTamperDetected
// corrupts payloads both ways).
func appendStoredHashInput(dst []byte, e Event, key, payload string) []byte {
	created := e.CreatedAt.String()
	if verbatimFields(e, key, created) && compactEscaped(payload) {
		return appendVerbatim(dst, e, key, created, payload)
	}
	if !json.Valid([]byte(payload)) {
		quoted, _ := json.Marshal(payload)
		return appendHashInput(dst, e, key, quoted)
	}
	return appendMarshalled(dst, e, key, created, json.RawMessage(payload))
}

// verbatimFields reports whether every string field of the hash input is
// one json.Marshal writes as it is (no escapes).
func verbatimFields(e Event, key, created string) bool {
	return jsonVerbatim(e.SessionID) && jsonVerbatim(e.Type) && jsonVerbatim(e.Actor) &&
		jsonVerbatim(key) && jsonVerbatim(e.PrevHash) && jsonVerbatim(created)
}

// appendMarshalled appends the hash input through json.Marshal, the
// definition; payload must be valid JSON.
func appendMarshalled(dst []byte, e Event, key, created string, payload json.RawMessage) []byte {
	b, err := json.Marshal(hashInput{
		SessionID: e.SessionID, Seq: e.Seq, Type: e.Type, Actor: e.Actor,
		VersionBefore: e.VersionBefore, VersionAfter: e.VersionAfter, Payload: payload,
		IdempotencyKey: key, PrevHash: e.PrevHash, CreatedAt: created,
	})
	if err != nil {
		panic("models: hash input does not marshal: " + err.Error())
	}
	return append(dst, b...)
}

// appendVerbatim lays the hash input down field by field: what json.Marshal
// writes when verbatimFields and compactEscaped hold.
func appendVerbatim[P ~string | ~[]byte](dst []byte, e Event, key, created string, payload P) []byte {
	dst = append(dst, `{"session_id":"`...)
	dst = append(dst, e.SessionID...)
	dst = append(dst, `","seq":`...)
	dst = strconv.AppendInt(dst, e.Seq, 10)
	dst = append(dst, `,"type":"`...)
	dst = append(dst, e.Type...)
	dst = append(dst, `","actor":"`...)
	dst = append(dst, e.Actor...)
	dst = append(dst, `","version_before":`...)
	dst = strconv.AppendInt(dst, e.VersionBefore, 10)
	dst = append(dst, `,"version_after":`...)
	dst = strconv.AppendInt(dst, e.VersionAfter, 10)
	dst = append(dst, `,"payload":`...)
	dst = append(dst, payload...)
	dst = append(dst, `,"idempotency_key":"`...)
	dst = append(dst, key...)
	dst = append(dst, `","prev_hash":"`...)
	dst = append(dst, e.PrevHash...)
	dst = append(dst, `","created_at":"`...)
	dst = append(dst, created...)
	return append(dst, `"}`...)
}

// compactEscaped reports whether encoding/json's compactor (which
// json.Marshal runs a json.RawMessage through) leaves the valid JSON p as it
// is: no whitespace between tokens, and inside strings no '<', '>', '&' or
// U+2028/U+2029, which it escapes. On invalid JSON the answer means
// nothing, but the scan still ends.
func compactEscaped[P ~string | ~[]byte](p P) bool {
	inString := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		if inString {
			switch {
			case c == '\\':
				i++ // the escaped byte cannot end the string
			case c == '"':
				inString = false
			case c == '<' || c == '>' || c == '&':
				return false
			case c == 0xE2 && i+2 < len(p) && p[i+1] == 0x80 && p[i+2]&^1 == 0xA8:
				return false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case ' ', '\t', '\n', '\r':
			return false
		}
	}
	return true
}
