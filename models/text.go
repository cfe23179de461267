package models

import (
	"fmt"
	"reflect"
	"strings"
)

// NULMessage is how a field holding a NUL character (U+0000) is refused.
// PostgreSQL cannot store NUL in text or jsonb (and cannot compare against
// it in a query), so text with NUL is bad input on every path, never a
// database error; SQLite would store it, and both dialects must agree.
const NULMessage = "must not contain NUL characters (U+0000)"

// HasNUL reports whether s contains a NUL character.
func HasNUL(s string) bool { return strings.IndexByte(s, 0) >= 0 }

// CheckNUL adds a NULMessage problem to v for every string inside x that
// holds a NUL: x itself, the items of slices, the keys and values of maps
// (facts) and the exported fields of structs, named by their JSON names
// under field (resources[0].name, facts.key). It is the one check that every
// input path shares: the text validators below, the API's JSON binding and
// the HTTP query and form binding.
func CheckNUL(v *ValidationError, field string, x any) {
	checkNUL(v, field, reflect.ValueOf(x))
}

func checkNUL(v *ValidationError, field string, rv reflect.Value) {
	switch rv.Kind() {
	case reflect.String:
		if HasNUL(rv.String()) {
			v.Add(field, NULMessage)
		}
	case reflect.Pointer, reflect.Interface:
		if !rv.IsNil() {
			checkNUL(v, field, rv.Elem())
		}
	case reflect.Slice, reflect.Array:
		if rv.Type().Elem().Kind() == reflect.Uint8 {
			return // bytes (json.RawMessage) are not text
		}
		for i := range rv.Len() {
			checkNUL(v, fmt.Sprintf("%s[%d]", field, i), rv.Index(i))
		}
	case reflect.Map:
		iter := rv.MapRange()
		for iter.Next() {
			k := fmt.Sprint(iter.Key().Interface())
			if HasNUL(k) {
				v.Add(field, "keys "+NULMessage)
				continue
			}
			checkNUL(v, joinField(field, k), iter.Value())
		}
	case reflect.Struct:
		t := rv.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-":
				continue
			case f.Anonymous && name == "":
				checkNUL(v, field, rv.Field(i))
				continue
			case name == "":
				name = f.Name
			}
			checkNUL(v, joinField(field, name), rv.Field(i))
		}
	}
}

func joinField(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}
