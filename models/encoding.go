package models

import (
	"bytes"
	"crypto/sha256"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"
)

// decodeJSON decodes b into v keeping numbers as json.Number, so that a value
// decoded and encoded again keeps its exact text: replay must reproduce bytes.
//
// It is the decoder of every event payload Apply reads and of every stored
// state a write starts from, so it is on the path of every write and of
// verify: there encoding/json's reflection was 40% of verify's CPU and a
// sixth of a write's in Go. It is defined as encoding/json's Decoder with
// UseNumber (decodeStd), and decodes with goccy/go-json first, which gives
// the same values (FuzzDecodeJSON, TestDecodeJSONAgreesOnStoredData) in a
// third of the time or less (BenchmarkDecodeJSON). Only when that fails — a syntax
// error, a type mismatch, a panic — does decodeStd decode again, from a
// zeroed destination, so errors and their text are always encoding/json's.
func decodeJSON(b []byte, v any) error {
	if decodeFast(b, v) {
		return nil
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv.Elem().SetZero()
	}
	return decodeStd(b, v)
}

// decodeFast decodes b into v with goccy/go-json's Decoder and UseNumber
// (one value, as encoding/json's Decoder reads it) and reports whether that
// succeeded. A panic inside the library counts as a failure: the stored
// bytes then go to encoding/json, which decides.
func decodeFast(b []byte, v any) (ok bool) {
	// A Decoder of its own per call: the library keeps no state from one
	// call to the next there (its pooled contexts, which a malformed input
	// could leave broken, goccy/go-json#604, serve Unmarshal only).
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	dec := gojson.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v) == nil
}

// decodeStd is decodeJSON's definition, with encoding/json alone. A Decoder
// (the only way to ask for json.Number) copies its input into a buffer of
// its own and scans it there; json.Unmarshal decodes in place. For a
// destination with no interface in it UseNumber changes nothing, and when
// Unmarshal accepts the input, the input is that one value, which the
// Decoder would decode the same way; on a syntax error (trailing bytes
// after a first value, say: the Decoder reads only the first) the Decoder
// decides, into a zeroed destination, so the result is always the
// Decoder's.
func decodeStd(b []byte, v any) error {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && !rv.IsNil() && numberFree(rv.Type().Elem()) {
		err := json.Unmarshal(b, v)
		var syntax *json.SyntaxError
		if !errors.As(err, &syntax) {
			return err
		}
		rv.Elem().SetZero()
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

// numberFreeTypes caches numberFree by type.
var numberFreeTypes sync.Map // reflect.Type → bool

// numberFree reports whether decoding into t never stores a number in an
// interface (so UseNumber cannot matter) and runs no UnmarshalJSON of its
// own (which might decode numbers its own way).
func numberFree(t reflect.Type) bool {
	if v, ok := numberFreeTypes.Load(t); ok {
		return v.(bool)
	}
	free := numberFreeWalk(t, map[reflect.Type]bool{})
	numberFreeTypes.Store(t, free)
	return free
}

func numberFreeWalk(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return true // a recursive type: decided where it started
	}
	seen[t] = true
	unmarshaler := reflect.TypeFor[json.Unmarshaler]()
	if t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler) {
		return false
	}
	switch t.Kind() {
	case reflect.Interface:
		return false
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return numberFreeWalk(t.Elem(), seen)
	case reflect.Map:
		return numberFreeWalk(t.Key(), seen) && numberFreeWalk(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() || f.Anonymous {
				if !numberFreeWalk(f.Type, seen) {
					return false
				}
			}
		}
	}
	return true
}

// EncodeState is the stored encoding of a state. encoding/json is already
// deterministic for State: struct fields in declaration order, map keys
// sorted, numbers kept as json.Number by decodeJSON, and raw outputs stored
// canonical. Live writes, verify and replay comparisons all use it.
func EncodeState(st State) ([]byte, error) {
	return json.Marshal(st)
}

// hashInput is the field order the event hash is computed over. Changing it
// breaks every stored chain; add a new version instead.
type hashInput struct {
	SessionID      string          `json:"session_id"`
	Seq            int64           `json:"seq"`
	Type           EventType       `json:"type"`
	Actor          string          `json:"actor"`
	VersionBefore  int64           `json:"version_before"`
	VersionAfter   int64           `json:"version_after"`
	Payload        json.RawMessage `json:"payload"`
	IdempotencyKey string          `json:"idempotency_key"`
	PrevHash       string          `json:"prev_hash"`
	CreatedAt      string          `json:"created_at"`
}

// ComputeHash returns the hash of e over its canonical encoding, including
// the previous event's hash. It ignores e.Hash and e.ID.
func ComputeHash(e Event) string {
	key := ""
	if e.IdempotencyKey != nil {
		key = *e.IdempotencyKey
	}
	if t, ok := parseTombstone(e.Payload); ok {
		return t.hash(e, key)
	}
	buf := hashBufs.Get().(*[]byte)
	b := appendStoredHashInput((*buf)[:0], e, key, e.Payload)
	sum := sha256.Sum256(b)
	*buf = b
	hashBufs.Put(buf)
	return hex.EncodeToString(sum[:])
}

// hashBufs recycles the buffers hash inputs are built in.
var hashBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// NewID returns a new opaque id with a type prefix, e.g. "ses_01J…".
// ULIDs sort by creation time, which keeps keyset pagination cheap.
func NewID(prefix string) string {
	return prefix + "_" + ulid.Make().String()
}

// timeLayout is fixed-width so that SQLite, which stores times as text,
// compares them correctly as strings; PostgreSQL parses it into timestamptz.
const timeLayout = "2006-01-02T15:04:05.000000Z"

// UTCTime is a timestamp stored with microsecond precision in UTC, the same
// way on both dialects.
type UTCTime struct{ time.Time }

// NewUTCTime truncates t to what the database keeps.
func NewUTCTime(t time.Time) UTCTime { return UTCTime{t.UTC().Truncate(time.Microsecond)} }

// String is the fixed-width RFC 3339 form used in hashes and SQL parameters.
func (t UTCTime) String() string { return t.Time.UTC().Format(timeLayout) }

// Value implements driver.Valuer.
func (t UTCTime) Value() (driver.Value, error) { return t.String(), nil }

// TimestamptzValue lets pgx send the time to PostgreSQL in binary; through
// Value it would format a string and then parse it back.
func (t UTCTime) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: t.Time, Valid: true}, nil
}

// ScanTimestamptz lets pgx read a timestamptz straight into t.
func (t *UTCTime) ScanTimestamptz(v pgtype.Timestamptz) error {
	if !v.Valid {
		return errors.New("scan NULL into a non-null time")
	}
	*t = NewUTCTime(v.Time)
	return nil
}

// Scan implements sql.Scanner for time.Time (PostgreSQL) and text (SQLite).
func (t *UTCTime) Scan(src any) error {
	switch v := src.(type) {
	case time.Time:
		*t = NewUTCTime(v)
		return nil
	case string:
		return t.parse(v)
	case []byte:
		return t.parse(string(v))
	case nil:
		*t = UTCTime{}
		return nil
	}
	return fmt.Errorf("scan time from %T", src)
}

func (t *UTCTime) parse(s string) error {
	for _, layout := range []string{timeLayout, time.RFC3339Nano, "2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05"} {
		if p, err := time.Parse(layout, strings.TrimSpace(s)); err == nil {
			*t = NewUTCTime(p)
			return nil
		}
	}
	return fmt.Errorf("scan time from %q", s)
}

// MarshalJSON writes RFC 3339 UTC.
func (t UTCTime) MarshalJSON() ([]byte, error) {
	return json.Marshal(t.Time.UTC().Format(time.RFC3339Nano))
}

// UnmarshalJSON reads RFC 3339.
func (t *UTCTime) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	return t.parse(s)
}

// NullTime is a nullable UTCTime.
type NullTime struct {
	Time  UTCTime
	Valid bool
}

// Value implements driver.Valuer.
func (n NullTime) Value() (driver.Value, error) {
	if !n.Valid {
		return nil, nil
	}
	return n.Time.Value()
}

// TimestamptzValue is UTCTime's, with NULL.
func (n NullTime) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: n.Time.Time, Valid: n.Valid}, nil
}

// ScanTimestamptz is UTCTime's, with NULL.
func (n *NullTime) ScanTimestamptz(v pgtype.Timestamptz) error {
	if !v.Valid {
		*n = NullTime{}
		return nil
	}
	*n = NullTime{Time: NewUTCTime(v.Time), Valid: true}
	return nil
}

// Scan implements sql.Scanner.
func (n *NullTime) Scan(src any) error {
	if src == nil {
		*n = NullTime{}
		return nil
	}
	n.Valid = true
	return n.Time.Scan(src)
}

// MarshalJSON writes null or RFC 3339 UTC.
func (n NullTime) MarshalJSON() ([]byte, error) {
	if !n.Valid {
		return []byte("null"), nil
	}
	return n.Time.MarshalJSON()
}

// Ptr returns the time or nil.
func (n NullTime) Ptr() *time.Time {
	if !n.Valid {
		return nil
	}
	t := n.Time.Time
	return &t
}

// SomeTime returns a valid NullTime.
func SomeTime(t time.Time) NullTime { return NullTime{Time: NewUTCTime(t), Valid: true} }
