package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/labstack/echo/v4"

	"github.com/taskpilots/handoff/models"
)

// MaxIdempotencyKeyLen is the longest Idempotency-Key accepted.
const MaxIdempotencyKeyLen = 200

// idempotencyHeader is the request header that makes a write repeatable.
const idempotencyHeader = "Idempotency-Key"

// bind reads the Idempotency-Key header and the JSON body of a write into
// dst, a pointer to the request struct.
//
// A missing, empty or malformed body, or one that is not a JSON object, is a
// 400. Unknown fields, fields of the wrong JSON type and a bad key header
// are a 422 listing every one of them; so that one round trip shows every
// problem, the 422 also lists what validate (the models validator, may be
// nil) finds in the rest of the request. When bind succeeds the models call
// validates again and its ValidationError is the 422.
func bind(c echo.Context, dst any, validate func() error) (idemKey string, err error) {
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return "", readError(err)
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return "", echo.NewHTTPError(http.StatusBadRequest, "The request body is required: a JSON object.")
	}
	if err := syntaxError(body); err != nil {
		return "", err
	}
	if body[0] != '{' {
		return "", echo.NewHTTPError(http.StatusBadRequest, "The request body must be a JSON object.")
	}

	var fields []models.FieldError
	key, keyProblem := idempotencyKey(c)
	if keyProblem != "" {
		fields = append(fields, models.FieldError{Field: idempotencyHeader, Message: keyProblem})
	}
	if err := bindObject(body, dst, validate, fields); err != nil {
		return "", err
	}
	return key, nil
}

// bindObject decodes the JSON object body into dst with bind's checks
// (unknown fields, wrong types, NUL, then validate), adding to the
// problems already found in fields; a batch binds each of its items with
// it, so that an item is judged exactly as the single request would be.
func bindObject(body []byte, dst any, validate func() error, fields []models.FieldError) error {
	t := reflect.TypeOf(dst).Elem()
	var typePaths []string
	for _, e := range objectEntries(body) {
		f, ok := jsonField(t, e.key)
		if !ok {
			fields = append(fields, models.FieldError{Field: e.key, Message: "is not a field of this request"})
			continue
		}
		fe, typed := checkType(f.Type, e.value, e.key)
		fields = append(fields, fe...)
		typePaths = append(typePaths, typed...)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	// Numbers inside free-form objects (facts) keep their exact text, as the
	// event log stores them.
	dec.UseNumber()
	// encoding/json skips a value of the wrong type and decodes the rest,
	// which is what lets the rest be validated below.
	var ute *json.UnmarshalTypeError
	if err := dec.Decode(dst); err != nil && !errors.As(err, &ute) {
		return echo.NewHTTPError(http.StatusBadRequest, "The request body could not be decoded: "+err.Error()).SetInternal(err)
	} else if err != nil && len(typePaths) == 0 {
		// checkType vets every value, so this is a shape it does not know.
		fields = append(fields, models.FieldError{Field: ute.Field, Message: "has the wrong type or is out of range"})
	}
	// Text with NUL is refused here for every request type, whether or not
	// its models validator looks at that field (see models.NULMessage).
	nul := &models.ValidationError{}
	models.CheckNUL(nul, "", dst)
	fields = append(fields, nul.Fields...)
	if len(fields) == 0 {
		return nil
	}
	if validate != nil {
		var ve *models.ValidationError
		if errors.As(validate(), &ve) {
			for _, f := range ve.Fields {
				// A mistyped field was left empty; it would only be reported
				// again as missing.
				if !covered(f.Field, typePaths) && !slices.Contains(fields, f) {
					fields = append(fields, f)
				}
			}
		}
	}
	return &models.ValidationError{Fields: fields}
}

// covered reports whether field is one of paths or inside one of them.
func covered(field string, paths []string) bool {
	for _, p := range paths {
		if field == p || strings.HasPrefix(field, p+".") || strings.HasPrefix(field, p+"[") {
			return true
		}
	}
	return false
}

// idempotencyKey reads the Idempotency-Key header; problem is non-empty when
// the key is unusable.
func idempotencyKey(c echo.Context) (key, problem string) {
	key = c.Request().Header.Get(idempotencyHeader)
	if p := keyProblem(key); p != "" {
		return "", p
	}
	return key, ""
}

// keyProblem says what makes an idempotency key unusable, or "".
func keyProblem(key string) string {
	switch {
	case len(key) > MaxIdempotencyKeyLen:
		return fmt.Sprintf("must be at most %d characters", MaxIdempotencyKeyLen)
	case strings.IndexFunc(key, func(r rune) bool { return r > unicode.MaxASCII || !unicode.IsPrint(r) }) >= 0:
		return "must be printable ASCII"
	}
	return ""
}

// asValidation is errors.As for a *models.ValidationError.
func asValidation(err error, ve **models.ValidationError) bool { return errors.As(err, ve) }

// readError maps a failure to read the body. The body limit middleware
// reports its 413 through the reader.
func readError(err error) error {
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return he
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return echo.NewHTTPError(http.StatusRequestEntityTooLarge, fmt.Sprintf("The request body is larger than %d bytes.", mbe.Limit)).SetInternal(err)
	}
	return echo.NewHTTPError(http.StatusBadRequest, "The request body could not be read.").SetInternal(err)
}

// syntaxError returns a 400 that says where body stops being JSON, or nil.
func syntaxError(body []byte) error {
	if json.Valid(body) {
		return nil
	}
	var v any
	err := json.Unmarshal(body, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return echo.NewHTTPError(http.StatusBadRequest, fmt.Sprintf("The request body is not valid JSON (at byte %d: %s).", se.Offset, se.Error())).SetInternal(err)
	}
	return echo.NewHTTPError(http.StatusBadRequest, "The request body is not valid JSON.").SetInternal(err)
}

type entry struct {
	key   string
	value json.RawMessage
}

// objectEntries lists the members of a valid JSON object in document order,
// so that errors are reported in the order the client wrote the fields.
func objectEntries(obj []byte) []entry {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil {
		return nil
	}
	var out []entry
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return out
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return out
		}
		out = append(out, entry{key: k, value: v})
	}
	return out
}

// jsonField finds the struct field whose JSON name is exactly name.
// (encoding/json would also accept another letter case; a strict API does
// not, so "Goal" is reported as unknown rather than silently used.)
func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Tag.Get("json") == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if sf, ok := jsonField(ft, name); ok {
					return sf, true
				}
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		if tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

var (
	rawMessageType  = reflect.TypeFor[json.RawMessage]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

// checkType checks that raw has the JSON type t decodes from, recursing into
// objects and arrays, and names every offending field by its path
// (resources[0].name, uncertainty.level), the way models names fields. It
// also returns the paths of values of the wrong type, which decoding skips.
func checkType(t reflect.Type, raw json.RawMessage, path string) (errs []models.FieldError, typed []string) {
	if bytes.Equal(raw, []byte("null")) {
		return nil, nil // null leaves the zero value; validation says if that is missing
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessageType || t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil, nil
	}
	fail := func(msg string) ([]models.FieldError, []string) {
		return []models.FieldError{{Field: path, Message: msg}}, []string{path}
	}
	switch t.Kind() {
	case reflect.String:
		if raw[0] != '"' {
			return fail("must be a string")
		}
	case reflect.Bool:
		if raw[0] != 't' && raw[0] != 'f' {
			return fail("must be true or false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if _, err := strconv.ParseInt(string(raw), 10, t.Bits()); err != nil {
			return fail("must be an integer")
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if _, err := strconv.ParseUint(string(raw), 10, t.Bits()); err != nil {
			return fail("must be a non-negative integer")
		}
	case reflect.Float32, reflect.Float64:
		if !isNumber(raw) {
			return fail("must be a number")
		}
		if _, err := strconv.ParseFloat(string(raw), t.Bits()); err != nil {
			return fail("is out of range")
		}
	case reflect.Slice, reflect.Array:
		var items []json.RawMessage
		if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
			return fail("must be an array")
		}
		for i, item := range items {
			e, ty := checkType(t.Elem(), item, fmt.Sprintf("%s[%d]", path, i))
			errs, typed = append(errs, e...), append(typed, ty...)
		}
	case reflect.Map:
		if raw[0] != '{' || t.Key().Kind() != reflect.String {
			return fail("must be an object")
		}
		for _, en := range objectEntries(raw) {
			e, ty := checkType(t.Elem(), en.value, path+"."+en.key)
			errs, typed = append(errs, e...), append(typed, ty...)
		}
	case reflect.Struct:
		if raw[0] != '{' {
			return fail("must be an object")
		}
		for _, en := range objectEntries(raw) {
			f, ok := jsonField(t, en.key)
			if !ok {
				errs = append(errs, models.FieldError{Field: path + "." + en.key, Message: "is not a field of this request"})
				continue
			}
			e, ty := checkType(f.Type, en.value, path+"."+en.key)
			errs, typed = append(errs, e...), append(typed, ty...)
		}
	}
	return errs, typed
}

func isNumber(raw json.RawMessage) bool {
	c := raw[0]
	return c == '-' || (c >= '0' && c <= '9')
}

// queryInt reads an optional integer query parameter within [lo, hi].
func queryInt(c echo.Context, name string, def, lo, hi int64, v *models.ValidationError) int64 {
	s := c.QueryParam(name)
	if s == "" {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < lo || n > hi {
		v.Add(name, "must be an integer between %d and %d", lo, hi)
		return def
	}
	return n
}
