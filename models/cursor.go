package models

import (
	"encoding/base64"
	"encoding/json"
)

// encodeCursor turns a keyset position (a small struct of the sort columns)
// into the opaque, URL-safe string that list pages hand back as "next".
func encodeCursor(key any) string {
	b, err := json.Marshal(key)
	if err != nil {
		panic("models: cursor does not encode: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor reads a cursor made by encodeCursor into key. Callers check
// the decoded fields and report a bad cursor as a field error.
func decodeCursor(s string, key any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, key)
}
