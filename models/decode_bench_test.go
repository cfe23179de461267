package models

import (
	"os"
	"testing"
)

// BenchmarkDecodeJSON compares decodeJSON with its definition, encoding/json
// alone (decodeStd), on a stored state of about 2 KB and a result payload,
// both taken from a database built by `taskpilots bench seed`.
func BenchmarkDecodeJSON(b *testing.B) {
	state, err := os.ReadFile("testdata/decode/state.json")
	if err != nil {
		b.Fatal(err)
	}
	payload, err := os.ReadFile("testdata/decode/result_payload.json")
	if err != nil {
		b.Fatal(err)
	}
	for _, d := range []struct {
		name   string
		decode func([]byte, any) error
	}{{"decodeJSON", decodeJSON}, {"encoding-json", decodeStd}} {
		b.Run("state/"+d.name, func(b *testing.B) {
			b.SetBytes(int64(len(state)))
			for b.Loop() {
				var st State
				if err := d.decode(state, &st); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("result/"+d.name, func(b *testing.B) {
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				var p ResultPayload
				if err := d.decode(payload, &p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
