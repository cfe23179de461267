package envflag

import (
	"strings"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	vars := map[string]string{
		"S": "text", "B": "true", "I": "42", "I64": "9000000000", "F": "0.25", "D": "90s",
		"BAD_B": "yes please", "BAD_I": "4x", "BAD_D": "soon",
	}
	d := &Defaults{Getenv: func(k string) string { return vars[k] }}
	if got := d.String("S", "def"); got != "text" {
		t.Errorf("String = %q", got)
	}
	if got := d.String("UNSET", "def"); got != "def" {
		t.Errorf("String unset = %q", got)
	}
	if !d.Bool("B", false) || d.Int("I", 0) != 42 || d.Int64("I64", 0) != 9_000_000_000 ||
		d.Float64("F", 0) != 0.25 || d.Duration("D", 0) != 90*time.Second {
		t.Errorf("parsed values wrong")
	}
	if d.Int("UNSET", 7) != 7 || d.Duration("UNSET", time.Minute) != time.Minute {
		t.Errorf("unset variables must give the default")
	}
	if err := d.Err(); err != nil {
		t.Fatalf("no malformed variable yet, Err = %v", err)
	}
	// Malformed values give the default and are all reported, by name.
	if d.Bool("BAD_B", true) != true || d.Int("BAD_I", 3) != 3 || d.Duration("BAD_D", time.Second) != time.Second {
		t.Errorf("malformed variables must give the default")
	}
	err := d.Err()
	if err == nil {
		t.Fatal("malformed variables not reported")
	}
	for _, want := range []string{`BAD_B="yes please": want true or false`, `BAD_I="4x": want an integer`, `BAD_D="soon": want a duration`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Err() = %v; want it to contain %q", err, want)
		}
	}
}
