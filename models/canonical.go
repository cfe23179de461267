package models

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Canonical returns the canonical JSON encoding of v: object keys sorted,
// numbers as written, no insignificant space. Hashes and the stored state are
// computed over this encoding.
//
// It is defined as encoding v, decoding the result into generic values
// (numbers kept as json.Number) and encoding those again. Every write
// canonicalises its payload and most hash their fingerprint, so rather than
// build the generic values it rewrites the first encoding in place: members
// sorted by key, strings and numbers copied as they are unless their bytes
// could come out differently from a decode and encode, which then do exactly
// that for the one string. TestCanonicalRoundTripProperty holds the two to the
// same bytes.
func Canonical(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	c := canonicalizer{src: b}
	out, err := c.value(make([]byte, 0, len(b)))
	if err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	return out, nil
}

// canonicalizer rewrites json.Marshal output (valid and compact JSON) into
// the canonical form.
type canonicalizer struct {
	src []byte
	i   int
	// spans is a stack of the members of the objects being written (each
	// object uses the part above where it started); scratch is where an
	// object's members wait while they are put in order.
	spans   []span
	scratch []byte
}

// span is one written object member: its decoded key, the sort order, and
// where its encoding (key included) lies in the output.
type span struct {
	key      []byte
	from, to int
}

func (c *canonicalizer) value(dst []byte) ([]byte, error) {
	c.skipSpace()
	if c.i >= len(c.src) {
		return nil, fmt.Errorf("unexpected end at %d", c.i)
	}
	switch c.src[c.i] {
	case '{':
		return c.object(dst)
	case '[':
		return c.array(dst)
	case '"':
		raw, err := c.string()
		if err != nil {
			return nil, err
		}
		return appendCanonicalString(dst, raw)
	default:
		// Numbers, true, false and null come out as they went in.
		start := c.i
		for c.i < len(c.src) && !strings.ContainsRune(",]} \t\r\n", rune(c.src[c.i])) {
			c.i++
		}
		return append(dst, c.src[start:c.i]...), nil
	}
}

// object writes the members in the order they come and, unless their keys
// already ascend (maps do; structs mostly do not), puts them in order
// afterwards.
func (c *canonicalizer) object(dst []byte) ([]byte, error) {
	c.i++ // {
	open := len(dst)
	dst = append(dst, '{')
	base := len(c.spans)
	ordered := true
	for n := 0; ; n++ {
		c.skipSpace()
		if c.i < len(c.src) && c.src[c.i] == '}' {
			c.i++
			break
		}
		if n > 0 {
			if err := c.expect(','); err != nil {
				return nil, err
			}
			c.skipSpace()
			dst = append(dst, ',')
		}
		raw, err := c.string()
		if err != nil {
			return nil, err
		}
		key, err := stringValue(raw)
		if err != nil {
			return nil, err
		}
		if err := c.expect(':'); err != nil {
			return nil, err
		}
		from := len(dst)
		if dst, err = appendCanonicalString(dst, raw); err != nil {
			return nil, err
		}
		dst = append(dst, ':')
		if dst, err = c.value(dst); err != nil {
			return nil, err
		}
		if n > 0 && bytes.Compare(c.spans[len(c.spans)-1].key, key) >= 0 {
			ordered = false
		}
		c.spans = append(c.spans, span{key: key, from: from, to: len(dst)})
	}
	members := c.spans[base:]
	defer func() { c.spans = c.spans[:base] }()
	if ordered {
		return append(dst, '}'), nil
	}
	// A decode keeps the last of duplicate keys; the stable sort keeps
	// their order, so the last of each run is the one to write.
	c.scratch = append(c.scratch[:0], dst[open:]...)
	slices.SortStableFunc(members, func(a, b span) int { return bytes.Compare(a.key, b.key) })
	dst = append(dst[:open], '{')
	first := true
	for i, m := range members {
		if i+1 < len(members) && bytes.Equal(members[i+1].key, m.key) {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, c.scratch[m.from-open:m.to-open]...)
	}
	return append(dst, '}'), nil
}

func (c *canonicalizer) array(dst []byte) ([]byte, error) {
	c.i++ // [
	dst = append(dst, '[')
	for n := 0; ; n++ {
		c.skipSpace()
		if c.i < len(c.src) && c.src[c.i] == ']' {
			c.i++
			return append(dst, ']'), nil
		}
		if n > 0 {
			if err := c.expect(','); err != nil {
				return nil, err
			}
			dst = append(dst, ',')
		}
		var err error
		if dst, err = c.value(dst); err != nil {
			return nil, err
		}
	}
}

// string reads a string token and returns it raw, quotes included.
func (c *canonicalizer) string() ([]byte, error) {
	if c.i >= len(c.src) || c.src[c.i] != '"' {
		return nil, fmt.Errorf("expected a string at %d", c.i)
	}
	start := c.i
	for c.i++; c.i < len(c.src); c.i++ {
		switch c.src[c.i] {
		case '\\':
			c.i++
		case '"':
			c.i++
			return c.src[start:c.i], nil
		}
	}
	return nil, fmt.Errorf("unterminated string at %d", start)
}

// stringValue is the decoded value of a string token, without a copy when
// decoding would not change it.
func stringValue(raw []byte) ([]byte, error) {
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		return body, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	return []byte(s), nil
}

// appendCanonicalString writes the string token raw as a decode and encode
// would: raw itself when that is certain to be the same bytes (no escapes,
// nothing encoding/json escapes, valid UTF-8).
func appendCanonicalString(dst []byte, raw []byte) ([]byte, error) {
	if plainString(raw) {
		return append(dst, raw...), nil
	}
	s, err := stringValue(raw)
	if err != nil {
		return nil, err
	}
	enc, err := json.Marshal(string(s))
	if err != nil {
		return nil, err
	}
	return append(dst, enc...), nil
}

func plainString(raw []byte) bool { return jsonVerbatim(raw[1 : len(raw)-1]) }

// The classes of bytes in jsonByteClass.
const (
	jsonPlain    = iota // written as it is
	jsonEscaped         // escaped by encoding/json: '"', '\\', control characters, '<', '>', '&'
	jsonNonASCII        // part of a multi-byte UTF-8 sequence
)

// jsonByteClass classifies each byte for jsonVerbatim, one table lookup a
// byte (the hash input of every event goes through it).
var jsonByteClass = func() (t [256]uint8) {
	for b := range 256 {
		switch {
		case b < 0x20, b == '"', b == '\\', b == '<', b == '>', b == '&':
			t[b] = jsonEscaped
		case b >= utf8.RuneSelf:
			t[b] = jsonNonASCII
		}
	}
	return t
}()

// jsonVerbatim reports whether encoding/json writes the string body between
// quotes as it is: nothing it escapes (the quote, the backslash, control
// characters, '<', '>', '&', U+2028, U+2029) and valid UTF-8, which it
// would otherwise replace.
func jsonVerbatim[T ~string | ~[]byte](body T) bool {
	ascii := true
	for i := 0; i < len(body); i++ {
		switch jsonByteClass[body[i]] {
		case jsonEscaped:
			return false
		case jsonNonASCII:
			ascii = false
		}
	}
	if ascii {
		return true
	}
	s := string(body)
	return utf8.ValidString(s) && !strings.Contains(s, "\u2028") && !strings.Contains(s, "\u2029")
}

func (c *canonicalizer) skipSpace() {
	for c.i < len(c.src) {
		switch c.src[c.i] {
		case ' ', '\t', '\r', '\n':
			c.i++
		default:
			return
		}
	}
}

func (c *canonicalizer) expect(b byte) error {
	c.skipSpace()
	if c.i >= len(c.src) || c.src[c.i] != b {
		return fmt.Errorf("expected %q at %d", b, c.i)
	}
	c.i++
	return nil
}
